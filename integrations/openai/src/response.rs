//! Whole answers: output policies on each text (a chat choice's message, the text parts of
//! a Responses API message or reasoning item), then tool-call policies on each call the
//! answer makes.

use bytes::Bytes;
use portcullis_engine::{EngineError, Message, Metadata, OutputContext};
use serde_json::{Map, Value};

use crate::error::Failure;
use crate::error::GuardError;
use crate::judge::{ToolOutcome, evaluate_tool_call};
use crate::mapping::{self, Api};
use crate::settings::Settings;

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
            let Value::Object(choice) = choice else {
                return Err(unreadable(format!(
                    "choice {position} of the answer is a JSON {}, not an object",
                    mapping::json_kind(choice)
                )));
            };
            guard_choice(settings, &metadata, position, choice).await?;
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
        Err(error) => Err(Failure::from(error)),
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
    let message = match choice.get_mut("message") {
        Some(Value::Object(message)) => message,
        None | Some(Value::Null) => return Ok(()),
        Some(other) => {
            return Err(unreadable(format!(
                "the message of choice {index} is a JSON {}, not an object",
                mapping::json_kind(other)
            )));
        }
    };

    // The text first: tool-call policies see the text as it will be forwarded. A `content`
    // given as a list of parts is read part by part, each a text of its own.
    let mut text = String::new();
    // Whether the policies changed a text the choice's `logprobs` spell out token by token.
    let mut texts_changed = false;
    let content_metadata = text_metadata(&metadata, ChatText::Content.name());
    for (slot, written) in content_texts(message.get("content"), index)? {
        let metadata = match slot {
            Some(part) => part_metadata(&content_metadata, part),
            None => content_metadata.clone(),
        };
        match clear_text(settings, &metadata, &written).await? {
            Cleared::Text {
                text: cleared,
                modified,
            } => {
                if modified && cleared != written {
                    texts_changed = true;
                    write_content(message, slot, cleared.clone());
                }
                join(&mut text, &cleared);
            }
            Cleared::Refused(refusal) => {
                withhold(choice, refusal);
                return Ok(());
            }
        }
    }
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return Ok(());
    };

    // A refusal the model wrote, and the reasoning some servers send, are text it sends too.
    for kind in SIDE_TEXTS {
        let field = kind.field();
        let written = match message.get(field) {
            Some(Value::String(written)) => written,
            None | Some(Value::Null) => continue,
            Some(other) => {
                return Err(unreadable(format!(
                    "the {field} of choice {index} is a JSON {}, not a string",
                    mapping::json_kind(other)
                )));
            }
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
    let audio = match message.get_mut("audio") {
        Some(Value::Object(audio)) => Some(audio),
        None | Some(Value::Null) => None,
        Some(other) => {
            return Err(unreadable(format!(
                "the audio of choice {index} is a JSON {}, not an object",
                mapping::json_kind(other)
            )));
        }
    };
    if let Some(audio) = audio {
        let metadata = text_metadata(&metadata, ChatText::Transcript.name());
        let cleared = match audio.get("transcript") {
            Some(Value::String(transcript)) => {
                Some(clear_text(settings, &metadata, transcript).await?)
            }
            None | Some(Value::Null) => None,
            Some(other) => {
                return Err(unreadable(format!(
                    "the audio transcript of choice {index} is a JSON {}, not a string",
                    mapping::json_kind(other)
                )));
            }
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

    // Citations the model's search added (titles, URLs) reach the client as its text does.
    if let Some(annotations) = message.get_mut("annotations") {
        guard_annotation_list(settings, &metadata, annotations).await?;
    }

    // The deprecated `function_call` is a call like the others.
    if let Some(call) = message.get("function_call")
        && !call.is_object()
        && !call.is_null()
    {
        return Err(unreadable(format!(
            "the function_call of choice {index} is a JSON {}, not an object",
            mapping::json_kind(call)
        )));
    }
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
    for (position, mut call) in calls.into_iter().enumerate() {
        // A call is a function's or a custom tool's: anything else the policies cannot see.
        let readable = ["function", "custom"]
            .iter()
            .any(|kind| call.get(kind).is_some_and(Value::is_object));
        if !readable {
            return Err(unreadable(format!(
                "tool call {position} of choice {index} is neither a function call nor a custom tool call"
            )));
        }
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

/// The error for what the guard cannot read in an answer: nothing of it is released (the
/// proxy answers 502; a stream ends with an error event).
pub(crate) fn unreadable(what: String) -> Failure {
    Failure::Guard(GuardError::Body {
        problem: format!("{what}; what the policies cannot read is not released"),
    })
}

/// The texts of a chat message's `content`: a string (`None` for its place), or each text
/// of a list of parts (`Some` index): a `text` part's `text`, a `refusal` part's `refusal`.
/// A part of another type, or a `content` of another kind, cannot be read: an error.
pub(crate) fn content_texts(
    content: Option<&Value>,
    choice: u64,
) -> Result<Vec<(Option<usize>, String)>, Failure> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![(None, text.clone())]),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(at, part)| match chat_part_text(part) {
                Some(text) => Ok((Some(at), text.to_owned())),
                None => Err(unreadable(format!(
                    "part {at} of the content of choice {choice} is not a text part"
                ))),
            })
            .collect(),
        Some(other) => Err(unreadable(format!(
            "the content of choice {choice} is a JSON {}, neither a string nor a list of parts",
            mapping::json_kind(other)
        ))),
    }
}

/// The field of a chat content part holding its text: `text` for a `text` part, `refusal`
/// for a `refusal` part; `None` for any other part.
fn chat_part_field(part: &Value) -> Option<&'static str> {
    match part.get("type").and_then(Value::as_str)? {
        "text" => Some("text"),
        "refusal" => Some("refusal"),
        _ => None,
    }
}

