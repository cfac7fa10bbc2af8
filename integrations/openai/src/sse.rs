//! Server-sent events: reading them from the upstream's body and writing them to the reader.

use std::io;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::GuardError;

/// The channel a guarded stream writes its events to.
pub(crate) type Sender = mpsc::Sender<Result<Bytes, io::Error>>;

/// One event: its `event` name and its `data` lines, joined by newlines.
#[derive(Debug, Default)]
pub(crate) struct Event {
    pub(crate) name: Option<String>,
    pub(crate) data: Option<String>,
}

/// Puts events back together from body chunks split anywhere (LF or CRLF line ends).
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    pending: Vec<u8>,
    event: Event,
}

impl EventReader {
    /// Adds a chunk of the body; returns the events it completes.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, GuardError> {
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
