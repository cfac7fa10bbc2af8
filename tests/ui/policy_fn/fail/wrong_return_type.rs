use portcullis::{InputContext, PolicyDecision, input_policy};

#[input_policy]
fn returns_bool(_: &InputContext) -> bool {
    true
}

#[input_policy]
fn returns_nothing(_: &InputContext) {}

#[input_policy]
fn returns_option(_: &InputContext) -> Option<PolicyDecision> {
    None
}

#[input_policy]
fn result_of_something_else(_: &InputContext) -> Result<bool, String> {
    Ok(true)
}

fn main() {}
