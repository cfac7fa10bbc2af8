//! What a push or the end of a stream yields: [`StreamItems`], at most one [`StreamItem`], whose
//! text is a [`StreamText`]. Neither allocates for the few bytes a push usually releases.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use arrayvec::ArrayString;

use crate::approval::ApprovalRequest;
use crate::error::{EngineError, PolicyDenialError, PolicyEvaluationError};

/// What a push or the end of a stream yields.
#[derive(Debug)]
pub enum StreamItem {
    /// Checked text, to release to the reader.
    Text(StreamText),
    /// A policy denied the answer; nothing more is released.
    Denied(PolicyDenialError),
    /// A policy could not be evaluated; nothing more is released.
    Error(PolicyEvaluationError),
    /// An output policy escalated and no approval came (see
    /// [`EngineError::ApprovalRequired`]); nothing more is released.
    ApprovalRequired(Box<ApprovalRequest>),
}

impl StreamItem {
    /// The released text, or why the stream stopped, as the error the non-streaming
    /// evaluation would give.
    pub fn into_text(self) -> Result<String, EngineError> {
        match self {
            StreamItem::Text(text) => Ok(text.into_string()),
            StreamItem::Denied(denial) => Err(EngineError::Denied(denial)),
            StreamItem::Error(error) => Err(EngineError::Evaluation(error)),
            StreamItem::ApprovalRequired(request) => Err(EngineError::ApprovalRequired(request)),
        }
    }
}

/// The items of one push, or of the end of a stream: the text it released, or why the stream
/// stopped, or nothing. There is never more than one, so the item is kept in place rather than
/// in a `Vec`: iterate over it (`for item in guard.push(delta).await`), or look at it as a
/// slice (`items.is_empty()`, `&items[..]`).
#[derive(Debug, Default)]
pub struct StreamItems(Option<StreamItem>);

impl StreamItems {
    /// The items of a call that released `text` (nothing when it is empty), or stopped with
    /// `error`.
    #[inline]
    pub(crate) fn of(result: Result<&str, EngineError>) -> Self {
        match result {
            Ok("") => StreamItems(None),
            Ok(text) => StreamItems(Some(StreamItem::Text(StreamText::from(text)))),
            Err(error) => StreamItems::stopped(error),
        }
    }

    /// The item of a call that stopped the stream.
    #[cold]
    fn stopped(error: EngineError) -> Self {
        StreamItems(Some(match error {
            EngineError::Denied(denial) => StreamItem::Denied(denial),
            EngineError::Evaluation(error) => StreamItem::Error(error),
            EngineError::ApprovalRequired(request) => StreamItem::ApprovalRequired(request),
        }))
    }

    /// The item, if there is one.
    pub fn into_item(self) -> Option<StreamItem> {
        self.0
    }

    /// The released text (empty when nothing was released), or why the stream stopped, as
    /// the error the non-streaming evaluation would give.
    pub fn into_text(self) -> Result<String, EngineError> {
        self.0.map_or(Ok(String::new()), StreamItem::into_text)
    }
}

impl Deref for StreamItems {
    type Target = [StreamItem];

    fn deref(&self) -> &[StreamItem] {
        self.0.as_slice()
    }
}

impl IntoIterator for StreamItems {
    type Item = StreamItem;
    type IntoIter = std::option::IntoIter<StreamItem>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a StreamItems {
    type Item = &'a StreamItem;
    type IntoIter = std::slice::Iter<'a, StreamItem>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.as_slice().iter()
    }
}

impl From<StreamItems> for Vec<StreamItem> {
    fn from(items: StreamItems) -> Self {
        items.0.into_iter().collect()
    }
}

/// Text the guard released, owned. Up to [`StreamText::INLINE`] bytes (what a push usually
/// releases) are kept in place, longer text in a `String`: a push allocates only for long
/// text. It reads as a `&str` (`Deref`), compares with strings, and turns into a `String`
/// ([`into_string`](Self::into_string), `String::from`).
#[derive(Clone)]
pub struct StreamText(Repr);

#[derive(Clone)]
enum Repr {
    Inline(ArrayString<{ StreamText::INLINE }>),
    Heap(String),
}

impl StreamText {
    /// The most bytes kept in place.
    pub const INLINE: usize = 32;

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(text) => text,
            Repr::Heap(text) => text,
        }
    }

    /// The text as a `String` (allocating when it was kept in place).
    pub fn into_string(self) -> String {
        match self.0 {
            Repr::Inline(text) => text.as_str().to_owned(),
            Repr::Heap(text) => text,
        }
    }
}

impl From<&str> for StreamText {
    #[inline]
    fn from(text: &str) -> Self {
        match ArrayString::from(text) {
            Ok(inline) => StreamText(Repr::Inline(inline)),
            Err(_) => StreamText(Repr::Heap(text.to_owned())),
        }
    }
}

impl From<String> for StreamText {
    fn from(text: String) -> Self {
        if text.len() <= Self::INLINE {
            StreamText::from(text.as_str())
        } else {
            StreamText(Repr::Heap(text))
        }
    }
}

impl From<StreamText> for String {
    fn from(text: StreamText) -> Self {
        text.into_string()
    }
}

impl Deref for StreamText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for StreamText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for StreamText {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for StreamText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for StreamText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl PartialEq for StreamText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for StreamText {}

impl Hash for StreamText {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for StreamText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for StreamText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for StreamText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<StreamText> for str {
    fn eq(&self, other: &StreamText) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<StreamText> for &str {
    fn eq(&self, other: &StreamText) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<StreamText> for String {
    fn eq(&self, other: &StreamText) -> bool {
        self == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_in_place_and_long_text_on_the_heap() {
        for text in [
            "",
            "a",
            "héllo wörld",
            "漢字🚀",
            &"x".repeat(32),
            &"y".repeat(33),
        ] {
            let kept = StreamText::from(text);
            assert_eq!(kept, text);
            assert_eq!(kept.len(), text.len());
            assert_eq!(format!("{kept}"), text);
            assert_eq!(format!("{kept:?}"), format!("{text:?}"));
            assert_eq!(
                matches!(kept.0, Repr::Inline(_)),
                text.len() <= StreamText::INLINE
            );
            assert_eq!(kept.clone().into_string(), text);
            assert_eq!(StreamText::from(text.to_owned()), kept);
        }
    }

    #[test]
    fn items_hold_one_item_at_most() {
        let none = StreamItems::of(Ok(""));
        assert!(none.is_empty());
        assert_eq!(none.into_text().ok().as_deref(), Some(""));
        let text = StreamItems::of(Ok("released"));
        assert!(matches!(&text[..], [StreamItem::Text(t)] if t == "released"));
        assert_eq!(Vec::from(text).len(), 1);
    }
}
