use portcullis::{dsl_policy, policy_set};

fn main() {
    let _ = policy_set! {
        input: [dsl_policy!(tool_call, "examples/rules/approved_tools.json")],
        output: [dsl_policy!(input, "examples/rules/no_ssn.json")],
    };
}
