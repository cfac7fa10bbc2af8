//! Diagnostics as a compiler writes them, or as JSON.

use std::io::IsTerminal;

use portcullis::manifest::{Diagnostic, Severity};
use serde_json::{Value, json};

/// Whether standard output gets colours: a terminal, and `NO_COLOR` unset.
pub(crate) fn colours() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

struct Paint(bool);

impl Paint {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// `file:line:col: error: message`, the line with a caret under the column, and `help:`.
pub(crate) fn human(diagnostic: &Diagnostic, colour: bool) -> String {
    let paint = Paint(colour);
    let mut out = diagnostic.file().display().to_string();
    if let Some(position) = diagnostic.position() {
        out.push_str(&format!(":{}:{}", position.line, position.column));
    }
    let severity = match diagnostic.severity() {
        Severity::Error => paint.paint("1;31", "error"),
        Severity::Warning => paint.paint("1;33", "warning"),
    };
    out.push_str(&format!(
        ": {severity}: {}\n",
        paint.paint("1", diagnostic.message())
    ));
    if let Some(position) = diagnostic.position()
        && let Ok(text) = std::fs::read_to_string(diagnostic.file())
        && let Some(line) = text.lines().nth(position.line.saturating_sub(1))
    {
        let number = position.line.to_string();
        let gutter = " ".repeat(number.len());
        let caret_at: String = line
            .chars()
            .take(position.column.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        out.push_str(&format!(
            "{} {line}\n",
            paint.paint("34", &format!("{number} |"))
        ));
        out.push_str(&format!(
            "{} {caret_at}{}\n",
            paint.paint("34", &format!("{gutter} |")),
            paint.paint("1;31", "^")
        ));
    }
    if let Some(help) = diagnostic.help() {
        out.push_str(&format!("  {}: {help}\n", paint.paint("1;36", "help")));
    }
    out
}

/// A diagnostic as JSON.
pub(crate) fn json(diagnostic: &Diagnostic) -> Value {
    json!({
        "severity": diagnostic.severity().as_str(),
        "file": diagnostic.file().display().to_string(),
        "line": diagnostic.position().map(|p| p.line),
        "column": diagnostic.position().map(|p| p.column),
        "message": diagnostic.message(),
        "help": diagnostic.help(),
    })
}

/// Prints the diagnostics of a manifest that did not load, to standard error.
pub(crate) fn print_load_errors(errors: &portcullis::manifest::ManifestErrors) {
    let colour = colours() && std::io::stderr().is_terminal();
    for diagnostic in errors.iter() {
        // A bundle URL's credentials and query string never reach the terminal or a log.
        let text = human(diagnostic, colour);
        eprint!("{}", portcullis::server::redact_urls(&text));
    }
}
