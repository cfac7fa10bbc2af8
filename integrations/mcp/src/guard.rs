//! The checks both forms share: a tool call before it goes upstream, a tool list before the
//! client sees it, a tool result before the client reads it.

use std::sync::Arc;

use portcullis_engine::apply::apply_decision;
use portcullis_engine::error::DENIED_WITHOUT_REASON;
use portcullis_engine::{
    ApprovalRequest, EngineError, Message, Metadata, OutputContext, PolicyDecision,
    PolicyDenialError, PolicyEngine, ToolCallContext,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, ResourceContents, Tool,
};
use serde_json::{Map, Value, json};

/// The `_meta` key of a tool result the guard wrote because a policy refused the call or its
/// result: `{"policy_id", "interception_point", "reason", "evaluation_error"}` (see
/// [`denial`]); `evaluation_error` is `true` when the policy could not be evaluated rather
/// than denied.
pub const DENIAL_META_KEY: &str = "portcullis/denial";

/// The `_meta` key of a tool result the guard wrote because the call needs a person's
/// approval: the engine's approval request (`{"id", "action_digest", "policy_ids",
/// "reasons", ...}`; see [`approval_request`]).
pub const APPROVAL_META_KEY: &str = "portcullis/approval";

/// The `metadata` key naming the MCP method a context comes from (`"tools/call"` or
/// `"tools/list"`).
pub const MCP_METHOD_KEY: &str = "mcp_method";

/// The engine and the identity the guard evaluates with; shared by [`GuardedClient`] and
/// [`GuardedServer`].
///
/// [`GuardedClient`]: crate::GuardedClient
/// [`GuardedServer`]: crate::GuardedServer
#[derive(Debug, Clone)]
pub struct ToolGuard {
    engine: Arc<PolicyEngine>,
    agent_id: Arc<str>,
    session_id: Arc<str>,
}

/// What the tool-call check decided.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallCheck {
    /// Send this request upstream (its arguments as the policies left them).
    Proceed(CallToolRequestParams),
    /// Do not call upstream: answer the client with this result (`isError: true`, the reason).
    Refused(CallToolResult),
    /// A policy escalated and no approval is recorded: the call may proceed only once a
    /// person approves this exact action. `refused` is the answer when nobody can be asked
    /// (`isError: true`, naming the approval request; [`approval_request`] reads it back).
    ApprovalRequired {
        /// What a person is asked to approve.
        request: Box<ApprovalRequest>,
        /// The answer when the call is not approved here and now.
        refused: CallToolResult,
    },
}

impl ToolGuard {
    /// A guard evaluating with `engine`, agent id `mcp-client`, session id `default`.
    pub fn new(engine: impl Into<Arc<PolicyEngine>>) -> Self {
        ToolGuard {
            engine: engine.into(),
            agent_id: Arc::from("mcp-client"),
            session_id: Arc::from("default"),
        }
    }

    /// The `metadata.agent_id` of every context (default `mcp-client`).
    pub fn agent_id(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Arc::from(agent_id.into());
        self
    }

