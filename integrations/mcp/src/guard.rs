//! The checks both forms share: a tool call before it goes upstream, a tool list before the
//! client sees it, a tool result before the client reads it.

use std::sync::Arc;

use portcullis_engine::apply::apply_decision;
use portcullis_engine::error::DENIED_WITHOUT_REASON;
use portcullis_engine::{
    ApprovalRequest, DecisionEntry, EngineError, InterceptionPoint, Message, Metadata,
    OutputContext, PolicyContext, PolicyDecision, PolicyDenialError, PolicyEngine, Redaction,
    ToolCallContext, ToolResultContext, TransformOperation,
};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorCode, GetPromptRequestParams,
    GetPromptResult, MetaObject, ReadResourceRequestParams, ReadResourceResult, ResourceContents,
    Tool,
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

/// The JSON-RPC error code of a request the guard refused because a policy denied its
/// result (or could not be evaluated): `resources/read` and `prompts/get`, which have no
/// `isError` result. The error's `data` holds the details a refused tool result carries in
/// its `_meta` ([`DENIAL_META_KEY`]): `{"policy_id", "interception_point", "reason",
/// "evaluation_error"}`.
pub const DENIAL_ERROR_CODE: ErrorCode = ErrorCode(-32001);

/// The `metadata` key naming the MCP method a context comes from (`"tools/call"`,
/// `"tools/list"`, `"resources/read"` or `"prompts/get"`).
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

    /// Runs the result policies on the result of a call to `tool_name` with `arguments`.
    ///
    /// With `tool_result` policies in the set (SPEC §18), the result is a
    /// [`ToolResultContext`]: `tool_name`, `arguments`, `is_error` from the result, `content`
    /// its text and `structured` its `structuredContent`. Without them, it goes to the output
    /// policies as before, an output context whose `response.content` is that text, so a set
    /// written before the point existed keeps its protection.
    ///
    /// The text the policies read is every text the model may read, joined by newlines: text
    /// blocks and the text of embedded text resources, in order, then `structuredContent` as
    /// JSON text, so a policy that matches only the structured result still denies it. Their
    /// changes to that text are applied again to each of those texts and to each string of
    /// `structuredContent` (changes to paths inside `structured` apply to it directly); a
    /// denial, or a policy that could not be evaluated, replaces the result with an error
    /// result that names the policy and the reason.
    ///
    /// Binary content is not text the policies read: images, audio and embedded blob
    /// resources pass through as they came, as do resource links (a URI and its names).
    pub async fn check_result(
        &self,
        tool_name: &str,
        arguments: Map<String, Value>,
        result: CallToolResult,
    ) -> CallToolResult {
        let metadata = self
            .metadata("tools/call")
            .with_extra("tool_name", tool_name);
        let source = Source {
            tool_name,
            arguments,
            is_error: result.is_error == Some(true),
        };
        let point = self.result_point();
        match self.check_data(point, source, metadata, result).await {
            Ok(result) => result,
            Err(Withheld::Refused(error)) => refusal(tool_name, &error),
            Err(Withheld::Unapplicable(problem)) => refused_result(
                "portcullis-mcp",
                point.as_str(),
                "",
                true,
                &format!(
                    "the result of tool \"{tool_name}\" was withheld: a policy's change could not be applied to it ({problem})"
                ),
            ),
        }
    }

    /// Runs the result policies on what a `resources/read` returned: the text of its text
    /// contents, joined by newlines, with `metadata.mcp_method = "resources/read"`. At the
    /// `tool_result` point, `tool_name` is `"resources/read"` and `arguments` the request's
    /// params; at the output point (a set without `tool_result` policies),
    /// `metadata.tool_name` and `metadata.arguments` say the same. Redactions and
    /// transformations reach every text content; a denial, or a policy that could not be
    /// evaluated, is a JSON-RPC error naming the policy ([`DENIAL_ERROR_CODE`], the
    /// `_meta`-shaped details of [`DENIAL_META_KEY`] as its `data`). Blob contents pass as
    /// they are.
    pub async fn check_resource(
        &self,
        params: &ReadResourceRequestParams,
        result: ReadResourceResult,
    ) -> Result<ReadResourceResult, ErrorData> {
        self.check_request_data("resources/read", serde_json::to_value(params), result)
            .await
    }

    /// Runs the result policies on what a `prompts/get` returned: the text of its messages
    /// (text blocks and embedded text resources), joined by newlines, with
    /// `metadata.mcp_method = "prompts/get"` and the request's params as the arguments; as
    /// [`check_resource`](Self::check_resource) otherwise. Images, audio and blobs in
    /// messages pass as they are.
    pub async fn check_prompt(
        &self,
        params: &GetPromptRequestParams,
        result: GetPromptResult,
    ) -> Result<GetPromptResult, ErrorData> {
        self.check_request_data("prompts/get", serde_json::to_value(params), result)
            .await
    }

    /// The point results go to: `tool_result` when the set has policies there, `output`
    /// otherwise (read at each call: a reload may add or remove them).
    fn result_point(&self) -> InterceptionPoint {
        if self.engine.policy_set().tool_result().is_empty() {
            InterceptionPoint::Output
        } else {
            InterceptionPoint::ToolResult
        }
    }

    /// [`check_data`](Self::check_data) for a method whose refusal is a JSON-RPC error.
    async fn check_request_data<D: Readable>(
        &self,
        method: &str,
        params: serde_json::Result<Value>,
        data: D,
    ) -> Result<D, ErrorData> {
        let arguments = match params {
            Ok(Value::Object(arguments)) => arguments,
            _ => Map::new(),
        };
        let metadata = self
            .metadata(method)
            .with_extra("tool_name", method)
            .with_extra("arguments", Value::Object(arguments.clone()));
        let source = Source {
            tool_name: method,
            arguments,
            is_error: false,
        };
        let point = self.result_point();
        self.check_data(point, source, metadata, data)
            .await
            .map_err(|withheld| withheld.into_error(method, point))
    }

    /// Judges data on its way to the model ([`Readable`]) at `point` and applies what the
    /// policies changed to each of its texts and each string of its structured value.
    ///
    /// When the texts so changed do not join into the text the policies' changes give when
    /// applied to the whole (a pattern matched across two texts, a mask or an append applied
    /// once to the whole), the data is [collapsed](Readable::collapse) to that whole text:
    /// the client never reads text the policies have not cleared.
    async fn check_data<D: Readable>(
        &self,
        point: InterceptionPoint,
        source: Source<'_>,
        metadata: Metadata,
        mut data: D,
    ) -> Result<D, Withheld> {
        let Some(mut judged) = judge(&self.engine, point, source, &data, metadata).await? else {
            return Ok(data);
        };
        // What the whole text becomes: the texts the data holds and the structured value as
        // the policies left it, with the text's changes applied once.
        let mut cleared = joined_text(&data, judged.structured.as_ref().or(data.structured()));
        judged
            .rewrite(&mut cleared)
            .map_err(Withheld::Unapplicable)?;
        let changed_structured = judged.structured.take();
        let rewrite = |text: &mut String| judged.rewrite(text);
        data.for_each_text(&mut |text| rewrite(text))
            .map_err(Withheld::Unapplicable)?;
        if let Some(structured) = data.structured_mut() {
            if let Some(left) = changed_structured {
                *structured = left;
            }
            rewrite_strings(structured, &rewrite).map_err(Withheld::Unapplicable)?;
        }
        if data_text(&data) != cleared {
            data.collapse(&cleared);
        }
        Ok(data)
    }
}

