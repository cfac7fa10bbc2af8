//! Whole answers: output policies on each text (a chat choice's message, the text parts of
//! a Responses API message or reasoning item), then tool-call policies on each call the
//! answer makes.

use bytes::Bytes;
use portcullis_engine::{EngineError, Message, Metadata, OutputContext};
use serde_json::{Map, Value};

use crate::exchange::{Failure, Settings, ToolOutcome, evaluate_tool_call, from_engine};
use crate::mapping::{self, Api};

/// Evaluates a whole answer; returns the body to release instead (`None`: the body is not an
/// answer of this endpoint, an error for one, and goes as it is).
pub(crate) async fn guard_answer(
    settings: &Settings,
    api: Api,
    metadata: Metadata,
    body: &[u8],
) -> Result<Option<Bytes>, Failure> {
    let key = match api {
        Api::ChatCompletions => "choices",
        Api::Responses => "output",
    };
    let mut answer = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(answer)) if answer.get(key).is_some_and(Value::is_array) => answer,
        _ => return Ok(None),
    };
    let mut metadata = metadata;
    if let Some(id) = answer.get("id").and_then(Value::as_str) {
        metadata
            .extra
            .insert("response_id".to_owned(), Value::from(id));
    }
    if api == Api::Responses {
        if let Some(Value::Array(output)) = answer.get_mut("output") {
            guard_output(settings, &metadata, output).await?;
        }
    } else if let Some(Value::Array(choices)) = answer.get_mut("choices") {
        for (position, choice) in choices.iter_mut().enumerate() {
            if let Value::Object(choice) = choice {
                guard_choice(settings, &metadata, position, choice).await?;
            }
        }
    }
    Ok(Some(Bytes::from(Value::Object(answer).to_string())))
}

/// What the output policies made of one text of a whole answer.
enum Cleared {
    /// Forward this text (`modified`: a policy changed it).
    Text { text: String, modified: bool },
    /// A policy denied the text and denied answers are refused: this refusal replaces it.
    Refused(String),
}

/// Runs the output policies on one text of a whole answer. A denial fails the exchange,
/// unless the settings refuse denied answers in the answer itself.
async fn clear_text(
    settings: &Settings,
    metadata: &Metadata,
    text: &str,
) -> Result<Cleared, Failure> {
    let context = OutputContext::new(Message::assistant(text), metadata.clone());
    match settings.engine.evaluate_output(&context).await {
        Ok(evaluation) => {
            let modified = evaluation.is_modified();
            Ok(Cleared::Text {
                text: evaluation.into_context().response.content,
                modified,
            })
        }
        Err(EngineError::Denied(denial)) if settings.refuse_denied_answers => {
            let reason = denial
                .reason()
                .unwrap_or(portcullis_engine::error::DENIED_WITHOUT_REASON);
            Ok(Cleared::Refused(format!(
                "[The answer was withheld by policy \"{}\": {reason}]",
                denial.policy_id()
            )))
        }
        Err(error) => Err(from_engine(error)),
    }
}

