//! How an exchange is evaluated: the settings the async-openai layer and the proxy share.

use std::sync::Arc;

use portcullis_engine::PolicyEngine;

use crate::ToolDenial;

/// The largest server-sent event a guarded stream accepts (an answer's text arrives in many
/// small events; one event this large is not an answer).
pub(crate) const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How an exchange is evaluated.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) engine: Arc<PolicyEngine>,
    pub(crate) agent_id: String,
    pub(crate) session_id: String,
    /// `metadata.framework` of every context.
    pub(crate) framework: String,
    pub(crate) tool_denial: ToolDenial,
    /// Whether a whole answer whose text an output policy denies is released with a refusal
    /// in place of the text (the proxy's choice) rather than failing the exchange.
    pub(crate) refuse_denied_answers: bool,
    pub(crate) pass_through: Vec<String>,
    /// Whether a request may refer to state the upstream keeps and the policies cannot read
    /// (`previous_response_id`, `conversation`, a stored `prompt`, item references).
    pub(crate) allow_server_state: bool,
    /// The largest server-sent event of a guarded stream.
    pub(crate) max_event_bytes: usize,
}

impl Settings {
    /// Settings evaluating with `engine` as `agent_id`, in session `default`.
    pub(crate) fn new(engine: Arc<PolicyEngine>, agent_id: &str, framework: &str) -> Self {
        Settings {
            engine,
            agent_id: agent_id.to_owned(),
            session_id: "default".to_owned(),
            framework: framework.to_owned(),
            tool_denial: ToolDenial::Refuse,
            refuse_denied_answers: false,
            pass_through: Vec::new(),
            allow_server_state: false,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }

    /// Whether the application listed `path` as one to forward unguarded.
    pub(crate) fn passes_through(&self, path: &str) -> bool {
        self.pass_through.iter().any(|listed| {
            path.strip_prefix(listed.trim_end_matches('/'))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}
