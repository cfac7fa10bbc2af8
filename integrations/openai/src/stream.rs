//! Streamed chat completions (server-sent events): the streaming output guard on each
//! choice's text, another on each other text it writes (its refusal, the `reasoning_content`
//! or `reasoning` some servers send, the transcript of an audio answer), tool-call deltas buffered per index
//! and evaluated whole when the choice finishes. An audio answer's `data` is held until the
//! choice finishes and released only with a transcript the policies left as it was.

use std::collections::BTreeMap;
use std::sync::Arc;

use portcullis_engine::{Metadata, OutputStream, PolicyEngine};
use serde_json::{Map, Value};

use crate::error::Failure;
use crate::error::{self, GuardError};
use crate::judge::{ToolOutcome, collect, evaluate_tool_call};
use crate::mapping::{self, ToolCall};
use crate::response::{self, ChatText, SIDE_TEXTS, content_texts, text_metadata, unreadable};
use crate::settings::Settings;
use crate::sse::{Event, EventReader, Sender, Upstream, next_chunk, send};

/// Guards a chat completion stream: reads `upstream`, writes the released events to
/// `sender`; a failure ends the stream with an OpenAI-style error event.
pub(crate) async fn run<E: std::fmt::Display>(
    settings: Arc<Settings>,
    metadata: Metadata,
    upstream: Upstream<E>,
    sender: Sender,
) {
    let engine = Arc::clone(&settings.engine);
    let mut guard = StreamGuard {
        settings: &settings,
        engine: &engine,
        metadata,
        choices: BTreeMap::new(),
        template: Map::new(),
    };
    if let Err(failure) = guard.run(upstream, &sender).await {
        // The stream ends with an OpenAI-style error event (async-openai reports the text of
        // body errors only, so an event keeps the denial readable; see `crate::denial`).
        // The reader may be gone already; nothing to do then.
        send(&sender, None, &error::error_event(&failure).to_string()).await;
    }
}

/// A tool call being assembled from its deltas.
#[derive(Debug, Default)]
struct PartialToolCall {
    id: String,
    name: String,
    arguments: String,
}

/// A text of a choice besides its content, with a guard of its own opened by its first
/// delta.
struct SideText<'e> {
    guard: OutputStream<'e>,
    /// What the upstream sent, and what the guard released.
    sent: String,
    released: String,
}

/// One choice of the answer.
struct ChoiceState<'e> {
    guard: Option<OutputStream<'e>>,
    /// The choice's other texts (refusal, reasoning, audio transcript).
    sides: BTreeMap<ChatText, SideText<'e>>,
    /// The audio answer's `data`, held until the choice finishes.
    audio_data: String,
    /// The tokens of `logprobs.content` and `logprobs.refusal`, held until the choice
    /// finishes.
    logprobs: Logprobs,
    /// The content text the upstream sent.
    sent: String,
    /// Whether the choice finished: text after that is not released.
    finished: bool,
    metadata: Metadata,
    released: String,
    tool_calls: BTreeMap<u64, PartialToolCall>,
    /// The deprecated `function_call` being assembled from its deltas.
    function_call: Option<PartialToolCall>,
}

/// The tokens of a choice's `logprobs`, by list.
#[derive(Default)]
struct Logprobs {
    content: Option<Vec<Value>>,
    refusal: Option<Vec<Value>>,
}

/// What finishing a choice adds to its last delta.
struct Tail {
    /// The choice's `logprobs`, when its texts came out as they were sent.
    logprobs: Option<Value>,
    text: String,
    /// The rest of each other text.
    sides: Vec<(ChatText, String)>,
    /// The audio answer's data, when its transcript came out as it was sent.
    audio_data: String,
    tool_calls: Vec<Value>,
    /// The deprecated `function_call`, when it is allowed.
    function_call: Option<Value>,
    refused: bool,
}

struct StreamGuard<'e> {
    settings: &'e Settings,
    engine: &'e PolicyEngine,
    metadata: Metadata,
    choices: BTreeMap<u64, ChoiceState<'e>>,
    /// The top-level fields of the last chunk, for chunks the guard adds at the end.
    template: Map<String, Value>,
}

