//! Session state: policies over what happened earlier in a session.
//!
//! Each evaluation sees one call, but the attacks that matter for agents span calls: the model
//! reads an untrusted web page and, three steps later, sends e-mail with what it read. With a
//! [`SessionStore`] configured ([`PolicyEngineBuilder::sessions`](crate::PolicyEngineBuilder::sessions)),
//! the engine keeps per-session facts, keyed by `(metadata.agent_id, metadata.session_id)`:
//!
//! ```json
//! {"labels": ["untrusted"],
//!  "counters": {"input": {"total": 3}, "output": {"total": 2},
//!               "tool_call": {"total": 4, "by_tool": {"fetch": 3, "shell": 1}},
//!               "tool_result": {"total": 3, "by_tool": {"fetch": 3}}}}
//! ```
//!
//! # The flow of a call
//!
//! 1. **Before the point**: the engine checks the session key (each part non-empty, at most
//!    [`MAX_SESSION_ID_BYTES`] bytes, no control characters: otherwise the call fails with an
//!    evaluation error before any policy runs), loads the session's facts and puts them in
//!    `metadata.session` of the context the policies see, replacing whatever the caller put
//!    there: callers cannot forge them. DSL paths (`metadata.session.labels`,
//!    `metadata.session.counters.tool_call.by_tool.send_email`), Rego
//!    (`input.metadata.session`) and remote policies read them.
//! 2. **The point runs** as without sessions.
//! 3. **After a call that proceeds**, one atomic record: the point's counter (and, for a tool
//!    call or a tool result, the tool's) goes up by one, and the labels carried by the enforced decisions
//!    ([`PolicyDecision::labels`](crate::PolicyDecision::labels)) are added. A denied call,
//!    or one failed by an evaluation error, records nothing. A monitored decision's labels are
//!    not added (monitored decisions take no effect). A label from a `tool_result` decision is
//!    how untrusted content marks the session (a fetched page), for later points to act on. A streamed answer records once, when the
//!    stream finishes without a denial.
//!
//! The context forwarded is the caller's own when no policy changed it; a changed one keeps
//! the caller's `metadata.session` (the facts are for policies only).
//!
//! # Failures
//!
//! A store that fails to load or record is an evaluation error of the policy
//! [`SESSION_POLICY_ID`], audited as such, and the policy set's `on_error` decides: `deny`
//! (the default) fails the call; `allow` goes on, with no `metadata.session` at all when the
//! facts could not be loaded (a rule on them sees a path that does not resolve).
//!
//! # The check-then-act window
//!
//! Loading and recording are two steps, and policies run between them. Two calls of one
//! session that run at the same time may both see the same facts before either records: with
//! a limit of 5 shell commands and 4 recorded, two concurrent calls can both see 4 and both
//! proceed, ending at 6. Counters stay exact (every record counts, none twice); only the
//! decision may be taken on facts that are stale by the calls running concurrently. The
//! overshoot is at most the number of calls of one session in flight at once, minus one. An
//! application that needs a hard limit runs the calls of one session one at a time (agents
//! usually do).
//!
//! # Stores
//!
//! - [`MemorySessionStore`]: in this process, bounded and expiring; a full store evicts the
//!   oldest session without labels, never a labelled one, and refuses a new session
//!   ([`StoreFull`]) when every session it holds is labelled.
//! - Redis (the `portcullis-redis` crate, feature `redis` of the facade), for a fleet of
//!   processes sharing one view.
//!
//! Any type implementing [`SessionStore`] will do.

pub(crate) mod flow;
pub(crate) mod memory;
pub(crate) mod store;

pub use memory::{DEFAULT_MEMORY_CAPACITY, DEFAULT_SESSION_TTL, MemorySessionStore, StoreFull};
pub use store::{
    MAX_SESSION_ID_BYTES, PointCounter, SESSION_POLICY_ID, SessionCounters, SessionFacts,
    SessionKey, SessionStore, SessionUpdate, ToolCounters,
};
