//! Portcullis for [rig] agents: an [`AgentHook`] that applies a [`PolicyEngine`] to every
//! run of a `rig-agent` agent.
//!
//! Add [`PortcullisHook`] to an agent (`AgentBuilder::add_hook`) and every run is guarded:
//!
//! - **input policies** run before the run starts, on the history and the prompt (a
//!   redaction rewrites the prompt the run records), and again before each completion call,
//!   on the whole request the model receives (system text, user text, tool results, earlier
//!   assistant text): redactions and transformations patch that request, a denial stops the
//!   run before the provider is called;
//! - **tool-call policies** run before each tool dispatch: redactions and transformations
//!   patch the arguments the tool receives (and the later requests of the run show the model
//!   the arguments that ran, not the ones it asked for); a denial either skips the tool, so
//!   the model reads a tool result saying it was denied ([`ToolDenial::Skip`], the default),
//!   or ends the run ([`ToolDenial::EndRun`]);
//! - **tool-result policies**, when the set has any (SPEC §18), run on what each tool
//!   returned, before the model reads it: `tool_name`, the arguments the tool ran with,
//!   `content` the result's text blocks joined by newlines, `structured` its first JSON
//!   block, `is_error` whether it failed. A redaction or transformation replaces what the
//!   model reads (the text in one block); a denial withholds the result (with
//!   [`ToolDenial::Skip`] the model reads a refusal naming the policy; with
//!   [`ToolDenial::EndRun`] the run ends). Tool results stay in the history the input
//!   policies read at each completion call;
//! - **output policies** run on each model turn, on each text block of the completion:
//!   redactions reach the caller and the history, a denial ends the run. rig cannot replace
//!   a turn that also calls tools, so when an output policy changes the text of such a turn
//!   the run ends rather than keep the unchanged text. A redacted text block loses its
//!   provider item (`Text::native`), which still holds the text as the model wrote it.
//!
//! A run stopped by a denial fails with `PromptError::Cancelled` (or rig's report of a
//! cancelled dispatch) whose reason says what happened; rig carries only that text, so the
//! hook keeps the engine's error itself, and [`denial`] (or [`approval_request`], for an
//! escalation no one approved) returns the
//! [`PolicyDenialError`](portcullis_engine::PolicyDenialError) the engine gave, not one read
//! back from the text. A policy that cannot be evaluated (with `on_error: deny`) ends the run
//! the same way.
//!
//! # Awaited runs
//!
//! rig records two things in an awaited run's [`PromptResponse`] that no hook can change:
//! each completion call's `raw` (the provider's answer as it arrived, before any output
//! policy) and the tool calls of the run's `messages` as the model asked for them (before a
//! tool-call policy redacted, transformed or denied them). Run awaited prompts through
//! [`PortcullisHook::prompt`] (or [`PortcullisHook::guard_run`] for a run configured
//! further), and the response the caller gets holds only what the policies passed:
//!
//! - every `completion_calls[].raw` is `null`: the provider's payload cannot be checked as a
//!   whole (it repeats the text, the tool calls and anything else the provider sent); usage,
//!   ids and finish reasons stay;
//! - every tool call of `messages` and `content` carries the arguments its tool ran with
//!   (the tool-call policies' redactions and transformations applied); a call that did not
//!   run with checked arguments (a policy denied it, or its arguments were not a JSON object)
//!   carries an empty object, and a changed call loses its provider item (`native`).
//!
//! A run that fails (`MaxTurns`, `Cancelled`, `UnknownToolCall`) returns its history with the
//! calls it made cleaned the same way; the calls of the history it started from stay as they
//! were.
//!
//! `agent.prompt(..).await` without them runs under the same policies (what the model, the
//! tools and the final text see is guarded), but returns those two fields as rig recorded
//! them.
//!
//! ```no_run
//! # async fn run(agent: rig_agent::Agent, hook: portcullis_rig::PortcullisHook) {
//! // `hook` is the one added to `agent` (`AgentBuilder::add_hook(hook.clone())`).
//! let response = hook.prompt(&agent, "Summarise my invoices.").await;
//! # drop(response);
//! # }
//! ```
//!
//! The input check runs twice on the first request (before the run, on the prompt the run
//! records, and at the completion call, on everything the model receives), so its audit
//! records appear twice for that turn.
//!
//! # Streamed runs
//!
//! A streamed run (`agent.prompt(..).stream()`) calls the same hooks, but rig hands text
//! deltas to the reader before the turn is complete, and a hook can only watch them. Pass
//! the stream through [`PortcullisHook::guard_stream`] (or start it with
//! [`PortcullisHook::stream_prompt`]): each text delta goes through the
//! engine's streaming output guard ([`PolicyEngine::output_stream`]), so the reader only
//! sees text the output policies cleared (redacted by streaming rules, held back while a
//! match may still be forming), and a denial ends the stream with `PromptError::Cancelled`
//! ([`denial`] reads it) before the offending text, which stops the run. The hook still
//! checks each finished turn as in awaited runs, so the run's history and final response
//! hold the turn as the whole-text policies left it.
//!
//! ```no_run
//! # async fn run(agent: rig_agent::Agent, hook: portcullis_rig::PortcullisHook) {
//! use futures_util::StreamExt;
//!
//! // `hook` is the one added to `agent` (`AgentBuilder::add_hook(hook.clone())`).
//! // Or `hook.guard_stream(agent.prompt(..).stream())` for a run configured further.
//! let mut stream = hook.stream_prompt(&agent, "Summarise my invoices.");
//! while let Some(item) = stream.next().await {
//!     match item {
//!         Ok(item) => { /* show cleared text */ let _ = item; }
//!         Err(error) => {
//!             if let Some(denial) = portcullis_rig::denial(&error) {
//!                 eprintln!("stopped by {}", denial.policy_id());
//!             }
//!         }
//!     }
//! }
//! # }
//! ```
//!
//! The stream's tool-call items (argument deltas, the model's calls) show the calls as the
//! model asked for them; what runs is what the tool-call policies let through
//! (`ToolExecutionCommitted` carries the patched call).
//!
//! # From rig to the policy contexts
//!
//! | Policy context | Taken from |
//! |---|---|
//! | `InputContext.messages[]` | each text of the request's `chat_history` (the prompt is its last message): `System` is `system`; user `Text` and the text of `ToolResult`s are `user`; assistant `Text` is `assistant` |
//! | `ToolCallContext.tool_name` | the dispatched `EffectKind::ToolCall` `name` |
//! | `ToolCallContext.arguments` | its `args`, parsed as a JSON object |
//! | `ToolCallContext.calling_message` | the text of the model turn that made the call |
//! | `OutputContext.response` | each `AssistantContent::Text` of the completion |
//! | `metadata.agent_id` | [`PortcullisHook::agent_id`], else the agent's name (`AgentBuilder::name`), else `rig-agent` |
//! | `metadata.session_id` | [`PortcullisHook::session_id`], else the run id |
//! | `metadata.extra` | `framework: "rig"`, `run_id`, `turn`; for tool calls `call_id` |
//!
//! # Example
//!
//! ```
//! use portcullis_engine::{PolicyEngine, PolicySet};
//! use portcullis_rig::{PortcullisHook, ToolDenial};
//!
//! let engine = PolicyEngine::builder().policy_set(PolicySet::builder().build()).build();
//! let hook = PortcullisHook::new(engine)
//!     .session_id("support-42")
//!     .on_tool_denial(ToolDenial::Skip);
//! // AgentBuilder::new(model).add_hook(hook).build()
//! # drop(hook);
//! ```
//!
//! The crate's tests and the `rig_agent` example run a real agent against a scripted
//! OpenAI-compatible server on 127.0.0.1.
//!
//! [rig]: https://docs.rs/rig-agent