/// What produced data on its way to the model: a tool (or an MCP method), the arguments it
/// ran with, and whether it reported an error.
struct Source<'a> {
    tool_name: &'a str,
    arguments: Map<String, Value>,
    is_error: bool,
}

/// Why data on its way to the model was withheld.
enum Withheld {
    /// A policy denied it, escalated it, or could not be evaluated.
    Refused(EngineError),
    /// A change the policies asked for could not be applied to one of its parts.
    Unapplicable(String),
}

impl From<EngineError> for Withheld {
    fn from(error: EngineError) -> Self {
        Withheld::Refused(error)
    }
}

impl Withheld {
    /// The JSON-RPC error that answers a `method` request whose result was withheld at
    /// `point`.
    fn into_error(self, method: &str, point: InterceptionPoint) -> ErrorData {
        match self {
            Withheld::Refused(error) => {
                let reason = error
                    .as_denial()
                    .and_then(PolicyDenialError::reason)
                    .unwrap_or("");
                let policy_id = error.policy_id();
                let message = match error.as_denial() {
                    Some(denial) => format!(
                        "{method}: the result was withheld by policy \"{policy_id}\": {}",
                        denial.reason().unwrap_or(DENIED_WITHOUT_REASON)
                    ),
                    None => format!(
                        "{method}: the result was withheld: policy \"{policy_id}\" could not be evaluated ({error})"
                    ),
                };
                ErrorData::new(
                    DENIAL_ERROR_CODE,
                    message,
                    Some(denial_details(
                        policy_id,
                        error.interception_point().as_str(),
                        reason,
                        error.as_denial().is_none(),
                    )),
                )
            }
            Withheld::Unapplicable(problem) => ErrorData::new(
                DENIAL_ERROR_CODE,
                format!(
                    "{method}: the result was withheld: a policy's change could not be applied to it ({problem})"
                ),
                Some(denial_details("portcullis-mcp", point.as_str(), "", true)),
            ),
        }
    }
}

