//! Every key is optional, in any order, with trailing commas; any expression is an element.

use std::sync::Arc;

use portcullis::{
    InputContext, InputPolicy, OnError, OutputContext, PolicyDecision, PolicyExt, PolicySet,
    ToolResultContext, input_policy, output_policy, policy_set, tool_result_policy,
};

#[input_policy]
fn first(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[output_policy]
fn last(_: &OutputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[tool_result_policy]
fn label(context: &ToolResultContext) -> PolicyDecision {
    if context.tool_name == "web_fetch" {
        PolicyDecision::allow().with_labels(["untrusted"])
    } else {
        PolicyDecision::allow()
    }
}

fn boxed() -> Box<dyn InputPolicy> {
    Box::new(first)
}

fn main() {
    let empty: PolicySet = policy_set! {};
    assert!(empty.input().is_empty());

    let builder = 7; // a local named like the expansion's internals is not captured
    let set = policy_set! {
        output: [last.monitored()],
        on_error: allow,
        input: [first, Arc::new(first), boxed(), { let p = first; p },],
    };
    assert_eq!(builder, 7);
    assert_eq!(set.on_error(), OnError::Allow);
    assert_eq!(set.input().len(), 4);

    let results = policy_set! { tool_result: [label, label.monitored()] };
    assert_eq!(results.tool_result().len(), 2);

    let deny = policy_set! { on_error: deny, tool_call: [] };
    assert_eq!(deny.on_error(), OnError::Deny);
}
