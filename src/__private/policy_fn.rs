//! Support for `#[input_policy]` and friends: turning what a policy function returns into
//! what a policy's `evaluate` returns.

use crate::{BoxError, PolicyDecision};

/// What a policy function may return: `PolicyDecision`, or `Result<PolicyDecision, E>` with
/// `E: Into<BoxError>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned by a policy function",
    label = "a policy function returns `PolicyDecision` or `Result<PolicyDecision, E>`",
    note = "a fallible policy function returns `Result<PolicyDecision, E>` where `E` converts into `BoxError` (any `std::error::Error + Send + Sync + 'static`)"
)]
pub trait IntoPolicyResult {
    /// The result as a policy's `evaluate` returns it.
    fn into_policy_result(self) -> Result<PolicyDecision, BoxError>;
}

impl IntoPolicyResult for PolicyDecision {
    fn into_policy_result(self) -> Result<PolicyDecision, BoxError> {
        Ok(self)
    }
}

impl<E: Into<BoxError>> IntoPolicyResult for Result<PolicyDecision, E> {
    fn into_policy_result(self) -> Result<PolicyDecision, BoxError> {
        self.map_err(Into::into)
    }
}

/// Turns what a policy function returned into what `evaluate` returns.
pub fn into_policy_result(result: impl IntoPolicyResult) -> Result<PolicyDecision, BoxError> {
    result.into_policy_result()
}