impl<'e> StreamGuard<'e> {
    async fn run<E: std::fmt::Display>(
        &mut self,
        mut upstream: Upstream<E>,
        sender: &Sender,
    ) -> Result<(), Failure> {
        let mut reader = EventReader::new(self.settings.max_event_bytes);
        while let Some(bytes) = next_chunk(&mut upstream, sender).await? {
            for event in reader.push(&bytes)? {
                if !self.dispatch(event, sender).await? {
                    return Ok(());
                }
            }
        }
        // The server closed without `[DONE]`: release what the guards clear, and stop.
        if let Some(last) = reader.finish()
            && !self.dispatch(last, sender).await?
        {
            return Ok(());
        }
        self.finish_all(sender).await
    }

    /// Handles one event; `false` when the reader is gone or the stream is done.
    async fn dispatch(&mut self, event: Event, sender: &Sender) -> Result<bool, Failure> {
        let Some(data) = event.data else {
            return Ok(true);
        };
        if data == "[DONE]" {
            self.finish_all(sender).await?;
            send(sender, event.name.as_deref(), &data).await;
            return Ok(false);
        }
        let chunk = match serde_json::from_str::<Value>(&data) {
            Ok(Value::Object(chunk)) if chunk.get("choices").is_some_and(Value::is_array) => chunk,
            // The server's error event: the reader sees it as it is.
            Ok(Value::Object(other)) if other.contains_key("error") => {
                return Ok(send(sender, event.name.as_deref(), &data).await);
            }
            // Anything else could carry text no policy has seen: the stream ends here.
            _ => {
                return Err(Failure::Guard(GuardError::Body {
                    problem: "the stream carries an event that is not a chat completion chunk"
                        .to_owned(),
                }));
            }
        };
        match self.guard_chunk(chunk).await? {
            Some(chunk) => Ok(send(sender, event.name.as_deref(), &chunk.to_string()).await),
            None => Ok(true),
        }
    }

    async fn guard_chunk(
        &mut self,
        mut chunk: Map<String, Value>,
    ) -> Result<Option<Value>, Failure> {
        let Some(Value::Array(choices)) = chunk.remove("choices") else {
            return Ok(Some(Value::Object(chunk)));
        };
        let had_choices = !choices.is_empty();
        self.template = chunk.clone();
        let response_id = chunk.get("id").and_then(Value::as_str).map(str::to_owned);
        let mut kept = Vec::with_capacity(choices.len());
        for (position, choice) in choices.into_iter().enumerate() {
            let Value::Object(mut choice) = choice else {
                return Err(unreadable(format!(
                    "choice {position} of a chunk is a JSON {}, not an object",
                    mapping::json_kind(&choice)
                )));
            };
            let index = choice
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            self.open_choice(index, response_id.as_deref());
            let mut delta = match choice.remove("delta") {
                Some(Value::Object(delta)) => delta,
                _ => Map::new(),
            };
            // The tokens of text the guards may still hold, or change: they wait for the end.
            if let Some(Value::Object(logprobs)) = choice.remove("logprobs") {
                self.buffer_logprobs(index, logprobs);
            }
            // A content given as a list of parts is one text, its parts' texts in order,
            // released as a string.
            let content: String = content_texts(delta.get("content"), index)?
                .into_iter()
                .map(|(_, text)| text)
                .collect();
            if delta
                .get("content")
                .is_some_and(|content| !content.is_null())
            {
                let released = self.push(index, &content).await?;
                delta.insert("content".to_owned(), Value::String(released));
            }
            for kind in SIDE_TEXTS {
                let field = kind.field();
                if let Some(text) = string_field(&delta, field, index)? {
                    let released = self.push_side(index, kind, &text).await?;
                    delta.insert(field.to_owned(), Value::String(released));
                }
            }
            match delta.remove("audio") {
                None | Some(Value::Null) => {}
                Some(Value::Object(mut audio)) => {
                    // The audio itself waits for the end of its transcript.
                    if let Some(data) = string_field(&audio, "data", index)?
                        && let Some(state) = self.choices.get_mut(&index)
                        && !state.finished
                    {
                        state.audio_data.push_str(&data);
                    }
                    audio.remove("data");
                    if let Some(text) = string_field(&audio, "transcript", index)? {
                        let released = self.push_side(index, ChatText::Transcript, &text).await?;
                        audio.remove("transcript");
                        if !released.is_empty() {
                            audio.insert("transcript".to_owned(), Value::String(released));
                        }
                    }
                    if !audio.is_empty() {
                        delta.insert("audio".to_owned(), Value::Object(audio));
                    }
                }
                Some(other) => {
                    return Err(unreadable(format!(
                        "the audio of choice {index} is a JSON {}, not an object",
                        mapping::json_kind(&other)
                    )));
                }
            }
            if let Some(Value::Array(calls)) = delta.remove("tool_calls") {
                self.buffer_tool_calls(index, calls);
            }
            match delta.remove("function_call") {
                None | Some(Value::Null) => {}
                Some(call @ Value::Object(_)) => self.buffer_function_call(index, &call),
                Some(other) => {
                    return Err(unreadable(format!(
                        "the function_call of choice {index} is a JSON {}, not an object",
                        mapping::json_kind(&other)
                    )));
                }
            }
            if let Some(annotations) = delta.get_mut("annotations") {
                let metadata = self
                    .choices
                    .get(&index)
                    .map(|state| state.metadata.clone())
                    .unwrap_or_else(|| self.metadata.clone());
                response::guard_annotation_list(self.settings, &metadata, annotations).await?;
            }
            let finish_reason = choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(reason) = finish_reason {
                let tail = self.finish_choice(index).await?;
                let no_call_left = match reason.as_str() {
                    "tool_calls" => tail.tool_calls.is_empty(),
                    "function_call" => tail.function_call.is_none(),
                    _ => false,
                };
                if tail.refused && no_call_left {
                    choice.insert("finish_reason".to_owned(), Value::from("stop"));
                }
                if let Some(logprobs) = &tail.logprobs {
                    choice.insert("logprobs".to_owned(), logprobs.clone());
                }
                add_tail(&mut delta, tail);
            }
            let carries_something = choice.get("finish_reason").is_some_and(|r| !r.is_null())
                || delta.iter().any(|(key, value)| match value {
                    Value::Null => false,
                    Value::String(text) => {
                        !text.is_empty()
                            || !(key == "content"
                                || SIDE_TEXTS.iter().any(|kind| kind.field() == key))
                    }
                    _ => true,
                });
            if carries_something {
                choice.insert("delta".to_owned(), Value::Object(delta));
                kept.push(Value::Object(choice));
            }
        }
        let usage = chunk.get("usage").is_some_and(|usage| !usage.is_null());
        if had_choices && kept.is_empty() && !usage {
            return Ok(None);
        }
        chunk.insert("choices".to_owned(), Value::Array(kept));
        Ok(Some(Value::Object(chunk)))
    }

