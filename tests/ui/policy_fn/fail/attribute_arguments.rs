use portcullis::{InputContext, PolicyDecision, input_policy, output_policy, tool_call_policy};

#[input_policy(name = "pii")]
fn unknown_argument(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[input_policy(id = pii)]
fn id_not_a_string(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[tool_call_policy(id = "a", id = "b", mode(monitor))]
fn repeated_and_unknown(_: &portcullis::ToolCallContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[output_policy(id = "")]
fn empty_id(_: &portcullis::OutputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {
    // The policies still exist (with errors reported once, above).
    let _ = portcullis::policy_set! { input: [unknown_argument, id_not_a_string] };
}
