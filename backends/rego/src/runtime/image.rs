//! The input document built by the host as the guest's own values, ready in guest memory: the
//! guest's JSON parser (a lexer, an allocation for every value, every key hashed and compared
//! into its bucket) is most of a small evaluation.
//!
//! The image is what OPA's parser would leave on a fresh heap: every value in a block of the
//! guest's allocator (a 12-byte header `size, prev, next` with the size rounded up to its class
//! of 4, 8, 16 or 64 bytes, the blocks one after another as its bump allocator lays them), the
//! values in the layouts `result` reads (see there), strings as copies the guest may free,
//! numbers as their text, array elements with their index as a number, and objects with as many
//! buckets as the guest's growth rule gives (8, doubled while the keys are more than 0.7 of
//! them), each key in bucket `hash % n` (OPA's 32-bit FNV hash of its bytes), each bucket sorted
//! by key. The guest cannot tell it from a parse.
//!
//! None of that is OPA's ABI, so a module gets images only after a probe (see
//! [`Image::probe_json`]) parsed by the guest and built by the host dumps the same JSON, byte for
//! byte, and the guest's allocator lays out blocks as above. The image is built from the input's
//! JSON as the host wrote it; an input it does not take (nesting deeper than [`MAX_DEPTH`],
//! a key twice in one object) is parsed by the guest as before.

use std::borrow::Cow;

/// How deep the image follows nesting; deeper inputs are parsed by the guest.
pub(crate) const MAX_DEPTH: usize = 64;

/// The size of a block header of the guest's allocator.
pub(super) const HEADER: u32 = 12;

/// The block size the guest's allocator gives a request of `size` bytes.
pub(super) fn class(size: u32) -> u32 {
    match size {
        0..=4 => 4,
        5..=8 => 8,
        9..=16 => 16,
        17..=64 => 64,
        _ => size,
    }
}

/// OPA's hash of a string's bytes (multiply, then xor, on 32 bits).
fn hash(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &byte| {
        hash.wrapping_mul(0x0100_0193) ^ u32::from(byte)
    })
}

/// The number of buckets of an object of `len` keys.
fn buckets(len: usize) -> u32 {
    // The guest doubles before inserting a key that would pass 0.7 of its buckets.
    let mut n: u32 = 8;
    while len as f64 > f64::from(n) * 0.7 {
        n = n.saturating_mul(2);
    }
    n
}

/// The key of an object's member, built (see [`Image::key`]).
#[derive(Clone, Copy)]
pub(crate) struct Key {
    /// The key's text block and length.
    key_text: u32,
    key_len: u32,
    /// The key's string value.
    key: u32,
    /// The key's hash (see [`hash`]).
    hash: u32,
    /// The key's first 8 bytes, big-endian and padded with zeros: keys compare as their
    /// prefixes first (an order that agrees with the keys' own), most without reading them.
    prefix: u64,
}

impl Key {
    /// The key of an array's element: none.
    const NONE: Key = Key {
        key_text: 0,
        key_len: 0,
        key: 0,
        hash: 0,
        prefix: 0,
    };
}

/// The first 8 bytes of `bytes` as a big-endian number, padded with zeros.
fn prefix(bytes: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    let len = bytes.len().min(8);
    first[..len].copy_from_slice(&bytes[..len]);
    u64::from_be_bytes(first)
}

/// One member of an array or object being built.
#[derive(Clone, Copy)]
struct Member {
    /// The key (objects only).
    key: Key,
    value: u32,
}

/// An input document laid out as guest values, for the address `base`.
pub(crate) struct Image {
    pub(super) bytes: Vec<u8>,
    base: u32,
    /// The members of the arrays and objects being built, innermost last.
    stack: Vec<Member>,
    /// Where the image holds addresses (byte offsets), for [`relocate`](Self::relocate); kept
    /// only for an image built for base 0.
    pointers: Vec<usize>,
    relocatable: bool,
}

impl Image {
    pub(super) fn new() -> Self {
        Self {
            bytes: Vec::new(),
            base: 0,
            stack: Vec::new(),
            pointers: Vec::new(),
            relocatable: false,
        }
    }

    /// Builds the values of `json` (the host's own JSON: compact, keys unique) for `base`, and
    /// returns the root's address; `None` when the JSON is not taken (see the module docs).
    pub(super) fn build(&mut self, json: &[u8], base: u32) -> Option<u32> {
        self.start(base);
        // About what the values of compact JSON take: no growth on the way for most inputs.
        self.bytes
            .reserve(json.len().saturating_mul(8).saturating_add(256));
        let mut reader = Reader { json, at: 0 };
        let root = self.value(&mut reader, 0)?;
        (reader.at == json.len()).then_some(root)
    }