async fn guard_choice(
    settings: &Settings,
    metadata: &Metadata,
    position: usize,
    choice: &mut Map<String, Value>,
) -> Result<(), Failure> {
    let index = choice
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(position as u64);
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert("choice_index".to_owned(), Value::from(index));
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return Ok(());
    };

    // The text first: tool-call policies see the text as it will be forwarded.
    let mut text = String::new();
    // Whether the policies changed a text the choice's `logprobs` spell out token by token.
    let mut texts_changed = false;
    if let Some(Value::String(content)) = message.get("content") {
        let text_metadata = text_metadata(&metadata, ChatText::Content.name());
        match clear_text(settings, &text_metadata, content).await? {
            Cleared::Text {
                text: cleared,
                modified,
            } => {
                if modified {
                    texts_changed |=
                        message.get("content").and_then(Value::as_str) != Some(cleared.as_str());
                    message.insert("content".to_owned(), Value::String(cleared.clone()));
                }
                text = cleared;
            }
            Cleared::Refused(refusal) => {
                // The whole answer is withheld: its text, its audio, its reasoning and the
                // calls it made.
                message.insert("content".to_owned(), Value::String(refusal));
                message.remove("audio");
                message.remove("reasoning_content");
                message.remove("tool_calls");
                message.remove("function_call");
                if choice
                    .get("logprobs")
                    .is_some_and(|logprobs| !logprobs.is_null())
                {
                    choice.insert("logprobs".to_owned(), Value::Null);
                }
                if matches!(
                    choice.get("finish_reason").and_then(Value::as_str),
                    Some("tool_calls" | "function_call")
                ) {
                    choice.insert("finish_reason".to_owned(), Value::from("stop"));
                }
                return Ok(());
            }
        }
    }

    // A refusal the model wrote, and the reasoning some servers send, are text it sends too.
    for (field, kind) in [
        ("refusal", ChatText::Refusal),
        ("reasoning_content", ChatText::Reasoning),
    ] {
        let Some(Value::String(written)) = message.get(field) else {
            continue;
        };
        match clear_text(settings, &text_metadata(&metadata, kind.name()), written).await? {
            Cleared::Text {
                modified: false, ..
            } => {}
            Cleared::Text { text, .. } | Cleared::Refused(text) => {
                texts_changed |= message.get(field).and_then(Value::as_str) != Some(text.as_str());
                message.insert(field.to_owned(), Value::String(text));
            }
        }
    }

    // An audio answer: the policies read its transcript. The audio says what the transcript
    // said before the policies saw it, so it is released only with a transcript they left
    // as it was; otherwise its `data` is emptied.
    if let Some(Value::Object(audio)) = message.get_mut("audio") {
        let metadata = text_metadata(&metadata, ChatText::Transcript.name());
        let cleared = match audio.get("transcript") {
            Some(Value::String(transcript)) => {
                Some(clear_text(settings, &metadata, transcript).await?)
            }
            _ => None,
        };
        match cleared {
            Some(Cleared::Text {
                modified: false, ..
            }) => {}
            Some(Cleared::Text { text, .. } | Cleared::Refused(text)) => {
                audio.insert("transcript".to_owned(), Value::String(text));
                audio.insert("data".to_owned(), Value::from(""));
            }
            None => {
                if audio.contains_key("data") {
                    audio.insert("data".to_owned(), Value::from(""));
                }
            }
        }
    }

    // The tokens of the texts as the model wrote them go only with those texts.
    if texts_changed
        && choice
            .get("logprobs")
            .is_some_and(|logprobs| !logprobs.is_null())
    {
        choice.insert("logprobs".to_owned(), Value::Null);
    }
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return Ok(());
    };

    // The deprecated `function_call` is a call like the others.
    if message.get("function_call").is_some_and(Value::is_object)
        && let Some(call) = message.remove("function_call")
    {
        let mut wrapped = serde_json::json!({ "function": call });
        let tool = mapping::read_tool_call(&wrapped)?;
        match evaluate_tool_call(settings, &metadata, &tool, &text).await? {
            ToolOutcome::Allowed(outcome) => {
                if let Some(arguments) = outcome {
                    mapping::write_tool_call(&mut wrapped, &tool, arguments);
                }
                if let Some(call) = wrapped.get_mut("function").map(Value::take) {
                    message.insert("function_call".to_owned(), call);
                }
            }
            ToolOutcome::Refused(refusal) => {
                join(&mut text, &refusal);
                message.insert("content".to_owned(), Value::String(text.clone()));
                if choice.get("finish_reason").and_then(Value::as_str) == Some("function_call") {
                    choice.insert("finish_reason".to_owned(), Value::from("stop"));
                }
            }
        }
    }
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return Ok(());
    };

    let Some(Value::Array(calls)) = message.remove("tool_calls") else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(calls.len());
    let mut refusals = Vec::new();
    for mut call in calls {
        let tool = mapping::read_tool_call(&call)?;
        match evaluate_tool_call(settings, &metadata, &tool, &text).await? {
            ToolOutcome::Allowed(None) => kept.push(call),
            ToolOutcome::Allowed(Some(arguments)) => {
                mapping::write_tool_call(&mut call, &tool, arguments);
                kept.push(call);
            }
            ToolOutcome::Refused(refusal) => refusals.push(refusal),
        }
    }
    if !refusals.is_empty() {
        let mut content = text;
        for refusal in refusals {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&refusal);
        }
        message.insert("content".to_owned(), Value::String(content));
    }
    if kept.is_empty() {
        if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
            choice.insert("finish_reason".to_owned(), Value::from("stop"));
        }
    } else if let Some(Value::Object(message)) = choice.get_mut("message") {
        message.insert("tool_calls".to_owned(), Value::Array(kept));
    }
    Ok(())
}

/// The metadata of one output item of a Responses API answer.
pub(crate) fn item_metadata(metadata: &Metadata, output_index: u64) -> Metadata {
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert("output_index".to_owned(), Value::from(output_index));
    metadata
}

/// Evaluates the `output` items of a Responses API answer in place: the texts of every
/// message and reasoning item first, then every call, with the answer's text (its message
/// items) as its calling message.
pub(crate) async fn guard_output(
    settings: &Settings,
    metadata: &Metadata,
    output: &mut [Value],
) -> Result<(), Failure> {
    let mut text = String::new();
    for (index, item) in output.iter_mut().enumerate() {
        let item_text =
            guard_item_texts(settings, &item_metadata(metadata, index as u64), item).await?;
        join(&mut text, &item_text);
    }
    for (index, item) in output.iter_mut().enumerate() {
        let metadata = item_metadata(metadata, index as u64);
        if let Some(refusal) = guard_call_item(settings, &metadata, item, &text).await? {
            join(&mut text, &refusal);
        }
    }
    Ok(())
}

