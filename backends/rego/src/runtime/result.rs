//! The result set of an evaluation, read by the host straight from guest memory and written as
//! the JSON OPA's `opa_json_dump` writes: the guest's dump (a buffer grown with its allocator,
//! an iteration that hashes every key again) costs more than the rest of a small evaluation.
//!
//! The layout of OPA's values (wasm32, little-endian) is not part of its ABI, so nothing here is
//! trusted before the guest has confirmed it: a walk reports which kinds of value it met, and
//! while a kind is new to the module the result is also dumped by the guest and the two are
//! compared ([`Walker`]). One disagreement and the module's results are read through the guest's
//! dump from then on. Anything the walk does not know (another number representation, a key that
//! is not a string, bytes that are not UTF-8, a structure deeper or larger than its budget, an
//! address outside memory) sends that one result through the guest's dump as well.
//!
//! | kind | layout |
//! |---|---|
//! | null (1) | `type` |
//! | boolean (2, interned 9) | `type`, `v: u8` at 1 |
//! | number (3) | `type`, `repr: u8` at 1; `repr` 1: `i64` at 8; `repr` 2: text `ptr` at 8, `len` at 12 |
//! | string (4, interned 8) | `type`, `len: u32` at 4, `ptr: u32` at 8 |
//! | array (5) | `type`, `elems: u32` at 4, `len: u32` at 8; an element is `(index, value)`, 8 bytes |
//! | object (6) | `type`, `buckets: u32` at 4, `n: u32` at 8; an element is `(key, value, next)` |
//! | set (7) | as an object; an element is `(value, next)`; written as an array |
//!
//! Objects and sets are written in the guest's order: bucket by bucket, each chain in order.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use portcullis_engine::json::write_string;

/// How many values a walk may visit before it gives the result to the guest's dump.
const BUDGET: usize = 1 << 16;
/// How deep a walk may go.
const MAX_DEPTH: usize = 128;

/// The bit of a kind of value met by a walk: the value's type, or a number's representation.
fn bit(kind: u32) -> u32 {
    1 << kind.min(31)
}
const NUMBER_INT: u32 = 16;
const NUMBER_REF: u32 = 17;

/// What a module's guest has confirmed about its value layout, shared by its instances.
#[derive(Debug, Default)]
pub(crate) struct Walker {
    /// The kinds whose layout the guest's dump has confirmed.
    confirmed: AtomicU32,
    /// Set when a walk and the guest's dump disagreed: the guest dumps every result.
    refused: AtomicBool,
}

/// How a result set is to be read.
pub(super) enum Reading {
    /// The walk's JSON can be used as it is.
    Trusted,
    /// The walk's JSON is complete but met kinds not confirmed yet (the bits): compare it with
    /// the guest's dump, then [`Walker::settle`].
    Unconfirmed(u32),
    /// The guest must dump this result.
    Guest,
}

impl Walker {
    /// Writes the value at `addr` of `memory` into `out` as JSON, and says how far to trust it.
    pub(super) fn read(&self, memory: &[u8], addr: u32, out: &mut Vec<u8>) -> Reading {
        if self.refused.load(Ordering::Relaxed) {
            return Reading::Guest;
        }
        out.clear();
        let mut walk = Walk {
            memory: Memory(memory),
            out,
            budget: BUDGET,
            seen: 0,
        };
        if walk.value(addr, 0).is_none() {
            return Reading::Guest;
        }
        let new = walk.seen & !self.confirmed.load(Ordering::Relaxed);
        if new == 0 {
            Reading::Trusted
        } else {
            Reading::Unconfirmed(new)
        }
    }

    /// The value at `addr` of `memory` for a reader in place, or `None` when the guest dumps
    /// every result of this module.
    pub(super) fn in_place<'a>(&self, memory: &'a [u8], addr: u32) -> Option<InPlace<'a>> {
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        Some(InPlace {
            memory: Memory(memory),
            addr,
            confirmed: self.confirmed.load(Ordering::Relaxed),
        })
    }

    /// Compares the walk's JSON (`ours`) with the guest's dump of the same value: equal, the
    /// kinds `seen` are confirmed; different, the guest dumps every result from now on.
    /// Returns whether they were equal.
    pub(super) fn settle(&self, seen: u32, ours: &[u8], guest: &[u8]) -> bool {
        let same = match (
            serde_json::from_slice::<serde_json::Value>(ours),
            serde_json::from_slice::<serde_json::Value>(guest),
        ) {
            // Written out again, so that the order of keys counts too.
            (Ok(ours), Ok(guest)) => {
                let (ours, guest) = (serde_json::to_vec(&ours), serde_json::to_vec(&guest));
                matches!((ours, guest), (Ok(ours), Ok(guest)) if ours == guest)
            }
            _ => false,
        };
        if same {
            self.confirmed.fetch_or(seen, Ordering::Relaxed);
        } else {
            self.refused.store(true, Ordering::Relaxed);
        }
        same
    }
}