mod stop;
mod stream;

pub use stop::{approval_request, denial};

use std::sync::Arc;

use portcullis_engine::{
    EngineError, InputContext, Message, Metadata, OutputContext, PolicyEngine, Role,
    ToolCallContext, ToolResultContext,
};
use rig_agent::agent::{
    AgentRunner, DispatchAction, DispatchEvent, OutcomeAction, OutcomeEvent, RunSettled, RunStart,
    RunStartAction,
};
use rig_agent::run::{PromptError, PromptResponse};
use rig_agent::{Agent, AgentHook, HookContext};
use rig_core::effect::{EffectKind, Outcome};
use rig_core::error::{ErrorKind, ErrorReport};
use rig_core::message::{AssistantContent, Message as RigMessage, ToolResultContent, UserContent};
use rig_core::tool::{ToolExecutionError, ToolOutput, ToolResult};
use serde_json::{Map, Value};

use crate::stop::stop_reason;

/// The rig crates this crate was built against, for applications that want the same ones.
pub use {rig_agent, rig_core};

/// What happens when a tool-call policy denies a call the model made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolDenial {
    /// Skip the tool: it never runs, and the model reads a tool result saying the call was
    /// denied, and why (the default).
    #[default]
    Skip,
    /// End the run with the denial (see [`denial`]).
    EndRun,
}

