//! The in-process session store: [`MemorySessionStore`].

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::BoxError;
use crate::session::store::{SessionFacts, SessionKey, SessionStore, SessionUpdate};

/// Sessions kept by default before the oldest unlabelled one is evicted.
pub const DEFAULT_MEMORY_CAPACITY: usize = 100_000;

/// How long a session is kept after its last update, by default (24 hours).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Session facts kept in this process's memory: for one process; a fleet of processes
/// shares a store such as Redis instead.
///
/// - **Bounded**: at most [`capacity`](Self::with_capacity) sessions; recording a new session
///   when full evicts the *unlabelled* session updated longest ago. A session that carries
///   labels (the taint a policy put on it) is never evicted to make room: flooding the store
///   with new sessions cannot wash another session's labels away. When every session held
///   carries labels, a new session is refused: [`record`](SessionStore::record) fails with a
///   [`StoreFull`] error, which the engine reports as an evaluation error of
///   [`SESSION_POLICY_ID`](crate::session::SESSION_POLICY_ID), so the policy set's `on_error`
///   decides (`deny`, the default, fails the call). Labelled sessions still leave when their
///   TTL runs out; size the capacity for the labelled sessions one TTL can hold.
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
    sessions: HashMap<String, Slot, foldhash::fast::RandomState>,
    /// The sessions without labels by the sequence number of their last update: the first is
    /// the oldest, the one evicted when the store is full.
    unlabelled: BTreeMap<u64, String>,
    /// The sessions with labels, likewise: never evicted, only expired.
    labelled: BTreeMap<u64, String>,
    next: u64,
}

#[derive(Debug)]
struct Slot {
    facts: SessionFacts,
    /// When it expires: its last update plus the TTL (`None` past what an `Instant` holds).
    expires: Option<Instant>,
    sequence: u64,
}

impl Slot {
    fn labelled(&self) -> bool {
        !self.facts.labels.is_empty()
    }
}

/// The error of a [`MemorySessionStore`] asked to record a new session while full of
/// sessions that carry labels, none of which it may evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFull {
    capacity: usize,
}

impl StoreFull {
    /// The capacity of the store that refused.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl std::fmt::Display for StoreFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the session store is full: all {} sessions carry labels, which are never evicted; \
             a new session is refused until one expires (raise `capacity` or shorten `ttl`)",
            self.capacity
        )
    }
}

impl std::error::Error for StoreFull {}

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
        slot.expires.is_some_and(|expires| now >= expires)
    }
}

fn write_name(name: &mut String, key: SessionKey<'_>) {
    // Control characters are refused in session keys, so the NUL keeps the two parts apart.
    name.clear();
    name.push_str(key.agent_id);
    name.push('\0');
    name.push_str(key.session_id);
}

/// Calls `f` with the name of `key`'s session, written into a buffer the thread keeps: looking
/// a session up allocates nothing.
fn with_name<R>(key: SessionKey<'_>, f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static NAME: Cell<String> = const { Cell::new(String::new()) };
    }
    let mut buffer = NAME.try_with(Cell::take).unwrap_or_default();
    write_name(&mut buffer, key);
    let result = f(&buffer);
    let _ = NAME.try_with(|name| name.set(buffer));
    result
}

impl Inner {
    fn queue(&mut self, labelled: bool) -> &mut BTreeMap<u64, String> {
        if labelled {
            &mut self.labelled
        } else {
            &mut self.unlabelled
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(slot) = self.sessions.remove(name) {
            self.queue(slot.labelled()).remove(&slot.sequence);
        }
    }

    /// Drops the expired sessions at the old end of `labelled`'s queue.
    fn drop_expired(&mut self, labelled: bool, now: Instant) {
        loop {
            let queue = if labelled {
                &self.labelled
            } else {
                &self.unlabelled
            };
            let Some((_, oldest)) = queue.first_key_value() else {
                return;
            };
            match self.sessions.get(oldest) {
                Some(slot) if slot.expires.is_some_and(|expires| now >= expires) => {
                    let oldest = oldest.clone();
                    self.remove(&oldest);
                }
                _ => return,
            }
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for MemorySessionStore {
    async fn load(&self, key: SessionKey<'_>) -> Result<SessionFacts, BoxError> {
        Ok(self.load_facts(key))
    }

    async fn record(&self, key: SessionKey<'_>, update: SessionUpdate<'_>) -> Result<(), BoxError> {
        self.record_update(key, &update).map_err(BoxError::from)
    }

    fn load_now(&self, key: SessionKey<'_>) -> Option<Result<SessionFacts, BoxError>> {
        Some(Ok(self.load_facts(key)))
    }

    fn record_now(
        &self,
        key: SessionKey<'_>,
        update: SessionUpdate<'_>,
    ) -> Option<Result<(), BoxError>> {
        Some(self.record_update(key, &update).map_err(BoxError::from))
    }
}

impl MemorySessionStore {
    fn load_facts(&self, key: SessionKey<'_>) -> SessionFacts {
        let now = Instant::now();
        with_name(key, |name| {
            let mut inner = self.lock();
            match inner.sessions.get(name) {
                None => SessionFacts::default(),
                Some(slot) if self.expired(slot, now) => {
                    inner.remove(name);
                    SessionFacts::default()
                }
                Some(slot) => slot.facts.clone(),
            }
        })
    }

    fn record_update(
        &self,
        key: SessionKey<'_>,
        update: &SessionUpdate<'_>,
    ) -> Result<(), StoreFull> {
        let now = Instant::now();
        with_name(key, |name| self.record_now_at(name, update, now))
    }
}

impl MemorySessionStore {
    /// [`record`](SessionStore::record), under the lock.
    fn record_now_at(
        &self,
        name: &str,
        update: &SessionUpdate<'_>,
        now: Instant,
    ) -> Result<(), StoreFull> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.drop_expired(false, now);
        inner.drop_expired(true, now);
        let newest = inner.next.checked_sub(1);
        if let Some(slot) = inner.sessions.get_mut(name) {
            let was_labelled = slot.labelled();
            if self.expired(slot, now) {
                slot.facts = SessionFacts::default();
            }
            slot.facts.apply(update);
            slot.expires = now.checked_add(self.ttl);
            let labelled = slot.labelled();
            if Some(slot.sequence) == newest && labelled == was_labelled {
                // Updated last already: it stays at the young end of its queue.
                return Ok(());
            }
            let sequence = inner.next;
            inner.next += 1;
            let previous = std::mem::replace(&mut slot.sequence, sequence);
            // The queue's copy of the name moves to the new place (in the other queue when
            // the session gained labels).
            let queued = inner
                .queue(was_labelled)
                .remove(&previous)
                .unwrap_or_else(|| name.to_owned());
            inner.queue(labelled).insert(sequence, queued);
            return Ok(());
        }
        while inner.sessions.len() >= self.capacity {
            match inner.unlabelled.pop_first() {
                Some((_, oldest)) => {
                    inner.sessions.remove(&oldest);
                }
                None => {
                    return Err(StoreFull {
                        capacity: self.capacity,
                    });
                }
            }
        }
        let sequence = inner.next;
        inner.next += 1;
        let mut facts = SessionFacts::default();
        facts.apply(update);
        let slot = Slot {
            facts,
            expires: now.checked_add(self.ttl),
            sequence,
        };
        inner
            .queue(slot.labelled())
            .insert(sequence, name.to_owned());
        inner.sessions.insert(name.to_owned(), slot);
        Ok(())
    }
}