    /// Starts an image for the address `base`, empty.
    pub(crate) fn start(&mut self, base: u32) {
        self.bytes.clear();
        self.stack.clear();
        self.pointers.clear();
        self.relocatable = base == 0;
        self.base = base;
    }

    /// Where the members of an array or object about to be built start (see
    /// [`end_array`](Self::end_array) and [`end_object`](Self::end_object)).
    pub(crate) fn mark(&self) -> usize {
        self.stack.len()
    }

    /// A string value: its address.
    pub(crate) fn str(&mut self, text: &str) -> Option<u32> {
        Some(self.string(text.as_bytes())?.0)
    }

    /// `null`, `true` or `false`.
    pub(crate) fn null(&mut self) -> Option<u32> {
        self.block(1, &[1])
    }

    /// `true` or `false`.
    pub(crate) fn boolean(&mut self, value: bool) -> Option<u32> {
        self.block(2, &[2, u8::from(value)])
    }

    /// A number written as `text` (JSON's syntax for it).
    pub(crate) fn number(&mut self, text: &[u8]) -> Option<u32> {
        let len = u32::try_from(text.len()).ok()?;
        // NUL-terminated, as the guest's parser copies it.
        let text = self.block(len.checked_add(1)?, text)?;
        // type 3, repr 2 (the number's text), text at 8, len at 12; not freed with it
        let mut content = [0u8; 64];
        content[0] = 3;
        content[1] = 2;
        content[8..12].copy_from_slice(&text.to_le_bytes());
        content[12..16].copy_from_slice(&len.to_le_bytes());
        let addr = self.fixed(content)?;
        self.note(addr, 8, text);
        Some(addr)
    }

    /// The key of the next member of an object, built before its value as the guest's parser
    /// builds it.
    pub(crate) fn key(&mut self, key: &str) -> Option<Key> {
        self.key_of(key.as_bytes())
    }

    fn key_of(&mut self, bytes: &[u8]) -> Option<Key> {
        let key_len = u32::try_from(bytes.len()).ok()?;
        let (key, key_text) = self.string(bytes)?;
        Some(Key {
            key_text,
            key_len,
            key,
            hash: hash(bytes),
            prefix: prefix(bytes),
        })
    }

    /// Adds a member (`key` from [`key`](Self::key), or `None` for an array's element) to the
    /// array or object being built.
    pub(crate) fn member(&mut self, key: Option<Key>, value: u32) {
        self.stack.push(Member {
            key: key.unwrap_or(Key::NONE),
            value,
        });
    }

    /// The address the image is built for.
    pub(super) fn base(&self) -> u32 {
        self.base
    }

    /// The address just past the image.
    pub(super) fn end(&self) -> Option<u32> {
        self.end_for(self.base)
    }

    /// A block of `size` bytes: the address of its data (zeroed).
    fn alloc(&mut self, size: u32) -> Option<u32> {
        self.block(size, &[])
    }

    /// A block of `size` bytes starting with `content` (the rest zeroed): the address of its
    /// data.
    #[inline]
    fn block(&mut self, size: u32, content: &[u8]) -> Option<u32> {
        const ZEROS: [u8; 64] = [0; 64];
        let class = class(size);
        let at = self.bytes.len();
        let data = self
            .base
            .checked_add(u32::try_from(at).ok()?)?
            .checked_add(HEADER)?;
        data.checked_add(class)?;
        if class <= 16 {
            // The common block (a short text, a small value): header and data in one copy of
            // a fixed size, then cut to the block's size.
            let mut block = [0u8; HEADER as usize + 16];
            block[..4].copy_from_slice(&class.to_le_bytes());
            block
                .get_mut(HEADER as usize..HEADER as usize + content.len())?
                .copy_from_slice(content);
            self.bytes.extend_from_slice(&block);
            self.bytes.truncate(at + HEADER as usize + class as usize);
            return Some(data);
        }
        let padding = (class as usize).checked_sub(content.len())?;
        let mut header = [0u8; HEADER as usize];
        header[..4].copy_from_slice(&class.to_le_bytes());
        self.bytes.extend_from_slice(&header);
        self.bytes.extend_from_slice(content);
        match ZEROS.get(..padding) {
            Some(zeros) => self.bytes.extend_from_slice(zeros),
            None => self.bytes.resize(at + HEADER as usize + class as usize, 0),
        }
        Some(data)
    }