/// The agent hook that guards rig runs; see the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct PortcullisHook {
    engine: Arc<PolicyEngine>,
    agent_id: Option<String>,
    session_id: Option<String>,
    tool_denial: ToolDenial,
}

/// The text of the model turn being executed, for the tool calls it made.
#[derive(Debug, Clone, Default)]
struct TurnText(String);

/// The arguments tool-call policies patched in this run, by call id: later requests show the
/// model the arguments that ran, not the ones it asked for.
#[derive(Debug, Clone, Default)]
struct PatchedCalls(Vec<(String, Map<String, Value>)>);

/// The tool calls of this run the tool-call policies checked, by call id: the arguments their
/// tool ran with, or `None` when the call was refused (denied, not evaluated, or its
/// arguments were not a JSON object).
#[derive(Debug, Clone, Default)]
struct CheckedCalls(Vec<(String, Option<Map<String, Value>>)>);

impl CheckedCalls {
    /// What became of the call `id`: `None` when it was never checked.
    fn get(&self, id: &str) -> Option<Option<&Map<String, Value>>> {
        self.0
            .iter()
            .rev()
            .find(|(call_id, _)| call_id == id)
            .map(|(_, arguments)| arguments.as_ref())
    }
}

/// Collects a run's [`CheckedCalls`] when it settles, for [`PortcullisHook::guard_run`].
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<std::sync::Mutex<Option<CheckedCalls>>>);

impl AgentHook for Recorder {
    fn name(&self) -> Option<String> {
        Some("portcullis-recorder".to_owned())
    }

    async fn on_run_settled(&self, ctx: &HookContext, _: RunSettled<'_>) {
        let checked = ctx.scratchpad().get::<CheckedCalls>().unwrap_or_default();
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(checked);
    }
}

impl PortcullisHook {
    /// A hook that evaluates with `engine`.
    pub fn new(engine: impl Into<Arc<PolicyEngine>>) -> Self {
        PortcullisHook {
            engine: engine.into(),
            agent_id: None,
            session_id: None,
            tool_denial: ToolDenial::Skip,
        }
    }

