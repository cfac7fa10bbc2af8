//! Streamed runs: the text the reader sees goes through the engine's streaming output guard.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::{FutureExt, StreamExt};
use portcullis_engine::{
    EngineError, Metadata, OutputStream, PolicyEngine, StreamItem, StreamItems,
};
use rig_agent::Agent;
use rig_agent::agent::{MultiTurnStreamItem, StreamingResult};
use rig_agent::run::PromptError;
use rig_agent::streaming::{Item, Part, StreamEvent};
use rig_core::message::{AssistantContent, Message};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::PortcullisHook;
use crate::stop::stop_reason;

/// Items in flight between the guard and the reader.
const CHANNEL_CAPACITY: usize = 16;

/// Numbers the streams of this process, for their default session ids.
static STREAMS: AtomicU64 = AtomicU64::new(0);

impl PortcullisHook {
    /// Guards the text of a streamed run (`agent.prompt(..).stream()`): each text delta goes
    /// through the engine's streaming output guard ([`PolicyEngine::output_stream`]), one
    /// guard per text part of a model turn, so the reader only sees text the output policies
    /// cleared (redacted where a streaming rule replaces it; held back while a match may
    /// still be forming).
    ///
    /// The provider's own payload of each completion call (`CompletionCall::raw`, also in the
    /// final response) holds the text as the model wrote it, before any policy: the guarded
    /// stream replaces it with `null`.
    ///
    /// A denial, or an output policy that cannot be evaluated, ends the stream with
    /// `PromptError::Cancelled` ([`denial`](crate::denial) reads it) before the offending
    /// text, and drops the run's stream, which stops the run: no further model call or tool
    /// runs. A text part's `End` carries the released text, so the turn the reader rebuilds
    /// is the one it saw.
    ///
    /// The hook itself still guards the run as it does an awaited one (input, tool calls,
    /// each finished turn), so add it to the agent as well.
    ///
    /// The guard's audit records carry `agent_id` ([`PortcullisHook::agent_id`], else
    /// `rig-agent`; [`stream_prompt`](Self::stream_prompt) knows the agent's name), `session_id` ([`PortcullisHook::session_id`], else `rig-stream-N`, N
    /// counting the streams of the process) and `extra`: `framework: "rig"`,
    /// `streamed: true`, `turn` (counted from 1 by the stream's completion calls) and
    /// `part` (the text part's position in the turn).
    pub fn guard_stream(&self, stream: StreamingResult) -> StreamingResult {
        self.guard(stream, None)
    }

    /// Starts a streamed run of `agent` on `prompt` (`agent.prompt(prompt).stream()`) and
    /// guards it as [`guard_stream`](Self::guard_stream) does; the audit records' agent id
    /// defaults to the agent's name, as in awaited runs.
    pub fn stream_prompt(&self, agent: &Agent, prompt: impl Into<Message>) -> StreamingResult {
        self.guard(agent.prompt(prompt).stream(), agent.name())
    }

    fn guard(&self, stream: StreamingResult, agent_name: Option<&str>) -> StreamingResult {
        let engine = Arc::clone(&self.engine);
        let session_id = self.session_id.clone().unwrap_or_else(|| {
            format!("rig-stream-{}", STREAMS.fetch_add(1, Ordering::Relaxed) + 1)
        });
        let agent_id = self
            .agent_id
            .as_deref()
            .or(agent_name)
            .unwrap_or("rig-agent");
        let metadata = Metadata::new(agent_id, session_id)
            .with_extra("framework", "rig")
            .with_extra("streamed", true);
        let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let driver = async move {
            let mut guard = TextGuard {
                engine: &engine,
                metadata,
                turn: 1,
                parts: BTreeMap::new(),
            };
            guard.run(stream, &sender).await;
        };
        let items = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        });
        // The driver yields nothing itself; it ends after its last item is sent.
        let driver = driver.into_stream().filter_map(|()| async { None });
        Box::pin(futures_util::stream::select(items, driver))
    }
}

type Sender = mpsc::Sender<Result<MultiTurnStreamItem, PromptError>>;

/// Why a guard stops the stream: the reason of the run's cancellation.
type Stop = String;

fn cancelled(reason: Stop) -> PromptError {
    PromptError::cancelled(Vec::new(), reason)
}

/// One text part's guard and the text it released.
struct TextPart<'e> {
    part: Part,
    guard: Option<OutputStream<'e>>,
    released: String,
}

struct TextGuard<'e> {
    engine: &'e PolicyEngine,
    metadata: Metadata,
    turn: usize,
    parts: BTreeMap<usize, TextPart<'e>>,
}

