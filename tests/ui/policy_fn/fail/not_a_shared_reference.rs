use portcullis::{InputContext, PolicyDecision, input_policy};

#[input_policy]
fn by_value(context: InputContext) -> PolicyDecision {
    let _ = context;
    PolicyDecision::allow()
}

#[input_policy]
fn by_mutable_reference(_: &mut InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[input_policy]
fn with_a_static_lifetime(_: &'static InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

fn main() {}