/// The changes the policies made to the text of data on its way to the model, to apply
/// again to each part of it, and its structured value as they left it.
struct Judged {
    /// The redactions and transformations of the text (at `tool_result`, those of
    /// `content`; the other fields do not reach the model).
    changes: Vec<PolicyDecision>,
    /// The context the changes are applied in, its text set to each part in turn.
    context: JudgedContext,
    /// The structured value as the tool-result policies left it (they may change paths inside
    /// it); `None` at the output point, which leaves the data's own as it came.
    structured: Option<Value>,
}

/// The context [`Judged::rewrite`] applies the changes in.
enum JudgedContext {
    Output(OutputContext),
    ToolResult(Box<ToolResultContext>),
}

/// Judges data on its way to the model at `point`: the output policies see an output
/// context whose `response.content` is the data's text; the tool-result policies a
/// [`ToolResultContext`] of `source` with that text as `content` and the structured value as
/// `structured`. `None` when the policies changed nothing.
async fn judge(
    engine: &PolicyEngine,
    point: InterceptionPoint,
    source: Source<'_>,
    data: &impl Readable,
    metadata: Metadata,
) -> Result<Option<Judged>, EngineError> {
    let text = data_text(data);
    if point == InterceptionPoint::ToolResult {
        let mut context =
            ToolResultContext::new(source.tool_name, source.arguments, text, metadata);
        context.structured = data.structured().cloned();
        context.is_error = source.is_error;
        let evaluation = engine.evaluate_tool_result(&context).await?;
        if !evaluation.is_modified() {
            return Ok(None);
        }
        let changes = text_changes(evaluation.decisions(), Some("content"));
        let structured = evaluation.into_context().structured;
        // Each part's text is rewritten in this context: only `content` is read there.
        context.content.clear();
        context.structured = None;
        context.arguments.clear();
        return Ok(Some(Judged {
            changes,
            context: JudgedContext::ToolResult(Box::new(context)),
            structured,
        }));
    }
    let context = OutputContext::new(Message::assistant(text), metadata);
    let evaluation = engine.evaluate_output(&context).await?;
    if !evaluation.is_modified() {
        return Ok(None);
    }
    Ok(Some(Judged {
        changes: text_changes(evaluation.decisions(), None),
        context: JudgedContext::Output(context),
        structured: None,
    }))
}

/// The redactions and transformations among `decisions`; with `field`, only their parts
/// that change that field.
fn text_changes(decisions: &[DecisionEntry], field: Option<&str>) -> Vec<PolicyDecision> {
    let wanted = |path: &str| field.is_none_or(|field| path == field);
    decisions
        .iter()
        .filter_map(|entry| match &entry.decision {
            PolicyDecision::Redact { redactions, .. } => {
                let redactions: Vec<Redaction> = redactions
                    .iter()
                    .filter(|redaction| wanted(&redaction.field))
                    .cloned()
                    .collect();
                (!redactions.is_empty()).then(|| PolicyDecision::redact(redactions))
            }
            PolicyDecision::Transform { transformation, .. } => {
                let operations: Vec<TransformOperation> = transformation
                    .operations
                    .iter()
                    .filter(|operation| wanted(&operation.field))
                    .cloned()
                    .collect();
                (!operations.is_empty()).then(|| PolicyDecision::transform(operations))
            }
            _ => None,
        })
        .collect()
}

