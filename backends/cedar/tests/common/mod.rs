//! What the tests of the backend share.

use portcullis_engine::{Message, Metadata, Role, ToolCallContext};

/// A call of `tool` by `agent` in session `s1`, without arguments.
pub(crate) fn call(agent: &str, tool: &str) -> ToolCallContext {
    ToolCallContext::new(
        tool,
        serde_json::Map::new(),
        Message::new(Role::Assistant, "calling"),
        Metadata::new(agent, "s1"),
    )
}
