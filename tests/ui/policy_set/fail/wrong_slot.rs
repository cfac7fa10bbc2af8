use portcullis::{
    InputContext, OutputContext, PolicyDecision, ToolCallContext, input_policy, output_policy,
    policy_set, tool_call_policy,
};

#[input_policy]
fn no_ssn(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[tool_call_policy]
fn approved_tools(_: &ToolCallContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[output_policy]
fn mask_secrets(_: &OutputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {
    let _ = policy_set! {
        input: [no_ssn, approved_tools],
        tool_call: [mask_secrets],
        output: [no_ssn],
    };
}
