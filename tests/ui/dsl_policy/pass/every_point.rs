//! Compiled rules of every point, as values, in the builder and in `policy_set!`.

use portcullis::{PolicyMode, PolicySet, dsl_policy, policy_set, Policy};

fn main() {
    let no_ssn = dsl_policy!(input, "examples/rules/no_ssn.json");
    assert_eq!(no_ssn.id(), "no_ssn");
    let approved = dsl_policy!(tool_call, "examples/rules/approved_tools.json");
    assert_eq!(approved.id(), "approved_tools");
    let refunds = dsl_policy!(output, "examples/rules/audit_refunds.json",);
    assert_eq!(refunds.id(), "audit_refunds");
    assert_eq!(refunds.mode(), PolicyMode::Monitor);

    let built = PolicySet::builder()
        .input(no_ssn)
        .tool_call(approved)
        .output(refunds)
        .build();
    assert_eq!(built.input().len(), 1);

    let set = policy_set! {
        input: [
            dsl_policy!(input, "examples/rules/block_secrets.json"),
            dsl_policy!(input, "rules/support_prefix.json"),
        ],
        tool_call: [dsl_policy!(tool_call, "rules/large_refund.json")],
        output: [dsl_policy!(output, "rules/mask_passwords.json")],
    };
    assert_eq!(set.input().len(), 2);
}
