//! Copies of the few bytes a push brings, compiled for each length.

/// Calls `short` on `text`, with the compiler knowing its length, when it has at most 32
/// bytes, and `long` otherwise.
///
/// A copy of a few bytes whose length is known only when the program runs is a call to
/// `memcpy`, which costs more than the copy and tests the length all over again. With the
/// length a constant, the same copy is a move or two in line. Most deltas of a stream are
/// that short, and every one is copied into the received text.
///
/// `long` is a function pointer, and the function behind it should not be inlined. When every
/// arm of the match does the same but for its constant, the compiler can merge them back into
/// one copy of unknown length, and it does so in some callers; a call in one arm that is not
/// like the others keeps them apart.
#[inline(always)]
pub(crate) fn by_length<S: ?Sized, R>(
    state: &mut S,
    text: &str,
    short: impl FnOnce(&mut S, &str) -> R,
    long: fn(&mut S, &str) -> R,
) -> R {
    macro_rules! arms {
        ($($length:literal)*) => {
            match text.len() {
                $($length => short(state, &text[..$length]),)*
                _ => long(state, text),
            }
        };
    }
    arms!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
}

/// Appends `text` to `to`; see [`by_length`].
#[inline(always)]
pub(crate) fn append(to: &mut String, text: &str) {
    by_length(to, text, |to, text| to.push_str(text), append_long);
}

/// [`append`] of more than 32 bytes.
#[inline(never)]
fn append_long(to: &mut String, text: &str) {
    to.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_is_appended_whole() {
        let source = "é".repeat(32) + &"a".repeat(32);
        for start in 0..source.len() {
            for end in start..=source.len() {
                let (Some(text), Some(before)) = (source.get(start..end), source.get(..start))
                else {
                    continue;
                };
                let mut to = before.to_owned();
                append(&mut to, text);
                assert_eq!(to, &source[..end], "appending {start}..{end}");
            }
        }
    }
}
