use portcullis::{InputContext, PolicyDecision, input_policy, policy_set};

#[input_policy]
fn first(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {
    let _ = policy_set! {
        on_error: ignore,
        input: first,
    };
    let _ = policy_set! { on_error: portcullis::OnError::Allow };
}
