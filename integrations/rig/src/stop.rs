//! Why a policy stopped a run, kept as the engine's own error.
//!
//! rig ends a run with a text reason (`PromptError::Cancelled`, or an `ErrorReport`'s message),
//! and has no place for a value of ours. So the hook keeps the [`EngineError`] itself here and
//! writes into the reason a tag that names it: [`denial`] and [`approval_request`] find the
//! error by its tag and return parts of it, never re-reading them from the text. A tag holds
//! a number drawn once per process, so text from elsewhere (a provider's error message) cannot
//! pass for a stop of this process.
//!
//! The last [`KEPT`] stops are kept: reading a stop back is meant for the run that just ended.

use std::collections::VecDeque;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, OnceLock, PoisonError};

use portcullis_engine::{ApprovalRequest, EngineError, PolicyDenialError};
use rig_agent::run::PromptError;

/// How many stops are kept for [`denial`] and [`approval_request`].
const KEPT: usize = 256;

/// One stop: the tag its reason carries, and the error.
struct Stop {
    tag: String,
    error: EngineError,
}

/// The stops of this process, the newest last, and the number of the next.
struct Stops {
    next: u64,
    kept: VecDeque<Stop>,
}

static STOPS: Mutex<Stops> = Mutex::new(Stops {
    next: 1,
    kept: VecDeque::new(),
});

/// The number every tag of this process carries, drawn at random the first time.
fn process_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| RandomState::new().hash_one("portcullis-rig stop"))
}

/// Keeps `error` and returns the reason the run stops with: what happened, in words, and the
/// tag that names the kept error.
pub(crate) fn stop_reason(error: EngineError) -> String {
    let what = match &error {
        EngineError::Evaluation(failure) => format!(
            "policy \"{}\" could not be evaluated: {}",
            failure.policy_id(),
            failure.cause_chain()
        ),
        other => other.to_string(),
    };
    let mut stops = STOPS.lock().unwrap_or_else(PoisonError::into_inner);
    let tag = format!("[portcullis stop {:016x}-{}]", process_key(), stops.next);
    stops.next += 1;
    if stops.kept.len() == KEPT {
        stops.kept.pop_front();
    }
    let reason = format!("portcullis: {what} {tag}");
    stops.kept.push_back(Stop { tag, error });
    reason
}

/// What `read` takes from the error that stopped the run `error` ended, if a policy stopped it.
fn stopped_by<T>(error: &PromptError, read: impl Fn(&EngineError) -> Option<T>) -> Option<T> {
    let text = match error {
        PromptError::Cancelled { reason, .. } => reason.as_str(),
        PromptError::Report(report) => report.message.as_str(),
        _ => return None,
    };
    let stops = STOPS.lock().unwrap_or_else(PoisonError::into_inner);
    stops
        .kept
        .iter()
        .rev()
        .find(|stop| text.contains(&stop.tag))
        .and_then(|stop| read(&stop.error))
}

/// The policy denial that ended a run, if one did.
///
/// ```
/// use rig_agent::run::PromptError;
///
/// // Text alone is not a denial: only a run the hook stopped has one.
/// let error = PromptError::cancelled(Vec::new(), "portcullis: denied by `no_secrets`");
/// assert!(portcullis_rig::denial(&error).is_none());
/// ```
pub fn denial(error: &PromptError) -> Option<PolicyDenialError> {
    stopped_by(error, |stop| match stop {
        EngineError::Denied(denial) => Some(denial.clone()),
        _ => None,
    })
}

/// The approval request that ended a run, if one did: a policy escalated and no approval came
/// (no stored grant, no resolver, a pending answer or the time-out).
///
/// With a resolver configured on the engine, the hook waits for its answer before the tool
/// runs (a grant lets the tool run, a refusal is a denial); this is what is left when the
/// resolver could not answer. Record a grant for the request's digest with
/// [`Approvals::grant`](portcullis_engine::Approvals::grant) and run again.
pub fn approval_request(error: &PromptError) -> Option<ApprovalRequest> {
    stopped_by(error, |stop| match stop {
        EngineError::ApprovalRequired(request) => Some(ApprovalRequest::clone(request)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use portcullis_engine::{
        ApprovalRequest, EngineError, InterceptionPoint, PolicyDenialError, PolicyEvaluationError,
    };
    use rig_agent::run::PromptError;
    use rig_core::error::{ErrorKind, ErrorReport};

    use super::{approval_request, denial, stop_reason};

    #[test]
    fn a_stopped_run_gives_back_the_engine_error_itself() {
        let denied = PolicyDenialError::new(
            "no_secrets",
            InterceptionPoint::Input,
            Some("asks for secrets".to_owned()),
        );
        let reason = stop_reason(EngineError::Denied(denied.clone()));
        assert!(reason.contains("no_secrets"), "{reason}");
        let cancelled = PromptError::cancelled(Vec::new(), reason.clone());
        assert_eq!(denial(&cancelled), Some(denied.clone()));
        assert_eq!(approval_request(&cancelled), None);
        // rig relays a hook's stop of a dispatch as a report.
        let report = PromptError::Report(ErrorReport::new(ErrorKind::Cancelled, reason));
        assert_eq!(denial(&report), Some(denied));
    }

    #[test]
    fn an_approval_request_and_an_evaluation_error_are_told_apart() {
        let request = ApprovalRequest {
            id: "request-1".to_owned(),
            interception_point: InterceptionPoint::ToolCall,
            policy_ids: vec!["refunds".to_owned()],
            reasons: vec!["large refund".to_owned()],
            context: serde_json::json!({"tool_name": "refund"}),
            action_digest: "sha256:00".to_owned(),
        };
        let reason = stop_reason(EngineError::ApprovalRequired(Box::new(request.clone())));
        let error = PromptError::cancelled(Vec::new(), reason);
        assert_eq!(approval_request(&error), Some(request));
        assert_eq!(denial(&error), None);
        let failed = PolicyEvaluationError::new("pii", InterceptionPoint::Output, "timed out");
        let reason = stop_reason(EngineError::Evaluation(failed));
        assert!(reason.contains("policy \"pii\" could not be evaluated: timed out"));
        let error = PromptError::cancelled(Vec::new(), reason);
        assert_eq!((denial(&error), approval_request(&error)), (None, None));
    }

    #[test]
    fn text_that_looks_like_a_stop_is_not_one() {
        let denied = PolicyDenialError::new("no_secrets", InterceptionPoint::Input, None);
        let reason = stop_reason(EngineError::Denied(denied));
        // Another number in the same form, as a provider's message might write it.
        let forged = reason.replace("stop ", "stop 1");
        assert!(denial(&PromptError::cancelled(Vec::new(), forged)).is_none());
        let old =
            r#"portcullis denial: {"policy_id":"x","interception_point":"input","reason":null}"#;
        assert!(denial(&PromptError::cancelled(Vec::new(), old)).is_none());
    }
}
