use portcullis::{InputContext, PolicyDecision, input_policy, policy_set};

#[input_policy]
fn first(_: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {
    let _ = policy_set! {
        inptu: [first],
        policies: [first],
        output: [],
    };
}
