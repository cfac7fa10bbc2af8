//! One evaluation and its outcome as `eval` prints it; `portcullis eval`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::manifest::{CodeRegistry, LoadedManifest, Manifest, ManifestErrors};
use portcullis::{
    AuditRecord, EngineError, InputContext, InterceptionPoint, OutputContext, PolicyEngine,
    ToolCallContext,
};
use serde_json::Value;

use crate::{Format, Point, render};

/// The decisions audited during one evaluation: (policy id, decision name).
#[derive(Clone, Default)]
pub(crate) struct Taken(Arc<Mutex<Vec<(String, String)>>>);

impl Taken {
    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// How long a grant given on the command line (`--grant`, a test case's `grants`) stays
/// valid: it is used by the call that follows.
pub(crate) const GRANT_TTL: Duration = Duration::from_secs(60 * 60);

/// Who a grant given on the command line is recorded for.
pub(crate) const GRANTED_BY: &str = "portcullis command line";

/// The engine the manifest describes (its set, session store, approval time-out and audit
/// sinks), whose audit records also say which decisions a call took.
pub(crate) async fn engine(
    loaded: LoadedManifest,
) -> Result<(PolicyEngine, Taken), ManifestErrors> {
    let taken = Taken::default();
    let sink = taken.clone();
    let builder = loaded
        .into_engine_builder_with_audit(move |record: &AuditRecord<'_>| {
            if let Ok(mut taken) = sink.0.lock() {
                taken.push((
                    record.policy_id.to_owned(),
                    record.decision.as_str().to_owned(),
                ));
            }
        })
        .await?;
    Ok((builder.build(), taken))
}

/// Checks that `digest` is an action digest (64 lowercase hexadecimal digits).
pub(crate) fn check_digest(digest: &str) -> Result<(), String> {
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(format!(
            "{digest:?} is not an action digest (64 lowercase hexadecimal digits, the `action_digest` of an `approval_required` outcome)"
        ))
    }
}

/// An approval the call waits for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Approval {
    pub(crate) id: String,
    pub(crate) action_digest: String,
    pub(crate) policy_ids: Vec<String>,
    pub(crate) reasons: Vec<String>,
}

/// What one evaluation came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    /// `allowed`, `denied`, `error` or `approval_required`.
    pub(crate) outcome: &'static str,
    pub(crate) decisions: Vec<(String, String)>,
    /// The forwarded context, when allowed.
    pub(crate) context: Option<Value>,
    /// (policy id, reason) when denied.
    pub(crate) denial: Option<(String, Option<String>)>,
    /// (policy id, message) on an evaluation error.
    pub(crate) error: Option<(String, String)>,
    /// The approval asked for, when one is required.
    pub(crate) approval: Option<Approval>,
}

impl Outcome {
    /// The JSON `eval` prints, as a value.
    pub(crate) fn to_json(&self) -> Value {
        serde_json::from_str(&self.to_text(false)).unwrap_or(Value::Null)
    }

    /// The JSON text `eval` prints (keys in the documented order).
    pub(crate) fn to_text(&self, pretty: bool) -> String {
        #[derive(serde::Serialize)]
        struct Decision<'a> {
            policy_id: &'a str,
            decision: &'a str,
        }
        #[derive(serde::Serialize)]
        struct Denial<'a> {
            policy_id: &'a str,
            reason: Option<&'a str>,
        }
        #[derive(serde::Serialize)]
        struct Failure<'a> {
            policy_id: &'a str,
            message: &'a str,
        }
        #[derive(serde::Serialize)]
        struct Asked<'a> {
            id: &'a str,
            action_digest: &'a str,
            policy_ids: &'a [String],
            reasons: &'a [String],
        }
        #[derive(serde::Serialize)]
        struct Document<'a> {
            outcome: &'a str,
            decisions: Vec<Decision<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            context: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            denial: Option<Denial<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<Failure<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            approval: Option<Asked<'a>>,
        }
        let document = Document {
            outcome: self.outcome,
            decisions: self
                .decisions
                .iter()
                .map(|(policy_id, decision)| Decision {
                    policy_id,
                    decision,
                })
                .collect(),
            context: self.context.as_ref(),
            denial: self.denial.as_ref().map(|(policy_id, reason)| Denial {
                policy_id,
                reason: reason.as_deref(),
            }),
            error: self
                .error
                .as_ref()
                .map(|(policy_id, message)| Failure { policy_id, message }),
            approval: self.approval.as_ref().map(|approval| Asked {
                id: &approval.id,
                action_digest: &approval.action_digest,
                policy_ids: &approval.policy_ids,
                reasons: &approval.reasons,
            }),
        };
        let text = if pretty {
            serde_json::to_string_pretty(&document)
        } else {
            serde_json::to_string(&document)
        };
        text.unwrap_or_default()
    }

    /// The exit status of `eval`.
    pub(crate) fn exit_code(&self) -> u8 {
        match self.outcome {
            "allowed" => 0,
            "denied" => 2,
            "error" => 3,
            _ => 4,
        }
    }
}

