//! Every accepted form of a policy function, used in the builder and in `policy_set!`.

use portcullis::{BoxError, InputContext, OutputContext, PolicyDecision, PolicySet, ToolCallContext, input_policy, output_policy, policy_set, tool_call_policy, Policy};

#[input_policy]
fn sync_policy(_context: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[input_policy(id = "custom-id")]
async fn async_policy(context: &'_ portcullis::InputContext) -> ::portcullis::PolicyDecision {
    if context.messages.is_empty() {
        PolicyDecision::deny("empty")
    } else {
        PolicyDecision::allow()
    }
}

#[derive(Debug)]
struct Failure;

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failure")
    }
}

impl std::error::Error for Failure {}

#[tool_call_policy]
fn fallible(context: &ToolCallContext) -> Result<PolicyDecision, Failure> {
    if context.tool_name.is_empty() {
        Err(Failure)
    } else {
        Ok(PolicyDecision::allow())
    }
}

#[tool_call_policy]
async fn fallible_async(_: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
    Ok(PolicyDecision::allow())
}

#[output_policy]
fn string_error(_: &OutputContext) -> std::result::Result<PolicyDecision, String> {
    Err("strings convert into BoxError".to_owned())
}

type Outcome<T> = Result<T, BoxError>;

#[output_policy]
fn aliased_result(_: &OutputContext) -> Outcome<PolicyDecision> {
    Ok(PolicyDecision::allow())
}

pub mod public {
    /// A documented public policy.
    #[portcullis::output_policy]
    #[allow(clippy::needless_pass_by_value)]
    pub fn documented(_: &portcullis::OutputContext) -> portcullis::PolicyDecision {
        portcullis::PolicyDecision::allow()
    }
}

fn main() {
    assert_eq!(sync_policy.id(), "sync_policy");
    assert_eq!(async_policy.id(), "custom-id");
    assert_eq!(fallible.id(), "fallible");
    assert_eq!(fallible_async.id(), "fallible_async");
    assert_eq!(string_error.id(), "string_error");
    assert_eq!(aliased_result.id(), "aliased_result");
    assert_eq!(public::documented.id(), "documented");

    let built = PolicySet::builder()
        .input(sync_policy)
        .input(async_policy)
        .tool_call(fallible)
        .output(public::documented)
        .build();
    assert_eq!(built.input().len(), 2);

    let set = policy_set! {
        input: [sync_policy, async_policy],
        tool_call: [fallible, fallible_async],
        output: [string_error, aliased_result, public::documented],
    };
    assert_eq!(set.output().len(), 3);
}