/// The text of a chat content part (see [`chat_part_field`]), if it is a string.
pub(crate) fn chat_part_text(part: &Value) -> Option<&str> {
    part.get(chat_part_field(part)?)?.as_str()
}

/// The metadata of one part of a chat message's `content`: `content_index` added.
pub(crate) fn part_metadata(metadata: &Metadata, part: usize) -> Metadata {
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert("content_index".to_owned(), Value::from(part));
    metadata
}

/// Writes a cleared text back where [`content_texts`] read it.
fn write_content(message: &mut Map<String, Value>, slot: Option<usize>, text: String) {
    match slot {
        None => {
            message.insert("content".to_owned(), Value::String(text));
        }
        Some(at) => {
            if let Some(part) = message
                .get_mut("content")
                .and_then(|parts| parts.get_mut(at))
                && let Some(field) = chat_part_field(part)
            {
                part[field] = Value::String(text);
            }
        }
    }
}

/// Withholds a whole chat choice whose text a policy denied: the refusal is its content;
/// its audio, its reasoning, its calls and its tokens go.
fn withhold(choice: &mut Map<String, Value>, refusal: String) {
    if let Some(Value::Object(message)) = choice.get_mut("message") {
        message.insert("content".to_owned(), Value::String(refusal));
        message.remove("audio");
        message.remove("reasoning_content");
        message.remove("reasoning");
        message.remove("refusal");
        message.remove("tool_calls");
        message.remove("function_call");
    }
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
    /// The transcript of a streamed audio answer (`response.audio.transcript.delta`): no
    /// part holds it.
    Transcript,
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
            TextKind::Transcript => "audio_transcript",
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
            TextKind::Transcript => "response.audio.transcript.delta",
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
/// part of its `content`. Other items carry no text parts. A part of another type, or
/// whose text is not a string, cannot be read: an error.
pub(crate) fn text_parts(item: &Value) -> Result<Vec<TextPart>, Failure> {
    let areas: &[Area] = match item.get("type").and_then(Value::as_str) {
        Some("message") => &[Area::Content],
        Some("reasoning") => &[Area::Summary, Area::Content],
        _ => return Ok(Vec::new()),
    };
    let mut found = Vec::new();
    for &area in areas {
        let parts = match item.get(area.field()) {
            Some(Value::Array(parts)) => parts,
            None | Some(Value::Null) => continue,
            Some(other) => {
                return Err(unreadable(format!(
                    "the {} of an output item is a JSON {}, not a list of parts",
                    area.field(),
                    mapping::json_kind(other)
                )));
            }
        };
        for (index, part) in parts.iter().enumerate() {
            let kind = TextKind::of_part(part)
                .filter(|kind| kind.area() == area)
                .ok_or_else(|| {
                    unreadable(format!(
                        "part {index} of the {} of an output item is of a type the guard does not know",
                        area.field()
                    ))
                })?;
            if !part.get(kind.field()).is_some_and(Value::is_string) {
                return Err(unreadable(format!(
                    "part {index} of the {} of an output item has no {} string",
                    area.field(),
                    kind.field()
                )));
            }
            found.push(TextPart { area, index, kind });
        }
    }
    Ok(found)
}

/// What the guard knows of an output item of the Responses API, by its `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemKind {
    /// A `message` or `reasoning` item: its text parts (see [`text_parts`]).
    Text,
    /// A call the client runs (see [`mapping::is_call_item`]): the tool-call policies.
    Call,
    /// The call of a tool the server runs itself (see [`HOSTED_ITEMS`]): every text in it
    /// goes through the output policies (see [`guard_hosted_texts`]).
    Hosted,
}

/// The output items of the tools the server runs itself: what the model asked of them (a
/// search query, code, an MCP tool's arguments, an image prompt) and what they returned
/// (results, logs, an MCP tool's output, the tools an MCP server lists, a shell's output)
/// reach the client as the answer does.
pub(crate) const HOSTED_ITEMS: [&str; 8] = [
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "shell_call_output",
];

