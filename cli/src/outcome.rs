//! One evaluation and its outcome as `eval` prints it; `portcullis eval`.

use std::path::Path;
use std::time::Duration;

use portcullis::manifest::{CodeRegistry, LoadedManifest, Manifest, ManifestErrors};
use portcullis::server::DecisionTap;
use portcullis::{InterceptionPoint, PolicyEngine};
use serde_json::Value;

use crate::{Format, Point, render};

/// The outcome document and the evaluation behind it are the decision service's: `eval`
/// prints exactly what `POST /v1/evaluate/{point}` answers.
pub(crate) use portcullis::server::{Context, Outcome, Verdict, evaluate, parse_context};

/// How long a grant given on the command line (`--grant`, a test case's `grants`) stays
/// valid: it is used by the call that follows.
pub(crate) const GRANT_TTL: Duration = Duration::from_secs(60 * 60);

/// Who a grant given on the command line is recorded for.
pub(crate) const GRANTED_BY: &str = "portcullis command line";

/// The engine the manifest describes (its set, session store, approval time-out and audit
/// sinks), whose audit records also say which decisions a call took.
pub(crate) async fn engine(loaded: LoadedManifest) -> Result<PolicyEngine, ManifestErrors> {
    let builder = loaded
        .into_engine_builder_with_audit(DecisionTap::new())
        .await?;
    Ok(builder.build())
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

pub(crate) fn point(point: Point) -> InterceptionPoint {
    match point {
        Point::Input => InterceptionPoint::Input,
        Point::ToolCall => InterceptionPoint::ToolCall,
        Point::ToolResult => InterceptionPoint::ToolResult,
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
        let engine = engine(loaded).await?;
        for digest in grants {
            if let Err(error) = engine
                .approvals()
                .grant(digest, GRANTED_BY, GRANT_TTL)
                .await
            {
                eprintln!("warning: --grant {digest}: the grant was not recorded: {error}");
            }
        }
        let outcome = evaluate(&engine, &context).await;
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
