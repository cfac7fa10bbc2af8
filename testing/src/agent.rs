//! The policies the framework integrations' tests guard an agent with: one set, so the
//! async-openai layer and the rig hook are held to the same rules.
//!
//! | Policy | Point | What it does |
//! |---|---|---|
//! | [`NoPasswordRequests`] | input | denies prompts asking for "admin password" |
//! | [`RedactPromptSsn`] | input | replaces SSNs in every message with `[REDACTED]` |
//! | [`GuardTools`] | tool call | denies `delete_database`; sets `limit` of `search` to 5 |
//! | [`RedactToolSsn`] | tool call | replaces SSNs in `arguments.query` |
//! | [`NoLaunchCodes`] | output | denies answers mentioning "launch codes", streamed or whole |
//! | [`RedactAnswerSsn`] | output | replaces SSNs in answers, streamed or whole |
//! | [`LabelWebResults`] | tool result | labels the session `untrusted` once `web_fetch` returned |
//! | [`RedactResultSsn`] | tool result | replaces SSNs in what tools return (`content`, `structured.ssn`) |
//! | [`NoEmailAfterUntrusted`] | tool call | denies `send_email` in an `untrusted` session |
//!
//! The last three are the untrusted-content pattern of SPEC §18; [`policy_set`] leaves them
//! out, so the tests that use it see results at the output point as a set written before
//! `tool_result` existed would.
//!
//! ```
//! let set = portcullis_testing::agent::policy_set();
//! assert_eq!(set.output().len(), 2);
//! ```

use portcullis_engine::stream::StreamingRule;
use portcullis_engine::{
    BoxError, InputContext, OutputContext, Policy, PolicyDecision, PolicySet, PolicySetBuilder,
    Redaction, ToolCallContext, ToolResultContext, TransformOperation, async_trait,
};

/// A US social security number, as the policies look for it.
pub const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";

/// Every policy of this module, in the order the integrations' tests use: input
/// [`NoPasswordRequests`], [`RedactPromptSsn`]; tool call [`GuardTools`], [`RedactToolSsn`];
/// output [`NoLaunchCodes`], [`RedactAnswerSsn`].
pub fn policy_set() -> PolicySet {
    PolicySet::builder()
        .input(NoPasswordRequests)
        .input(RedactPromptSsn)
        .tool_call(GuardTools)
        .tool_call(RedactToolSsn)
        .output(NoLaunchCodes)
        .output(RedactAnswerSsn)
        .build()
}

/// Redacts SSNs from every message sent to the model (id `redact_prompt_ssn`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactPromptSsn;

#[async_trait]
impl Policy<InputContext> for RedactPromptSsn {
    fn id(&self) -> &str {
        "redact_prompt_ssn"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "messages.*.content",
            SSN,
        )]))
    }
}

/// Denies prompts that ask for the admin password (id `no_password_requests`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPasswordRequests;

#[async_trait]
impl Policy<InputContext> for NoPasswordRequests {
    fn id(&self) -> &str {
        "no_password_requests"
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        let asks = context
            .messages
            .iter()
            .any(|message| message.content.contains("admin password"));
        Ok(if asks {
            PolicyDecision::deny("asks for the admin password")
        } else {
            PolicyDecision::allow()
        })
    }
}

/// Redacts SSNs from answers, whole or streamed (id `redact_answer_ssn`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactAnswerSsn;

#[async_trait]
impl Policy<OutputContext> for RedactAnswerSsn {
    fn id(&self) -> &str {
        "redact_answer_ssn"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "response.content",
            SSN,
        )]))
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::Replace {
            pattern: SSN.to_owned(),
            replacement: "[REDACTED]".to_owned(),
            max_match_len: None,
        }])
    }
}

/// Denies answers that mention the launch codes, whole or streamed (id `no_launch_codes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLaunchCodes;

