//! Where each part of a rule is in its text: the line and column of every member and element,
//! by the JSON path the checker names it with, so a finding about `condition.equals` can say
//! `rules/x.json:3:28`.

use std::collections::HashMap;

use super::{child, element};

/// The 1-based line and column of every part of `source` (valid JSON), by JSON path: a
/// member is where its key starts, an element where it starts, the root (`""`) where the text
/// starts. A key written twice keeps its first place.
pub(super) fn positions(source: &str) -> HashMap<String, (usize, usize)> {
    let mut locator = Locator {
        source,
        bytes: source.as_bytes(),
        at: 0,
        offsets: HashMap::new(),
    };
    locator.skip_whitespace();
    locator.offsets.insert(String::new(), locator.at);
    // A text the scanner cannot follow (it is valid JSON, so this does not happen) leaves the
    // positions found so far.
    let _ = locator.value("");
    let lines = LineStarts::new(source);
    locator
        .offsets
        .into_iter()
        .map(|(path, offset)| (path, lines.line_column(source, offset)))
        .collect()
}

struct Locator<'s> {
    source: &'s str,
    bytes: &'s [u8],
    at: usize,
    offsets: HashMap<String, usize>,
}

impl Locator<'_> {
    fn skip_whitespace(&mut self) {
        while self
            .bytes
            .get(self.at)
            .is_some_and(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.bytes.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    /// The value at `self.at` (after whitespace), named `path`.
    fn value(&mut self, path: &str) -> Option<()> {
        self.skip_whitespace();
        match self.bytes.get(self.at)? {
            b'{' => self.object(path),
            b'[' => self.array(path),
            b'"' => self.string().map(drop),
            _ => {
                while self.bytes.get(self.at).is_some_and(|byte| {
                    !matches!(byte, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    self.at += 1;
                }
                Some(())
            }
        }
    }

    /// A string at `self.at`; its decoded text.
    fn string(&mut self) -> Option<String> {
        let start = self.at;
        self.at += 1;
        loop {
            match self.bytes.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    break;
                }
                _ => self.at += 1,
            }
        }
        serde_json::from_str(self.source.get(start..self.at)?).ok()
    }

    fn object(&mut self, path: &str) -> Option<()> {
        self.at += 1;
        self.skip_whitespace();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            let key_at = self.at;
            let key = self.string()?;
            let member = child(path, &key);
            self.offsets.entry(member.clone()).or_insert(key_at);
            self.expect(b':')?;
            self.value(&member)?;
            self.skip_whitespace();
            match self.bytes.get(self.at)? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, path: &str) -> Option<()> {
        self.at += 1;
        self.skip_whitespace();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Some(());
        }
        let mut index = 0;
        loop {
            self.skip_whitespace();
            let item = element(path, index);
            self.offsets.entry(item.clone()).or_insert(self.at);
            self.value(&item)?;
            index += 1;
            self.skip_whitespace();
            match self.bytes.get(self.at)? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

/// The byte offsets where lines start.
struct LineStarts(Vec<usize>);

impl LineStarts {
    fn new(source: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(
            source
                .bytes()
                .enumerate()
                .filter(|(_, byte)| *byte == b'\n')
                .map(|(at, _)| at + 1),
        );
        LineStarts(starts)
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn line_column(&self, source: &str, offset: usize) -> (usize, usize) {
        let line = self.0.partition_point(|start| *start <= offset).max(1);
        let start = self.0[line - 1];
        let column = source
            .get(start..offset)
            .map_or(0, |text| text.chars().count());
        (line, column + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_elements_have_their_place() {
        let source = "{\n  \"condition\": { \"all\": [ { \"always\": true },\n    { \"field\": \"x\", \"equals\": \"é\" } ] },\n  \"a b\": 1\n}";
        let found = positions(source);
        assert_eq!(found[""], (1, 1));
        assert_eq!(found["condition"], (2, 3));
        assert_eq!(found["condition.all"], (2, 18));
        assert_eq!(found["condition.all[0]"], (2, 27));
        assert_eq!(found["condition.all[0].always"], (2, 29));
        assert_eq!(found["condition.all[1]"], (3, 5));
        assert_eq!(found["condition.all[1].equals"], (3, 21));
        assert_eq!(found["[\"a b\"]"], (4, 3));
    }
}
