use portcullis::{InputContext, OutputContext, PolicyDecision, ToolCallContext};
use portcullis::{input_policy, output_policy, tool_call_policy};

#[input_policy]
fn tool_context_on_input(context: &ToolCallContext) -> PolicyDecision {
    let _ = context;
    PolicyDecision::allow()
}

#[tool_call_policy]
fn output_context_on_tool_call(_: &OutputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[output_policy]
fn text_on_output(_: &str) -> PolicyDecision {
    PolicyDecision::allow()
}

#[output_policy]
fn input_context_on_output(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {}
