//! The in-process session store: [`MemorySessionStore`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::BoxError;
use crate::session::store::{SessionFacts, SessionKey, SessionStore, SessionUpdate};

/// Sessions kept by default before the oldest is evicted.
pub const DEFAULT_MEMORY_CAPACITY: usize = 100_000;

/// How long a session is kept after its last update, by default (24 hours).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Session facts kept in this process's memory: for one process; a fleet of processes
/// shares a store such as Redis instead.
///
/// - **Bounded**: at most [`capacity`](Self::with_capacity) sessions; recording a new session
///   when full evicts the one updated longest ago.
/// - **Expiring**: a session not updated for the [TTL](Self::with_ttl) is forgotten. There
///   is no background thread: an expired session is dropped when it is next read or written,
///   and every record also drops the expired sessions at the old end of the queue, so
///   memory stays bounded by the capacity whatever the traffic.
/// - **Atomic**: a record is one critical section under a lock held for a few
///   hundred nanoseconds; concurrent records of one session all count, none twice.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use portcullis_engine::InterceptionPoint;
/// use portcullis_engine::session::{MemorySessionStore, SessionKey, SessionStore, SessionUpdate};
///
/// let store = MemorySessionStore::new().with_capacity(10_000);
/// let key = SessionKey::new("agent", "s1").unwrap();
/// let labels = ["untrusted".to_owned()];
/// let update = SessionUpdate { point: InterceptionPoint::ToolCall, tool: Some("fetch"), labels: &labels };
/// store.record(key, update).await.unwrap();
/// let facts = store.load(key).await.unwrap();
/// assert_eq!(facts.labels, ["untrusted"]);
/// assert_eq!(facts.counters.tool_call.by_tool["fetch"], 1);
/// # });
/// ```
#[derive(Debug)]
pub struct MemorySessionStore {
    inner: Mutex<Inner>,
    capacity: usize,
    ttl: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, Slot>,
    /// The sessions by the sequence number of their last update: the first is the oldest.
    order: BTreeMap<u64, String>,
    next: u64,
}

#[derive(Debug)]
struct Slot {
    facts: SessionFacts,
    updated: Instant,
    sequence: u64,
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySessionStore {
    /// A store of at most [`DEFAULT_MEMORY_CAPACITY`] sessions kept [`DEFAULT_SESSION_TTL`]
    /// after their last update.
    pub fn new() -> Self {
        MemorySessionStore {
            inner: Mutex::new(Inner::default()),
            capacity: DEFAULT_MEMORY_CAPACITY,
            ttl: DEFAULT_SESSION_TTL,
        }
    }

    /// Keeps at most `capacity` sessions (at least one).
    #[must_use]
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// Forgets a session `ttl` after its last update.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The most sessions kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How long a session is kept after its last update.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How many sessions are held now (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The critical sections leave the maps consistent at every step that can panic
        // (none allocates between the two maps' updates without finishing both).
        match self.inner.lock() {
            Ok(inner) => inner,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn expired(&self, slot: &Slot, now: Instant) -> bool {
        now.saturating_duration_since(slot.updated) >= self.ttl
    }
}

fn name(key: SessionKey<'_>) -> String {
    // Control characters are refused in session keys, so the NUL keeps the two parts apart.
    let mut name = String::with_capacity(key.agent_id.len() + 1 + key.session_id.len());
    name.push_str(key.agent_id);
    name.push('\0');
    name.push_str(key.session_id);
    name
}

impl Inner {
    fn remove(&mut self, name: &str) {
        if let Some(slot) = self.sessions.remove(name) {
            self.order.remove(&slot.sequence);
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for MemorySessionStore {
    async fn load(&self, key: SessionKey<'_>) -> Result<SessionFacts, BoxError> {
        let name = name(key);
        let now = Instant::now();
        let mut inner = self.lock();
        match inner.sessions.get(&name) {
            None => Ok(SessionFacts::default()),
            Some(slot) if self.expired(slot, now) => {
                inner.remove(&name);
                Ok(SessionFacts::default())
            }
            Some(slot) => Ok(slot.facts.clone()),
        }
    }

    async fn record(&self, key: SessionKey<'_>, update: SessionUpdate<'_>) -> Result<(), BoxError> {
        let name = name(key);
        let now = Instant::now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        // Drop the expired sessions at the old end of the queue.
        while let Some((_, oldest)) = inner.order.first_key_value() {
            match inner.sessions.get(oldest) {
                Some(slot) if self.expired(slot, now) => {
                    let oldest = oldest.clone();
                    inner.remove(&oldest);
                }
                _ => break,
            }
        }
        let sequence = inner.next;
        inner.next += 1;
        if let Some(slot) = inner.sessions.get_mut(&name) {
            if self.expired(slot, now) {
                slot.facts = SessionFacts::default();
            }
            slot.facts.apply(&update);
            slot.updated = now;
            let previous = std::mem::replace(&mut slot.sequence, sequence);
            inner.order.remove(&previous);
            inner.order.insert(sequence, name);
            return Ok(());
        }
        while inner.sessions.len() >= self.capacity {
            match inner.order.pop_first() {
                Some((_, oldest)) => {
                    inner.sessions.remove(&oldest);
                }
                None => break,
            }
        }
        let mut facts = SessionFacts::default();
        facts.apply(&update);
        inner.order.insert(sequence, name.clone());
        inner.sessions.insert(
            name,
            Slot {
                facts,
                updated: now,
                sequence,
            },
        );
        Ok(())
    }
}
