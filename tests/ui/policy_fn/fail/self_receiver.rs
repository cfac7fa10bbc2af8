use portcullis::{InputContext, PolicyDecision, input_policy};

#[input_policy]
fn takes_self(&self, _: &InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {}
