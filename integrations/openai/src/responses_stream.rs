//! Streamed Responses API answers (server-sent events).
//!
//! - the text of each part goes through a streaming output guard of its own, so only
//!   cleared text is released: a message item's content parts (`response.output_text.delta`,
//!   `response.refusal.delta`), a reasoning item's summary parts
//!   (`response.reasoning_summary_text.delta`) and its reasoning text
//!   (`response.reasoning_text.delta`); summary and content parts are told apart by the list
//!   they live in, not only by their index. A part starts blank (`…part.added`, and the
//!   parts of `response.output_item.added`); its `done` events, its item's
//!   `response.output_item.done` and the final `response.completed` carry the released text;
//! - a call item (`function_call`, `custom_tool_call`, and the calls of built-in tools the
//!   client runs: `local_shell_call`, `shell_call`, `apply_patch_call`, `computer_call`) is
//!   held back, with its argument deltas (and the `response.shell_call_command.*` and
//!   `response.apply_patch_call_operation_diff.*` events that stream a command or a diff),
//!   until its `response.output_item.done`: then it is evaluated whole and released as a
//!   complete item (added, one arguments delta, done; a built-in tool's call added complete,
//!   then done), with patched arguments, or replaced by an assistant message item saying it
//!   was refused;
//! - the item of a tool the server runs itself (see [`response::HOSTED_ITEMS`]) is held
//!   likewise, with the events that stream its code, arguments, output or partial image, and
//!   released complete (added, done) once every text in it went through the output policies;
//!   the status events of hosted tools keep their type, `item_id` and `output_index` only;
//! - the audio transcript goes through a streaming output guard of its own; the audio is
//!   held until the transcript is done and released only with a transcript the policies
//!   left as it was;
//! - an event of a type the guard does not know, an item or part of a type it does not know,
//!   or an `output_item` event without its `output_index` ends the stream with an error
//!   event: what the policies cannot read is not released;
//! - every event the guard writes is numbered again (`sequence_number`), in order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use portcullis_engine::{Metadata, OutputStream, PolicyEngine};
use serde_json::{Map, Value, json};

use crate::error;
use crate::error::Failure;
use crate::judge::collect;
use crate::settings::Settings;

use crate::response::{
    self, Area, CallVerdict, ItemKind, TextKind, item_metadata, join, text_metadata, text_parts,
};
use crate::sse::{Event, EventReader, Sender, Upstream, next_chunk, send};

/// Guards a Responses API stream: reads `upstream`, writes the released events to `sender`;
/// a failure ends the stream with an OpenAI-style error event.
pub(crate) async fn run<E: std::fmt::Display>(
    settings: Arc<Settings>,
    metadata: Metadata,
    upstream: Upstream<E>,
    sender: Sender,
) {
    let engine = Arc::clone(&settings.engine);
    let mut guard = ResponsesGuard {
        settings: &settings,
        engine: &engine,
        metadata,
        sequence: 0,
        parts: BTreeMap::new(),
        held_items: BTreeSet::new(),
        audio: Audio::default(),
        released_items: BTreeMap::new(),
        text: String::new(),
    };
    if let Err(failure) = guard.run(upstream, &sender).await {
        // As in chat streams: an error event async-openai reports as an error whose content
        // `crate::denial` reads. The reader may be gone already.
        let event = error::error_event(&failure).to_string();
        send(&sender, Some("error"), &event).await;
    }
}

/// The text of one part: `(output_index, the list it lives in, its index there)`.
type PartKey = (u64, Area, u64);

/// One part's guard and the text it released.
struct Part<'e> {
    guard: Option<OutputStream<'e>>,
    /// The kind of text, as the part was opened.
    kind: TextKind,
    released: String,
}

struct ResponsesGuard<'e> {
    settings: &'e Settings,
    engine: &'e PolicyEngine,
    metadata: Metadata,
    /// The `sequence_number` of the next event written.
    sequence: u64,
    parts: BTreeMap<PartKey, Part<'e>>,
    /// Output indices of items held until they are done: calls, hosted tools' items.
    held_items: BTreeSet<u64>,
    /// The answer's audio, held until its transcript is done.
    audio: Audio,
    /// Items as released, by output index, for the final `response`.
    released_items: BTreeMap<u64, Value>,
    /// The answer's text released so far: the calling message of its calls.
    text: String,
}

