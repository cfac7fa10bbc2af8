use portcullis::{PolicyDecision, PolicySet, ToolCallContext, tool_call_policy};

#[tool_call_policy]
fn approved_tools(_: &ToolCallContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {
    let _ = PolicySet::builder().input(approved_tools).build();
}