    /// The agent id of every run (default: the agent's name, else `rig-agent`).
    pub fn agent_id(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// The session id of every run (default: the run id).
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// What a tool-call denial does (default [`ToolDenial::Skip`]).
    pub fn on_tool_denial(mut self, tool_denial: ToolDenial) -> Self {
        self.tool_denial = tool_denial;
        self
    }

    /// Runs `agent` on `prompt`, awaited (`agent.prompt(prompt)`), and returns a response
    /// that holds only what the policies passed: no provider payloads, tool calls with the
    /// arguments that ran (see [Awaited runs](crate#awaited-runs)). `self` must be the hook
    /// added to `agent`.
    pub async fn prompt(
        &self,
        agent: &Agent,
        prompt: impl Into<RigMessage>,
    ) -> Result<PromptResponse, PromptError> {
        self.guard_run(agent.prompt(prompt)).await
    }

    /// Awaits `run` (an `agent.prompt(..)` configured further) and returns its response as
    /// [`prompt`](Self::prompt) does.
    pub async fn guard_run(&self, run: AgentRunner) -> Result<PromptResponse, PromptError> {
        let recorder = Recorder::default();
        let result = run.add_hook(recorder.clone()).await;
        let checked = recorder
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_default();
        match result {
            Ok(mut response) => {
                clean_response(&mut response, &checked);
                Ok(response)
            }
            Err(mut error) => {
                clean_error(&mut error, &checked);
                Err(error)
            }
        }
    }

    fn metadata(&self, ctx: &HookContext, turn: usize) -> Metadata {
        let run_id = ctx.run_id().to_string();
        let agent_id = self
            .agent_id
            .as_deref()
            .or(ctx.agent_name())
            .unwrap_or("rig-agent");
        let session_id = self.session_id.as_deref().unwrap_or(&run_id);
        Metadata::new(agent_id, session_id)
            .with_extra("framework", "rig")
            .with_extra("run_id", run_id.as_str())
            .with_extra("turn", turn)
    }

    /// Runs the input policies on `history`; returns the new texts when a policy changed
    /// them.
    async fn evaluate_history(
        &self,
        metadata: Metadata,
        history: &mut [RigMessage],
    ) -> Result<bool, String> {
        let mut slots = text_slots(history);
        let messages = slots
            .iter()
            .map(|(role, text)| Message::new(*role, text.as_str()))
            .collect();
        let context = InputContext::new(messages, metadata);
        let evaluation = self
            .engine
            .evaluate_input(&context)
            .await
            .map_err(stop_reason)?;
        if !evaluation.is_modified() {
            return Ok(false);
        }
        let evaluated = evaluation.into_context().messages;
        if evaluated.len() != slots.len() {
            return Err(format!(
                "portcullis: an input policy turned {} messages into {}; the rig integration can rewrite message text but not add or remove messages",
                slots.len(),
                evaluated.len()
            ));
        }
        for ((_, text), message) in slots.iter_mut().zip(evaluated) {
            **text = message.content;
        }
        Ok(true)
    }

    async fn guard_tool_call(
        &self,
        ctx: &HookContext,
        event: &DispatchEvent<'_>,
    ) -> DispatchAction {
        let (Some(name), Some(raw)) = (event.tool_name(), event.tool_args()) else {
            return DispatchAction::proceed();
        };
        let arguments = match parse_arguments(raw) {
            Ok(arguments) => arguments,
            Err(problem) => {
                record_call(ctx, event, None);
                return DispatchAction::skip(format!(
                    "portcullis: the arguments of the call to tool \"{name}\" are not a JSON object ({problem}); the tool did not run"
                ));
            }
        };
        let mut metadata = self.metadata(ctx, event.turn);
        if let Some(call_id) = event.call_id {
            metadata
                .extra
                .insert("call_id".to_owned(), Value::from(call_id.to_string()));
        }
        let calling = ctx.scratchpad().get::<TurnText>().unwrap_or_default();
        let context =
            ToolCallContext::new(name, arguments, Message::assistant(calling.0), metadata);
        let evaluated = self.engine.evaluate_tool_call(&context).await;
        record_call(
            ctx,
            event,
            evaluated
                .as_ref()
                .ok()
                .map(|evaluation| evaluation.context().arguments.clone()),
        );
        match evaluated {
            Ok(evaluation) if evaluation.is_modified() => {
                let arguments = evaluation.into_context().arguments;
                if let Some(call_id) = event.call_id {
                    let call_id = call_id.to_string();
                    ctx.scratchpad().update(|patched: &mut PatchedCalls| {
                        patched.0.push((call_id, arguments.clone()));
                    });
                }
                DispatchAction::rewrite_tool_args(event.kind, Value::Object(arguments))
            }
            Ok(_) => DispatchAction::proceed(),
            Err(EngineError::Denied(denial)) if self.tool_denial == ToolDenial::Skip => {
                let reason = denial
                    .reason()
                    .unwrap_or(portcullis_engine::error::DENIED_WITHOUT_REASON);
                DispatchAction::skip(format!(
                    "The call to tool \"{name}\" was denied by policy \"{}\": {reason}. The tool did not run.",
                    denial.policy_id()
                ))
            }
            Err(error) => DispatchAction::stop(stop_reason(error)),
        }
    }

    /// Runs the tool-result policies on what the tool `name` returned (when the set has any):
    /// `arguments` are those the tool ran with, `content` the result's text blocks joined by
    /// newlines, `structured` its first JSON block, `is_error` whether it failed. A change
    /// replaces the output the model reads (the text in one block, the JSON block with the
    /// policies' value); a denial withholds it ([`ToolDenial::Skip`]: the model reads a
    /// refusal naming the policy) or ends the run ([`ToolDenial::EndRun`]); any other failure
    /// ends the run.
    async fn guard_tool_result(
        &self,
        ctx: &HookContext,
        event: &OutcomeEvent<'_>,
        name: &str,
        raw: &str,
        result: &ToolResult,
    ) -> OutcomeAction {
        if self.engine.policy_set().tool_result().is_empty() {
            return OutcomeAction::proceed();
        }
        let checked = ctx.scratchpad().get::<CheckedCalls>().unwrap_or_default();
        let ran_with = event
            .call_id
            .and_then(|id| checked.get(&id.to_string()))
            .flatten()
            .cloned();
        let arguments = ran_with
            .or_else(|| parse_arguments(raw).ok())
            .unwrap_or_default();
        let blocks = result.output().as_content();
        let content = blocks
            .iter()
            .filter_map(|block| match block {
                ToolResultContent::Text(text) => Some(text.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut metadata = self.metadata(ctx, event.turn);
        if let Some(call_id) = event.call_id {
            metadata
                .extra
                .insert("call_id".to_owned(), Value::from(call_id.to_string()));
        }
        let mut context = ToolResultContext::new(name, arguments, content, metadata);
        context.structured = blocks.iter().find_map(|block| match block {
            ToolResultContent::Json { value } => Some(value.clone()),
            _ => None,
        });
        context.is_error = result.is_error() || result.is_refused();
        match self.engine.evaluate_tool_result(&context).await {
            Ok(evaluation) if evaluation.is_modified() => {
                let judged = evaluation.into_context();
                let output = judged_output(blocks, judged.content, judged.structured);
                OutcomeAction::replace(Ok(Outcome::ToolResult {
                    result: result.clone().with_output(output),
                }))
            }
            Ok(_) => OutcomeAction::proceed(),
            Err(EngineError::Denied(denial)) if self.tool_denial == ToolDenial::Skip => {
                let reason = denial
                    .reason()
                    .unwrap_or(portcullis_engine::error::DENIED_WITHOUT_REASON);
                let message = format!(
                    "The result of tool \"{name}\" was withheld by policy \"{}\": {reason}.",
                    denial.policy_id()
                );
                OutcomeAction::replace(Ok(Outcome::ToolResult {
                    result: ToolResult::failed(ToolExecutionError::refused(message)),
                }))
            }
            Err(error) => OutcomeAction::stop(stop_reason(error)),
        }
    }

    async fn guard_completion(
        &self,
        ctx: &HookContext,
        event: &DispatchEvent<'_>,
    ) -> DispatchAction {
        let EffectKind::Completion { request, stream } = event.kind else {
            return DispatchAction::proceed();
        };
        let mut request = request.clone();
        let patched_calls = ctx
            .scratchpad()
            .get::<PatchedCalls>()
            .is_some_and(|patched| patch_history(&mut request.chat_history, &patched));
        let metadata = self.metadata(ctx, event.turn);
        match self
            .evaluate_history(metadata, &mut request.chat_history)
            .await
        {
            Ok(changed) if changed || patched_calls => {
                DispatchAction::patch(EffectKind::Completion {
                    request,
                    stream: *stream,
                })
            }
            Ok(_) => DispatchAction::proceed(),
            Err(reason) => DispatchAction::deny(ErrorReport::new(ErrorKind::Cancelled, reason)),
        }
    }
}

impl AgentHook for PortcullisHook {
    fn name(&self) -> Option<String> {
        Some(format!("portcullis(tool_denial={:?})", self.tool_denial))
    }

    async fn on_run_start(&self, ctx: &HookContext, event: RunStart<'_>) -> RunStartAction {
        let mut messages: Vec<RigMessage> = event.history.to_vec();
        messages.push(event.prompt.clone());
        match self
            .evaluate_history(self.metadata(ctx, 0), &mut messages)
            .await
        {
            Ok(true) => match messages.pop() {
                Some(prompt) if prompt != *event.prompt => RunStartAction::rewrite(prompt),
                _ => RunStartAction::continue_run(),
            },
            Ok(false) => RunStartAction::continue_run(),
            Err(reason) => RunStartAction::stop(reason),
        }
    }

    async fn on_dispatch(&self, ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        match event.kind {
            EffectKind::ToolCall { .. } => self.guard_tool_call(ctx, &event).await,
            EffectKind::Completion { .. } => self.guard_completion(ctx, &event).await,
            _ => DispatchAction::proceed(),
        }
    }

    async fn on_outcome(&self, ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        let response = match (event.kind, event.outcome) {
            (EffectKind::ToolCall { name, args }, Ok(Outcome::ToolResult { result })) => {
                return self
                    .guard_tool_result(ctx, &event, name, args, result)
                    .await;
            }
            (_, Ok(Outcome::Completion(response))) => response,
            _ => return OutcomeAction::proceed(),
        };
        let metadata = self.metadata(ctx, event.turn);
        let mut response = response.clone();
        let mut changed = false;
        let mut turn_text = String::new();
        for content in &mut response.choice {
            let AssistantContent::Text(text) = content else {
                continue;
            };
            let context =
                OutputContext::new(Message::assistant(text.text.as_str()), metadata.clone());
            match self.engine.evaluate_output(&context).await {
                Ok(evaluation) => {
                    let content = &evaluation.context().response.content;
                    if *content != text.text {
                        text.text.clone_from(content);
                        // The provider's item still holds the text as the model wrote it.
                        text.native = None;
                        changed = true;
                    }
                }
                Err(error) => return OutcomeAction::stop(stop_reason(error)),
            }
            if !turn_text.is_empty() {
                turn_text.push('\n');
            }
            turn_text.push_str(&text.text);
        }
        ctx.scratchpad().insert(TurnText(turn_text));
        let calls_tools = response
            .choice
            .iter()
            .any(|content| matches!(content, AssistantContent::ToolCall(_)));
        if changed && calls_tools {
            // rig cannot replace a turn that calls tools; forwarding the unredacted text
            // would let it reach the history, so the run ends instead.
            return OutcomeAction::stop(
                "portcullis: an output policy changed the text of a model turn that calls tools, and rig cannot replace such a turn; the run was stopped so the unredacted text is not kept",
            );
        }
        if changed {
            OutcomeAction::replace(Ok(Outcome::Completion(response)))
        } else {
            OutcomeAction::proceed()
        }
    }
}

/// Every text of `history` the policies see, with its role, in order.
fn text_slots(history: &mut [RigMessage]) -> Vec<(Role, &mut String)> {
    let mut slots = Vec::new();
    for message in history {
        match message {
            RigMessage::System { content } => slots.push((Role::System, content)),
            RigMessage::User { content } => {
                for item in content {
                    match item {
                        UserContent::Text(text) => slots.push((Role::User, &mut text.text)),
                        UserContent::ToolResult(result) => {
                            for part in &mut result.content {
                                if let ToolResultContent::Text(text) = part {
                                    slots.push((Role::User, &mut text.text));
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            RigMessage::Assistant(turn) => {
                for item in &mut turn.content {
                    if let AssistantContent::Text(text) = item {
                        slots.push((Role::Assistant, &mut text.text));
                    }
                }
            }
        }
    }
    slots
}

/// The output the model reads once the tool-result policies changed `blocks`: the first text
/// block holds `content` (the other text blocks go: the policies judged their text joined),
/// the first JSON block holds `structured`, images stay; `content` leads when there was no
/// text block and it is not empty.
fn judged_output(
    blocks: &[ToolResultContent],
    content: String,
    structured: Option<Value>,
) -> ToolOutput {
    let mut content = Some(content);
    let mut structured = structured;
    let mut judged: Vec<ToolResultContent> = Vec::with_capacity(blocks.len() + 1);
    for block in blocks {
        match block {
            ToolResultContent::Text(_) => {
                if let Some(text) = content.take() {
                    judged.push(ToolResultContent::text(text));
                }
            }
            ToolResultContent::Json { .. } => {
                if let Some(value) = structured.take() {
                    judged.push(ToolResultContent::json(value));
                }
            }
            other => judged.push(other.clone()),
        }
    }
    if let Some(text) = content.filter(|text| !text.is_empty()) {
        judged.insert(0, ToolResultContent::text(text));
    }
    ToolOutput::content(judged).unwrap_or_else(|_| ToolOutput::text(""))
}

/// Puts the patched arguments into the calls of `history`; `true` when any changed.
fn patch_history(history: &mut [RigMessage], patched: &PatchedCalls) -> bool {
    let mut changed = false;
    for message in history {
        let RigMessage::Assistant(turn) = message else {
            continue;
        };
        for item in &mut turn.content {
            let AssistantContent::ToolCall(call) = item else {
                continue;
            };
            let id = call.id.to_string();
            if let Some((_, arguments)) = patched.0.iter().rev().find(|(call_id, _)| *call_id == id)
                && call.function.arguments != *arguments
            {
                call.function.arguments.clone_from(arguments);
                // The provider's own copy of the call would replay the old arguments.
                call.native = None;
                changed = true;
            }
        }
    }
    changed
}

/// Takes out of an awaited run's response what the policies did not pass: the providers'
/// payloads, and tool-call arguments other than the ones that ran (a call that did not run
/// with checked arguments keeps none).
fn clean_response(response: &mut PromptResponse, checked: &CheckedCalls) {
    for call in &mut response.completion_calls {
        call.raw = Value::Null;
    }
    let turns = response
        .messages
        .iter_mut()
        .filter_map(|message| match message {
            RigMessage::Assistant(turn) => Some(&mut turn.content),
            _ => None,
        })
        .chain(std::iter::once(&mut response.content));
    clean_calls(turns, |id| Some(checked.get(id).flatten().cloned()));
}

/// The history a failed run returns, its tool calls cleaned as [`clean_response`] cleans them;
/// calls the run never checked (those of the history it started from) stay as they are.
fn clean_error(error: &mut PromptError, checked: &CheckedCalls) {
    let history = match error {
        PromptError::MaxTurns { chat_history, .. }
        | PromptError::Cancelled { chat_history, .. }
        | PromptError::UnknownToolCall { chat_history, .. } => chat_history,
        _ => return,
    };
    let turns = history.iter_mut().filter_map(|message| match message {
        RigMessage::Assistant(turn) => Some(&mut turn.content),
        _ => None,
    });
    clean_calls(turns, |id| {
        checked.get(id).map(|arguments| arguments.cloned())
    });
}

/// Cleans every tool call in `turns` as `decide(call id)` says: `None` leaves it as it is,
/// `Some(arguments)` gives it those arguments (an empty object for `Some(None)`); a call so
/// changed loses its provider item.
fn clean_calls<'a>(
    turns: impl Iterator<Item = &'a mut Vec<AssistantContent>>,
    decide: impl Fn(&str) -> Option<Option<Map<String, Value>>>,
) {
    for content in turns {
        for item in content {
            let AssistantContent::ToolCall(call) = item else {
                continue;
            };
            let Some(cleaned) = decide(&call.id.to_string()) else {
                continue;
            };
            let cleaned = cleaned.unwrap_or_default();
            if call.function.arguments != cleaned || call.function.invalid_arguments.is_some() {
                call.function.arguments = cleaned;
                call.function.invalid_arguments = None;
                call.native = None;
            }
        }
    }
}

/// Records what became of the tool call of `event`, for [`PortcullisHook::guard_run`].
fn record_call(
    ctx: &HookContext,
    event: &DispatchEvent<'_>,
    arguments: Option<Map<String, Value>>,
) {
    if let Some(call_id) = event.call_id {
        let call_id = call_id.to_string();
        ctx.scratchpad().update(|checked: &mut CheckedCalls| {
            checked.0.push((call_id, arguments));
        });
    }
}

fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(_) => Err("they are JSON, but not an object".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}