/// Appends `more` to `text` on a new line.
pub(crate) fn join(text: &mut String, more: &str) {
    if more.is_empty() {
        return;
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(more);
}

/// The `metadata.extra` key naming the kind of an answer text of the Responses API: the type
/// of the part it lives in (see [`TextKind`]).
pub(crate) const TEXT_KIND: &str = "text_kind";

/// The kinds of text the model writes in the output items of a Responses API answer, named
/// after the type of the part that holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// An `output_text` part of a message item: the answer.
    OutputText,
    /// A `refusal` part of a message item.
    Refusal,
    /// A `summary_text` part of a reasoning item's `summary`.
    SummaryText,
    /// A `reasoning_text` part of a reasoning item's `content`.
    ReasoningText,
}

impl TextKind {
    /// The kind of a part, by its `type`; `None` for parts that carry no text to check.
    pub(crate) fn of_part(part: &Value) -> Option<TextKind> {
        match part.get("type").and_then(Value::as_str)? {
            "output_text" => Some(TextKind::OutputText),
            "refusal" => Some(TextKind::Refusal),
            "summary_text" => Some(TextKind::SummaryText),
            "reasoning_text" => Some(TextKind::ReasoningText),
            _ => None,
        }
    }

    /// The part's type, which is also `metadata.extra.text_kind`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TextKind::OutputText => "output_text",
            TextKind::Refusal => "refusal",
            TextKind::SummaryText => "summary_text",
            TextKind::ReasoningText => "reasoning_text",
        }
    }

    /// The field of the part (and of its `…done` event) that holds the text.
    pub(crate) fn field(self) -> &'static str {
        match self {
            TextKind::Refusal => "refusal",
            _ => "text",
        }
    }

    /// The list of its item the part lives in.
    pub(crate) fn area(self) -> Area {
        match self {
            TextKind::SummaryText => Area::Summary,
            _ => Area::Content,
        }
    }

    /// The type of the stream event that carries a piece of this text.
    pub(crate) fn delta_event(self) -> &'static str {
        match self {
            TextKind::OutputText => "response.output_text.delta",
            TextKind::Refusal => "response.refusal.delta",
            TextKind::SummaryText => "response.reasoning_summary_text.delta",
            TextKind::ReasoningText => "response.reasoning_text.delta",
        }
    }
}

/// The list of an output item a text part lives in: `content` (a message's text, a reasoning
/// item's reasoning text) or `summary` (a reasoning item's summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Area {
    /// `content`, indexed by `content_index` in stream events.
    Content,
    /// `summary`, indexed by `summary_index` in stream events.
    Summary,
}

impl Area {
    /// The item's field holding the list.
    pub(crate) fn field(self) -> &'static str {
        match self {
            Area::Content => "content",
            Area::Summary => "summary",
        }
    }

    /// The field of stream events (and of `metadata.extra`) giving a part's place in it.
    pub(crate) fn index_key(self) -> &'static str {
        match self {
            Area::Content => "content_index",
            Area::Summary => "summary_index",
        }
    }
}

/// One text part of an output item: the list it lives in, its place there, its kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextPart {
    pub(crate) area: Area,
    pub(crate) index: usize,
    pub(crate) kind: TextKind,
}

impl TextPart {
    /// The part in `item`, if it is still there.
    pub(crate) fn in_item(self, item: &mut Value) -> Option<&mut Value> {
        item.get_mut(self.area.field())?.get_mut(self.index)
    }

    /// Writes the part's text as forwarded; its `logprobs` go when that is not the text the
    /// part held (see [`drop_logprobs`]).
    pub(crate) fn forward(self, part: &mut Value, text: String) {
        let field = self.kind.field();
        if part.get(field).and_then(Value::as_str) != Some(text.as_str()) {
            drop_logprobs(part);
        }
        part[field] = Value::String(text);
    }
}

/// The text parts of an output item: each `output_text` and `refusal` part of a message
/// item, each `summary_text` part of a reasoning item's `summary` and each `reasoning_text`
/// part of its `content`. Other items carry no text to check here.
pub(crate) fn text_parts(item: &Value) -> Vec<TextPart> {
    let areas: &[Area] = match item.get("type").and_then(Value::as_str) {
        Some("message") => &[Area::Content],
        Some("reasoning") => &[Area::Summary, Area::Content],
        _ => return Vec::new(),
    };
    let mut found = Vec::new();
    for &area in areas {
        let Some(Value::Array(parts)) = item.get(area.field()) else {
            continue;
        };
        for (index, part) in parts.iter().enumerate() {
            if let Some(kind) = TextKind::of_part(part) {
                found.push(TextPart { area, index, kind });
            }
        }
    }
    found
}