impl<'e> ResponsesGuard<'e> {
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
        if let Some(last) = reader.finish()
            && !self.dispatch(last, sender).await?
        {
            return Ok(());
        }
        // The server closed without `response.completed`: release what the guards clear.
        self.finish_parts(sender).await?;
        Ok(())
    }

    /// Handles one event; `false` when the reader is gone or the stream is done.
    async fn dispatch(&mut self, event: Event, sender: &Sender) -> Result<bool, Failure> {
        let Some(data) = event.data else {
            return Ok(true);
        };
        if data == "[DONE]" {
            self.finish_parts(sender).await?;
            send(sender, event.name.as_deref(), &data).await;
            return Ok(false);
        }
        let mut event = match serde_json::from_str::<Value>(&data) {
            Ok(Value::Object(event)) if event.get("type").is_some_and(Value::is_string) => event,
            // The server's error event: the reader sees it as it is.
            Ok(Value::Object(other)) if other.contains_key("error") => {
                return Ok(send(sender, event.name.as_deref(), &data).await);
            }
            // Anything else could carry text no policy has seen: the stream ends here.
            _ => {
                return Err(Failure::Guard(error::GuardError::Body {
                    problem: "the stream carries an event that is not a Responses API event"
                        .to_owned(),
                }));
            }
        };
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let output_index = event.get("output_index").and_then(Value::as_u64);
        let of_held_item = output_index.is_some_and(|index| self.held_items.contains(&index));
        if HELD_PIECES.contains(&kind.as_str())
            || (of_held_item && kind != "response.output_item.done")
        {
            // A piece of a held item: released whole when the item is done.
            return Ok(true);
        }
        match kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(id) = event
                    .get("response")
                    .and_then(|value| value.get("id"))
                    .and_then(Value::as_str)
                {
                    self.metadata
                        .extra
                        .insert("response_id".to_owned(), Value::from(id));
                }
                // Items a snapshot already carries are checked whole.
                let output = event
                    .get_mut("response")
                    .and_then(|value| value.get_mut("output"));
                if let Some(Value::Array(output)) = output {
                    self.settle_output(output).await?;
                }
                Ok(self.emit(sender, event).await)
            }
            "response.output_item.added" => {
                let index = output_index.ok_or_else(|| without_index(&kind))?;
                let item = event.get_mut("item").ok_or_else(|| without_item(&kind))?;
                if response::item_kind(item)? != ItemKind::Text {
                    // A call, or a hosted tool's item: held until it is done.
                    self.held_items.insert(index);
                    return Ok(true);
                }
                // Text reaches the reader through the deltas, once cleared.
                response::text_parts(item)?;
                for area in [Area::Content, Area::Summary] {
                    if let Some(Value::Array(parts)) = item.get_mut(area.field()) {
                        parts.iter_mut().for_each(blank_part);
                    }
                }
                Ok(self.emit(sender, event).await)
            }
            "response.content_part.added" | "response.reasoning_summary_part.added" => {
                let area = part_area(&kind);
                let part = event.get_mut("part").ok_or_else(|| without_part(&kind))?;
                if TextKind::of_part(part).is_none_or(|text_kind| text_kind.area() != area) {
                    return Err(unknown_part(&kind));
                }
                blank_part(part);
                Ok(self.emit(sender, event).await)
            }
            "response.output_text.delta"
            | "response.refusal.delta"
            | "response.reasoning_summary_text.delta"
            | "response.reasoning_text.delta" => {
                let Some(text_kind) = text_event(&kind) else {
                    return Ok(self.emit(sender, event).await);
                };
                let key = part_key(&event, text_kind.area());
                let delta = event
                    .get("delta")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let released = self.push(key, text_kind, &delta).await?;
                if released.is_empty() {
                    return Ok(true);
                }
                event.insert("delta".to_owned(), Value::String(released));
                // The released pieces are not the upstream's: their tokens go with the whole
                // text, in its `…done` event, if the policies left it as it was.
                empty_logprobs(&mut event);
                Ok(self.emit(sender, event).await)
            }
            "response.output_text.done"
            | "response.refusal.done"
            | "response.reasoning_summary_text.done"
            | "response.reasoning_text.done" => {
                let Some(text_kind) = text_event(&kind) else {
                    return Ok(self.emit(sender, event).await);
                };
                let field = text_kind.field();
                let key = part_key(&event, text_kind.area());
                let whole = event.get(field).and_then(Value::as_str).map(str::to_owned);
                let released = self
                    .finish_part(key, text_kind, whole.as_deref(), &event, sender)
                    .await?;
                if whole.as_deref() != Some(released.as_str()) {
                    empty_logprobs(&mut event);
                }
                event.insert(field.to_owned(), Value::String(released));
                Ok(self.emit(sender, event).await)
            }
            "response.content_part.done" | "response.reasoning_summary_part.done" => {
                let area = part_area(&kind);
                let text_kind = event
                    .get("part")
                    .and_then(TextKind::of_part)
                    .filter(|text_kind| text_kind.area() == area)
                    .ok_or_else(|| unknown_part(&kind))?;
                let key = part_key(&event, area);
                let field = text_kind.field();
                let whole = event
                    .get("part")
                    .and_then(|part| part.get(field))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let released = self
                    .finish_part(key, text_kind, whole.as_deref(), &event, sender)
                    .await?;
                if let Some(part) = event.get_mut("part") {
                    if whole.as_deref() != Some(released.as_str()) {
                        response::drop_logprobs(part);
                    }
                    if let Some(part) = part.as_object_mut() {
                        part.insert(field.to_owned(), Value::String(released));
                    }
                    let metadata = part_metadata(&self.metadata, key, text_kind);
                    response::guard_annotations(self.settings, &metadata, part).await?;
                }
                Ok(self.emit(sender, event).await)
            }
            "response.output_item.done" => {
                let index = output_index.ok_or_else(|| without_index(&kind))?;
                let mut item = event.remove("item").ok_or_else(|| without_item(&kind))?;
                let item_kind = response::item_kind(&item)?;
                self.held_items.remove(&index);
                if item_kind != ItemKind::Text {
                    return self.release_held(index, item, item_kind, sender).await;
                }
                self.settle_item(index, &mut item, sender).await?;
                self.released_items.insert(index, item.clone());
                event.insert("item".to_owned(), item);
                Ok(self.emit(sender, event).await)
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.finish_parts(sender).await?;
                let output = event
                    .get_mut("response")
                    .and_then(|value| value.get_mut("output"));
                if let Some(Value::Array(output)) = output {
                    self.settle_output(output).await?;
                }
                Ok(self.emit(sender, event).await)
            }
            "error" => Ok(self.emit(sender, event).await),
            status if STATUS_EVENTS.contains(&status) => {
                // They say how far a hosted tool got, and nothing else goes with them.
                event.retain(|key, _| STATUS_FIELDS.contains(&key.as_str()));
                Ok(self.emit(sender, event).await)
            }
            "response.audio.transcript.delta" => {
                let delta = event
                    .get("delta")
                    .and_then(Value::as_str)
                    .ok_or_else(|| without_text(&kind))?
                    .to_owned();
                let released = self.push(TRANSCRIPT, TextKind::Transcript, &delta).await?;
                self.audio.transcript_sent.push_str(&delta);
                if released.is_empty() {
                    return Ok(true);
                }
                event.insert("delta".to_owned(), Value::String(released));
                Ok(self.emit(sender, event).await)
            }
            "response.audio.transcript.done" => {
                let released = self
                    .finish_part(TRANSCRIPT, TextKind::Transcript, None, &Map::new(), sender)
                    .await?;
                self.audio.transcript_kept = Some(released == self.audio.transcript_sent);
                if !self.emit(sender, event).await {
                    return Ok(false);
                }
                self.release_audio(sender).await
            }
            "response.audio.delta" => {
                // The audio speaks what its transcript said before the policies saw it: held
                // until the transcript is done, released only if they left it as it was.
                let data = event
                    .get("delta")
                    .and_then(Value::as_str)
                    .ok_or_else(|| without_text(&kind))?;
                self.audio.data.push_str(data);
                Ok(true)
            }
            "response.audio.done" => {
                self.audio.done = Some(event);
                self.release_audio(sender).await
            }
            _ => Err(Failure::Guard(error::GuardError::Body {
                problem: format!(
                    "the stream carries an event of type {kind:?}, which the guard does not know; what the policies cannot read is not released"
                ),
            })),
        }
    }

    /// Writes the held audio of the answer once its transcript is done and its `done` event
    /// came: its data in one delta when the policies left the transcript as it was, else
    /// none of it.
    async fn release_audio(&mut self, sender: &Sender) -> Result<bool, Failure> {
        let Some(kept) = self.audio.transcript_kept else {
            return Ok(true);
        };
        let Some(done) = self.audio.done.take() else {
            return Ok(true);
        };
        let data = std::mem::take(&mut self.audio.data);
        if kept && !data.is_empty() {
            let delta = json!({ "type": "response.audio.delta", "delta": data });
            if let Value::Object(delta) = delta
                && !self.emit(sender, delta).await
            {
                return Ok(false);
            }
        }
        Ok(self.emit(sender, done).await)
    }

    /// Writes one event, numbered in order; `false` when the reader is gone.
    async fn emit(&mut self, sender: &Sender, mut event: Map<String, Value>) -> bool {
        if event.contains_key("sequence_number") || event.contains_key("type") {
            event.insert("sequence_number".to_owned(), Value::from(self.sequence));
            self.sequence += 1;
        }
        let name = event.get("type").and_then(Value::as_str).map(str::to_owned);
        send(sender, name.as_deref(), &Value::Object(event).to_string()).await
    }

    /// The part's state, its guard opened with the part's metadata (`output_index`,
    /// `content_index` or `summary_index`, `text_kind`) when it is new.
    fn open(&mut self, key: PartKey, kind: TextKind) -> &mut Part<'e> {
        let engine = self.engine;
        let metadata = &self.metadata;
        self.parts.entry(key).or_insert_with(|| Part {
            guard: Some(engine.output_stream(part_metadata(metadata, key, kind))),
            kind,
            released: String::new(),
        })
    }

    /// Pushes a text delta through its part's guard; returns what it releases.
    async fn push(&mut self, key: PartKey, kind: TextKind, delta: &str) -> Result<String, Failure> {
        let part = self.open(key, kind);
        let Some(guard) = part.guard.as_mut() else {
            // The part is done; text after that is not released.
            return Ok(String::new());
        };
        let released = collect(guard.push(delta).await)?;
        part.released.push_str(&released);
        Ok(released)
    }

    /// Ends a part's guard, writing what it still releases as one more delta event (shaped
    /// after `like`); returns the part's whole released text. A part that had no deltas is
    /// checked whole, from `whole`.
    async fn finish_part(
        &mut self,
        key: PartKey,
        kind: TextKind,
        whole: Option<&str>,
        like: &Map<String, Value>,
        sender: &Sender,
    ) -> Result<String, Failure> {
        let fresh = !self.parts.contains_key(&key);
        let part = self.open(key, kind);
        let kind = part.kind;
        let Some(mut guard) = part.guard.take() else {
            return Ok(part.released.clone());
        };
        let mut tail = String::new();
        if fresh && let Some(whole) = whole {
            tail.push_str(&collect(guard.push(whole).await)?);
        }
        tail.push_str(&collect(guard.finish().await)?);
        part.released.push_str(&tail);
        let released = part.released.clone();
        if !tail.is_empty() && !fresh {
            let mut delta = Map::new();
            delta.insert("type".to_owned(), Value::from(kind.delta_event()));
            if let Some(id) = like.get("item_id") {
                delta.insert("item_id".to_owned(), id.clone());
            }
            if kind != TextKind::Transcript {
                delta.insert("output_index".to_owned(), Value::from(key.0));
                delta.insert(key.1.index_key().to_owned(), Value::from(key.2));
            }
            delta.insert("delta".to_owned(), Value::String(tail));
            self.emit(sender, delta).await;
        }
        Ok(released)
    }

    /// Ends every part still open (the upstream ended early), releasing what is left.
    async fn finish_parts(&mut self, sender: &Sender) -> Result<(), Failure> {
        let open: Vec<(PartKey, TextKind)> = self
            .parts
            .iter()
            .filter(|(_, part)| part.guard.is_some())
            .map(|(key, part)| (*key, part.kind))
            .collect();
        for (key, kind) in open {
            self.finish_part(key, kind, None, &Map::new(), sender)
                .await?;
        }
        Ok(())
    }

    /// Puts the released text into each text part of a finished message or reasoning item
    /// (see [`text_parts`]); a message item's text joins the answer's text.
    async fn settle_item(
        &mut self,
        index: u64,
        item: &mut Value,
        sender: &Sender,
    ) -> Result<(), Failure> {
        let answer = item.get("type").and_then(Value::as_str) == Some("message");
        // A delta the guard still releases is shaped like the item's own text events.
        let mut like = Map::new();
        if let Some(id) = item.get("id").filter(|id| id.is_string()) {
            like.insert("item_id".to_owned(), id.clone());
        }
        let mut text = String::new();
        for part in text_parts(item)? {
            let Some(slot) = part.in_item(item) else {
                continue;
            };
            let whole = slot
                .get(part.kind.field())
                .and_then(Value::as_str)
                .map(str::to_owned);
            let key = (index, part.area, part.index as u64);
            let released = self
                .finish_part(key, part.kind, whole.as_deref(), &like, sender)
                .await?;
            if answer {
                join(&mut text, &released);
            }
            part.forward(slot, released);
            let metadata = part_metadata(&self.metadata, key, part.kind);
            response::guard_annotations(self.settings, &metadata, slot).await?;
        }
        join(&mut self.text, &text);
        Ok(())
    }

    /// Evaluates a finished held item and writes it as a complete item: a call through the
    /// tool-call policies (the message item saying it was refused replaces a refused call),
    /// a hosted tool's item through the output policies (see
    /// [`response::guard_hosted_texts`]), written added, then done.
    async fn release_held(
        &mut self,
        index: u64,
        mut item: Value,
        kind: ItemKind,
        sender: &Sender,
    ) -> Result<bool, Failure> {
        let metadata = item_metadata(&self.metadata, index);
        let events = if kind == ItemKind::Hosted {
            response::guard_hosted_texts(self.settings, &metadata, &mut item).await?;
            whole_item_events(index, &item)
        } else {
            let verdict =
                response::evaluate_call_item(self.settings, &metadata, &mut item, &self.text)
                    .await?;
            match verdict {
                CallVerdict::NotACall => return Ok(true),
                CallVerdict::Allowed => call_events(index, &item),
                CallVerdict::Refused(refusal) => {
                    join(&mut self.text, &refusal);
                    message_events(index, &item, &refusal)
                }
            }
        };
        self.released_items.insert(index, item);
        for event in events {
            if let Value::Object(event) = event
                && !self.emit(sender, event).await
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The final `response.output`: each item as released, and any item the events did not
    /// carry evaluated whole.
    async fn settle_output(&mut self, output: &mut [Value]) -> Result<(), Failure> {
        let mut unseen = Vec::new();
        for (index, item) in output.iter_mut().enumerate() {
            match self.released_items.get(&(index as u64)) {
                Some(released) => *item = released.clone(),
                None => unseen.push(index),
            }
        }
        for &index in &unseen {
            let metadata = item_metadata(&self.metadata, index as u64);
            let text =
                response::guard_item_texts(self.settings, &metadata, &mut output[index]).await?;
            join(&mut self.text, &text);
        }
        for &index in &unseen {
            let metadata = item_metadata(&self.metadata, index as u64);
            response::guard_call_item(self.settings, &metadata, &mut output[index], &self.text)
                .await?;
        }
        Ok(())
    }
}

/// Empties the `logprobs` of a text event (see [`response::drop_logprobs`]).
fn empty_logprobs(event: &mut Map<String, Value>) {
    if let Some(logprobs) = event.get_mut("logprobs")
        && logprobs.is_array()
    {
        *logprobs = Value::Array(Vec::new());
    }
}

/// The part's text starts empty: it reaches the reader through its deltas; its annotations
/// and its tokens start empty too (its `done` events carry them, read).
fn blank_part(part: &mut Value) {
    let Some(part) = part.as_object_mut() else {
        return;
    };
    for field in ["text", "refusal"] {
        if part.get(field).is_some_and(Value::is_string) {
            part.insert(field.to_owned(), Value::from(""));
        }
    }
    for field in ["annotations", "logprobs"] {
        if part.get(field).is_some_and(|value| !value.is_null()) {
            part.insert(field.to_owned(), Value::Array(Vec::new()));
        }
    }
}

/// The part a text event is about: its output index, and its index in `area`.
fn part_key(event: &Map<String, Value>, area: Area) -> PartKey {
    let index = |key: &str| event.get(key).and_then(Value::as_u64).unwrap_or(0);
    (index("output_index"), area, index(area.index_key()))
}

/// The kind of text a `…delta` or `…done` text event carries.
fn text_event(kind: &str) -> Option<TextKind> {
    match kind {
        "response.output_text.delta" | "response.output_text.done" => Some(TextKind::OutputText),
        "response.refusal.delta" | "response.refusal.done" => Some(TextKind::Refusal),
        "response.reasoning_summary_text.delta" | "response.reasoning_summary_text.done" => {
            Some(TextKind::SummaryText)
        }
        "response.reasoning_text.delta" | "response.reasoning_text.done" => {
            Some(TextKind::ReasoningText)
        }
        _ => None,
    }
}

/// The id events use for an item: its `id`, else its `call_id`.
fn id_of(item: &Value) -> Value {
    item.get("id")
        .filter(|id| id.is_string())
        .or_else(|| item.get("call_id"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The events of a complete call item: added, its arguments (or input) in one delta, done.
/// The call of a built-in tool is added complete, then done: the events that stream its
/// command or diff are not written again.
fn call_events(index: u64, item: &Value) -> Vec<Value> {
    let id = id_of(item);
    let kind = item.get("type").and_then(Value::as_str);
    let (field, delta_kind, done_kind) = match kind {
        Some("function_call") => (
            "arguments",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
        ),
        Some("custom_tool_call") => (
            "input",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.done",
        ),
        _ => return whole_item_events(index, item),
    };
    let custom = kind == Some("custom_tool_call");
    let value = item.get(field).cloned().unwrap_or(Value::from(""));
    let mut added = item.clone();
    added[field] = Value::from("");
    added["status"] = Value::from("in_progress");
    let mut done = json!({
        "type": done_kind,
        "item_id": id,
        "output_index": index,
        field: value,
    });
    if !custom && let Some(name) = item.get("name") {
        done["name"] = name.clone();
    }
    vec![
        json!({ "type": "response.output_item.added", "output_index": index, "item": added }),
        json!({ "type": delta_kind, "item_id": id, "output_index": index, "delta": value }),
        done,
        json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
    ]
}

/// The events of an item released whole, with nothing streamed between: added complete (in
/// progress), then done.
fn whole_item_events(index: u64, item: &Value) -> Vec<Value> {
    let mut added = item.clone();
    added["status"] = Value::from("in_progress");
    vec![
        json!({ "type": "response.output_item.added", "output_index": index, "item": added }),
        json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
    ]
}

/// The events that stream a piece of a held item (a call's arguments, a command, a diff, a
/// hosted tool's code, arguments, output or partial image): the item is released whole when
/// it is done, and these are not written again. So is a citation added to a text part: the
/// part's `done` events carry its annotations, read.
const HELD_PIECES: [&str; 17] = [
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done",
    "response.shell_call_command.added",
    "response.shell_call_command.delta",
    "response.shell_call_command.done",
    "response.apply_patch_call_operation_diff.delta",
    "response.apply_patch_call_operation_diff.done",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.shell_call_output_content.delta",
    "response.shell_call_output_content.done",
    "response.image_generation_call.partial_image",
    "response.output_text.annotation.added",
];

/// The events that say how far a hosted tool got, and carry no text.
const STATUS_EVENTS: [&str; 18] = [
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.file_search_call.in_progress",
    "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.image_generation_call.in_progress",
    "response.image_generation_call.generating",
    "response.image_generation_call.completed",
    "response.mcp_call.in_progress",
    "response.mcp_call.completed",
    "response.mcp_call.failed",
    "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed",
];

/// The fields a status event keeps (see [`STATUS_EVENTS`]); the others go.
const STATUS_FIELDS: [&str; 4] = ["type", "item_id", "output_index", "sequence_number"];

/// The place of the audio transcript's guard among the parts: no output item holds it.
const TRANSCRIPT: PartKey = (u64::MAX, Area::Content, 0);

/// The audio of the answer, held until its transcript is done.
#[derive(Default)]
struct Audio {
    /// The data of its deltas, in order.
    data: String,
    /// Its `response.audio.done` event, once it came.
    done: Option<Map<String, Value>>,
    /// The transcript as the upstream sent it.
    transcript_sent: String,
    /// Once the transcript is done: whether the policies left it as it was.
    transcript_kept: Option<bool>,
}

/// The metadata of a part's texts: `output_index`, `content_index` or `summary_index`,
/// `text_kind` (only `text_kind` for the audio transcript, which no item holds).
fn part_metadata(metadata: &Metadata, key: PartKey, kind: TextKind) -> Metadata {
    if kind == TextKind::Transcript {
        return text_metadata(metadata, kind.name());
    }
    let mut metadata = text_metadata(&item_metadata(metadata, key.0), kind.name());
    metadata
        .extra
        .insert(key.1.index_key().to_owned(), Value::from(key.2));
    metadata
}

/// The list a `…part.added` or `…part.done` event's part lives in.
fn part_area(kind: &str) -> Area {
    if kind.starts_with("response.reasoning_summary_part.") {
        Area::Summary
    } else {
        Area::Content
    }
}

/// The error for an event the guard must place but cannot.
fn malformed(kind: &str, missing: &str) -> Failure {
    Failure::Guard(error::GuardError::Body {
        problem: format!(
            "a {kind} event of the stream has no {missing}; what the policies cannot read is not released"
        ),
    })
}

fn without_index(kind: &str) -> Failure {
    malformed(kind, "output_index")
}

fn without_item(kind: &str) -> Failure {
    malformed(kind, "item")
}

fn without_part(kind: &str) -> Failure {
    malformed(kind, "part")
}

fn without_text(kind: &str) -> Failure {
    malformed(kind, "delta string")
}

fn unknown_part(kind: &str) -> Failure {
    malformed(kind, "part of a type the guard knows")
}

/// The events of a one-part assistant message item saying `text`.
fn message_events(index: u64, item: &Value, text: &str) -> Vec<Value> {
    let id = id_of(item);
    let mut added = item.clone();
    added["content"] = json!([]);
    added["status"] = Value::from("in_progress");
    let empty = json!({ "type": "output_text", "text": "", "annotations": [] });
    let full = json!({ "type": "output_text", "text": text, "annotations": [] });
    let at = |kind: &str| json!({ "type": kind, "item_id": id, "output_index": index, "content_index": 0 });
    let mut part_added = at("response.content_part.added");
    part_added["part"] = empty;
    let mut delta = at("response.output_text.delta");
    delta["delta"] = Value::from(text);
    let mut text_done = at("response.output_text.done");
    text_done["text"] = Value::from(text);
    let mut part_done = at("response.content_part.done");
    part_done["part"] = full;
    vec![
        json!({ "type": "response.output_item.added", "output_index": index, "item": added }),
        part_added,
        delta,
        text_done,
        part_done,
        json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
    ]
}