impl<'e> TextGuard<'e> {
    /// Reads the run's stream to its end, or until the reader is gone or a guard stops it.
    async fn run(&mut self, mut stream: StreamingResult, sender: &Sender) {
        while let Some(item) = stream.next().await {
            let items = match item {
                Ok(item) => self.item(item).await.map_err(cancelled),
                Err(error) => Err(error),
            };
            match items {
                Ok(items) => {
                    for item in items {
                        if sender.send(Ok(item)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(error) => {
                    // Dropping the run's stream stops the run.
                    drop(stream);
                    let _ = sender.send(Err(error)).await;
                    return;
                }
            }
        }
        match self.finish_parts().await.map_err(cancelled) {
            Ok(items) => {
                for item in items {
                    if sender.send(Ok(item)).await.is_err() {
                        return;
                    }
                }
            }
            Err(error) => {
                let _ = sender.send(Err(error)).await;
            }
        }
    }

    /// What the reader gets for one item of the run.
    async fn item(&mut self, item: MultiTurnStreamItem) -> Result<Vec<MultiTurnStreamItem>, Stop> {
        match item {
            MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text {
                part,
                text,
            })) => {
                let released = self.push(part, &text).await?;
                Ok(text_item(part, released).into_iter().collect())
            }
            MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::End {
                part,
                content: AssistantContent::Text(mut text),
            })) => {
                let (tail, released) = self.finish_part(part, Some(&text.text)).await?;
                text.text = released;
                let end = MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::End {
                    part,
                    content: AssistantContent::Text(text),
                }));
                Ok(text_item(part, tail).into_iter().chain([end]).collect())
            }
            MultiTurnStreamItem::StreamAssistantItem(item) => {
                Ok(vec![MultiTurnStreamItem::StreamAssistantItem(item)])
            }
            MultiTurnStreamItem::ModelTurnRetried { turn } => {
                // The turn's text was provisional; the next attempt starts afresh.
                self.parts.clear();
                Ok(vec![MultiTurnStreamItem::ModelTurnRetried { turn }])
            }
            other => {
                // The turn is over: what its guards still hold comes first.
                let mut items = self.finish_parts().await?;
                let other = match other {
                    MultiTurnStreamItem::CompletionCall(mut call) => {
                        self.turn += 1;
                        self.parts.clear();
                        call.raw = Value::Null;
                        MultiTurnStreamItem::CompletionCall(call)
                    }
                    MultiTurnStreamItem::FinalResponse(mut response) => {
                        for call in &mut response.completion_calls {
                            call.raw = Value::Null;
                        }
                        MultiTurnStreamItem::FinalResponse(response)
                    }
                    other => other,
                };
                items.push(other);
                Ok(items)
            }
        }
    }

    fn open(&mut self, part: Part) -> &mut TextPart<'e> {
        let engine = self.engine;
        let mut metadata = self.metadata.clone();
        metadata
            .extra
            .insert("turn".to_owned(), Value::from(self.turn));
        metadata
            .extra
            .insert("part".to_owned(), Value::from(part.index()));
        self.parts.entry(part.index()).or_insert_with(|| TextPart {
            part,
            guard: Some(engine.output_stream(metadata)),
            released: String::new(),
        })
    }

    async fn push(&mut self, part: Part, text: &str) -> Result<String, Stop> {
        let state = self.open(part);
        let Some(guard) = state.guard.as_mut() else {
            // The part ended; text after its end is not released.
            return Ok(String::new());
        };
        let released = collect(guard.push(text).await)?;
        state.released.push_str(&released);
        Ok(released)
    }

    /// Ends a part's guard: what it still releases, and the part's whole released text. A
    /// part that streamed no delta is checked whole, from `whole`.
    async fn finish_part(
        &mut self,
        part: Part,
        whole: Option<&str>,
    ) -> Result<(String, String), Stop> {
        let fresh = !self.parts.contains_key(&part.index());
        let state = self.open(part);
        let Some(mut guard) = state.guard.take() else {
            return Ok((String::new(), state.released.clone()));
        };
        let mut tail = String::new();
        if fresh && let Some(whole) = whole {
            tail.push_str(&collect(guard.push(whole).await)?);
        }
        tail.push_str(&collect(guard.finish().await)?);
        state.released.push_str(&tail);
        Ok((tail, state.released.clone()))
    }

    /// Ends every open part, as text items of what they still release.
    async fn finish_parts(&mut self) -> Result<Vec<MultiTurnStreamItem>, Stop> {
        let open: Vec<Part> = self
            .parts
            .values()
            .filter(|state| state.guard.is_some())
            .map(|state| state.part)
            .collect();
        let mut items = Vec::new();
        for part in open {
            let (tail, _) = self.finish_part(part, None).await?;
            items.extend(text_item(part, tail));
        }
        Ok(items)
    }
}

/// A text item, unless the text is empty.
fn text_item(part: Part, text: String) -> Option<MultiTurnStreamItem> {
    (!text.is_empty()).then(|| {
        MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text { part, text }))
    })
}

/// The released text of a guard's items, or the stop its denial or error is.
fn collect(items: StreamItems) -> Result<String, Stop> {
    let mut text = String::new();
    for item in items {
        match item {
            StreamItem::Text(released) => text.push_str(&released),
            StreamItem::Denied(denial) => return Err(stop_reason(EngineError::Denied(denial))),
            StreamItem::Error(error) => return Err(stop_reason(EngineError::Evaluation(error))),
            StreamItem::ApprovalRequired(request) => {
                return Err(stop_reason(EngineError::ApprovalRequired(request)));
            }
        }
    }
    Ok(text)
}