/// The kind of an output item; an item of a type the guard does not know cannot be read.
pub(crate) fn item_kind(item: &Value) -> Result<ItemKind, Failure> {
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        Some("message" | "reasoning") => Ok(ItemKind::Text),
        Some(hosted) if HOSTED_ITEMS.contains(&hosted) => Ok(ItemKind::Hosted),
        _ if mapping::is_call_item(kind) => Ok(ItemKind::Call),
        Some(other) => Err(unreadable(format!(
            "the answer has an output item of type {other:?}, which the guard does not know"
        ))),
        None => Err(unreadable(
            "the answer has an output item without a type".to_owned(),
        )),
    }
}

/// Runs the output policies on every text of a hosted tool's item (see [`HOSTED_ITEMS`]),
/// each on its own with `metadata.extra.text_kind` the item's type (see [`clear_strings`]).
pub(crate) async fn guard_hosted_texts(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
) -> Result<(), Failure> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    clear_strings(settings, &text_metadata(metadata, &kind), item).await
}

/// Runs the output policies on the `annotations` of a text part (the citations a hosted
/// search adds: titles, URLs, file names), each text on its own with
/// `metadata.extra.text_kind` `annotation` (see [`clear_strings`]).
pub(crate) async fn guard_annotations(
    settings: &Settings,
    metadata: &Metadata,
    part: &mut Value,
) -> Result<(), Failure> {
    let Some(annotations) = part.get_mut("annotations") else {
        return Ok(());
    };
    guard_annotation_list(settings, metadata, annotations).await
}

/// Runs the output policies on each string of a list of annotations (a text part's, or a
/// chat message's), with `metadata.extra.text_kind` `annotation` (see [`clear_strings`]).
pub(crate) async fn guard_annotation_list(
    settings: &Settings,
    metadata: &Metadata,
    annotations: &mut Value,
) -> Result<(), Failure> {
    clear_strings(
        settings,
        &text_metadata(metadata, "annotation"),
        annotations,
    )
    .await
}

/// Runs the output policies on every string in `value` but those under
/// [`OPAQUE_KEYS`](mapping::OPAQUE_KEYS),
/// each on its own with `metadata.extra.text_field` its JSON pointer in `value`, writing
/// back what they change; a text they deny is handled as the answer's text is (see
/// [`clear_text`]).
async fn clear_strings(
    settings: &Settings,
    metadata: &Metadata,
    value: &mut Value,
) -> Result<(), Failure> {
    let pointers: Vec<String> = {
        let mut found = Vec::new();
        // An answer's nesting is bounded by the JSON parser's own limit.
        mapping::texts_in(value, "", usize::MAX, &mut found)?;
        found.into_iter().map(|(pointer, _)| pointer).collect()
    };
    for pointer in pointers {
        let Some(Value::String(written)) = value.pointer(&pointer) else {
            continue;
        };
        let mut metadata = metadata.clone();
        metadata
            .extra
            .insert("text_field".to_owned(), Value::from(pointer.as_str()));
        let forwarded = match clear_text(settings, &metadata, written).await? {
            Cleared::Text {
                modified: false, ..
            } => continue,
            Cleared::Text { text, .. } | Cleared::Refused(text) => text,
        };
        if let Some(slot) = value.pointer_mut(&pointer) {
            *slot = Value::String(forwarded);
        }
    }
    Ok(())
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
    /// `reasoning`: the same, under the name other servers (vLLM, OpenRouter) give it.
    BareReasoning,
    /// `audio.transcript`: the transcript of an audio answer.
    Transcript,
}

/// The texts of a chat message (or delta) besides its content and its audio, by field.
pub(crate) const SIDE_TEXTS: [ChatText; 3] = [
    ChatText::Refusal,
    ChatText::Reasoning,
    ChatText::BareReasoning,
];

impl ChatText {
    /// `metadata.extra.text_kind` of this text.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ChatText::Content => "content",
            ChatText::Refusal => "refusal",
            ChatText::Reasoning => "reasoning_content",
            ChatText::BareReasoning => "reasoning",
            ChatText::Transcript => "audio_transcript",
        }
    }

    /// The field of the message (or of its `audio`) holding the text.
    pub(crate) fn field(self) -> &'static str {
        match self {
            ChatText::Transcript => "transcript",
            other => other.name(),
        }
    }
}

/// Runs the output policies on the texts of an output item: each text part of a message or
/// reasoning item (see [`text_parts`]), every text of a hosted tool's item (see
/// [`guard_hosted_texts`]), writing back what they change; a text they deny is handled as
/// the answer's text is (see [`clear_text`]). Returns the text of a message item as
/// forwarded (a reasoning item's text is not part of the answer's text); a call item is left
/// for the tool-call policies; an item or part the guard does not know is an error.
pub(crate) async fn guard_item_texts(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
) -> Result<String, Failure> {
    let mut text = String::new();
    match item_kind(item)? {
        ItemKind::Call => return Ok(text),
        ItemKind::Hosted => {
            guard_hosted_texts(settings, metadata, item).await?;
            return Ok(text);
        }
        ItemKind::Text => {}
    }
    let answer = item.get("type").and_then(Value::as_str) == Some("message");
    for part in text_parts(item)? {
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
        guard_annotations(settings, &metadata, slot).await?;
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