/// The guest's memory, read with every address checked.
#[derive(Clone, Copy)]
struct Memory<'a>(&'a [u8]);

impl<'a> Memory<'a> {
    fn byte(self, addr: u32, offset: u32) -> Option<u8> {
        let at = usize::try_from(addr.checked_add(offset)?).ok()?;
        self.0.get(at).copied()
    }

    fn word(self, addr: u32, offset: u32) -> Option<u32> {
        let at = usize::try_from(addr.checked_add(offset)?).ok()?;
        let bytes = self.0.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    }

    fn bytes(self, addr: u32, len: u32) -> Option<&'a [u8]> {
        let start = usize::try_from(addr).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.0.get(start..end)
    }

    /// The text of the string value at `addr` (its kind already checked).
    fn text(self, addr: u32) -> Option<&'a str> {
        let (len, text) = (self.word(addr, 4)?, self.word(addr, 8)?);
        std::str::from_utf8(self.bytes(text, len)?).ok()
    }

    /// The members of the array, object or set (`kind` 5, 6 or 7) at `addr`; `None` for any
    /// other kind, or an address outside memory.
    fn members(self, kind: u8, addr: u32) -> Option<Members<'a>> {
        matches!(kind, 5..=7).then_some(())?;
        Some(Members {
            memory: self,
            kind,
            table: self.word(addr, 4)?,
            len: self.word(addr, 8)?,
            at: 0,
            element: 0,
        })
    }
}

/// The members of an array, object or set, in the guest's order (an array's by index, an
/// object's or a set's bucket by bucket, each chain in order): the addresses of each member's
/// key (0 in an array or a set) and value. An address outside memory is an item `None`.
struct Members<'a> {
    memory: Memory<'a>,
    kind: u8,
    /// The elements (an array) or the buckets (an object or a set).
    table: u32,
    /// How many elements or buckets.
    len: u32,
    /// The next element or bucket.
    at: u32,
    /// The next element of the current bucket's chain, 0 at its end.
    element: u32,
}

impl Members<'_> {
    /// How many buckets an object or a set has (0 for an array): the host reads them all.
    fn buckets(&self) -> u32 {
        if self.kind == 5 { 0 } else { self.len }
    }

    fn member(&mut self) -> Option<(u32, u32)> {
        if self.kind == 5 {
            let index = self.at - 1;
            return Some((
                0,
                self.memory
                    .word(self.table, index.checked_mul(8)?.checked_add(4)?)?,
            ));
        }
        let element = self.element;
        if self.kind == 6 {
            self.element = self.memory.word(element, 8)?;
            Some((self.memory.word(element, 0)?, self.memory.word(element, 4)?))
        } else {
            self.element = self.memory.word(element, 4)?;
            Some((0, self.memory.word(element, 0)?))
        }
    }
}

impl Iterator for Members<'_> {
    type Item = Option<(u32, u32)>;

    fn next(&mut self) -> Option<Option<(u32, u32)>> {
        if self.kind == 5 {
            if self.at == self.len {
                return None;
            }
            self.at += 1;
            return Some(self.member());
        }
        while self.element == 0 {
            if self.at == self.len {
                return None;
            }
            let bucket = self.at;
            self.at += 1;
            match bucket
                .checked_mul(4)
                .and_then(|offset| self.memory.word(self.table, offset))
            {
                Some(element) => self.element = element,
                None => return Some(None),
            }
        }
        Some(self.member())
    }
}

/// How many members [`InPlace::members`] visits before it gives up (`None`): a reader in place
/// expects a small value of a known shape.
const IN_PLACE_MEMBERS: usize = 64;

/// A value of the guest's memory, read in place by a reader that knows the shape it expects
/// (see [`Walker::in_place`]): only kinds of value the guest has confirmed are read, any other
/// kind (or an address outside memory) reads as `None`, and the reader goes the JSON way.
#[derive(Clone, Copy)]
pub(crate) struct InPlace<'a> {
    memory: Memory<'a>,
    addr: u32,
    confirmed: u32,
}

impl<'a> InPlace<'a> {
    /// The value's kind, when the guest has confirmed its layout.
    fn kind(self) -> Option<u8> {
        if self.addr == 0 {
            return None;
        }
        let kind = self.memory.byte(self.addr, 0)?;
        (self.confirmed & bit(u32::from(kind)) != 0).then_some(kind)
    }

