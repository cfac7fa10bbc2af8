//! Server-sent events: reading them from the upstream's body and writing them to the reader.

use std::io;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;

use crate::error::GuardError;

/// The channel a guarded stream writes its events to.
pub(crate) type Sender = mpsc::Sender<Result<Bytes, io::Error>>;

/// The upstream's body, chunk by chunk.
pub(crate) type Upstream<E> = Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>;

/// Reads the next chunk of the upstream's body; a failure to read it is a [`GuardError::Body`],
/// and so is the reader going away meanwhile (the guard then stops, dropping the upstream's
/// connection, even while the upstream is silent).
pub(crate) async fn next_chunk<E: std::fmt::Display>(
    upstream: &mut Upstream<E>,
    sender: &Sender,
) -> Result<Option<Bytes>, GuardError> {
    use futures_util::StreamExt;
    let next = tokio::select! {
        next = upstream.next() => next,
        () = sender.closed() => {
            return Err(GuardError::Body {
                problem: "the reader went away".to_owned(),
            });
        }
    };
    match next {
        Some(Ok(bytes)) => Ok(Some(bytes)),
        Some(Err(problem)) => Err(GuardError::Body {
            problem: problem.to_string(),
        }),
        None => Ok(None),
    }
}

/// One event: its `event` name and its `data` lines, joined by newlines.
#[derive(Debug, Default)]
pub(crate) struct Event {
    pub(crate) name: Option<String>,
    pub(crate) data: Option<String>,
}

/// Puts events back together from body chunks split anywhere (LF or CRLF line ends).
#[derive(Debug)]
pub(crate) struct EventReader {
    pending: Vec<u8>,
    event: Event,
    /// Bytes of the event being read (its lines so far and the pending line).
    size: usize,
    /// The largest event accepted.
    limit: usize,
}

impl EventReader {
    /// A reader refusing events larger than `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        EventReader {
            pending: Vec::new(),
            event: Event::default(),
            size: 0,
            limit,
        }
    }

    /// Adds a chunk of the body; returns the events it completes.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, GuardError> {
        self.size += bytes.len();
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8(line).map_err(|problem| GuardError::Body {
                problem: format!("the event stream is not UTF-8: {problem}"),
            })?;
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                events.push(std::mem::take(&mut self.event));
                self.size = self.pending.len();
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            match field {
                "data" => match &mut self.event.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.event.data = Some(value.to_owned()),
                },
                "event" => self.event.name = Some(value.to_owned()),
                _ => {}
            }
        }
        if self.size > self.limit {
            return Err(GuardError::Body {
                problem: format!("an event of the stream is larger than {} bytes", self.limit),
            });
        }
        Ok(events)
    }

    /// The event the body ended in without its blank line, if it has data.
    pub(crate) fn finish(self) -> Option<Event> {
        self.event.data.is_some().then_some(self.event)
    }
}

/// Sends one event; `false` when the reader is gone.
pub(crate) async fn send(sender: &Sender, name: Option<&str>, data: &str) -> bool {
    let mut event = String::with_capacity(data.len() + 16);
    if let Some(name) = name {
        event.push_str("event: ");
        event.push_str(name);
        event.push('\n');
    }
    for line in data.split('\n') {
        event.push_str("data: ");
        event.push_str(line);
        event.push('\n');
    }
    event.push('\n');
    sender.send(Ok(Bytes::from(event))).await.is_ok()
}