impl Judged {
    /// Applies the policies' changes to one part's text.
    fn rewrite(&self, text: &mut String) -> Result<(), String> {
        match &self.context {
            JudgedContext::Output(context) => {
                let mut context = OutputContext::new(
                    Message::assistant(std::mem::take(text)),
                    context.metadata.clone(),
                );
                self.apply(&mut context)?;
                *text = context.response.content;
            }
            JudgedContext::ToolResult(context) => {
                let mut context = ToolResultContext::clone(context);
                context.content = std::mem::take(text);
                self.apply(&mut context)?;
                *text = context.content;
            }
        }
        Ok(())
    }

    /// Applies each change to `context`, in order.
    fn apply<C: PolicyContext>(&self, context: &mut C) -> Result<(), String> {
        for decision in &self.changes {
            if let Some(changed) =
                apply_decision(context, decision).map_err(|error| error.to_string())?
            {
                *context = changed;
            }
        }
        Ok(())
    }
}

/// Data on its way to the model that the guard reads: texts, in order, and perhaps a
/// structured value.
trait Readable {
    /// Calls `read` with each text, in order.
    fn texts<'a>(&'a self, read: &mut dyn FnMut(&'a str));
    /// Calls `rewrite` with each text, in order, until it fails.
    fn for_each_text(
        &mut self,
        rewrite: &mut dyn FnMut(&mut String) -> Result<(), String>,
    ) -> Result<(), String>;
    /// The structured value, read as JSON text after the texts.
    fn structured(&self) -> Option<&Value> {
        None
    }
    /// [`structured`](Self::structured), to rewrite its strings.
    fn structured_mut(&mut self) -> Option<&mut Value> {
        None
    }
    /// Keeps only `cleared` of what the policies read: the first text becomes `cleared`, the
    /// other texts and the structured value go; what they did not read stays.
    fn collapse(&mut self, cleared: &str);
}

/// The text the policies read of `data`: its texts and its structured value as JSON text,
/// joined by newlines.
fn data_text(data: &impl Readable) -> String {
    joined_text(data, data.structured())
}

/// `data`'s texts and `structured` as JSON text, joined by newlines.
fn joined_text(data: &impl Readable, structured: Option<&Value>) -> String {
    let mut text = String::new();
    let mut first = true;
    let mut push = |piece: &str| {
        if !first {
            text.push('\n');
        }
        first = false;
        text.push_str(piece);
    };
    data.texts(&mut push);
    if let Some(structured) = structured {
        push(&serde_json::to_string(structured).unwrap_or_default());
    }
    text
}

/// Keeps the first of the blocks that carry text, as one text block holding `cleared`, and
/// drops the others; blocks without text stay.
fn collapse_blocks<T>(
    items: &mut Vec<T>,
    block: impl Fn(&mut T) -> &mut ContentBlock,
    cleared: &str,
) {
    let mut first = true;
    items.retain_mut(|item| {
        let block = block(item);
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

impl Readable for CallToolResult {
    fn texts<'a>(&'a self, read: &mut dyn FnMut(&'a str)) {
        self.content.iter().filter_map(block_text).for_each(read);
    }

    fn for_each_text(
        &mut self,
        rewrite: &mut dyn FnMut(&mut String) -> Result<(), String>,
    ) -> Result<(), String> {
        self.content
            .iter_mut()
            .filter_map(block_text_mut)
            .try_for_each(rewrite)
    }

    fn structured(&self) -> Option<&Value> {
        self.structured_content.as_ref()
    }

    fn structured_mut(&mut self) -> Option<&mut Value> {
        self.structured_content.as_mut()
    }

    fn collapse(&mut self, cleared: &str) {
        collapse_blocks(&mut self.content, |block| block, cleared);
        if self.structured_content.take().is_some() && block_text_count(&self.content) == 0 {
            self.content.insert(0, ContentBlock::text(cleared));
        }
    }
}

fn block_text_count(blocks: &[ContentBlock]) -> usize {
    blocks.iter().filter_map(block_text).count()
}

impl Readable for GetPromptResult {
    fn texts<'a>(&'a self, read: &mut dyn FnMut(&'a str)) {
        self.messages
            .iter()
            .filter_map(|message| block_text(&message.content))
            .for_each(read);
    }

    fn for_each_text(
        &mut self,
        rewrite: &mut dyn FnMut(&mut String) -> Result<(), String>,
    ) -> Result<(), String> {
        self.messages
            .iter_mut()
            .filter_map(|message| block_text_mut(&mut message.content))
            .try_for_each(rewrite)
    }

    fn collapse(&mut self, cleared: &str) {
        collapse_blocks(&mut self.messages, |message| &mut message.content, cleared);
    }
}

impl Readable for ReadResourceResult {
    fn texts<'a>(&'a self, read: &mut dyn FnMut(&'a str)) {
        self.contents
            .iter()
            .filter_map(resource_text)
            .for_each(read);
    }

    fn for_each_text(
        &mut self,
        rewrite: &mut dyn FnMut(&mut String) -> Result<(), String>,
    ) -> Result<(), String> {
        self.contents
            .iter_mut()
            .filter_map(|contents| match contents {
                ResourceContents::TextResourceContents { text, .. } => Some(text),
                _ => None,
            })
            .try_for_each(rewrite)
    }

    fn collapse(&mut self, cleared: &str) {
        let mut first = true;
        self.contents.retain_mut(|contents| match contents {
            ResourceContents::TextResourceContents { text, .. } => {
                let keep = first;
                if first {
                    cleared.clone_into(text);
                    first = false;
                }
                keep
            }
            _ => true,
        });
    }
}

fn resource_text(contents: &ResourceContents) -> Option<&str> {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => Some(text),
        _ => None,
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
        ContentBlock::Resource(embedded) => resource_text(&embedded.resource),
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
            if denial.interception_point() == InterceptionPoint::ToolCall {
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
        None if matches!(
            error.interception_point(),
            InterceptionPoint::Output | InterceptionPoint::ToolResult
        ) =>
        {
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
        denial_details(policy_id, point, reason, evaluation_error),
    );
    result.meta = Some(meta);
    result
}

/// What the guard tells of a refusal, in a result's `_meta` ([`DENIAL_META_KEY`]) or a
/// JSON-RPC error's `data`.
fn denial_details(policy_id: &str, point: &str, reason: &str, evaluation_error: bool) -> Value {
    json!({
        "policy_id": policy_id,
        "interception_point": point,
        "reason": reason,
        "evaluation_error": evaluation_error,
    })
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
        let result = guard
            .check_result("t", Map::new(), blocks(&["a 123", "b 456"]))
            .await;
        assert_eq!(texts(&result), ["a [REDACTED]", "b [REDACTED]"]);
        assert_eq!(result.content.len(), 3, "the image stays");
    }

    #[tokio::test]
    async fn a_match_across_blocks_leaves_only_cleared_text() {
        let guard = ToolGuard::new(engine(Redaction::replace("response.content", r"12\n34")));
        let result = guard
            .check_result("t", Map::new(), blocks(&["a 12", "34 b"]))
            .await;
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
        let result = guard.check_result("t", Map::new(), result).await;
        assert_eq!(data_text(&result), "a [REDACTED]\nr [REDACTED]");
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
        let result = guard.check_result("t", Map::new(), result).await;
        assert_eq!(texts(&result), ["a [REDACTED] b"]);
        assert_eq!(result.content.len(), 1);
    }

    #[tokio::test]
    async fn a_mask_masks_the_whole_text_once() {
        let guard = ToolGuard::new(engine(Redaction::mask("response.content")));
        let result = guard
            .check_result("t", Map::new(), blocks(&["a", "b"]))
            .await;
        assert_eq!(texts(&result), ["[REDACTED]"]);
    }
}
