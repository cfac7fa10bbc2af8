//! One call of an engine on a context given as JSON, and its outcome as one JSON document that
//! a binding's host-language layer turns into the context to forward or one of its errors.

use std::error::Error;

use portcullis_engine::{
    ApprovalRequest, AuditContext, EngineError, InputContext, InterceptionPoint, OutputContext,
    PolicyContext, PolicyEngine, ToolCallContext, ToolResultContext,
};
use serde::Serialize;
use serde_json::Value;

use crate::audit::{RecordContexts, keeping};

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

/// Whether the context of an audit record is the very context the call in this task was
/// given (see [`is_call_context`]).
pub(crate) fn is_call_audit_context(context: &AuditContext<'_>) -> bool {
    match *context {
        AuditContext::Input(context) => is_call_context(context),
        AuditContext::ToolCall(context) => is_call_context(context),
        AuditContext::ToolResult(context) => is_call_context(context),
        AuditContext::Output(context) => is_call_context(context),
    }
}

/// Reads a context of `C`'s point from JSON, saying what is wrong with it.
pub fn read_context<C: PolicyContext>(json: &str) -> Result<C, String> {
    serde_json::from_str(json).map_err(|error| format!("not a valid {} context: {error}", C::POINT))
}

/// The outcome of a call that forwards its context unchanged, when the engine keeps no audit
/// records: the usual outcome, always this text, which a binding may recognise without
/// reading it.
pub const FORWARD_UNCHANGED: &str = r#"{"outcome":"forward","context":null}"#;

/// Evaluates the policies of `point` on the context `context_json`, and with `records` keeps
/// the call's audit records, their contexts written as it says: the outcome as JSON text.
///
/// | `outcome` | other keys |
/// |---|---|
/// | `forward` | `context`: the changed context, or `null` when unchanged |
/// | `denied` | `policy_id`, `interception_point`, `reason`, `message` |
/// | `evaluation_error` | `policy_id`, `interception_point`, `cause`, `thrown` (what `thrown` gives for the cause) |
/// | `approval_required` | `policy_id`, `interception_point`, `request` |
/// | `invalid_context` | `message` |
///
/// `records` (a list of audit records) is added when records are kept, after
/// `call_context` (the context the call was given, as the engine read it) when a record
/// refers to it ([`RecordContexts::CallContextOnce`]). `thrown` is how a binding points at
/// what its host-language policy threw, if the cause is such a throw. An unchanged `forward`
/// without records is [`FORWARD_UNCHANGED`].
pub async fn outcome<F>(
    engine: &PolicyEngine,
    records: Option<RecordContexts>,
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
    let Some(contexts) = records else {
        return outcome.await.0;
    };
    let ((mut json, call_context), records) = keeping(contexts, outcome).await;
    // The records' own JSON texts, spliced in as the last keys (the outcome is an object).
    json.pop();
    if let Some(call_context) = call_context {
        json.push_str(r#","call_context":"#);
        json.push_str(&call_context);
    }
    json.push_str(r#","records":["#);
    for (index, record) in records.iter().enumerate() {
        if index > 0 {
            json.push(',');
        }
        json.push_str(record);
    }
    json.push_str("]}");
    json
}

/// An outcome as [`outcome`] writes it: the kind under `outcome`, then its other keys in the
/// order of the table there.
#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Outcome<'a, C> {
    Forward {
        context: Option<&'a C>,
    },
    Denied {
        policy_id: &'a str,
        interception_point: InterceptionPoint,
        reason: Option<&'a str>,
        message: String,
    },
    EvaluationError {
        policy_id: &'a str,
        interception_point: InterceptionPoint,
        cause: String,
        thrown: Value,
    },
    ApprovalRequired {
        policy_id: Option<&'a str>,
        interception_point: InterceptionPoint,
        request: &'a ApprovalRequest,
    },
    InvalidContext {
        message: String,
    },
}

impl<C: Serialize> Outcome<'_, C> {
    /// The outcome as JSON text, written straight from the engine's values.
    fn to_json(&self) -> String {
        portcullis_engine::json::to_string(self).unwrap_or_else(|error| {
            // Contexts and approval requests are plain data with string keys: writing them
            // does not fail. Should it, the call fails rather than forward anything.
            invalid_context(format!("the outcome cannot be written as JSON: {error}"))
        })
    }
}

/// An `invalid_context` outcome with `message`, as JSON text.
fn invalid_context(message: String) -> String {
    let outcome: Outcome<'_, ()> = Outcome::InvalidContext { message };
    // A string alone cannot fail to be written.
    portcullis_engine::json::to_string(&outcome).unwrap_or_default()
}

