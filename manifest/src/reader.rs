//! Reading the manifest's YAML nodes into values, with a diagnostic for each thing that does
//! not fit.

use std::path::Path;
use std::time::Duration;

use crate::diagnostic::{Diagnostic, Report, closest};
use crate::yaml::{Node, NodeValue, Position};
use portcullis_engine::duration::parse_duration;

/// Reads the keys of maps, reporting what does not fit.
pub(crate) struct Reader<'r> {
    pub(crate) file: &'r Path,
    pub(crate) report: &'r mut Report,
}

impl Reader<'_> {
    pub(crate) fn error(&mut self, position: Position, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(self.file, Some(position), message)
    }

    pub(crate) fn push(&mut self, diagnostic: Diagnostic) {
        self.report.push(diagnostic);
    }

    /// The entries of a map whose keys must be among `allowed`; unknown keys are reported
    /// (with the closest allowed key) and left out.
    pub(crate) fn map<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Option<Vec<(&'n str, &'n Node, &'n Node)>> {
        let NodeValue::Map(entries) = &node.value else {
            let diagnostic = self.error(
                node.position,
                format!("{what} must be a map, not {}", node.kind()),
            );
            self.push(diagnostic);
            return None;
        };
        let mut fields = Vec::new();
        for (key, value) in entries {
            let Some(name) = key.as_str() else {
                let diagnostic = self.error(
                    key.position,
                    format!("the keys of {what} are names, not {}", key.kind()),
                );
                self.push(diagnostic);
                continue;
            };
            if allowed.contains(&name) {
                fields.push((name, key, value));
            } else {
                let help = closest(name, allowed)
                    .map(|suggestion| format!("did you mean `{suggestion}`?"))
                    .or_else(|| Some(format!("the keys of {what} are: {}", allowed.join(", "))));
                let diagnostic = self
                    .error(key.position, format!("unknown key `{name}` in {what}"))
                    .with_optional_help(help);
                self.push(diagnostic);
            }
        }
        Some(fields)
    }

    pub(crate) fn string(&mut self, node: &Node, what: &str) -> Option<String> {
        match &node.value {
            NodeValue::String(text) if text.contains("${") => {
                let diagnostic = self
                    .error(
                        node.position,
                        format!("{what} contains `${{`: values are not interpolated"),
                    )
                    .with_help(
                        "secrets come from the environment through the `*_env` keys (for example `bearer_token_env: POLICY_TOKEN`)",
                    );
                self.push(diagnostic);
                None
            }
            NodeValue::String(text) if text.is_empty() => {
                let diagnostic = self.error(node.position, format!("{what} is empty"));
                self.push(diagnostic);
                None
            }
            NodeValue::String(text) => Some(text.clone()),
            _ => {
                let diagnostic = self.error(
                    node.position,
                    format!("{what} must be a string, not {}", node.kind()),
                );
                self.push(diagnostic);
                None
            }
        }
    }

    pub(crate) fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.value {
            NodeValue::Bool(value) => Some(value),
            _ => {
                let diagnostic = self.error(
                    node.position,
                    format!("{what} must be true or false, not {}", node.kind()),
                );
                self.push(diagnostic);
                None
            }
        }
    }

    pub(crate) fn duration(&mut self, node: &Node, what: &str) -> Option<Duration> {
        let NodeValue::String(text) = &node.value else {
            let diagnostic = self.error(
                node.position,
                format!(
                    "{what} must be a duration such as 500ms, 5m or 24h, not {}",
                    node.kind()
                ),
            );
            self.push(diagnostic);
            return None;
        };
        match parse_duration(text) {
            Ok(duration) => Some(duration),
            Err(message) => {
                let diagnostic = self
                    .error(node.position, format!("{what}: {message}"))
                    .with_help("durations are written like 500ms, 30s, 5m or 24h");
                self.push(diagnostic);
                None
            }
        }
    }

    pub(crate) fn count(&mut self, node: &Node, what: &str) -> Option<usize> {
        match &node.value {
            NodeValue::Number(number) => {
                match number.as_u64().and_then(|n| usize::try_from(n).ok()) {
                    Some(count) => Some(count),
                    None => {
                        let diagnostic = self.error(
                            node.position,
                            format!("{what} must be a whole number, at least 0"),
                        );
                        self.push(diagnostic);
                        None
                    }
                }
            }
            _ => {
                let diagnostic = self.error(
                    node.position,
                    format!("{what} must be a whole number, not {}", node.kind()),
                );
                self.push(diagnostic);
                None
            }
        }
    }

    pub(crate) fn list<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n [Node]> {
        match &node.value {
            NodeValue::List(items) => Some(items),
            NodeValue::Null => Some(&[]),
            _ => {
                let diagnostic = self.error(
                    node.position,
                    format!("{what} must be a list, not {}", node.kind()),
                );
                self.push(diagnostic);
                None
            }
        }
    }
}
