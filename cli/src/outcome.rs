//! One evaluation and its outcome as `eval` prints it; `portcullis eval`.

use std::path::Path;

use portcullis::manifest::{CodeRegistry, Manifest};
use portcullis::server::DecisionTap;
use portcullis::{InterceptionPoint, PolicyEngine, PolicySet};
use serde_json::Value;

use crate::{Format, Point, render};

/// The outcome document and the evaluation behind it are the decision service's: `eval`
/// prints exactly what `POST /v1/evaluate/{point}` answers.
pub(crate) use portcullis::server::{Context, Outcome, evaluate, parse_context};

/// An engine whose audit records say which decisions a call took.
pub(crate) fn engine(set: PolicySet) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(set)
        .on_audit(DecisionTap::new())
        .build()
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
    if !grants.is_empty() {
        eprintln!(
            "warning: --grant has no effect: no policy of this engine asks for an approval yet"
        );
    }
    let engine = engine(loaded.into_policy_set());
    let outcome = crate::runtime().block_on(evaluate(&engine, &context));
    println!("{}", outcome.to_text(format == Format::Human));
    outcome.exit_code()
}