    /// The `metadata.session_id` of every context (default `default`).
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Arc::from(session_id.into());
        self
    }

    /// The engine the guard evaluates with.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    fn metadata(&self, method: &str) -> Metadata {
        Metadata::new(&*self.agent_id, &*self.session_id)
            .with_extra("framework", "mcp")
            .with_extra(MCP_METHOD_KEY, method)
    }

    /// Runs the tool-call policies on a `tools/call` request.
    ///
    /// A transformation or redaction of `arguments` rewrites the request's arguments; a
    /// denial, or a policy that could not be evaluated, refuses the call with an error
    /// result that names the policy and the reason; an escalation without a recorded
    /// approval is [`CallCheck::ApprovalRequired`].
    pub async fn check_call(&self, mut params: CallToolRequestParams) -> CallCheck {
        let calling_message = Message::assistant(describe_call(&params));
        let had_arguments = params.arguments.is_some();
        let context = ToolCallContext::new(
            params.name.as_ref(),
            params.arguments.take().unwrap_or_default(),
            calling_message,
            self.metadata("tools/call"),
        );
        let changed = match self.engine.evaluate_tool_call(&context).await {
            Ok(evaluation) => evaluation
                .is_modified()
                .then(|| evaluation.into_context().arguments),
            Err(EngineError::ApprovalRequired(request)) => {
                let refused = approval_refusal(&params.name, &request);
                return CallCheck::ApprovalRequired { request, refused };
            }
            Err(error) => return CallCheck::Refused(refusal(&params.name, &error)),
        };
        params.arguments = match changed {
            Some(arguments) => Some(arguments),
            None => had_arguments.then_some(context.arguments),
        };
        CallCheck::Proceed(params)
    }

    /// Keeps the tools whose call with empty arguments the tool-call policies allow (with
    /// `metadata.mcp_method = "tools/list"`). A tool whose check fails to evaluate is hidden
    /// too: nothing is shown that the policies have not cleared. A tool whose calls escalate
    /// is shown: each call is checked, and asked, on its own.
    pub async fn filter_tools(&self, tools: Vec<Tool>) -> Vec<Tool> {
        let mut visible = Vec::with_capacity(tools.len());
        for tool in tools {
            let context = ToolCallContext::new(
                tool.name.as_ref(),
                Map::new(),
                Message::assistant(format!("List tool \"{}\".", tool.name)),
                self.metadata("tools/list"),
            );
            match self.engine.evaluate_tool_call(&context).await {
                // A tool whose calls need a person's approval is shown: each call is asked.
                Ok(_) | Err(EngineError::ApprovalRequired(_)) => visible.push(tool),
                Err(_) => {}
            }
        }
        visible
    }

    /// Runs the output policies on the result of a call to `tool_name`.
    ///
    /// The policies see the result's text joined by newlines: its text blocks and the text of
    /// its embedded text resources, in order. Their redactions and transformations are
    /// applied again to each of those and to each string of `structuredContent`; a denial,
    /// or a policy that could not be evaluated, replaces the result with an error result
    /// that names the policy and the reason.
    ///
    /// Binary content is not text the policies read: images, audio and embedded blob
    /// resources pass through as they came, as do resource links (a URI and its names).
    pub async fn check_result(&self, tool_name: &str, result: CallToolResult) -> CallToolResult {
        let text = result_text(&result);
        let metadata = self
            .metadata("tools/call")
            .with_extra("tool_name", tool_name);
        let context = OutputContext::new(Message::assistant(text), metadata);
        let evaluation = match self.engine.evaluate_output(&context).await {
            Ok(evaluation) => evaluation,
            Err(error) => return refusal(tool_name, &error),
        };
        if !evaluation.is_modified() {
            return result;
        }
        let changes: Vec<&PolicyDecision> = evaluation
            .decisions()
            .iter()
            .map(|entry| &entry.decision)
            .filter(|decision| {
                matches!(
                    decision,
                    PolicyDecision::Redact { .. } | PolicyDecision::Transform { .. }
                )
            })
            .collect();
        let cleared = &evaluation.context().response.content;
        match apply_to_result(result, &context.metadata, &changes, cleared) {
            Ok(result) => result,
            Err(problem) => refused_result(
                "portcullis-mcp",
                "output",
                "",
                true,
                &format!(
                    "the result of tool \"{tool_name}\" was withheld: an output policy's change could not be applied to it ({problem})"
                ),
            ),
        }
    }
}

/// The text the tool-call policies see as the message that made the call.
fn describe_call(params: &CallToolRequestParams) -> String {
    match &params.arguments {
        Some(arguments) => format!(
            "Call tool \"{}\" with arguments {}.",
            params.name,
            serde_json::to_string(arguments).unwrap_or_default()
        ),
        None => format!("Call tool \"{}\" without arguments.", params.name),
    }
}

