use portcullis::{InputContext, PolicyDecision, input_policy};

#[input_policy]
fn no_argument() -> PolicyDecision {
    PolicyDecision::allow()
}

#[input_policy]
fn two_arguments(_: &InputContext, strict: bool) -> PolicyDecision {
    let _ = strict;
    PolicyDecision::allow()
}

fn main() {}