    fn open_choice(&mut self, index: u64, response_id: Option<&str>) {
        if self.choices.contains_key(&index) {
            return;
        }
        let mut metadata = self.metadata.clone();
        if let Some(id) = response_id {
            metadata
                .extra
                .insert("response_id".to_owned(), Value::from(id));
        }
        metadata
            .extra
            .insert("choice_index".to_owned(), Value::from(index));
        let guard = self
            .engine
            .output_stream(text_metadata(&metadata, ChatText::Content.name()));
        self.choices.insert(
            index,
            ChoiceState {
                guard: Some(guard),
                sides: BTreeMap::new(),
                audio_data: String::new(),
                logprobs: Logprobs::default(),
                sent: String::new(),
                finished: false,
                metadata,
                released: String::new(),
                tool_calls: BTreeMap::new(),
                function_call: None,
            },
        );
    }

    /// Pushes a text delta through the choice's guard; returns what it releases.
    async fn push(&mut self, index: u64, text: &str) -> Result<String, Failure> {
        let Some(state) = self.choices.get_mut(&index) else {
            return Ok(String::new());
        };
        let Some(guard) = state.guard.as_mut() else {
            // The choice finished already; text after that is not released.
            return Ok(String::new());
        };
        state.sent.push_str(text);
        let released = collect(guard.push(text).await)?;
        state.released.push_str(&released);
        Ok(released)
    }

    /// Pushes a delta of one of the choice's other texts through its guard; returns what it
    /// releases.
    async fn push_side(
        &mut self,
        index: u64,
        kind: ChatText,
        text: &str,
    ) -> Result<String, Failure> {
        let engine = self.engine;
        let Some(state) = self.choices.get_mut(&index) else {
            return Ok(String::new());
        };
        if state.finished {
            return Ok(String::new());
        }
        let side = state.sides.entry(kind).or_insert_with(|| SideText {
            guard: engine.output_stream(text_metadata(&state.metadata, kind.name())),
            sent: String::new(),
            released: String::new(),
        });
        side.sent.push_str(text);
        let released = collect(side.guard.push(text).await)?;
        side.released.push_str(&released);
        Ok(released)
    }