/// The text a block carries for the output policies: a text block's, or an embedded text
/// resource's.
fn block_text(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::Text(text) => Some(&text.text),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        },
        _ => None,
    }
}

/// [`block_text`], to rewrite it.
fn block_text_mut(block: &mut ContentBlock) -> Option<&mut String> {
    match block {
        ContentBlock::Text(text) => Some(&mut text.text),
        ContentBlock::Resource(embedded) => match &mut embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        },
        _ => None,
    }
}

/// The result's text ([`block_text`] of each block), joined by newlines.
fn result_text(result: &CallToolResult) -> String {
    let mut text = String::new();
    for (index, block) in result.content.iter().filter_map(block_text).enumerate() {
        if index > 0 {
            text.push('\n');
        }
        text.push_str(block);
    }
    text
}

/// Applies `changes` to each block's text ([`block_text`]) and each string of
/// `structuredContent`.
///
/// When the texts so changed do not join into `cleared` (the text the policies returned: a
/// pattern matched across two blocks, a mask or an append applied once to the whole), the
/// blocks that carry text (embedded text resources included) are replaced by one text block
/// holding `cleared`, where the first was: the client never reads text the policies have not
/// cleared.
fn apply_to_result(
    mut result: CallToolResult,
    metadata: &Metadata,
    changes: &[&PolicyDecision],
    cleared: &str,
) -> Result<CallToolResult, String> {
    let rewrite = |text: &mut String| -> Result<(), String> {
        let mut context =
            OutputContext::new(Message::assistant(std::mem::take(text)), metadata.clone());
        for decision in changes {
            if let Some(changed) =
                apply_decision(&context, decision).map_err(|error| error.to_string())?
            {
                context = changed;
            }
        }
        *text = context.response.content;
        Ok(())
    };
    for block in &mut result.content {
        if let Some(text) = block_text_mut(block) {
            rewrite(text)?;
        }
    }
    if result_text(&result) != cleared {
        let mut first = true;
        result.content.retain_mut(|block| {
            if block_text(block).is_none() {
                return true;
            }
            if !first {
                return false;
            }
            first = false;
            match block {
                ContentBlock::Text(text) => cleared.clone_into(&mut text.text),
                other => *other = ContentBlock::text(cleared),
            }
            true
        });
    }
    if let Some(structured) = &mut result.structured_content {
        rewrite_strings(structured, &rewrite)?;
    }
    Ok(result)
}

fn rewrite_strings(
    value: &mut Value,
    rewrite: &impl Fn(&mut String) -> Result<(), String>,
) -> Result<(), String> {
    match value {
        Value::String(text) => rewrite(text),
        Value::Array(items) => items
            .iter_mut()
            .try_for_each(|item| rewrite_strings(item, rewrite)),
        Value::Object(fields) => fields
            .values_mut()
            .try_for_each(|item| rewrite_strings(item, rewrite)),
        _ => Ok(()),
    }
}

/// The result that answers a call refused by `error`.
fn refusal(tool_name: &str, error: &EngineError) -> CallToolResult {
    let point = error.interception_point().as_str();
    let policy_id = error.policy_id();
    let message = match error.as_denial() {
        Some(denial) => {
            let reason = denial.reason().unwrap_or(DENIED_WITHOUT_REASON);
            if denial.interception_point() == portcullis_engine::InterceptionPoint::ToolCall {
                format!(
                    "The call to tool \"{tool_name}\" was denied by policy \"{policy_id}\": {reason}. The tool did not run."
                )
            } else {
                format!(
                    "The result of tool \"{tool_name}\" was withheld by policy \"{policy_id}\": {reason}."
                )
            }
        }
        // An evaluation error, or any other way the engine refuses (an escalated result, which
        // no one can approve before the client reads it): fail closed.
        None if error.interception_point() == portcullis_engine::InterceptionPoint::Output => {
            format!(
                "The result of tool \"{tool_name}\" was withheld: policy \"{policy_id}\" could not be evaluated ({error})."
            )
        }
        None => format!(
            "The call to tool \"{tool_name}\" was refused: policy \"{policy_id}\" could not be evaluated ({error}). The tool did not run."
        ),
    };
    let reason = error
        .as_denial()
        .and_then(PolicyDenialError::reason)
        .unwrap_or("");
    refused_result(
        policy_id,
        point,
        reason,
        error.as_denial().is_none(),
        &message,
    )
}