    /// A block of a fixed-size value (`N` bytes, at most 64): one copy of header and content.
    #[inline]
    fn fixed<const N: usize>(&mut self, content: [u8; N]) -> Option<u32> {
        let class = class(u32::try_from(N).ok()?);
        if class as usize != N {
            return self.block(u32::try_from(N).ok()?, &content);
        }
        let at = self.bytes.len();
        let data = self
            .base
            .checked_add(u32::try_from(at).ok()?)?
            .checked_add(HEADER)?;
        data.checked_add(class)?;
        let mut header = [0u8; HEADER as usize];
        header[..4].copy_from_slice(&class.to_le_bytes());
        self.bytes.extend_from_slice(&header);
        self.bytes.extend_from_slice(&content);
        Some(data)
    }

    /// Notes the address held at `offset` in the block at `addr` for relocation (none when 0).
    fn note(&mut self, addr: u32, offset: u32, value: u32) {
        if self.relocatable && value != 0 {
            let at = self.offset(addr, offset);
            self.pointers.push(at);
        }
    }

    /// A value of 16 bytes or less: the kind, then `words` at 4, 8 and 12 (those marked in
    /// `addresses` are addresses).
    #[inline]
    fn small(&mut self, head: [u8; 4], words: [u32; 3], addresses: [bool; 3]) -> Option<u32> {
        let [a, b, c] = words;
        let [a0, a1, a2, a3] = a.to_le_bytes();
        let [b0, b1, b2, b3] = b.to_le_bytes();
        let [c0, c1, c2, c3] = c.to_le_bytes();
        let [h0, h1, h2, h3] = head;
        let content = [
            h0, h1, h2, h3, a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3,
        ];
        let addr = self.fixed(content)?;
        if self.relocatable {
            for (index, (word, address)) in words.into_iter().zip(addresses).enumerate() {
                if address {
                    self.note(addr, 4 + 4 * index as u32, word);
                }
            }
        }
        Some(addr)
    }

    fn offset(&self, addr: u32, offset: u32) -> usize {
        (addr - self.base + offset) as usize
    }

