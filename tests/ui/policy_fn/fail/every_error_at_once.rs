//! One function with several mistakes: every one is reported, and uses of the policy
//! elsewhere add no errors of their own.

use portcullis::{PolicySet, ToolCallContext, input_policy, policy_set};

#[input_policy(idd = "x")]
unsafe fn everything_wrong<T>(context: ToolCallContext, extra: T) -> u32 {
    let _ = (context, extra);
    0
}

fn main() {
    let _: PolicySet = policy_set! { input: [everything_wrong] };
    let _ = PolicySet::builder().input(everything_wrong).build();
}