/// The error result of a call that waits for a person's approval: it names the request and
/// its action digest, for whoever records the grant.
fn approval_refusal(tool_name: &str, request: &ApprovalRequest) -> CallToolResult {
    let mut message = format!(
        "The call to tool \"{tool_name}\" needs a person's approval (policy {}",
        request
            .policy_ids
            .iter()
            .map(|id| format!("\"{id}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !request.reasons.is_empty() {
        message.push_str(": ");
        message.push_str(&request.reasons.join("; "));
    }
    message.push_str(&format!(
        "). The tool did not run. Approval request {}, action digest {}: once a grant is recorded for that digest, the same call proceeds.",
        request.id, request.action_digest
    ));
    let mut result = CallToolResult::error(vec![ContentBlock::text(message)]);
    let mut meta = MetaObject::new();
    meta.0.insert(
        APPROVAL_META_KEY.to_owned(),
        serde_json::to_value(request).unwrap_or(Value::Null),
    );
    result.meta = Some(meta);
    result
}

/// The approval request a tool result reports, if the guard refused the call because it
/// needs a person's approval (reads the `_meta` entry [`APPROVAL_META_KEY`]).
pub fn approval_request(result: &CallToolResult) -> Option<ApprovalRequest> {
    let request = result.meta.as_ref()?.0.get(APPROVAL_META_KEY)?;
    serde_json::from_value(request.clone()).ok()
}

/// The error result of a call a person refused to approve: a denial by the escalating
/// policy.
pub(crate) fn not_approved(
    tool_name: &str,
    request: &ApprovalRequest,
    reason: &str,
) -> CallToolResult {
    let policy_id = request.policy_ids.first().map_or("", String::as_str);
    refused_result(
        policy_id,
        "tool_call",
        reason,
        false,
        &format!(
            "The call to tool \"{tool_name}\" was not approved ({reason}); policy \"{policy_id}\" asked for an approval. The tool did not run."
        ),
    )
}

/// An error result saying why the guard refused; its `_meta` names the policy.
fn refused_result(
    policy_id: &str,
    point: &str,
    reason: &str,
    evaluation_error: bool,
    message: &str,
) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(message)]);
    let mut meta = MetaObject::new();
    meta.0.insert(
        DENIAL_META_KEY.to_owned(),
        json!({
            "policy_id": policy_id,
            "interception_point": point,
            "reason": reason,
            "evaluation_error": evaluation_error,
        }),
    );
    result.meta = Some(meta);
    result
}

/// The policy denial a tool result reports, if the guard refused the call or its result.
///
/// Reads the `_meta` entry the guard writes ([`DENIAL_META_KEY`]), so it works on results
/// read from a [`GuardedClient`](crate::GuardedClient) and on results a client received
/// through a [`GuardedServer`](crate::GuardedServer). A refusal because a policy could not
/// be evaluated is not a denial: `None`.
pub fn denial(result: &CallToolResult) -> Option<PolicyDenialError> {
    let details = result.meta.as_ref()?.0.get(DENIAL_META_KEY)?;
    if details.get("evaluation_error") != Some(&Value::Bool(false)) {
        return None;
    }
    let policy_id = details.get("policy_id")?.as_str()?;
    let point = serde_json::from_value(details.get("interception_point")?.clone()).ok()?;
    let reason = details
        .get("reason")
        .and_then(Value::as_str)
        .filter(|reason| !reason.is_empty())
        .map(str::to_owned);
    Some(PolicyDenialError::new(policy_id, point, reason))
}