/// Reads `value` as a context of `point`, or says why it is not one.
pub(crate) fn parse_context(point: InterceptionPoint, value: Value) -> Result<Context, String> {
    let read = match point {
        InterceptionPoint::Input => serde_json::from_value(value).map(Context::Input),
        InterceptionPoint::ToolCall => serde_json::from_value(value).map(Context::ToolCall),
        InterceptionPoint::Output => serde_json::from_value(value).map(Context::Output),
    };
    read.map_err(|error| format!("not a valid {point} context: {error}"))
}

/// A context of any point.
pub(crate) enum Context {
    Input(InputContext),
    ToolCall(ToolCallContext),
    Output(OutputContext),
}

/// Evaluates `context` and says what came of it.
pub(crate) async fn evaluate(engine: &PolicyEngine, taken: &Taken, context: &Context) -> Outcome {
    let result = match context {
        Context::Input(context) => engine
            .evaluate_input(context)
            .await
            .map(|e| serde_json::to_value(e.context())),
        Context::ToolCall(context) => engine
            .evaluate_tool_call(context)
            .await
            .map(|e| serde_json::to_value(e.context())),
        Context::Output(context) => engine
            .evaluate_output(context)
            .await
            .map(|e| serde_json::to_value(e.context())),
    };
    let decisions = taken.take();
    match result {
        Ok(forwarded) => Outcome {
            outcome: "allowed",
            decisions,
            context: Some(forwarded.unwrap_or(Value::Null)),
            denial: None,
            error: None,
            approval: None,
        },
        Err(EngineError::Denied(denial)) => Outcome {
            outcome: "denied",
            decisions,
            context: None,
            denial: Some((
                denial.policy_id().to_owned(),
                denial.reason().map(str::to_owned),
            )),
            error: None,
            approval: None,
        },
        Err(EngineError::ApprovalRequired(request)) => Outcome {
            outcome: "approval_required",
            decisions,
            context: None,
            denial: None,
            error: None,
            approval: Some(Approval {
                id: request.id,
                action_digest: request.action_digest,
                policy_ids: request.policy_ids,
                reasons: request.reasons,
            }),
        },
        Err(error) => {
            let (policy_id, message) = match &error {
                EngineError::Evaluation(failure) => {
                    (failure.policy_id().to_owned(), error_chain(failure))
                }
                other => (String::new(), other.to_string()),
            };
            Outcome {
                outcome: "error",
                decisions,
                context: None,
                denial: None,
                error: Some((policy_id, message)),
                approval: None,
            }
        }
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(crate) fn point(point: Point) -> InterceptionPoint {
    match point {
        Point::Input => InterceptionPoint::Input,
        Point::ToolCall => InterceptionPoint::ToolCall,
        Point::Output => InterceptionPoint::Output,
    }
}

/// Reads a JSON (or YAML) document from a file or, for `-`, standard input.
fn read_document(source: &str) -> Result<Value, String> {
    let text = if source == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|error| format!("cannot read standard input: {error}"))?;
        text
    } else {
        portcullis::manifest::yaml::read_text(Path::new(source))
            .map_err(|message| format!("{source}: {message}"))?
    };
    let origin = if source == "-" { "<stdin>" } else { source };
    match serde_json::from_str(&text) {
        Ok(value) => Ok(value),
        Err(_) => match portcullis::manifest::yaml::parse(&text) {
            Ok(node) => Ok(node.to_json()),
            Err(error) => Err(match error.position {
                Some(at) => format!("{origin}:{at}: not JSON or YAML: {}", error.message),
                None => format!("{origin}: not JSON or YAML: {}", error.message),
            }),
        },
    }
}

pub(crate) fn run_eval(
    manifest: &Path,
    at: Point,
    context: &str,
    grants: &[String],
    format: Format,
) -> u8 {
    let loaded = match Manifest::load(manifest, &CodeRegistry::new()) {
        Ok(loaded) => loaded,
        Err(errors) => {
            render::print_load_errors(&errors);
            return 1;
        }
    };
    let point = point(at);
    let context = match read_document(context).and_then(|value| parse_context(point, value)) {
        Ok(context) => context,
        Err(message) => {
            let origin = if context == "-" { "<stdin>" } else { context };
            eprintln!("{origin}: error: {message}");
            return 1;
        }
    };
    for digest in grants {
        if let Err(message) = check_digest(digest) {
            eprintln!("error: --grant: {message}");
            return 1;
        }
    }
    let export = loaded.audit_export();
    let run = async {
        let (engine, taken) = engine(loaded).await?;
        for digest in grants {
            if let Err(error) = engine
                .approvals()
                .grant(digest, GRANTED_BY, GRANT_TTL)
                .await
            {
                eprintln!("warning: --grant {digest}: the grant was not recorded: {error}");
            }
        }
        let outcome = evaluate(&engine, &taken, &context).await;
        drop(engine);
        // What the audit sinks hold goes out before the process ends.
        if let Err(error) = export.shutdown().await {
            eprintln!("warning: {error}");
        }
        Ok::<_, ManifestErrors>(outcome)
    };
    match crate::runtime().block_on(run) {
        Ok(outcome) => {
            println!("{}", outcome.to_text(format == Format::Human));
            outcome.exit_code()
        }
        Err(errors) => {
            render::print_load_errors(&errors);
            1
        }
    }
}