    fn buffer_tool_calls(&mut self, index: u64, calls: Vec<Value>) {
        let Some(state) = self.choices.get_mut(&index) else {
            return;
        };
        for (position, call) in calls.iter().enumerate() {
            let call_index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let partial = state.tool_calls.entry(call_index).or_default();
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                partial.id.push_str(id);
            }
            if let Some(function) = call.get("function") {
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    partial.name.push_str(name);
                }
                if let Some(arguments) = function.get("arguments").and_then(Value::as_str) {
                    partial.arguments.push_str(arguments);
                }
            }
        }
    }

    fn buffer_logprobs(&mut self, index: u64, logprobs: Map<String, Value>) {
        let Some(state) = self.choices.get_mut(&index) else {
            return;
        };
        if state.finished {
            return;
        }
        for (field, held) in [
            ("content", &mut state.logprobs.content),
            ("refusal", &mut state.logprobs.refusal),
        ] {
            if let Some(Value::Array(tokens)) = logprobs.get(field) {
                held.get_or_insert_with(Vec::new)
                    .extend(tokens.iter().cloned());
            }
        }
    }

    fn buffer_function_call(&mut self, index: u64, call: &Value) {
        let Some(state) = self.choices.get_mut(&index) else {
            return;
        };
        if state.finished {
            return;
        }
        let partial = state
            .function_call
            .get_or_insert_with(PartialToolCall::default);
        if let Some(name) = call.get("name").and_then(Value::as_str) {
            partial.name.push_str(name);
        }
        if let Some(arguments) = call.get("arguments").and_then(Value::as_str) {
            partial.arguments.push_str(arguments);
        }
    }

    /// Ends a choice: the rest of its text, then its tool calls, evaluated whole.
    async fn finish_choice(&mut self, index: u64) -> Result<Tail, Failure> {
        let mut tail = Tail {
            text: String::new(),
            sides: Vec::new(),
            audio_data: String::new(),
            tool_calls: Vec::new(),
            function_call: None,
            logprobs: None,
            refused: false,
        };
        let Some(state) = self.choices.get_mut(&index) else {
            return Ok(tail);
        };
        state.finished = true;
        if let Some(guard) = state.guard.take() {
            tail.text = collect(guard.finish().await)?;
            state.released.push_str(&tail.text);
        }
        let mut texts_kept = state.released == state.sent;
        let mut transcript_kept = false;
        for (kind, side) in std::mem::take(&mut state.sides) {
            let rest = collect(side.guard.finish().await)?;
            let kept = side.released + &rest == side.sent;
            match kind {
                ChatText::Transcript => transcript_kept = kept,
                _ => texts_kept &= kept,
            }
            tail.sides.push((kind, rest));
        }
        let logprobs = std::mem::take(&mut state.logprobs);
        if texts_kept && (logprobs.content.is_some() || logprobs.refusal.is_some()) {
            tail.logprobs = Some(serde_json::json!({
                "content": logprobs.content,
                "refusal": logprobs.refusal,
            }));
        }
        let audio_data = std::mem::take(&mut state.audio_data);
        if transcript_kept {
            tail.audio_data = audio_data;
        }
        let calls = std::mem::take(&mut state.tool_calls);
        let mut refusals = Vec::new();
        let legacy = state.function_call.take();
        for (legacy, partial) in calls
            .into_values()
            .map(|call| (false, call))
            .chain(legacy.map(|call| (true, call)))
        {
            let arguments = mapping::parse_arguments(&partial.arguments).map_err(|problem| {
                GuardError::InvalidToolArguments {
                    tool_name: partial.name.clone(),
                    call_id: partial.id.clone(),
                    problem,
                }
            })?;
            let tool = ToolCall {
                id: partial.id,
                name: partial.name,
                arguments,
                custom: false,
                action: None,
            };
            let outcome =
                evaluate_tool_call(self.settings, &state.metadata, &tool, &state.released).await?;
            let arguments = match outcome {
                ToolOutcome::Allowed(Some(arguments)) => Value::Object(arguments).to_string(),
                ToolOutcome::Allowed(None) => partial.arguments,
                ToolOutcome::Refused(refusal) => {
                    refusals.push(refusal);
                    continue;
                }
            };
            if legacy {
                tail.function_call = Some(serde_json::json!({
                    "name": tool.name,
                    "arguments": arguments,
                }));
                continue;
            }
            tail.tool_calls.push(serde_json::json!({
                "index": tail.tool_calls.len(),
                "id": tool.id,
                "type": "function",
                "function": { "name": tool.name, "arguments": arguments },
            }));
        }
        for refusal in refusals {
            if !state.released.is_empty() || !tail.text.is_empty() {
                tail.text.push('\n');
            }
            tail.text.push_str(&refusal);
            state.released.push('\n');
            state.released.push_str(&refusal);
            tail.refused = true;
        }
        Ok(tail)
    }

    /// Finishes every open choice, releasing what is left in one last chunk.
    async fn finish_all(&mut self, sender: &Sender) -> Result<(), Failure> {
        let open: Vec<u64> = self
            .choices
            .iter()
            .filter(|(_, state)| {
                state.guard.is_some()
                    || !state.sides.is_empty()
                    || !state.audio_data.is_empty()
                    || state.logprobs.content.is_some()
                    || state.logprobs.refusal.is_some()
                    || !state.tool_calls.is_empty()
                    || state.function_call.is_some()
            })
            .map(|(index, _)| *index)
            .collect();
        let mut choices = Vec::new();
        for index in open {
            let tail = self.finish_choice(index).await?;
            let empty = tail.text.is_empty()
                && tail.sides.iter().all(|(_, rest)| rest.is_empty())
                && tail.audio_data.is_empty()
                && tail.logprobs.is_none()
                && tail.tool_calls.is_empty()
                && tail.function_call.is_none();
            if empty {
                continue;
            }
            let mut choice = Map::new();
            choice.insert("index".to_owned(), Value::from(index));
            if let Some(logprobs) = &tail.logprobs {
                choice.insert("logprobs".to_owned(), logprobs.clone());
            }
            let mut delta = Map::new();
            add_tail(&mut delta, tail);
            choice.insert("delta".to_owned(), Value::Object(delta));
            choices.push(Value::Object(choice));
        }
        if !choices.is_empty() {
            let mut chunk = self.template.clone();
            chunk.insert("choices".to_owned(), Value::Array(choices));
            chunk.remove("usage");
            send(sender, None, &Value::Object(chunk).to_string()).await;
        }
        Ok(())
    }
}