    fn at(self, addr: u32) -> InPlace<'a> {
        InPlace { addr, ..self }
    }

    /// The value as a boolean, if it is one.
    pub(crate) fn as_bool(self) -> Option<bool> {
        match self.kind()? {
            2 | 9 => match self.memory.byte(self.addr, 1)? {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            },
            _ => None,
        }
    }

    /// The value as a string, if it is one (and UTF-8).
    pub(crate) fn as_str(self) -> Option<&'a str> {
        match self.kind()? {
            4 | 8 => self.memory.text(self.addr),
            _ => None,
        }
    }

    /// Visits the members of an array or a set (key `None`) or an object (its key), in the
    /// order the JSON walk writes them, and returns how many there are; `None` when the value
    /// is none of those, a key is not a string, a visit says `None`, or there are more than
    /// [`IN_PLACE_MEMBERS`].
    pub(crate) fn members(
        self,
        mut visit: impl FnMut(Option<&'a str>, InPlace<'a>) -> Option<()>,
    ) -> Option<usize> {
        let kind = self.kind()?;
        let members = self.memory.members(kind, self.addr)?;
        if usize::try_from(members.buckets()).ok()? > IN_PLACE_MEMBERS * 8 {
            return None;
        }
        let mut count = 0usize;
        for member in members {
            count += 1;
            if count > IN_PLACE_MEMBERS {
                return None;
            }
            let (key, value) = member?;
            let key = match kind {
                6 => Some(self.at(key).as_str()?),
                _ => None,
            };
            visit(key, self.at(value))?;
        }
        Some(count)
    }
}

struct Walk<'a> {
    memory: Memory<'a>,
    out: &'a mut Vec<u8>,
    budget: usize,
    seen: u32,
}

impl Walk<'_> {
    fn spend(&mut self) -> Option<()> {
        self.budget = self.budget.checked_sub(1)?;
        Some(())
    }

    fn value(&mut self, addr: u32, depth: usize) -> Option<()> {
        self.spend()?;
        if addr == 0 || depth > MAX_DEPTH {
            return None;
        }
        let kind = self.memory.byte(addr, 0)?;
        self.seen |= bit(u32::from(kind));
        match kind {
            1 => self.out.extend_from_slice(b"null"),
            2 | 9 => match self.memory.byte(addr, 1)? {
                0 => self.out.extend_from_slice(b"false"),
                1 => self.out.extend_from_slice(b"true"),
                _ => return None,
            },
            3 => self.number(addr)?,
            4 | 8 => self.string(addr)?,
            5..=7 => {
                let members = self.memory.members(kind, addr)?;
                // Every bucket of an object or a set is read, empty or not.
                self.budget = self
                    .budget
                    .checked_sub(usize::try_from(members.buckets()).ok()?)?;
                let (open, close) = if kind == 6 {
                    (b'{', b'}')
                } else {
                    (b'[', b']')
                };
                self.out.push(open);
                for (index, member) in members.enumerate() {
                    let (key, value) = member?;
                    if kind != 5 {
                        self.spend()?;
                    }
                    if index > 0 {
                        self.out.push(b',');
                    }
                    if kind == 6 {
                        if !matches!(self.memory.byte(key, 0)?, 4 | 8) {
                            return None;
                        }
                        self.value(key, depth + 1)?;
                        self.out.push(b':');
                    }
                    self.value(value, depth + 1)?;
                }
                self.out.push(close);
            }
            _ => return None,
        }
        Some(())
    }

    fn number(&mut self, addr: u32) -> Option<()> {
        match self.memory.byte(addr, 1)? {
            1 => {
                self.seen |= bit(NUMBER_INT);
                let low = self.memory.word(addr, 8)?;
                let high = self.memory.word(addr, 12)?;
                let value = (u64::from(high) << 32 | u64::from(low)) as i64;
                self.out.extend_from_slice(itoa(value).as_bytes());
            }
            2 => {
                self.seen |= bit(NUMBER_REF);
                let (text, len) = (self.memory.word(addr, 8)?, self.memory.word(addr, 12)?);
                let text = self.memory.bytes(text, len)?;
                // The text of a JSON number, or something this walk does not know.
                let plausible = matches!(text.first(), Some(b'-' | b'0'..=b'9'))
                    && text
                        .iter()
                        .all(|byte| matches!(byte, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'));
                if !plausible {
                    return None;
                }
                self.out.extend_from_slice(text);
            }
            _ => return None,
        }
        Some(())
    }

    fn string(&mut self, addr: u32) -> Option<()> {
        let text = self.memory.text(addr)?;
        write_string(self.out, text);
        Some(())
    }
}

/// An `i64` in decimal, without allocating.
struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

fn itoa(value: i64) -> Decimal {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        digits[at] = b'-';
    }
    Decimal { digits, start: at }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        for value in [0, 7, -7, 10, 1234567890, i64::MAX, i64::MIN] {
            assert_eq!(
                std::str::from_utf8(itoa(value).as_bytes()),
                Ok(value.to_string().as_str())
            );
        }
    }
}
