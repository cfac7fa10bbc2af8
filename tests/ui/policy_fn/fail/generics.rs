use portcullis::{InputContext, PolicyDecision, input_policy};

#[input_policy]
fn generic<T: Default>(_: &InputContext) -> PolicyDecision {
    let _ = T::default();
    PolicyDecision::allow()
}

#[input_policy]
fn with_lifetime<'a>(_: &'a InputContext) -> PolicyDecision {
    PolicyDecision::allow()
}

#[input_policy]
fn with_where_clause(_: &InputContext) -> PolicyDecision
where
    u8: Copy,
{
    PolicyDecision::allow()
}

fn main() {}