#[async_trait]
impl Policy<OutputContext> for NoLaunchCodes {
    fn id(&self) -> &str {
        "no_launch_codes"
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.response.content.contains("launch codes") {
            PolicyDecision::deny("mentions the launch codes")
        } else {
            PolicyDecision::allow()
        })
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::DenyOnMatch {
            pattern: "launch codes".to_owned(),
            reason: Some("mentions the launch codes".to_owned()),
            max_match_len: None,
        }])
    }
}

/// Denies `delete_database` ("destructive tool") and caps `search` at 5 results
/// (id `guard_tools`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardTools;

#[async_trait]
impl Policy<ToolCallContext> for GuardTools {
    fn id(&self) -> &str {
        "guard_tools"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(match context.tool_name.as_str() {
            "delete_database" => PolicyDecision::deny("destructive tool"),
            "search" => PolicyDecision::transform([TransformOperation::set("arguments.limit", 5)]),
            _ => PolicyDecision::allow(),
        })
    }
}

/// Redacts SSNs from the `query` argument of tool calls (id `redact_tool_ssn`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactToolSsn;

#[async_trait]
impl Policy<ToolCallContext> for RedactToolSsn {
    fn id(&self) -> &str {
        "redact_tool_ssn"
    }

    async fn evaluate(&self, _: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "arguments.query",
            SSN,
        )]))
    }
}

/// The untrusted-content pattern: [`NoEmailAfterUntrusted`] at the tool-call point,
/// [`LabelWebResults`] and [`RedactResultSsn`] at the tool-result point (an engine needs a
/// session store for the label to carry from one call to the next).
pub fn untrusted_content() -> PolicySetBuilder {
    PolicySet::builder()
        .tool_call(NoEmailAfterUntrusted)
        .tool_result(LabelWebResults)
        .tool_result(RedactResultSsn)
}

/// The label [`LabelWebResults`] gives a session and [`NoEmailAfterUntrusted`] reads.
pub const UNTRUSTED: &str = "untrusted";

/// Labels the session [`UNTRUSTED`] once a `web_fetch` tool returned: what a web page says
/// may be an injected instruction (id `label_web_results`; an audit decision).
#[derive(Debug, Clone, Copy, Default)]
pub struct LabelWebResults;

#[async_trait]
impl Policy<ToolResultContext> for LabelWebResults {
    fn id(&self) -> &str {
        "label_web_results"
    }

    async fn evaluate(&self, context: &ToolResultContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.tool_name == "web_fetch" {
            PolicyDecision::audit("web content entered the session").with_labels([UNTRUSTED])
        } else {
            PolicyDecision::allow()
        })
    }
}

/// Redacts SSNs from what tools return: the text, and the `ssn` field of a structured
/// result (id `redact_result_ssn`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactResultSsn;

#[async_trait]
impl Policy<ToolResultContext> for RedactResultSsn {
    fn id(&self) -> &str {
        "redact_result_ssn"
    }

    async fn evaluate(&self, context: &ToolResultContext) -> Result<PolicyDecision, BoxError> {
        let mut redactions = vec![Redaction::replace("content", SSN)];
        if context
            .structured
            .as_ref()
            .is_some_and(|structured| structured.get("ssn").is_some())
        {
            redactions.push(Redaction::mask("structured.ssn"));
        }
        Ok(PolicyDecision::redact(redactions))
    }
}

/// Denies `send_email` once the session is [`UNTRUSTED`] (id `no_email_after_untrusted`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEmailAfterUntrusted;

#[async_trait]
impl Policy<ToolCallContext> for NoEmailAfterUntrusted {
    fn id(&self) -> &str {
        "no_email_after_untrusted"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        // The engine puts the session's facts in `metadata.session` (SPEC §12).
        let untrusted = context
            .metadata
            .extra
            .get("session")
            .and_then(|session| session.get("labels"))
            .and_then(serde_json::Value::as_array)
            .is_some_and(|labels| labels.iter().any(|label| label == UNTRUSTED));
        Ok(if untrusted && context.tool_name == "send_email" {
            PolicyDecision::deny("no outbound e-mail once untrusted content entered the session")
        } else {
            PolicyDecision::allow()
        })
    }
}
