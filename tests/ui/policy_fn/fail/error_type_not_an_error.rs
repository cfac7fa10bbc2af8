use portcullis::{InputContext, PolicyDecision, input_policy};

struct NotAnError;

#[input_policy]
fn fails_with_a_plain_struct(_: &InputContext) -> Result<PolicyDecision, NotAnError> {
    Err(NotAnError)
}

fn main() {}