#[cfg(test)]
mod tests {
    use portcullis_engine::{BoxError, Policy, PolicySet, Redaction, async_trait};

    use super::*;

    struct Redact(Redaction);

    #[async_trait]
    impl Policy<OutputContext> for Redact {
        fn id(&self) -> &str {
            "redact"
        }

        async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
            Ok(PolicyDecision::redact([self.0.clone()]))
        }
    }

    fn engine(redaction: Redaction) -> PolicyEngine {
        PolicyEngine::builder()
            .policy_set(PolicySet::builder().output(Redact(redaction)).build())
            .build()
    }

    fn blocks(texts: &[&str]) -> CallToolResult {
        let mut content: Vec<ContentBlock> = texts.iter().map(|t| ContentBlock::text(*t)).collect();
        content.insert(1, ContentBlock::image("aGk=", "image/png"));
        CallToolResult::success(content)
    }

    fn texts(result: &CallToolResult) -> Vec<&str> {
        result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
            .collect()
    }

    #[tokio::test]
    async fn a_match_within_blocks_is_redacted_block_by_block() {
        let guard = ToolGuard::new(engine(Redaction::replace("response.content", r"\d{3}")));
        let result = guard.check_result("t", blocks(&["a 123", "b 456"])).await;
        assert_eq!(texts(&result), ["a [REDACTED]", "b [REDACTED]"]);
        assert_eq!(result.content.len(), 3, "the image stays");
    }

    #[tokio::test]
    async fn a_match_across_blocks_leaves_only_cleared_text() {
        let guard = ToolGuard::new(engine(Redaction::replace("response.content", r"12\n34")));
        let result = guard.check_result("t", blocks(&["a 12", "34 b"])).await;
        assert_eq!(texts(&result), ["a [REDACTED] b"]);
        assert_eq!(result.content.len(), 2, "the image stays");
    }

    #[tokio::test]
    async fn embedded_text_resources_are_checked_and_blobs_pass() {
        let guard = ToolGuard::new(engine(Redaction::replace("response.content", r"\d{3}")));
        let blob = ResourceContents::blob("MTIz", "file:///b.bin");
        let result = CallToolResult::success(vec![
            ContentBlock::text("a 123"),
            ContentBlock::embedded_text("file:///r.txt", "r 456"),
            ContentBlock::resource(blob.clone()),
        ]);
        let result = guard.check_result("t", result).await;
        assert_eq!(result_text(&result), "a [REDACTED]\nr [REDACTED]");
        assert!(matches!(
            result.content[1].as_resource().map(|r| &r.resource),
            Some(ResourceContents::TextResourceContents { uri, .. }) if uri == "file:///r.txt"
        ));
        assert_eq!(
            result.content[2].as_resource().map(|r| &r.resource),
            Some(&blob)
        );
        // Across a text block and a resource: one text block of cleared text.
        let guard = ToolGuard::new(engine(Redaction::replace("response.content", r"12\n34")));
        let result = CallToolResult::success(vec![
            ContentBlock::text("a 12"),
            ContentBlock::embedded_text("file:///r.txt", "34 b"),
        ]);
        let result = guard.check_result("t", result).await;
        assert_eq!(texts(&result), ["a [REDACTED] b"]);
        assert_eq!(result.content.len(), 1);
    }

    #[tokio::test]
    async fn a_mask_masks_the_whole_text_once() {
        let guard = ToolGuard::new(engine(Redaction::mask("response.content")));
        let result = guard.check_result("t", blocks(&["a", "b"])).await;
        assert_eq!(texts(&result), ["[REDACTED]"]);
    }
}