    fn put(&mut self, addr: u32, offset: u32, bytes: &[u8]) {
        let at = self.offset(addr, offset);
        self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn word(&mut self, addr: u32, offset: u32, value: u32) {
        self.put(addr, offset, &value.to_le_bytes());
    }

    /// Writes an address (none when 0), noting where for [`relocate`](Self::relocate).
    fn pointer(&mut self, addr: u32, offset: u32, value: u32) {
        self.word(addr, offset, value);
        self.note(addr, offset, value);
    }

    /// Moves the image to `base` (it was built for base 0): every address in it is offset.
    /// Returns the new root, or `None` when an address would not fit.
    pub(super) fn relocate(&mut self, root: u32, base: u32) -> Option<u32> {
        if self.base != 0 {
            return None;
        }
        self.end_for(base)?;
        for &at in &self.pointers {
            let mut word = [0; 4];
            word.copy_from_slice(&self.bytes[at..at + 4]);
            let moved = u32::from_le_bytes(word).checked_add(base)?;
            self.bytes[at..at + 4].copy_from_slice(&moved.to_le_bytes());
        }
        self.base = base;
        root.checked_add(base)
    }

    fn end_for(&self, base: u32) -> Option<u32> {
        base.checked_add(u32::try_from(self.bytes.len()).ok()?)
    }

    fn read_word(&self, addr: u32, offset: u32) -> u32 {
        let at = self.offset(addr, offset);
        let mut word = [0; 4];
        word.copy_from_slice(&self.bytes[at..at + 4]);
        u32::from_le_bytes(word)
    }

    /// A block holding `bytes`.
    fn text(&mut self, bytes: &[u8]) -> Option<u32> {
        self.block(u32::try_from(bytes.len()).ok()?, bytes)
    }

    /// A string value and its text block.
    fn string(&mut self, bytes: &[u8]) -> Option<(u32, u32)> {
        let text = self.text(bytes)?;
        let len = u32::try_from(bytes.len()).ok()?;
        // type 4, free 1 (the text is the string's own block), len, text
        let addr = self.small([4, 1, 0, 0], [len, text, 0], [false, true, false])?;
        Some((addr, text))
    }

    fn int(&mut self, value: u32) -> Option<u32> {
        // type 3, repr 1 (an integer), the i64 at 8
        // (24 bytes, in a block of 64)
        let mut content = [0u8; 64];
        content[0] = 3;
        content[1] = 1;
        content[8..16].copy_from_slice(&u64::from(value).to_le_bytes());
        self.fixed(content)
    }

    fn value(&mut self, reader: &mut Reader<'_>, depth: usize) -> Option<u32> {
        if depth > MAX_DEPTH {
            return None;
        }
        match reader.peek()? {
            b'n' => {
                reader.literal(b"null")?;
                self.null()
            }
            b't' | b'f' => {
                let value = reader.peek()? == b't';
                reader.literal(if value { b"true" } else { b"false" })?;
                self.boolean(value)
            }
            b'"' => {
                let bytes = reader.string()?;
                Some(self.string(&bytes)?.0)
            }
            b'-' | b'0'..=b'9' => {
                let text = reader.number();
                self.number(text)
            }
            b'[' => self.array(reader, depth),
            b'{' => self.object(reader, depth),
            _ => None,
        }
    }

    fn array(&mut self, reader: &mut Reader<'_>, depth: usize) -> Option<u32> {
        reader.at += 1;
        let mark = self.stack.len();
        if reader.peek()? == b']' {
            reader.at += 1;
        } else {
            loop {
                let value = self.value(reader, depth + 1)?;
                self.member(None, value);
                match reader.next()? {
                    b',' => {}
                    b']' => break,
                    _ => return None,
                }
            }
        }
        self.end_array(mark)
    }

    /// The array of the members added since `mark`.
    pub(crate) fn end_array(&mut self, mark: usize) -> Option<u32> {
        let len = u32::try_from(self.stack.len() - mark).ok()?;
        let elems = if len == 0 {
            0
        } else {
            let elems = self.alloc(len.checked_mul(8)?)?;
            for index in 0..len {
                let item = self.stack[mark + index as usize].value;
                let number = self.int(index)?;
                self.pointer(elems, index * 8, number);
                self.pointer(elems, index * 8 + 4, item);
            }
            elems
        };
        self.stack.truncate(mark);
        // type 5, elems, len, cap
        self.small([5, 0, 0, 0], [elems, len, len], [true, false, false])
    }

    fn object(&mut self, reader: &mut Reader<'_>, depth: usize) -> Option<u32> {
        reader.at += 1;
        let mark = self.stack.len();
        if reader.peek()? == b'}' {
            reader.at += 1;
        } else {
            loop {
                if reader.peek()? != b'"' {
                    return None;
                }
                let key = reader.string()?;
                let key = self.key_of(&key)?;
                if reader.next()? != b':' {
                    return None;
                }
                let value = self.value(reader, depth + 1)?;
                self.member(Some(key), value);
                match reader.next()? {
                    b',' => {}
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        self.end_object(mark)
    }

    /// The object of the members added since `mark`, or `None` when a key is there twice.
    pub(crate) fn end_object(&mut self, mark: usize) -> Option<u32> {
        let len = self.stack.len() - mark;
        let n = buckets(len);
        let table = self.alloc(n.checked_mul(4)?)?;
        {
            let (stack, bytes, base) = (&mut self.stack, &self.bytes, self.base);
            let text = |key: &Key| {
                let at = (key.key_text - base) as usize;
                &bytes[at..at + key.key_len as usize]
            };
            // The prefixes decide most comparisons; equal ones, the whole keys.
            let order = |a: &Member, b: &Member| {
                a.key
                    .prefix
                    .cmp(&b.key.prefix)
                    .then_with(|| text(&a.key).cmp(text(&b.key)))
            };
            let members = &mut stack[mark..];
            members.sort_unstable_by(order);
            if members
                .windows(2)
                .any(|pair| order(&pair[0], &pair[1]).is_eq())
            {
                return None;
            }
        }
        // Each bucket's chain in key order: link from the last key back.
        for index in (mark..self.stack.len()).rev() {
            let Member { key, value } = self.stack[index];
            let bucket = key.hash % n;
            let head = self.read_word(table, bucket * 4);
            // (12 bytes, in a block of 16)
            let mut content = [0u8; 16];
            content[..4].copy_from_slice(&key.key.to_le_bytes());
            content[4..8].copy_from_slice(&value.to_le_bytes());
            content[8..12].copy_from_slice(&head.to_le_bytes());
            let element = self.fixed(content)?;
            self.note(element, 0, key.key);
            self.note(element, 4, value);
            self.note(element, 8, head);
            self.word(table, bucket * 4, element);
        }
        if self.relocatable {
            for bucket in 0..n {
                let head = self.read_word(table, bucket * 4);
                self.note(table, bucket * 4, head);
            }
        }
        self.stack.truncate(mark);
        // type 6, buckets, n, len
        let len = u32::try_from(len).ok()?;
        self.small([6, 0, 0, 0], [table, n, len], [true, false, false])
    }

    /// JSON exercising every kind of value and the growth of objects: a module gets images only
    /// when this parsed by the guest and built by the host dumps the same.
    pub(super) fn probe_json() -> Vec<u8> {
        let mut keys = String::new();
        for index in 0..40 {
            if index > 0 {
                keys.push(',');
            }
            keys.push_str(&format!("\"k{index}\":{index}"));
        }
        let mut nested = String::new();
        for size in [1usize, 5, 6, 11, 12, 23] {
            nested.push_str(&format!(",\"o{size}\":{{"));
            for index in 0..size {
                if index > 0 {
                    nested.push(',');
                }
                nested.push_str(&format!("\"{}\":{index}", "x".repeat(index + 1)));
            }
            nested.push('}');
        }
        // An ASCII key and a longer one with a byte above 0x7f, in one bucket of eight: the order
        // of a bucket's chain compares bytes unsigned.
        let other = "\u{e9}t\u{e9}".to_owned();
        let pair = (0..4096)
            .map(|index| (format!("a{index}"), other.clone()))
            .find(|(ascii, other)| hash(ascii.as_bytes()) % 8 == hash(other.as_bytes()) % 8)
            .unwrap_or_default();
        nested.push_str(&format!(",\"u\":{{\"{}\":1,\"{}\":2}}", pair.0, pair.1));
        format!(
            concat!(
                "{{\"null\":null,\"t\":true,\"f\":false,\"n\":[0,-1,2.5,1e10,-3.25E-2,12345678901234567890],",
                "\"s\":[\"\",\"a\",\"tab\\there\",\"q\\\"\\\\\",\"\\u0001\",\"snow \u{2603}\",\"\\ud83d\\ude00\"],",
                "\"a\":[[],[[]],[1,[2,[3]]],{{}},[null,true]],\"many\":{{{}}}{}}}"
            ),
            keys, nested
        )
        .into_bytes()
    }
}

/// The index of the first `"` or `\\` in `bytes`, eight bytes at a time.
fn quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let quote = word ^ (LOW * u64::from(b'"'));
        let backslash = word ^ (LOW * u64::from(b'\\'));
        // A lane's high bit is set when the lane is zero, or above a lane that is: the lowest
        // one set is the first match.
        let found =
            (quote.wrapping_sub(LOW) & !quote | backslash.wrapping_sub(LOW) & !backslash) & HIGH;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = bytes.get(at..)?;
    Some(
        at + tail
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\')?,
    )
}

/// A reader of the host's own compact JSON.
struct Reader<'a> {
    json: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.json.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.json.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn number(&mut self) -> &'a [u8] {
        let start = self.at;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        &self.json[start..self.at]
    }

    /// The string at the reader (its quotes included), unescaped: borrowed when it has no
    /// escape.
    fn string(&mut self) -> Option<Cow<'a, [u8]>> {
        if self.next()? != b'"' {
            return None;
        }
        let start = self.at;
        let rest = self.json.get(start..)?;
        let end = start + quote_or_backslash(rest)?;
        if self.json[end] == b'"' {
            self.at = end + 1;
            return Some(Cow::Borrowed(&self.json[start..end]));
        }
        let mut out = self.json[start..end].to_vec();
        self.at = end;
        loop {
            match self.next()? {
                b'"' => return Some(Cow::Owned(out)),
                b'\\' => {
                    let escaped = match self.next()? {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let unit = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&unit) {
                                self.literal(b"\\u")?;
                                let low = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&low) {
                                    return None;
                                }
                                0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)
                            } else {
                                unit
                            };
                            let character = char::from_u32(code)?;
                            let mut buffer = [0; 4];
                            out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                            continue;
                        }
                        _ => return None,
                    };
                    out.push(escaped);
                }
                byte => out.push(byte),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let end = self.at.checked_add(4)?;
        let digits = std::str::from_utf8(self.json.get(self.at..end)?).ok()?;
        let value = u32::from_str_radix(digits, 16).ok()?;
        self.at = end;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::prefix;

    proptest! {
        /// Keys ordered by their prefixes first, then as a whole, are in the keys' own order.
        #[test]
        fn prefixes_order_keys_as_the_keys_do(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), any::<u8>()], 0..12),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), any::<u8>()], 0..12),
        ) {
            let by_prefix = prefix(&a).cmp(&prefix(&b)).then_with(|| a.cmp(&b));
            prop_assert_eq!(by_prefix, a.cmp(&b));
        }
    }
}