/// A text field of a delta (or of its audio): its string, `None` when it is missing or
/// `null`; anything else cannot be read.
fn string_field(
    fields: &Map<String, Value>,
    field: &str,
    choice: u64,
) -> Result<Option<String>, Failure> {
    match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(unreadable(format!(
            "the {field} of choice {choice} is a JSON {}, not a string",
            mapping::json_kind(other)
        ))),
    }
}

/// Adds the end of a choice to its delta.
fn add_tail(delta: &mut Map<String, Value>, tail: Tail) {
    if !tail.text.is_empty() {
        let mut content = match delta.get("content") {
            Some(Value::String(text)) => text.clone(),
            _ => String::new(),
        };
        content.push_str(&tail.text);
        delta.insert("content".to_owned(), Value::String(content));
    }
    let mut audio = match delta.remove("audio") {
        Some(Value::Object(audio)) => audio,
        _ => Map::new(),
    };
    for (kind, rest) in tail.sides {
        if rest.is_empty() {
            continue;
        }
        let (target, field) = match kind {
            ChatText::Transcript => (&mut audio, kind.field()),
            ChatText::Content => continue,
            side => (&mut *delta, side.field()),
        };
        let mut text = match target.get(field) {
            Some(Value::String(text)) => text.clone(),
            _ => String::new(),
        };
        text.push_str(&rest);
        target.insert(field.to_owned(), Value::String(text));
    }
    if !tail.audio_data.is_empty() {
        audio.insert("data".to_owned(), Value::String(tail.audio_data));
    }
    if !audio.is_empty() {
        delta.insert("audio".to_owned(), Value::Object(audio));
    }
    if !tail.tool_calls.is_empty() {
        delta.insert("tool_calls".to_owned(), Value::Array(tail.tool_calls));
    }
    if let Some(call) = tail.function_call {
        delta.insert("function_call".to_owned(), call);
    }
}
