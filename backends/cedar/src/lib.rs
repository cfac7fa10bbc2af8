//! [Cedar](https://www.cedarpolicy.com) policies evaluated in process, at any interception
//! point, with the entity model agent tool-authorization platforms use.
//!
//! [`CedarPolicy<C>`](CedarPolicy) is one generic type, named [`CedarInputPolicy`],
//! [`CedarToolCallPolicy`], [`CedarToolResultPolicy`] and [`CedarOutputPolicy`] at each
//! point: `::new(id, policies_source)` parses the policies, `.with_schema(..)` validates them
//! (and every request) against a schema, `.with_entities(..)` adds agents, groups and tools in
//! Cedar's JSON entity format. Everything is parsed, validated and compiled when the policy is
//! built; an evaluation builds the request and asks Cedar's authorizer, and reads no file.
//!
//! ```
//! use portcullis_cedar::CedarToolCallPolicy;
//! use portcullis_engine::{EngineError, Message, Metadata, PolicyEngine, PolicySet, Role, ToolCallContext};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policies = r#"
//!     permit(principal, action == Action::"tool_call", resource)
//!     when { [Tool::"web_search", Tool::"read_file"].contains(resource) };
//!
//!     @reason("interns may not read files")
//!     forbid(principal in Group::"interns", action, resource == Tool::"read_file");
//! "#;
//! let entities = r#"[
//!     {"uid": {"type": "Agent", "id": "intern-bot"}, "attrs": {},
//!      "parents": [{"type": "Group", "id": "interns"}]}
//! ]"#;
//! let policy = CedarToolCallPolicy::new("tools", policies)?.with_entities(entities)?;
//! let engine = PolicyEngine::builder()
//!     .policy_set(PolicySet::builder().tool_call(policy).build())
//!     .build();
//!
//! let call = |agent: &str, tool: &str| ToolCallContext::new(
//!     tool,
//!     serde_json::Map::new(),
//!     Message::new(Role::Assistant, "calling a tool"),
//!     Metadata::new(agent, "session-1"),
//! );
//! assert!(engine.evaluate_tool_call(&call("support-bot", "read_file")).await.is_ok());
//! match engine.evaluate_tool_call(&call("intern-bot", "read_file")).await {
//!     Err(EngineError::Denied(denial)) => assert_eq!(denial.reason(), Some("interns may not read files")),
//!     other => panic!("expected a denial, got {other:?}"),
//! }
//! match engine.evaluate_tool_call(&call("support-bot", "delete_database")).await {
//!     Err(EngineError::Denied(denial)) => assert_eq!(denial.reason(), Some("no Cedar policy permits this")),
//!     other => panic!("expected a denial, got {other:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! # The request
//!
//! | | Cedar |
//! |---|---|
//! | principal | `Agent::"<metadata.agent_id>"` |
//! | action | `Action::"<point>"`: `input`, `tool_call`, `tool_result` or `output` |
//! | resource | `Tool::"<tool_name>"` at `tool_call` and `tool_result`; `Session::"<metadata.session_id>"` at `input` and `output` |
//! | context | the point's context (its JSON) as a record |
//!
//! The types are unqualified (`Agent`, not `MyApp::Agent`): a schema declares them, and the
//! four actions, in the empty namespace. An empty `agent_id` is the agent `Agent::""`: a
//! policy that names agents (`principal == Agent::"x"`, `principal in Group::".."`) never
//! matches it, one that does not (`permit(principal, ..)`) does. Give it no entity to keep
//! it out of every group. The same goes for an empty `session_id`.
//!
//! The context record is the context's JSON: `context.tool_name`, `context.arguments.to`,
//! `context.metadata.agent_id`, `context.messages` (a set of `{role, content}` records). With
//! a session store, `context.metadata.session` holds the session's facts: `labels` a set of
//! strings, `counters` records of longs (`context.metadata.session.counters.tool_call.total`).
//! A policy that reads an attribute a context may lack guards it with `has`
//! (`context.metadata has session && context.metadata.session.labels.contains("untrusted")`):
//! reading a missing attribute is an evaluation error.
//!
//! JSON becomes Cedar as an author expects: strings, booleans, whole numbers that fit 64 bits
//! (`Long`), arrays as sets (unordered, each value once), objects as records. Cedar has no
//! null and no fractions: a `null` attribute is left out, any other number becomes its JSON
//! text as a string. Keys are plain attributes: `__entity` and `__extn` in a tool's arguments
//! are never read as Cedar's JSON escapes, so a caller cannot forge an entity reference.
//!
//! Without a schema, the record holds only the top-level attributes the policies read
//! (`context.<name>` or `context has <name>`; all of them when a policy uses `context` any
//! other way), so a policy set that reads no context costs no serialization. With a schema,
//! it holds the attributes the schema declares for the point's action, at every depth (Cedar's
//! schema records are closed), and the request is validated: a context that does not fit
//! (a declared attribute missing or of another type) is an evaluation error.
//!
//! # The decision
//!
//! - Cedar allows: `allow`.
//! - Cedar denies because a `forbid` applies: `deny`, whose reason is the `@reason("..")` of
//!   the first such forbid in the text (else its `@id`, else Cedar's id for it, `policy2`)
//!   and whose `policy_id` is this policy's id.
//! - Cedar denies because no policy applies: `deny` with the reason
//!   `"no Cedar policy permits this"` ([`NO_PERMIT_REASON`]): Cedar denies by default.
//! - `@decision("audit")` or `@decision("escalate")` on a determining policy turns its effect
//!   into that decision: a permit that must be audited or approved, a forbid that audits
//!   instead of denying, or that a person may overrule. When only such forbids apply, the
//!   decision is what Cedar says without them: `escalate` (or `audit`) when a permit then
//!   applies, still `deny` when none does. Escalation wins over audit; the reason is the first
//!   such policy's. Any other `@decision` value is a load error.
//! - An error while evaluating (an attribute that does not exist, a type error, an
//!   overflow), or a request that does not fit the schema, is an evaluation error
//!   ([`CedarEvaluationError`]) and the policy set's `on_error` decides; except that a plain
//!   forbid that applies denies whatever the policies that failed would have said.
//!
//! # Problems at load
//!
//! [`CedarError`] lists every problem of the policies, the schema and the entities at once,
//! each a [`CedarProblem`] with the text it is in and its line and column: Cedar's own parse
//! errors and its strict validation against the schema, a schema that does not declare the
//! point's action, entities that are not Cedar's JSON format (placed at the entity at fault).
//! Validation warnings come with a policy that loads, from [`CedarPolicy::warnings`].

#![cfg_attr(docsrs, feature(doc_cfg))]

mod compile;
mod error;
mod policy;
mod request;

pub use compile::CedarSources;
pub use error::{CedarError, CedarEvaluationError, CedarProblem, CedarSource};
pub use policy::{
    CedarInputPolicy, CedarOutputPolicy, CedarPolicy, CedarToolCallPolicy, CedarToolResultPolicy,
    NO_PERMIT_REASON,
};

/// The `cedar-policy` crate this backend is built on, for callers that build requests or
/// policy sets of their own (tests comparing with Cedar's authorizer, among them).
pub use cedar_policy;

const _: () = {
    const fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<CedarInputPolicy>();
    assert_send_sync::<CedarToolCallPolicy>();
    assert_send_sync::<CedarToolResultPolicy>();
    assert_send_sync::<CedarOutputPolicy>();
    assert_send_sync::<CedarError>();
    assert_send_sync::<CedarEvaluationError>();
};
