//! A rule with warnings (valid under the schema, but its condition can never hold) compiles:
//! the warning is printed, the policy decides as the runtime one does.

use portcullis::{InputContext, Message, Metadata, PolicyDecision, dsl_policy, Policy};

fn main() {
    let policy = dsl_policy!(input, "rules/upper_case_role.json");
    assert_eq!(policy.id(), "upper_case_role");
    let context = InputContext::new(vec![Message::user("hi")], Metadata::new("agent", "session"));
    let decision = block_on(policy.evaluate(&context)).expect("a DSL rule never fails");
    assert_eq!(decision, PolicyDecision::allow());
}

/// Polls a future that never waits to its end.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}