/// Runs `C`'s point on a context given as JSON: the outcome as [`outcome`] describes it, and
/// the context as the engine read it (JSON) when a kept record refers to it.
async fn evaluate<C: PolicyContext, F>(
    engine: &PolicyEngine,
    context_json: &str,
    thrown: F,
) -> (String, Option<String>)
where
    F: FnOnce(&(dyn Error + 'static)) -> Value,
{
    let context: C = match read_context(context_json) {
        Ok(context) => context,
        Err(message) => return (invalid_context(message), None),
    };
    let address = std::ptr::from_ref(&context).addr();
    let evaluated = CALL_CONTEXT.scope(address, engine.evaluate(&context)).await;
    let call_context = crate::audit::refers_to_call_context()
        .then(|| portcullis_engine::json::to_string(&context).ok())
        .flatten();
    let outcome: Outcome<'_, C> = match &evaluated {
        Ok(evaluation) if evaluation.is_modified() => Outcome::Forward {
            context: Some(evaluation.context()),
        },
        Ok(_) => return (FORWARD_UNCHANGED.to_owned(), call_context),
        Err(EngineError::Denied(denial)) => Outcome::Denied {
            policy_id: denial.policy_id(),
            interception_point: denial.interception_point(),
            reason: denial.reason(),
            message: denial.to_string(),
        },
        Err(EngineError::Evaluation(error)) => Outcome::EvaluationError {
            policy_id: error.policy_id(),
            interception_point: error.interception_point(),
            cause: error.cause_chain(),
            thrown: thrown(error.cause()),
        },
        Err(EngineError::ApprovalRequired(request)) => Outcome::ApprovalRequired {
            policy_id: request.policy_ids.first().map(String::as_str),
            interception_point: request.interception_point,
            request,
        },
    };
    (outcome.to_json(), call_context)
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
        engine_of(keep, &["too_many_messages", "no_ssn"])
    }

    /// An engine on the input DSL rules `ids` of the shared fixtures.
    fn engine_of(keep: bool, ids: &[&str]) -> PolicyEngine {
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/dsl/input");
        let mut set = PolicySet::builder();
        for &id in ids {
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

    /// The outcome's text, for the context `context_json` at input.
    async fn written(engine: &PolicyEngine, keep: bool, context_json: &str) -> String {
        let records = keep.then_some(RecordContexts::Whole);
        outcome(
            engine,
            records,
            InterceptionPoint::Input,
            context_json,
            |_| Value::Null,
        )
        .await
    }

    async fn call(engine: &PolicyEngine, keep: bool, content: &str) -> Value {
        let json = written(engine, keep, &context(content)).await;
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

        let invalid = written(&kept, true, "{").await;
        let invalid: Value = serde_json::from_str(&invalid).expect("JSON");
        assert_eq!(
            (&invalid["outcome"], &invalid["records"]),
            (&json!("invalid_context"), &json!([]))
        );

        let unkept = call(&engine(false), false, "hello").await;
        assert_eq!(unkept, json!({"outcome": "forward", "context": null}));
    }

    /// The outcome of `context_json` at input, its records referring to the call's context.
    async fn shared(engine: &PolicyEngine, context_json: &str) -> Value {
        let records = Some(RecordContexts::CallContextOnce);
        let text = outcome(
            engine,
            records,
            InterceptionPoint::Input,
            context_json,
            |_| Value::Null,
        )
        .await;
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("{error}: {text}"))
    }

    /// The records with their timestamps blanked, to compare two calls' records.
    fn timeless(records: &Value) -> Vec<Value> {
        let records = records.as_array().expect("records");
        records
            .iter()
            .map(|record| {
                let mut record = record.clone();
                record["timestamp"] = Value::Null;
                record
            })
            .collect()
    }

    /// With the call's context written once, the records that evaluated it say `0` in its
    /// place, and are otherwise those written whole; a record of a changed context has it
    /// whole; an outcome with no record of the call's context carries no `call_context`.
    #[tokio::test]
    async fn records_can_refer_to_the_call_context_written_once() {
        let kept = engine_of(true, &["too_many_messages", "mask_first_message", "no_ssn"]);
        let sent = context("a secret");
        let given: Value = serde_json::from_str(&sent).unwrap();
        let forwarded = shared(&kept, &sent).await;
        assert_eq!(forwarded["call_context"], given);
        let contexts: Vec<&Value> = (0..3)
            .map(|index| &forwarded["records"][index]["context"])
            .collect();
        assert_eq!(contexts, [&json!(0), &json!(0), &forwarded["context"]]);
        assert_ne!(forwarded["context"], given);

        let mut restored = forwarded["records"].clone();
        for index in 0..2 {
            restored[index]["context"] = given.clone();
        }
        let whole = call(&kept, true, "a secret").await;
        assert_eq!(timeless(&restored), timeless(&whole["records"]));
        assert!(whole.get("call_context").is_none());

        let invalid = shared(&engine_of(true, &["no_ssn"]), "{").await;
        assert_eq!(invalid["outcome"], "invalid_context");
        assert!(invalid.get("call_context").is_none(), "{invalid}");
        assert_eq!(invalid["records"], json!([]));
    }

    /// Each outcome is written with its kind first and every key of the table, values as the
    /// engine gives them; the fixed text of an unchanged forward is what would be written.
    #[tokio::test]
    async fn outcomes_are_written_whole() {
        let unchanged: Outcome<'_, ()> = Outcome::Forward { context: None };
        assert_eq!(unchanged.to_json(), FORWARD_UNCHANGED);
        let unkept = engine(false);
        let text = written(&unkept, false, &context("hello")).await;
        assert_eq!(text, FORWARD_UNCHANGED);

        let text = written(&unkept, false, &context("my ssn")).await;
        assert!(text.starts_with(r#"{"outcome":"denied","#), "{text}");
        let denied: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            denied,
            json!({
                "outcome": "denied",
                "policy_id": "no_ssn",
                "interception_point": "input",
                "reason": "No social security numbers.",
                "message": "No social security numbers.",
            })
        );

        let text = written(&unkept, false, "{").await;
        let invalid: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(invalid["outcome"], "invalid_context");
        assert!(
            invalid["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("not a valid input context")),
            "{invalid}"
        );
    }
}