/// The metadata of one text of an answer: `metadata.extra.text_kind` added (for the
/// Responses API the part's type, [`TextKind::name`]; for chat completions the message's
/// field, see [`ChatText`]).
pub(crate) fn text_metadata(metadata: &Metadata, kind: &str) -> Metadata {
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert(TEXT_KIND.to_owned(), Value::from(kind));
    metadata
}

/// The texts of a chat completion message the output policies see, each on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ChatText {
    /// `content`: the answer.
    Content,
    /// `refusal`: a refusal the model wrote.
    Refusal,
    /// `reasoning_content`: the reasoning some OpenAI-compatible servers send beside the
    /// answer.
    Reasoning,
    /// `audio.transcript`: the transcript of an audio answer.
    Transcript,
}

impl ChatText {
    /// `metadata.extra.text_kind` of this text.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ChatText::Content => "content",
            ChatText::Refusal => "refusal",
            ChatText::Reasoning => "reasoning_content",
            ChatText::Transcript => "audio_transcript",
        }
    }
}

/// Runs the output policies on each text part of an output item (see [`text_parts`]),
/// writing back what they change; a text they deny is handled as the answer's text is (see
/// [`clear_text`]). Returns the text of a message item as forwarded (a reasoning item's text
/// is not part of the answer's text); other items are left alone.
pub(crate) async fn guard_item_texts(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
) -> Result<String, Failure> {
    let mut text = String::new();
    let answer = item.get("type").and_then(Value::as_str) == Some("message");
    for part in text_parts(item) {
        let Some(slot) = part.in_item(item) else {
            continue;
        };
        let Some(Value::String(content)) = slot.get(part.kind.field()) else {
            continue;
        };
        let metadata = text_metadata(metadata, part.kind.name());
        let forwarded = match clear_text(settings, &metadata, content).await? {
            Cleared::Text { text, .. } | Cleared::Refused(text) => text,
        };
        if answer {
            join(&mut text, &forwarded);
        }
        part.forward(slot, forwarded);
    }
    Ok(text)
}

/// Empties the `logprobs` of a part (or a text event) whose text the policies changed: they
/// spell out, token by token, the text as the model wrote it.
pub(crate) fn drop_logprobs(part: &mut Value) {
    if let Some(logprobs) = part.get_mut("logprobs")
        && logprobs.is_array()
    {
        *logprobs = Value::Array(Vec::new());
    }
}

/// What the tool-call policies made of an output item.
pub(crate) enum CallVerdict {
    /// The item is no call (see [`mapping::read_output_calls`]).
    NotACall,
    /// The call goes, its arguments patched in place if a policy changed them.
    Allowed,
    /// The call was refused; the item is now the assistant message item saying this text.
    Refused(String),
}

/// Runs the tool-call policies on each call of an output item (a `function_call`, a
/// `custom_tool_call`, or the call of a built-in tool the client runs: see
/// [`mapping::read_output_calls`]): patched arguments are written back; an item any of whose
/// calls is refused is replaced by an assistant message item saying so.
pub(crate) async fn evaluate_call_item(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
    calling_message: &str,
) -> Result<CallVerdict, Failure> {
    let calls = mapping::read_output_calls(item)?;
    let Some(call_id) = calls.first().map(|tool| tool.id.clone()) else {
        return Ok(CallVerdict::NotACall);
    };
    let mut patches = Vec::new();
    let mut refusals = Vec::new();
    for tool in calls {
        match evaluate_tool_call(settings, metadata, &tool, calling_message).await? {
            ToolOutcome::Allowed(None) => {}
            ToolOutcome::Allowed(Some(arguments)) => patches.push((tool, arguments)),
            ToolOutcome::Refused(refusal) => refusals.push(refusal),
        }
    }
    if !refusals.is_empty() {
        let refusal = refusals.join("\n");
        *item = mapping::refusal_item(&call_id, &refusal);
        return Ok(CallVerdict::Refused(refusal));
    }
    for (tool, arguments) in patches {
        mapping::write_output_call(item, &tool, arguments);
    }
    Ok(CallVerdict::Allowed)
}

/// Runs the tool-call policies on a call item (see [`evaluate_call_item`]); returns the text
/// of the message item that replaced a refused call. Other items are left alone.
pub(crate) async fn guard_call_item(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
    calling_message: &str,
) -> Result<Option<String>, Failure> {
    match evaluate_call_item(settings, metadata, item, calling_message).await? {
        CallVerdict::Refused(refusal) => Ok(Some(refusal)),
        CallVerdict::NotACall | CallVerdict::Allowed => Ok(None),
    }
}
