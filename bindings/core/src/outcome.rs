//! One call of an engine on a context given as JSON, and its outcome as one JSON document that
//! a binding's host-language layer turns into the context to forward or one of its errors.

use std::error::Error;

use portcullis_engine::{
    EngineError, InputContext, InterceptionPoint, OutputContext, PolicyContext, PolicyEngine,
    ToolCallContext, ToolResultContext,
};
use serde_json::{Value, json};

use crate::audit::with_records;

tokio::task_local! {
    /// The address of the context the call in this task evaluates, as [`outcome`] read it.
    static CALL_CONTEXT: usize;
}

/// Whether `context` is the very context the call in this task was given (no policy has
/// changed it yet): a binding can then hand its host policy the caller's own object instead
/// of a copy read from JSON.
pub fn is_call_context<C>(context: &C) -> bool {
    CALL_CONTEXT
        .try_with(|address| *address == std::ptr::from_ref(context).addr())
        .unwrap_or(false)
}

/// Reads a context of `C`'s point from JSON, saying what is wrong with it.
pub fn read_context<C: PolicyContext>(json: &str) -> Result<C, String> {
    serde_json::from_str(json).map_err(|error| format!("not a valid {} context: {error}", C::POINT))
}

/// Evaluates the policies of `point` on the context `context_json`, and with `audit` keeps the
/// call's audit records: the outcome as JSON text.
///
/// | `outcome` | other keys |
/// |---|---|
/// | `forward` | `context`: the changed context, or `null` when unchanged |
/// | `denied` | `policy_id`, `interception_point`, `reason`, `message` |
/// | `evaluation_error` | `policy_id`, `interception_point`, `cause`, `thrown` (what `thrown` gives for the cause) |
/// | `approval_required` | `policy_id`, `interception_point`, `request` |
/// | `invalid_context` | `message` |
///
/// `records` (a list of audit records) is added when `audit`. `thrown` is how a binding
/// points at what its host-language policy threw, if the cause is such a throw.
pub async fn outcome<F>(
    engine: &PolicyEngine,
    audit: bool,
    point: InterceptionPoint,
    context_json: &str,
    thrown: F,
) -> String
where
    F: FnOnce(&(dyn Error + 'static)) -> Value,
{
    let outcome = async move {
        match point {
            InterceptionPoint::Input => {
                evaluate::<InputContext, F>(engine, context_json, thrown).await
            }
            InterceptionPoint::ToolCall => {
                evaluate::<ToolCallContext, F>(engine, context_json, thrown).await
            }
            InterceptionPoint::ToolResult => {
                evaluate::<ToolResultContext, F>(engine, context_json, thrown).await
            }
            InterceptionPoint::Output => {
                evaluate::<OutputContext, F>(engine, context_json, thrown).await
            }
        }
    };
    let (outcome, records) = with_records(audit, outcome).await;
    let mut json = outcome.to_string();
    if let Some(records) = records {
        // The records' own JSON texts, spliced in as the last key (the outcome is an object).
        json.pop();
        json.push_str(r#","records":["#);
        for (index, record) in records.iter().enumerate() {
            if index > 0 {
                json.push(',');
            }
            json.push_str(record);
        }
        json.push_str("]}");
    }
    json
}

/// Runs `C`'s point on a context given as JSON; the outcome as [`outcome`] describes it.
async fn evaluate<C: PolicyContext, F>(
    engine: &PolicyEngine,
    context_json: &str,
    thrown: F,
) -> Value
where
    F: FnOnce(&(dyn Error + 'static)) -> Value,
{
    let context: C = match read_context(context_json) {
        Ok(context) => context,
        Err(message) => return json!({ "outcome": "invalid_context", "message": message }),
    };
    let address = std::ptr::from_ref(&context).addr();
    match CALL_CONTEXT.scope(address, engine.evaluate(&context)).await {
        Ok(evaluation) if evaluation.is_modified() => json!({
            "outcome": "forward",
            "context": serde_json::to_value(evaluation.context()).unwrap_or(Value::Null),
        }),
        Ok(_) => json!({ "outcome": "forward", "context": null }),
        Err(EngineError::Denied(denial)) => json!({
            "outcome": "denied",
            "policy_id": denial.policy_id(),
            "interception_point": denial.interception_point(),
            "reason": denial.reason(),
            "message": denial.to_string(),
        }),
        Err(EngineError::Evaluation(error)) => json!({
            "outcome": "evaluation_error",
            "policy_id": error.policy_id(),
            "interception_point": error.interception_point(),
            "cause": error.cause_chain(),
            "thrown": thrown(error.cause()),
        }),
        Err(EngineError::ApprovalRequired(request)) => json!({
            "outcome": "approval_required",
            "policy_id": request.policy_ids.first(),
            "interception_point": request.interception_point,
            "request": &*request,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use portcullis_engine::{PolicyEngine, PolicySet};
    use serde_json::{Value, json};

    use super::*;
    use crate::audit::audit_handler;
    use crate::native::dsl;

    fn engine(keep: bool) -> PolicyEngine {
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/dsl/input");
        let mut set = PolicySet::builder();
        for id in ["too_many_messages", "no_ssn"] {
            let loaded = dsl(InterceptionPoint::Input, id, &rules);
            assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
            set = loaded.policy.add_to(set);
        }
        let builder = PolicyEngine::builder().policy_set(set.build());
        match audit_handler(keep, None) {
            Some(handler) => builder.on_audit(handler).build(),
            None => builder.build(),
        }
    }

    fn context(content: &str) -> String {
        json!({
            "messages": [{"role": "user", "content": content}],
            "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"},
        })
        .to_string()
    }

    async fn call(engine: &PolicyEngine, keep: bool, content: &str) -> Value {
        let json = outcome(
            engine,
            keep,
            InterceptionPoint::Input,
            &context(content),
            |_| Value::Null,
        )
        .await;
        serde_json::from_str(&json).unwrap_or_else(|error| panic!("{error}: {json}"))
    }

    /// The records' own JSON is spliced into the outcome: one document, every record whole, in
    /// the order the policies decided.
    #[tokio::test]
    async fn an_outcome_carries_its_records_as_json() {
        let kept = engine(true);
        let forwarded = call(&kept, true, "hello").await;
        assert_eq!(forwarded["outcome"], "forward");
        assert_eq!(forwarded["context"], Value::Null);
        let records = forwarded["records"].as_array().expect("records");
        let policies: Vec<&Value> = records.iter().map(|record| &record["policy_id"]).collect();
        assert_eq!(policies, ["too_many_messages", "no_ssn"]);
        assert_eq!(records[1]["context"]["messages"][0]["content"], "hello");

        let denied = call(&kept, true, "my ssn").await;
        assert_eq!(
            (&denied["outcome"], &denied["reason"]),
            (&json!("denied"), &json!("No social security numbers."))
        );
        assert_eq!(denied["records"][1]["decision"], "deny");

        let invalid = outcome(&kept, true, InterceptionPoint::Input, "{", |_| Value::Null).await;
        let invalid: Value = serde_json::from_str(&invalid).expect("JSON");
        assert_eq!(
            (&invalid["outcome"], &invalid["records"]),
            (&json!("invalid_context"), &json!([]))
        );

        let unkept = call(&engine(false), false, "hello").await;
        assert_eq!(unkept, json!({"outcome": "forward", "context": null}));
    }
}
