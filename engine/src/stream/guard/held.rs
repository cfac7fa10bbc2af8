//! Counting the text the guard holds: the characters held back, the most ever held, and when
//! the first text was released, for the stream's audit records.

use crate::stream::report::StreamMode;

use super::OutputStream;

/// The characters of `text`; ASCII (most deltas) is checked a word at a time, much faster
/// than counting short text character by character.
pub(super) fn char_count(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// The characters of a growing text up to a position that moves a little at a time: counting
/// them up to a new position costs only the bytes between the two positions.
#[derive(Debug, Default)]
pub(super) struct CharsUpTo {
    at: usize,
    chars: usize,
}

impl CharsUpTo {
    /// The characters of `text[..at]` (`at` a character boundary, `text` only ever appended to
    /// since the last call).
    fn to(&mut self, text: &str, at: usize) -> usize {
        if at >= self.at {
            self.chars += char_count(&text[self.at..at]);
        } else {
            self.chars -= char_count(&text[at..self.at]);
        }
        self.at = at;
        self.chars
    }
}

impl<'e> OutputStream<'e> {
    /// [`note_held`](Self::note_held) in the fast lane, where the stages hold nothing: the
    /// call only when the text received and not released may set a record.
    #[inline(always)]
    pub(super) fn note_held_in_lane(&mut self) {
        if self.raw.len() - self.fed > self.max_held_chars {
            self.note_held();
        }
    }

    #[cold]
    pub(super) fn note_first_release(&mut self) {
        self.first_release = Some(self.started.elapsed());
    }

    /// Notes the time of the first release, if the text from `lent_from` on is it.
    pub(super) fn note_release(&mut self) {
        if !self.lent().is_empty() && self.first_release.is_none() {
            self.first_release = Some(self.started.elapsed());
        }
    }

    // Out of line: a new record is rare, and the fast paths that check for one stay small.
    #[inline(never)]
    pub(super) fn note_held(&mut self) {
        // Characters never outnumber bytes: count them only when the bytes could set a record.
        let held_bytes = match self.plan.mode {
            // The stages hold nothing in the fast lane.
            StreamMode::Incremental if self.in_lane => self.raw.len() - self.fed,
            StreamMode::Incremental => {
                let held: usize = self.stages.iter().map(|state| state.held().len()).sum();
                held + self.raw.len() - self.fed
            }
            _ => self.raw.len() - self.released_raw,
        };
        if held_bytes <= self.max_held_chars {
            return;
        }
        let held = match self.plan.mode {
            StreamMode::Incremental => {
                let staged: usize = self
                    .stages
                    .iter()
                    .map(|state| char_count(state.held()))
                    .sum();
                let received = self.counted_to_end.to(&self.raw, self.raw.len());
                staged + received - self.counted_to_fed.to(&self.raw, self.fed)
            }
            _ => self.held_chars(),
        };
        self.max_held_chars = self.max_held_chars.max(held);
    }
}
