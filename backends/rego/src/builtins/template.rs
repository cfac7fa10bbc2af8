//! `strings.render_template(template, vars)`: Go's `text/template`, as OPA runs it.
//!
//! OPA parses the template with Go's `text/template` (a missing key is no value, as Go's default
//! `missingkey` has it), executes it on `vars` decoded as Go's JSON decoder does with numbers
//! kept as `json.Number` (a string type), and replaces every `<no value>` of the output with
//! `<undefined>` (the template's own text included). That decides a few things a Rego author meets: a number prints as it was written, is
//! "true" in a condition even when it is zero, compares equal to the string of its digits and
//! is incompatible with a number written in the template (`eq .n 1` is an error, `eq .n "1"`
//! is true).
//!
//! What this host runs: text, comments and the `{{-`/`-}}` trim markers; pipelines with
//! variables (`$x := …`, `$x = …`), fields (`.a.b`, `$x.a`, `(…).a`), literals, parentheses
//! and `|`; `if`, `else if`, `with`, `else with`, `range` (over arrays, objects in key order and
//! integers, with `break` and `continue`), `define`, `template` and `block`; and the functions
//! `and`, `or`, `not`, `len`, `index`, `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `print`, `println`,
//! `printf`, `html` and `urlquery`, with Go's answers and error texts. `printf` formats strings
//! and the template's own numbers as Go does; a number of the variables is a string to it, as in
//! Go (a bad verb names its type `string` where Go says `json.Number`), and any other operand is
//! handed over as its printed text. The `js`, `slice` and `call` functions are not provided: a
//! template naming them is an error that says so.
//!
//! Bounds: the output and the parsed template are charged against the evaluation's memory
//! limit, every step reads the deadline, and nesting (parentheses, control structures,
//! templates invoking templates) deeper than [`MAX_DEPTH`] is an error.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use super::sprintf::{GoValue, go_format};
use super::{BuiltinContext, BuiltinError, Outcome, arg, string, type_name};

/// The deepest nesting of parentheses, control structures and template calls.
const MAX_DEPTH: usize = 200;

/// The builtin.
pub(super) fn render_template(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let source = string(args, 0)?;
    let vars = match arg(args, 1)? {
        Value::Object(vars) => vars,
        other => {
            return Err(BuiltinError::Failed(format!(
                "operand 2 must be object but got {}",
                type_name(other)
            )));
        }
    };
    let items = lex(source, context)?;
    let mut parser = Parser {
        source,
        items,
        at: 0,
        vars: vec!["$".to_owned()],
        range_depth: 0,
        depth: 0,
        defines: HashMap::new(),
        context,
    };
    let tree = parser.parse()?;
    let defines = std::mem::take(&mut parser.defines);
    let root = Val::Map(vars);
    let mut exec = Exec {
        source,
        context,
        defines: &defines,
        out: String::new(),
        vars: vec![("$".to_owned(), root.clone())],
        depth: 0,
    };
    exec.walk(&root, &tree)?;
    Ok(Value::from(undefined_for_no_value(exec.out, context)?))
}

/// What Go prints for no value.
const NO_VALUE: &str = "<no value>";

/// What OPA prints instead.
const UNDEFINED: &str = "<undefined>";

/// OPA replaces every `<no value>` of the output with `<undefined>`, wherever it came from (a
/// missing key, a `null`, or the template's own text).
fn undefined_for_no_value(
    out: String,
    context: &mut BuiltinContext,
) -> Result<String, BuiltinError> {
    let count = out.matches(NO_VALUE).count();
    if count == 0 {
        return Ok(out);
    }
    context.charge(
        out.len() + count * (UNDEFINED.len() - NO_VALUE.len()),
        "strings.render_template's output",
    )?;
    Ok(out.replace(NO_VALUE, UNDEFINED))
}

// ---------------------------------------------------------------------------------------------
// Lexing

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    LeftDelim,
    RightDelim,
    Space,
    Identifier,
    Keyword,
    Field,
    Dot,
    Variable,
    String,
    RawString,
    Char,
    Number,
    Bool,
    Nil,
    LeftParen,
    RightParen,
    Pipe,
    Declare,
    Assign,
    Comma,
    Eof,
}

#[derive(Debug, Clone)]
struct Item {
    kind: Kind,
    /// Where the item starts in the template, in bytes.
    pos: usize,
    /// Its text: the source text, or for `Text` the text after trimming.
    text: String,
}

const KEYWORDS: &[&str] = &[
    "block", "break", "continue", "define", "else", "end", "if", "range", "template", "with",
];

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// A template error as Go words it: the template's name, the line, the message.
fn parse_error(source: &str, pos: usize, message: &str) -> BuiltinError {
    let line = 1 + source
        .get(..pos)
        .map_or(0, |before| before.matches('\n').count());
    BuiltinError::Failed(format!("template: template:{line}: {message}"))
}

/// Whether `rest` starts with a right trim marker and the right delimiter: ` -}}`.
fn right_trim_at(rest: &str) -> bool {
    let mut chars = rest.chars();
    chars.next().is_some_and(is_space) && rest.get(1..).is_some_and(|r| r.starts_with("-}}"))
}

/// Adds an item, charged for itself and for the tree nodes made of it.
fn push(
    items: &mut Vec<Item>,
    context: &mut BuiltinContext,
    kind: Kind,
    pos: usize,
    text: &str,
) -> Result<(), BuiltinError> {
    context.charge(
        2 * size_of::<Item>() + 2 * text.len(),
        "strings.render_template's template",
    )?;
    items.push(Item {
        kind,
        pos,
        text: text.to_owned(),
    });
    Ok(())
}

fn lex(source: &str, context: &mut BuiltinContext) -> Result<Vec<Item>, BuiltinError> {
    let mut items = Vec::new();
    let mut pos = 0;
    let mut trim_next = false;
    loop {
        context.check_time()?;
        let rest = &source[pos..];
        let Some(found) = rest.find("{{") else {
            let text = if trim_next {
                rest.trim_start_matches(is_space)
            } else {
                rest
            };
            if !text.is_empty() {
                push(&mut items, context, Kind::Text, pos, text)?;
            }
            push(&mut items, context, Kind::Eof, source.len(), "")?;
            return Ok(items);
        };
        let delim = pos + found;
        let after = delim + 2;
        let trim_left = source[after..].starts_with('-')
            && source[after + 1..].chars().next().is_some_and(is_space);
        let mut text = &source[pos..delim];
        if trim_next {
            text = text.trim_start_matches(is_space);
        }
        if trim_left {
            text = text.trim_end_matches(is_space);
        }
        trim_next = false;
        if !text.is_empty() {
            push(&mut items, context, Kind::Text, pos, text)?;
        }
        let mut p = if trim_left { after + 2 } else { after };
        if source[p..].starts_with("/*") {
            let Some(end) = source[p + 2..].find("*/") else {
                return Err(parse_error(source, p, "unclosed comment"));
            };
            p += 2 + end + 2;
            if right_trim_at(&source[p..]) {
                p += 4;
                trim_next = true;
            } else if source[p..].starts_with("}}") {
                p += 2;
            } else {
                return Err(parse_error(
                    source,
                    p,
                    "comment ends before closing delimiter",
                ));
            }
            pos = p;
            continue;
        }
        push(&mut items, context, Kind::LeftDelim, delim, "{{")?;
        let mut parens = 0usize;
        loop {
            context.check_time()?;
            let rest = &source[p..];
            if right_trim_at(rest) || rest.starts_with("}}") {
                if parens > 0 {
                    return Err(parse_error(source, p, "unclosed left paren"));
                }
                push(&mut items, context, Kind::RightDelim, p, "}}")?;
                if rest.starts_with("}}") {
                    p += 2;
                } else {
                    p += 4;
                    trim_next = true;
                }
                break;
            }
            let Some(c) = rest.chars().next() else {
                return Err(parse_error(source, p, "unclosed action"));
            };
            let start = p;
            let next = rest.chars().nth(1);
            match c {
                c if is_space(c) => {
                    let mut end = p;
                    for (offset, c) in rest.char_indices() {
                        if !is_space(c) || right_trim_at(&rest[offset..]) {
                            break;
                        }
                        end = p + offset + c.len_utf8();
                    }
                    // A single space before `-}}` belongs to the delimiter.
                    if end == p {
                        end = p + 1;
                    }
                    p = end;
                    push(&mut items, context, Kind::Space, start, &source[start..p])?;
                }
                '=' => {
                    p += 1;
                    push(&mut items, context, Kind::Assign, start, "=")?;
                }
                ':' => {
                    if next != Some('=') {
                        return Err(parse_error(source, p, "expected :="));
                    }
                    p += 2;
                    push(&mut items, context, Kind::Declare, start, ":=")?;
                }
                '|' => {
                    p += 1;
                    push(&mut items, context, Kind::Pipe, start, "|")?;
                }
                ',' => {
                    p += 1;
                    push(&mut items, context, Kind::Comma, start, ",")?;
                }
                '(' => {
                    p += 1;
                    parens += 1;
                    push(&mut items, context, Kind::LeftParen, start, "(")?;
                }
                ')' => {
                    if parens == 0 {
                        return Err(parse_error(source, p, "unexpected right paren"));
                    }
                    parens -= 1;
                    p += 1;
                    push(&mut items, context, Kind::RightParen, start, ")")?;
                }
                '"' | '\'' => {
                    let mut escaped = false;
                    let mut end = None;
                    for (offset, ch) in rest.char_indices().skip(1) {
                        if escaped {
                            escaped = false;
                        } else if ch == '\\' {
                            escaped = true;
                        } else if ch == '\n' {
                            break;
                        } else if ch == c {
                            end = Some(p + offset + 1);
                            break;
                        }
                    }
                    let Some(end) = end else {
                        let what = if c == '"' {
                            "unterminated quoted string"
                        } else {
                            "unterminated character constant"
                        };
                        return Err(parse_error(source, p, what));
                    };
                    p = end;
                    let kind = if c == '"' { Kind::String } else { Kind::Char };
                    push(&mut items, context, kind, start, &source[start..p])?;
                }
                '`' => {
                    let Some(end) = rest[1..].find('`') else {
                        return Err(parse_error(source, p, "unterminated raw quoted string"));
                    };
                    p += end + 2;
                    push(
                        &mut items,
                        context,
                        Kind::RawString,
                        start,
                        &source[start..p],
                    )?;
                }
                '$' | '.' if !(c == '.' && next.is_some_and(|n| n.is_ascii_digit())) => {
                    let name_len: usize = rest[1..]
                        .chars()
                        .take_while(|&c| is_alphanumeric(c))
                        .map(char::len_utf8)
                        .sum();
                    p += 1 + name_len;
                    let kind = match (c, name_len) {
                        ('$', _) => Kind::Variable,
                        (_, 0) => Kind::Dot,
                        _ => Kind::Field,
                    };
                    push(&mut items, context, kind, start, &source[start..p])?;
                    terminator(source, p)?;
                }
                '+' | '-' | '.' | '0'..='9' => {
                    p += number_length(rest);
                    if let Some(after) = source[p..].chars().next().filter(|&c| is_alphanumeric(c))
                    {
                        let end = p + after.len_utf8();
                        return Err(parse_error(
                            source,
                            p,
                            &format!("bad number syntax: {:?}", &source[start..end]),
                        ));
                    }
                    push(&mut items, context, Kind::Number, start, &source[start..p])?;
                }
                c if is_alphanumeric(c) => {
                    let len: usize = rest
                        .chars()
                        .take_while(|&c| is_alphanumeric(c))
                        .map(char::len_utf8)
                        .sum();
                    p += len;
                    let word = &source[start..p];
                    let kind = if KEYWORDS.contains(&word) {
                        Kind::Keyword
                    } else if word == "true" || word == "false" {
                        Kind::Bool
                    } else if word == "nil" {
                        Kind::Nil
                    } else {
                        Kind::Identifier
                    };
                    push(&mut items, context, kind, start, word)?;
                    terminator(source, p)?;
                }
                other => {
                    return Err(parse_error(
                        source,
                        p,
                        &format!("unexpected {other:?} in command"),
                    ));
                }
            }
        }
        pos = p;
    }
}

/// After a word: what may follow one (a space, a delimiter, punctuation), else an error.
fn terminator(source: &str, p: usize) -> Result<(), BuiltinError> {
    let rest = &source[p..];
    match rest.chars().next() {
        None => Ok(()),
        Some(c) if is_space(c) || matches!(c, '.' | ',' | '|' | ':' | ')' | '(' | '=') => Ok(()),
        Some(_) if rest.starts_with("}}") => Ok(()),
        Some(c) => Err(parse_error(source, p, &format!("bad character {c:?}"))),
    }
}

/// The length of the number at the start of `rest`, as Go's template lexer scans one.
fn number_length(rest: &str) -> usize {
    let bytes = rest.as_bytes();
    let mut i = 0;
    let accept = |i: &mut usize, set: &[u8]| {
        if bytes.get(*i).is_some_and(|b| set.contains(b)) {
            *i += 1;
            true
        } else {
            false
        }
    };
    let run = |i: &mut usize, set: &[u8]| while accept(i, set) {};
    accept(&mut i, b"+-");
    let mut digits: &[u8] = b"0123456789_";
    if accept(&mut i, b"0") {
        if accept(&mut i, b"xX") {
            digits = b"0123456789abcdefABCDEF_";
        } else if accept(&mut i, b"oO") {
            digits = b"01234567_";
        } else if accept(&mut i, b"bB") {
            digits = b"01_";
        }
    }
    run(&mut i, digits);
    if accept(&mut i, b".") {
        run(&mut i, digits);
    }
    if digits.len() == 11 && accept(&mut i, b"eE") {
        accept(&mut i, b"+-");
        run(&mut i, b"0123456789_");
    }
    if digits.len() == 23 && accept(&mut i, b"pP") {
        accept(&mut i, b"+-");
        run(&mut i, b"0123456789_");
    }
    accept(&mut i, b"i");
    i
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// Where a node is in the template: its first byte and the byte after it.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

#[derive(Debug)]
enum Node {
    Text(String),
    Action(Pipe),
    If(Control),
    With(Control),
    Range(Control),
    Template {
        span: Span,
        name: String,
        pipe: Option<Pipe>,
    },
    Break,
    Continue,
}

#[derive(Debug)]
struct Control {
    pipe: Pipe,
    list: Vec<Node>,
    otherwise: Option<Vec<Node>>,
}

#[derive(Debug)]
struct Pipe {
    decl: Vec<String>,
    assign: bool,
    commands: Vec<Command>,
}

#[derive(Debug)]
struct Command {
    span: Span,
    args: Vec<Operand>,
}

#[derive(Debug)]
enum Operand {
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `.a.b`: fields of the dot.
    Field(Vec<String>),
    /// `$x.a.b`.
    Variable(String, Vec<String>),
    Function(String),
    Pipe(Box<Pipe>),
    /// `(…).a.b`.
    Chain(Box<Operand>, Vec<String>),
}

/// How a list of nodes ended.
enum Ending {
    Eof,
    End,
    Else,
}

const FUNCTIONS: &[&str] = &[
    "and", "or", "not", "len", "index", "eq", "ne", "lt", "le", "gt", "ge", "print", "println",
    "printf", "html", "urlquery",
];

const UNSUPPORTED: &[&str] = &["js", "slice", "call"];

struct Parser<'s, 'c> {
    source: &'s str,
    items: Vec<Item>,
    at: usize,
    /// The variables in scope.
    vars: Vec<String>,
    range_depth: usize,
    depth: usize,
    defines: HashMap<String, Vec<Node>>,
    context: &'c mut BuiltinContext,
}

impl Parser<'_, '_> {
    fn error(&self, pos: usize, message: &str) -> BuiltinError {
        parse_error(self.source, pos, message)
    }

    fn next(&mut self) -> Item {
        let item = self.items.get(self.at).cloned().unwrap_or(Item {
            kind: Kind::Eof,
            pos: self.source.len(),
            text: String::new(),
        });
        if self.at < self.items.len() {
            self.at += 1;
        }
        item
    }

    fn peek(&self) -> Kind {
        self.items.get(self.at).map_or(Kind::Eof, |item| item.kind)
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Kind::Space {
            self.at += 1;
        }
    }

    fn next_non_space(&mut self) -> Item {
        self.skip_spaces();
        self.next()
    }

    fn peek_non_space(&mut self) -> Kind {
        self.skip_spaces();
        self.peek()
    }

    fn expect(&mut self, kind: Kind, context: &str) -> Result<Item, BuiltinError> {
        let item = self.next_non_space();
        if item.kind != kind {
            return Err(self.unexpected(&item, context));
        }
        Ok(item)
    }

    fn unexpected(&self, item: &Item, context: &str) -> BuiltinError {
        let what = match item.kind {
            Kind::Eof => return self.error(item.pos, "unexpected EOF"),
            Kind::RightDelim => "\"}}\"".to_owned(),
            Kind::Keyword => format!("<{}>", item.text),
            _ => format!("{:?}", item.text),
        };
        self.error(item.pos, &format!("unexpected {what} in {context}"))
    }

    fn enter(&mut self, pos: usize) -> Result<(), BuiltinError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(pos, "max expression depth exceeded"));
        }
        self.context.check_time()
    }

    /// The whole template, with its `define`s set aside.
    fn parse(&mut self) -> Result<Vec<Node>, BuiltinError> {
        let mut list = Vec::new();
        loop {
            if self.peek() == Kind::LeftDelim {
                let save = self.at;
                self.next();
                let item = self.next_non_space();
                if item.kind == Kind::Keyword && item.text == "define" {
                    self.define(item.pos)?;
                    continue;
                }
                self.at = save;
            }
            let (node, ending) = self.text_or_action()?;
            match ending {
                Some(Ending::Eof) => return Ok(list),
                Some(Ending::End) => return Err(self.error(self.last_pos(), "unexpected {{end}}")),
                Some(Ending::Else) => {
                    return Err(self.error(self.last_pos(), "unexpected {{else}}"));
                }
                None => list.extend(node),
            }
        }
    }

    fn last_pos(&self) -> usize {
        self.items
            .get(self.at.saturating_sub(1))
            .map_or(0, |item| item.pos)
    }

    /// `{{define "name"}}…{{end}}`, its keyword read.
    fn define(&mut self, pos: usize) -> Result<(), BuiltinError> {
        let name = self.expect_name("define clause")?;
        self.expect(Kind::RightDelim, "define clause")?;
        let vars = std::mem::replace(&mut self.vars, vec!["$".to_owned()]);
        let (list, ending) = self.list()?;
        self.vars = vars;
        if !matches!(ending, Ending::End) {
            return Err(self.error(pos, "unexpected EOF"));
        }
        self.add_define(pos, name, list)
    }

    fn add_define(
        &mut self,
        pos: usize,
        name: String,
        list: Vec<Node>,
    ) -> Result<(), BuiltinError> {
        let empty = list
            .iter()
            .all(|node| matches!(node, Node::Text(text) if text.trim().is_empty()));
        match self.defines.get(&name) {
            // A later empty definition does not replace a non-empty one; two non-empty ones clash.
            Some(_) if empty => Ok(()),
            Some(existing)
                if !existing
                    .iter()
                    .all(|node| matches!(node, Node::Text(text) if text.trim().is_empty())) =>
            {
                Err(self.error(
                    pos,
                    &format!("template: multiple definition of template {name:?}"),
                ))
            }
            _ => {
                self.defines.insert(name, list);
                Ok(())
            }
        }
    }

    fn expect_name(&mut self, context: &str) -> Result<String, BuiltinError> {
        let item = self.next_non_space();
        match item.kind {
            Kind::String | Kind::RawString => self.unquote(&item),
            _ => Err(self.unexpected(&item, context)),
        }
    }

    /// Nodes up to `{{end}}`, `{{else}}` or the end of the template.
    fn list(&mut self) -> Result<(Vec<Node>, Ending), BuiltinError> {
        let mut list = Vec::new();
        loop {
            let (node, ending) = self.text_or_action()?;
            if let Some(ending) = ending {
                return Ok((list, ending));
            }
            list.extend(node);
        }
    }

    fn text_or_action(&mut self) -> Result<(Option<Node>, Option<Ending>), BuiltinError> {
        self.context.check_time()?;
        let item = self.next();
        match item.kind {
            Kind::Text => Ok((Some(Node::Text(item.text)), None)),
            Kind::LeftDelim => self.action(),
            Kind::Eof => Ok((None, Some(Ending::Eof))),
            _ => Err(self.unexpected(&item, "input")),
        }
    }

    fn action(&mut self) -> Result<(Option<Node>, Option<Ending>), BuiltinError> {
        if self.peek_non_space() == Kind::Keyword {
            let item = self.next();
            match item.text.as_str() {
                "if" => return Ok((Some(Node::If(self.control("if", item.pos)?)), None)),
                "with" => return Ok((Some(Node::With(self.control("with", item.pos)?)), None)),
                "range" => {
                    return Ok((Some(Node::Range(self.control("range", item.pos)?)), None));
                }
                "else" => {
                    // `else if` and `else with` leave their keyword for the caller.
                    let next = self.peek_non_space();
                    let save = self.at;
                    let keyword = self.next();
                    self.at = save;
                    if next == Kind::Keyword && (keyword.text == "if" || keyword.text == "with") {
                        return Ok((None, Some(Ending::Else)));
                    }
                    self.expect(Kind::RightDelim, "else")?;
                    return Ok((None, Some(Ending::Else)));
                }
                "end" => {
                    self.expect(Kind::RightDelim, "end")?;
                    return Ok((None, Some(Ending::End)));
                }
                "break" | "continue" => {
                    if self.range_depth == 0 {
                        return Err(self.error(
                            item.pos,
                            &format!("{{{{{}}}}} outside {{{{range}}}}", item.text),
                        ));
                    }
                    self.expect(Kind::RightDelim, &format!("{{{{{}}}}}", item.text))?;
                    let node = if item.text == "break" {
                        Node::Break
                    } else {
                        Node::Continue
                    };
                    return Ok((Some(node), None));
                }
                "template" => {
                    let name = self.expect_name("template clause")?;
                    let pipe = if self.peek_non_space() == Kind::RightDelim {
                        self.next();
                        None
                    } else {
                        Some(self.pipeline("template clause", Kind::RightDelim, false)?)
                    };
                    let span = Span {
                        start: item.pos,
                        end: self.last_pos(),
                    };
                    return Ok((Some(Node::Template { span, name, pipe }), None));
                }
                "block" => {
                    self.enter(item.pos)?;
                    let name = self.expect_name("block clause")?;
                    let pipe = self.pipeline("block clause", Kind::RightDelim, false)?;
                    let vars = std::mem::replace(&mut self.vars, vec!["$".to_owned()]);
                    let (list, ending) = self.list()?;
                    self.vars = vars;
                    if !matches!(ending, Ending::End) {
                        return Err(self.error(item.pos, "unexpected EOF"));
                    }
                    self.add_define(item.pos, name.clone(), list)?;
                    self.depth -= 1;
                    let span = Span {
                        start: item.pos,
                        end: self.last_pos(),
                    };
                    return Ok((
                        Some(Node::Template {
                            span,
                            name,
                            pipe: Some(pipe),
                        }),
                        None,
                    ));
                }
                _ => return Err(self.unexpected(&item, "command")),
            }
        }
        let pipe = self.pipeline("command", Kind::RightDelim, true)?;
        Ok((Some(Node::Action(pipe)), None))
    }

    /// `if`, `with` and `range`: the pipeline, the list, the `else` list.
    fn control(&mut self, context: &str, pos: usize) -> Result<Control, BuiltinError> {
        self.enter(pos)?;
        let mark = self.vars.len();
        let pipe = self.pipeline(context, Kind::RightDelim, true)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let listed = self.list();
        if context == "range" {
            self.range_depth -= 1;
        }
        let (list, ending) = listed?;
        let otherwise = match ending {
            Ending::End => None,
            Ending::Eof => return Err(self.error(self.source.len(), "unexpected EOF")),
            Ending::Else => {
                let chained = if context == "if" || context == "with" {
                    let save = self.at;
                    let keyword = self.next_non_space();
                    if keyword.kind == Kind::Keyword && keyword.text == context {
                        Some(keyword.pos)
                    } else {
                        self.at = save;
                        None
                    }
                } else {
                    None
                };
                match chained {
                    // `{{else if b}}…{{end}}` is `{{else}}{{if b}}…{{end}}{{end}}`.
                    Some(at) => {
                        let nested = self.control(context, at)?;
                        Some(vec![if context == "if" {
                            Node::If(nested)
                        } else {
                            Node::With(nested)
                        }])
                    }
                    None => {
                        let (otherwise, ending) = self.list()?;
                        if !matches!(ending, Ending::End) {
                            return Err(self.error(self.last_pos(), "expected end; found else"));
                        }
                        Some(otherwise)
                    }
                }
            }
        };
        self.vars.truncate(mark);
        self.depth -= 1;
        Ok(Control {
            pipe,
            list,
            otherwise,
        })
    }

    fn pipeline(&mut self, context: &str, end: Kind, declare: bool) -> Result<Pipe, BuiltinError> {
        let mut decl = Vec::new();
        let mut assign = false;
        if declare && self.peek_non_space() == Kind::Variable {
            let save = self.at;
            let variable = self.next();
            let mut names = vec![variable.text.clone()];
            let after = self.next_non_space();
            let mut declared = None;
            match after.kind {
                Kind::Declare | Kind::Assign => declared = Some(after.kind),
                Kind::Comma if context == "range" => {
                    let second = self.next_non_space();
                    if second.kind != Kind::Variable {
                        return Err(self.error(second.pos, "range can only initialize variables"));
                    }
                    names.push(second.text.clone());
                    let op = self.next_non_space();
                    match op.kind {
                        Kind::Declare | Kind::Assign => declared = Some(op.kind),
                        _ => return Err(self.unexpected(&op, context)),
                    }
                }
                Kind::Comma => {
                    return Err(
                        self.error(after.pos, &format!("too many declarations in {context}"))
                    );
                }
                _ => self.at = save,
            }
            if let Some(op) = declared {
                assign = op == Kind::Assign;
                for name in &names {
                    if assign {
                        if !self.vars.contains(name) {
                            return Err(
                                self.error(variable.pos, &format!("undefined variable {name:?}"))
                            );
                        }
                    } else {
                        self.vars.push(name.clone());
                    }
                }
                decl = names;
            }
        }
        let mut commands = Vec::new();
        loop {
            let kind = self.peek_non_space();
            if kind == end {
                let item = self.next();
                if commands.is_empty() {
                    return Err(self.error(item.pos, &format!("missing value for {context}")));
                }
                break;
            }
            match kind {
                Kind::Bool
                | Kind::Char
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    let command = self.command()?;
                    if !commands.is_empty()
                        && matches!(
                            command.args.first(),
                            Some(
                                Operand::Bool(_)
                                    | Operand::Dot
                                    | Operand::Nil
                                    | Operand::Int(_)
                                    | Operand::Float(_)
                                    | Operand::Str(_)
                            )
                        )
                    {
                        return Err(self.error(
                            command.span.start,
                            &format!(
                                "non executable command in pipeline stage {}",
                                commands.len() + 1
                            ),
                        ));
                    }
                    commands.push(command);
                }
                _ => {
                    let item = self.next();
                    return Err(self.unexpected(&item, context));
                }
            }
        }
        Ok(Pipe {
            decl,
            assign,
            commands,
        })
    }

    fn command(&mut self) -> Result<Command, BuiltinError> {
        self.skip_spaces();
        let start = self.items.get(self.at).map_or(0, |item| item.pos);
        let mut args = Vec::new();
        loop {
            self.skip_spaces();
            if let Some(operand) = self.operand()? {
                args.push(operand);
            }
            let item = self.next();
            match item.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.at -= 1,
                Kind::Pipe => {}
                _ => return Err(self.unexpected(&item, "operand")),
            }
            break;
        }
        let end = self
            .items
            .get(self.at.saturating_sub(1))
            .map_or(start, |item| {
                if item.kind == Kind::Pipe {
                    item.pos
                } else {
                    self.items.get(self.at).map_or(item.pos, |next| next.pos)
                }
            });
        if args.is_empty() {
            return Err(self.error(start, "empty command"));
        }
        let end = self.source[start..end.max(start)].trim_end().len() + start;
        Ok(Command {
            span: Span { start, end },
            args,
        })
    }

    fn operand(&mut self) -> Result<Option<Operand>, BuiltinError> {
        let Some(term) = self.term()? else {
            return Ok(None);
        };
        if self.peek() != Kind::Field {
            return Ok(Some(term));
        }
        let mut fields = Vec::new();
        while self.peek() == Kind::Field {
            let item = self.next();
            fields.push(item.text[1..].to_owned());
        }
        Ok(Some(match term {
            Operand::Field(mut first) => {
                first.extend(fields);
                Operand::Field(first)
            }
            Operand::Variable(name, mut first) => {
                first.extend(fields);
                Operand::Variable(name, first)
            }
            Operand::Bool(_)
            | Operand::Str(_)
            | Operand::Int(_)
            | Operand::Float(_)
            | Operand::Nil
            | Operand::Dot => {
                let pos = self.last_pos();
                return Err(self.error(pos, "unexpected . after term"));
            }
            other => Operand::Chain(Box::new(other), fields),
        }))
    }

    fn term(&mut self) -> Result<Option<Operand>, BuiltinError> {
        let item = self.next_non_space();
        Ok(Some(match item.kind {
            Kind::Identifier => {
                if UNSUPPORTED.contains(&item.text.as_str()) {
                    return Err(self.error(
                        item.pos,
                        &format!("function {:?} is not provided by this host", item.text),
                    ));
                }
                if !FUNCTIONS.contains(&item.text.as_str()) {
                    return Err(
                        self.error(item.pos, &format!("function {:?} not defined", item.text))
                    );
                }
                Operand::Function(item.text)
            }
            Kind::Dot => Operand::Dot,
            Kind::Nil => Operand::Nil,
            Kind::Variable => {
                if !self.vars.contains(&item.text) {
                    return Err(
                        self.error(item.pos, &format!("undefined variable {:?}", item.text))
                    );
                }
                Operand::Variable(item.text, Vec::new())
            }
            Kind::Field => Operand::Field(vec![item.text[1..].to_owned()]),
            Kind::Bool => Operand::Bool(item.text == "true"),
            Kind::Char => {
                let text = self.unquote(&item)?;
                let mut chars = text.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Operand::Int(i64::from(u32::from(c))),
                    _ => {
                        return Err(self.error(
                            item.pos,
                            &format!("malformed character constant: {}", item.text),
                        ));
                    }
                }
            }
            Kind::Number => self.number(&item)?,
            Kind::String | Kind::RawString => Operand::Str(self.unquote(&item)?),
            Kind::LeftParen => {
                self.enter(item.pos)?;
                let pipe = self.pipeline("parenthesized pipeline", Kind::RightParen, true)?;
                self.depth -= 1;
                Operand::Pipe(Box::new(pipe))
            }
            _ => {
                self.at -= 1;
                return Ok(None);
            }
        }))
    }

    fn number(&self, item: &Item) -> Result<Operand, BuiltinError> {
        let text = item.text.replace('_', "");
        if text.ends_with('i') {
            return Err(self.error(
                item.pos,
                &format!("complex number {} is not provided by this host", item.text),
            ));
        }
        let (negative, digits) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text.as_str()),
        };
        let lower = digits.to_ascii_lowercase();
        let (radix, body) = if let Some(hex) = lower.strip_prefix("0x") {
            (16, hex)
        } else if let Some(octal) = lower.strip_prefix("0o") {
            (8, octal)
        } else if let Some(binary) = lower.strip_prefix("0b") {
            (2, binary)
        } else if lower.len() > 1
            && lower.starts_with('0')
            && lower.bytes().all(|b| b.is_ascii_digit())
        {
            (8, &lower[1..])
        } else {
            (10, lower.as_str())
        };
        let floating = radix == 10 && body.contains(['.', 'e']);
        if !floating {
            let value = u64::from_str_radix(body, radix).ok().and_then(|magnitude| {
                if negative {
                    0i64.checked_sub_unsigned(magnitude)
                } else {
                    i64::try_from(magnitude).ok()
                }
            });
            if let Some(value) = value {
                return Ok(Operand::Int(value));
            }
            if body.bytes().all(|b| b.is_ascii_hexdigit()) && !body.is_empty() {
                return Err(self.error(item.pos, &format!("integer overflow: {:?}", item.text)));
            }
        }
        if radix == 10
            && let Ok(value) = text.parse::<f64>()
            && value.is_finite()
        {
            return Ok(Operand::Float(value));
        }
        Err(self.error(item.pos, &format!("illegal number syntax: {:?}", item.text)))
    }

    /// A quoted string, raw string or character constant's value, Go's escapes decoded.
    fn unquote(&self, item: &Item) -> Result<String, BuiltinError> {
        let text = &item.text;
        let bad = || self.error(item.pos, &format!("invalid syntax: {text}"));
        if let Some(raw) = text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
            return Ok(raw.replace('\r', ""));
        }
        let quote = text.chars().next().ok_or_else(bad)?;
        let inner = text
            .get(1..text.len().saturating_sub(1))
            .filter(|_| text.len() >= 2)
            .ok_or_else(bad)?;
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let escape = chars.next().ok_or_else(bad)?;
            let mut hex = |count: usize| -> Result<u32, BuiltinError> {
                let digits: String = (0..count).filter_map(|_| chars.next()).collect();
                if digits.len() != count {
                    return Err(bad());
                }
                u32::from_str_radix(&digits, 16).map_err(|_| bad())
            };
            match escape {
                'a' => out.push('\u{7}'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'v' => out.push('\u{b}'),
                '\\' => out.push('\\'),
                '"' if quote == '"' => out.push('"'),
                '\'' if quote == '\'' => out.push('\''),
                'x' => {
                    // A byte: only ASCII makes a valid character on its own.
                    let byte = hex(2)?;
                    out.push(
                        char::from_u32(byte)
                            .filter(char::is_ascii)
                            .unwrap_or('\u{FFFD}'),
                    );
                }
                'u' => out.push(char::from_u32(hex(4)?).ok_or_else(bad)?),
                'U' => out.push(char::from_u32(hex(8)?).ok_or_else(bad)?),
                '0'..='7' => {
                    let mut value = escape.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        let digit = chars.next().and_then(|c| c.to_digit(8)).ok_or_else(bad)?;
                        value = value * 8 + digit;
                    }
                    if value > 255 {
                        return Err(bad());
                    }
                    out.push(
                        char::from_u32(value)
                            .filter(char::is_ascii)
                            .unwrap_or('\u{FFFD}'),
                    );
                }
                _ => return Err(bad()),
            }
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Execution

/// A value as the template sees it.
#[derive(Debug, Clone)]
enum Val<'d> {
    /// No value (Go's invalid value): a `null` once a command has produced it.
    Missing,
    /// A `null` read from the data, before a command ends.
    Null,
    Bool(bool),
    Str(Cow<'d, str>),
    /// A number of the data: a `json.Number`, a string type.
    Number(&'d serde_json::Number),
    /// A number written in the template, or a length or index.
    Int(i64),
    Float(f64),
    Array(&'d [Value]),
    Map(&'d Map<String, Value>),
}

impl<'d> Val<'d> {
    fn of(value: &'d Value) -> Val<'d> {
        match value {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => Val::Number(n),
            Value::String(s) => Val::Str(Cow::Borrowed(s)),
            Value::Array(items) => Val::Array(items),
            Value::Object(map) => Val::Map(map),
        }
    }

    /// What a command's result becomes: a `null` is no value.
    fn settled(self) -> Val<'d> {
        match self {
            Val::Null => Val::Missing,
            other => other,
        }
    }

    /// Go's type name for the value.
    fn type_name(&self) -> &'static str {
        match self {
            Val::Missing | Val::Null => "<nil>",
            Val::Bool(_) => "bool",
            Val::Str(_) => "string",
            Val::Number(_) => "json.Number",
            Val::Int(_) => "int",
            Val::Float(_) => "float64",
            Val::Array(_) => "[]interface {}",
            Val::Map(_) => "map[string]interface {}",
        }
    }

    /// Go's truth: non-zero, non-empty.
    fn truth(&self) -> bool {
        match self {
            Val::Missing | Val::Null => false,
            Val::Bool(b) => *b,
            Val::Str(s) => !s.is_empty(),
            Val::Number(_) => true,
            Val::Int(i) => *i != 0,
            Val::Float(f) => *f != 0.0,
            Val::Array(items) => !items.is_empty(),
            Val::Map(map) => !map.is_empty(),
        }
    }

    /// Whether Go's formatter treats it as a string (`print` spaces operands that are not).
    fn is_string(&self) -> bool {
        matches!(self, Val::Str(_) | Val::Number(_))
    }
}

/// Go's `fmt` `%v` of a value: `map[k:v]` with sorted keys, `[a b]`, `<nil>` for `null`.
fn print_value(out: &mut String, value: &Val<'_>) {
    match value {
        Val::Missing => out.push_str(NO_VALUE),
        Val::Null => out.push_str("<nil>"),
        Val::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Val::Str(s) => out.push_str(s),
        Val::Number(n) => out.push_str(&n.to_string()),
        Val::Int(i) => out.push_str(&i.to_string()),
        Val::Float(f) => out.push_str(&go_float(*f)),
        Val::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                print_value(out, &Val::of(item));
            }
            out.push(']');
        }
        Val::Map(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push_str("map[");
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                if let Some(item) = map.get(key) {
                    print_value(out, &Val::of(item));
                }
            }
            out.push(']');
        }
    }
}

fn go_float(f: f64) -> String {
    go_format("%v", &[GoValue::Float(f)], &mut BuiltinContext::default()).unwrap_or_default()
}

/// Why execution stopped early.
enum Flow {
    Normal,
    Break,
    Continue,
}

struct Exec<'s, 'c, 'd> {
    source: &'s str,
    context: &'c mut BuiltinContext,
    defines: &'s HashMap<String, Vec<Node>>,
    out: String,
    vars: Vec<(String, Val<'d>)>,
    depth: usize,
}

impl<'s, 'd> Exec<'s, '_, 'd>
where
    's: 'd,
{
    /// An execution error at `span`, as Go words it.
    fn error(&self, span: Span, message: &str) -> BuiltinError {
        let before = self.source.get(..span.start).unwrap_or("");
        let line = 1 + before.matches('\n').count();
        let column = span.start - before.rfind('\n').map_or(0, |at| at + 1);
        let text = self.source.get(span.start..span.end).unwrap_or("");
        BuiltinError::Failed(format!(
            "template: template:{line}:{column}: executing \"template\" at <{text}>: {message}"
        ))
    }

    fn write(&mut self, text: &str) -> Result<(), BuiltinError> {
        self.context
            .charge(text.len(), "strings.render_template's output")?;
        self.out.push_str(text);
        Ok(())
    }

    fn walk(&mut self, dot: &Val<'d>, list: &'s [Node]) -> Result<Flow, BuiltinError> {
        for node in list {
            self.context.check_time()?;
            match node {
                Node::Text(text) => self.write(text)?,
                Node::Action(pipe) => {
                    let value = self.pipeline(dot, pipe)?;
                    if pipe.decl.is_empty() {
                        let mut text = String::new();
                        print_value(&mut text, &value);
                        self.write(&text)?;
                    }
                }
                Node::If(control) | Node::With(control) => {
                    let mark = self.vars.len();
                    let value = self.pipeline(dot, &control.pipe)?;
                    let flow = if value.truth() {
                        let inner = if matches!(node, Node::With(_)) {
                            &value
                        } else {
                            dot
                        };
                        self.nested(inner, &control.list)?
                    } else if let Some(otherwise) = &control.otherwise {
                        self.nested(dot, otherwise)?
                    } else {
                        Flow::Normal
                    };
                    self.vars.truncate(mark);
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Range(control) => {
                    let mark = self.vars.len();
                    self.range(dot, control)?;
                    self.vars.truncate(mark);
                }
                Node::Template { span, name, pipe } => {
                    let Some(tree) = self.defines.get(name) else {
                        return Err(self.error(*span, &format!("template {name:?} not defined")));
                    };
                    let value = match pipe {
                        Some(pipe) => self.pipeline(dot, pipe)?,
                        None => Val::Missing,
                    };
                    self.depth += 1;
                    if self.depth > MAX_DEPTH {
                        return Err(self.error(
                            *span,
                            &format!("exceeded maximum template depth ({MAX_DEPTH})"),
                        ));
                    }
                    let vars =
                        std::mem::replace(&mut self.vars, vec![("$".to_owned(), value.clone())]);
                    let result = self.walk(&value, tree);
                    self.vars = vars;
                    self.depth -= 1;
                    result?;
                }
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    fn nested(&mut self, dot: &Val<'d>, list: &'s [Node]) -> Result<Flow, BuiltinError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(BuiltinError::Failed(
                "template: max expression depth exceeded".to_owned(),
            ));
        }
        let flow = self.walk(dot, list);
        self.depth -= 1;
        flow
    }

    fn range(&mut self, dot: &Val<'d>, control: &'s Control) -> Result<(), BuiltinError> {
        let value = self.pipeline(dot, &control.pipe)?;
        let decl = control.pipe.decl.len();
        // One variable takes the element; two take the index (or key) and the element.
        let body =
            |this: &mut Self, key: Val<'d>, element: Val<'d>| -> Result<bool, BuiltinError> {
                this.context.check_time()?;
                let top = this.vars.len();
                if decl >= 1 && top >= 1 {
                    this.vars[top - 1].1 = element.clone();
                }
                if decl == 2 && top >= 2 {
                    this.vars[top - 2].1 = key;
                }
                let flow = this.nested(&element, &control.list)?;
                this.vars.truncate(top);
                Ok(matches!(flow, Flow::Break))
            };
        let ran = match &value {
            Val::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    let index = i64::try_from(index).unwrap_or(i64::MAX);
                    if body(self, Val::Int(index), Val::of(item))? {
                        break;
                    }
                }
                !items.is_empty()
            }
            Val::Map(map) => {
                let mut keys: Vec<&'d String> = map.keys().collect();
                keys.sort_unstable();
                for &key in &keys {
                    let Some(item) = map.get(key.as_str()) else {
                        continue;
                    };
                    if body(self, Val::Str(Cow::Borrowed(key.as_str())), Val::of(item))? {
                        break;
                    }
                }
                !keys.is_empty()
            }
            Val::Int(count) => {
                if decl > 1 {
                    return Err(BuiltinError::Failed(format!(
                        "template: can't use {count} to iterate over more than one variable"
                    )));
                }
                for index in 0..*count {
                    if body(self, Val::Int(index), Val::Int(index))? {
                        break;
                    }
                }
                *count > 0
            }
            Val::Missing => false,
            other => {
                let mut text = String::new();
                print_value(&mut text, other);
                return Err(BuiltinError::Failed(format!(
                    "template: range can't iterate over {text}"
                )));
            }
        };
        if !ran && let Some(otherwise) = &control.otherwise {
            self.nested(dot, otherwise)?;
        }
        Ok(())
    }

    fn pipeline(&mut self, dot: &Val<'d>, pipe: &'s Pipe) -> Result<Val<'d>, BuiltinError> {
        let mut value: Option<Val<'d>> = None;
        for command in &pipe.commands {
            self.context.check_time()?;
            value = Some(self.command(dot, command, value)?.settled());
        }
        let value = value.unwrap_or(Val::Missing);
        for name in &pipe.decl {
            if pipe.assign {
                if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| n == name) {
                    slot.1 = value.clone();
                }
            } else {
                self.vars.push((name.clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn variable(&self, name: &str) -> Val<'d> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(Val::Missing, |(_, value)| value.clone())
    }

    fn command(
        &mut self,
        dot: &Val<'d>,
        command: &'s Command,
        last: Option<Val<'d>>,
    ) -> Result<Val<'d>, BuiltinError> {
        let span = command.span;
        let has_args = command.args.len() > 1 || last.is_some();
        let Some(first) = command.args.first() else {
            return Err(self.error(span, "empty command"));
        };
        let not_a_function = |this: &Self, what: &str| -> Result<(), BuiltinError> {
            if has_args {
                return Err(
                    this.error(span, &format!("can't give argument to non-function {what}"))
                );
            }
            Ok(())
        };
        match first {
            Operand::Field(names) => self.fields(span, dot.clone(), names, has_args),
            Operand::Variable(name, names) => {
                let value = self.variable(name);
                if names.is_empty() {
                    not_a_function(self, name)?;
                    return Ok(value);
                }
                self.fields(span, value, names, has_args)
            }
            Operand::Chain(inner, names) => {
                let value = self.operand(dot, span, inner)?;
                self.fields(span, value, names, has_args)
            }
            Operand::Function(name) => self.call(dot, span, name, &command.args[1..], last),
            Operand::Nil => Err(self.error(span, "nil is not a command")),
            other => {
                let text = self.source.get(span.start..span.end).unwrap_or("");
                let text = text.split(' ').next().unwrap_or(text).to_owned();
                not_a_function(self, &text)?;
                self.operand(dot, span, other)
            }
        }
    }

    /// The value of an operand that is an argument.
    fn operand(
        &mut self,
        dot: &Val<'d>,
        span: Span,
        operand: &'s Operand,
    ) -> Result<Val<'d>, BuiltinError> {
        Ok(match operand {
            Operand::Dot => dot.clone(),
            Operand::Nil => Val::Missing,
            Operand::Bool(b) => Val::Bool(*b),
            Operand::Int(i) => Val::Int(*i),
            Operand::Float(f) => Val::Float(*f),
            Operand::Str(s) => Val::Str(Cow::Borrowed(s.as_str())),
            Operand::Field(names) => self.fields(span, dot.clone(), names, false)?,
            Operand::Variable(name, names) => {
                let value = self.variable(name);
                if names.is_empty() {
                    value
                } else {
                    self.fields(span, value, names, false)?
                }
            }
            Operand::Function(name) => self.call(dot, span, name, &[], None)?,
            Operand::Pipe(pipe) => {
                self.depth += 1;
                let value = self.pipeline(dot, pipe);
                self.depth -= 1;
                value?
            }
            Operand::Chain(inner, names) => {
                let value = self.operand(dot, span, inner)?;
                self.fields(span, value, names, false)?
            }
        }
        .settled())
    }

    /// `receiver.a.b`.
    fn fields(
        &self,
        span: Span,
        mut receiver: Val<'d>,
        names: &[String],
        has_args: bool,
    ) -> Result<Val<'d>, BuiltinError> {
        for (index, name) in names.iter().enumerate() {
            receiver = match receiver {
                Val::Map(map) => {
                    if has_args && index + 1 == names.len() {
                        return Err(
                            self.error(span, &format!("{name} is not a method but has arguments"))
                        );
                    }
                    // Go's default `missingkey`: a missing key is no value, not an error.
                    map.get(name).map_or(Val::Missing, Val::of)
                }
                // A field of no value is no value.
                Val::Missing => Val::Missing,
                Val::Null => {
                    return Err(self.error(
                        span,
                        &format!("nil pointer evaluating interface {{}}.{name}"),
                    ));
                }
                other => {
                    return Err(self.error(
                        span,
                        &format!("can't evaluate field {name} in type {}", other.type_name()),
                    ));
                }
            };
        }
        Ok(receiver)
    }

    /// The operands of a function, the piped value last.
    fn arguments(
        &mut self,
        dot: &Val<'d>,
        span: Span,
        args: &'s [Operand],
        last: Option<Val<'d>>,
    ) -> Result<Vec<Val<'d>>, BuiltinError> {
        let mut values = Vec::with_capacity(args.len() + 1);
        for operand in args {
            values.push(self.operand(dot, span, operand)?);
        }
        values.extend(last);
        Ok(values)
    }

    fn call(
        &mut self,
        dot: &Val<'d>,
        span: Span,
        name: &str,
        args: &'s [Operand],
        last: Option<Val<'d>>,
    ) -> Result<Val<'d>, BuiltinError> {
        let count = args.len() + usize::from(last.is_some());
        let calling = |this: &Self, message: &str| {
            this.error(span, &format!("error calling {name}: {message}"))
        };
        let wrong = |this: &Self, want: &str| {
            this.error(
                span,
                &format!("wrong number of args for {name}: want {want} got {count}"),
            )
        };
        // `and` and `or` evaluate their operands one at a time and stop early.
        if name == "and" || name == "or" {
            if count == 0 {
                return Err(wrong(self, "at least 1"));
            }
            let mut value = Val::Missing;
            for operand in args {
                value = self.operand(dot, span, operand)?;
                self.valid(span, &value)?;
                if value.truth() == (name == "or") {
                    return Ok(value);
                }
            }
            if let Some(last) = last {
                self.valid(span, &last)?;
                value = last;
            }
            return Ok(value);
        }
        let values = self.arguments(dot, span, args, last)?;
        match name {
            "print" | "println" | "html" | "urlquery" => {
                let mut text = String::new();
                for (index, value) in values.iter().enumerate() {
                    let spaced = name == "println"
                        || (index > 0 && !value.is_string() && !values[index - 1].is_string());
                    if index > 0 && spaced {
                        text.push(' ');
                    }
                    print_value(&mut text, &printed(value));
                }
                if name == "println" {
                    text.push('\n');
                }
                let text = match name {
                    "html" => html_escape(&text),
                    "urlquery" => query_escape(&text),
                    _ => text,
                };
                self.context
                    .charge(text.len(), "strings.render_template's output")?;
                Ok(Val::Str(Cow::Owned(text)))
            }
            "printf" => {
                let Some(format) = values.first() else {
                    return Err(wrong(self, "at least 1"));
                };
                let Val::Str(format) = format else {
                    return Err(self.error(
                        span,
                        &format!(
                            "wrong type for value; expected string; got {}",
                            format.type_name()
                        ),
                    ));
                };
                let operands: Vec<GoValue> = values[1..]
                    .iter()
                    .map(|value| match value {
                        Val::Int(i) => GoValue::Int(*i),
                        Val::Float(f) => GoValue::Float(*f),
                        other => {
                            let mut text = String::new();
                            print_value(&mut text, &printed(other));
                            GoValue::Str(text)
                        }
                    })
                    .collect();
                let text = go_format(format, &operands, self.context)?;
                Ok(Val::Str(Cow::Owned(text)))
            }
            "not" => {
                if count != 1 {
                    return Err(wrong(self, "1"));
                }
                self.valid(span, &values[0])?;
                Ok(Val::Bool(!values[0].truth()))
            }
            "len" => {
                if count != 1 {
                    return Err(wrong(self, "1"));
                }
                self.valid(span, &values[0])?;
                let length = match &values[0] {
                    Val::Str(s) => s.len(),
                    Val::Number(n) => n.to_string().len(),
                    Val::Array(items) => items.len(),
                    Val::Map(map) => map.len(),
                    other => {
                        return Err(calling(self, &format!("len of type {}", other.type_name())));
                    }
                };
                Ok(Val::Int(i64::try_from(length).unwrap_or(i64::MAX)))
            }
            "index" => {
                let Some((item, indexes)) = values.split_first() else {
                    return Err(wrong(self, "at least 1"));
                };
                self.valid(span, item)?;
                let mut item = item.clone();
                for index in indexes {
                    self.context.check_time()?;
                    item = match (&item, index) {
                        (Val::Missing, _) => return Err(calling(self, "index of untyped nil")),
                        (Val::Null, _) => return Err(calling(self, "index of nil pointer")),
                        (Val::Array(_) | Val::Str(_), Val::Int(at)) => {
                            let length = match &item {
                                Val::Array(items) => items.len(),
                                Val::Str(s) => s.len(),
                                _ => 0,
                            };
                            let position = usize::try_from(*at)
                                .ok()
                                .filter(|&at| at < length)
                                .ok_or_else(|| {
                                    calling(self, &format!("index out of range: {at}"))
                                })?;
                            match &item {
                                Val::Array(items) => Val::of(&items[position]),
                                Val::Str(s) => Val::Int(i64::from(s.as_bytes()[position])),
                                _ => Val::Missing,
                            }
                        }
                        (Val::Array(_) | Val::Str(_), Val::Missing) => {
                            return Err(calling(self, "cannot index slice/array with nil"));
                        }
                        (Val::Array(_) | Val::Str(_), other) => {
                            return Err(calling(
                                self,
                                &format!(
                                    "cannot index slice/array with type {}",
                                    other.type_name()
                                ),
                            ));
                        }
                        (Val::Map(map), Val::Str(key)) => {
                            map.get(key.as_ref()).map_or(Val::Missing, Val::of)
                        }
                        (Val::Map(_), other) => {
                            return Err(calling(
                                self,
                                &format!("value has type {}; should be string", other.type_name()),
                            ));
                        }
                        (other, _) => {
                            return Err(calling(
                                self,
                                &format!("can't index item of type {}", other.type_name()),
                            ));
                        }
                    };
                }
                Ok(item)
            }
            "eq" | "ne" => {
                if count < 2 && name == "eq" {
                    return Err(calling(self, "missing argument for comparison"));
                }
                if count != 2 && name == "ne" {
                    return Err(wrong(self, "2"));
                }
                for value in &values {
                    self.valid(span, value)?;
                }
                let mut found = false;
                for other in &values[1..] {
                    if equal(&values[0], other).map_err(|message| calling(self, message))? {
                        found = true;
                        break;
                    }
                }
                Ok(Val::Bool(found == (name == "eq")))
            }
            "lt" | "le" | "gt" | "ge" => {
                if count != 2 {
                    return Err(wrong(self, "2"));
                }
                for value in &values {
                    self.valid(span, value)?;
                }
                let ordering =
                    order(&values[0], &values[1]).map_err(|message| calling(self, message))?;
                use std::cmp::Ordering::{Greater, Less};
                Ok(Val::Bool(match name {
                    "lt" => ordering == Less,
                    "le" => ordering != Greater,
                    "gt" => ordering == Greater,
                    _ => ordering != Less,
                }))
            }
            other => Err(self.error(span, &format!("function {other:?} not defined"))),
        }
    }

    /// Go refuses no value where a function wants one.
    fn valid(&self, span: Span, value: &Val<'_>) -> Result<(), BuiltinError> {
        if matches!(value, Val::Missing | Val::Null) {
            return Err(self.error(span, "invalid value; expected reflect.Value"));
        }
        Ok(())
    }
}

/// What `print` and friends see of an operand: no value is Go's `nil`.
fn printed<'v, 'd>(value: &'v Val<'d>) -> Cow<'v, Val<'d>> {
    match value {
        Val::Missing => Cow::Owned(Val::Null),
        other => Cow::Borrowed(other),
    }
}

/// Go's basic kinds of comparable values: `None` for no value, arrays and objects.
fn basic_kind(value: &Val<'_>) -> Option<u8> {
    match value {
        Val::Bool(_) => Some(0),
        Val::Int(_) => Some(1),
        Val::Float(_) => Some(2),
        Val::Str(_) | Val::Number(_) => Some(3),
        _ => None,
    }
}

fn text_of(value: &Val<'_>) -> String {
    match value {
        Val::Str(s) => s.to_string(),
        Val::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// Go's `eq` of two operands.
fn equal(a: &Val<'_>, b: &Val<'_>) -> Result<bool, &'static str> {
    match (basic_kind(a), basic_kind(b)) {
        (None, None) => Err("non-comparable types"),
        (x, y) if x != y => Err("incompatible types for comparison"),
        _ => Ok(match (a, b) {
            (Val::Bool(x), Val::Bool(y)) => x == y,
            (Val::Int(x), Val::Int(y)) => x == y,
            (Val::Float(x), Val::Float(y)) => x == y,
            _ => text_of(a) == text_of(b),
        }),
    }
}

/// Go's order of two operands, as `lt` and friends take it.
fn order(a: &Val<'_>, b: &Val<'_>) -> Result<std::cmp::Ordering, &'static str> {
    let (Some(x), Some(y)) = (basic_kind(a), basic_kind(b)) else {
        return Err("invalid type for comparison");
    };
    if x != y {
        return Err("incompatible types for comparison");
    }
    match (a, b) {
        (Val::Bool(_), _) => Err("invalid type for comparison"),
        (Val::Int(x), Val::Int(y)) => Ok(x.cmp(y)),
        (Val::Float(x), Val::Float(y)) => Ok(x.total_cmp(y)),
        _ => Ok(text_of(a).cmp(&text_of(b))),
    }
}

/// Go's `template.HTMLEscapeString`.
fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, vars: Value) -> Outcome {
        render_template(&[json!(template), vars], &mut BuiltinContext::default())
    }

    fn rendered(template: &str, vars: Value) -> String {
        match render(template, vars) {
            Ok(Value::String(text)) => text,
            other => panic!("{template}: {other:?}"),
        }
    }

    fn failure(template: &str, vars: Value) -> String {
        match render(template, vars) {
            Err(BuiltinError::Failed(message)) => message,
            other => panic!("{template}: expected an error, got {other:?}"),
        }
    }

    /// OPA's own test cases of `strings.render_template`.
    #[test]
    fn opa_test_cases() {
        assert_eq!(
            rendered("{{.test}}", json!({"test": "hello world"})),
            "hello world"
        );
        assert_eq!(rendered("{{.test}}", json!({"test": 2023})), "2023");
        assert_eq!(
            rendered(
                "{{range $i, $name := .hellonames}}{{if $i}},{{end}}hello {{$name}}{{end}}",
                json!({"hellonames": ["rohan", "john doe"]})
            ),
            "hello rohan,hello john doe"
        );
        // OPA v1.20: `rendertemplate/missingkey` and `rendertemplate/missingmultiplekeys`.
        assert_eq!(
            rendered("{{.testvarnotprovided}}", json!({"test": "hello world"})),
            "<undefined>"
        );
        assert_eq!(
            rendered("test {{.foo}} {{.bar}} {{.baz}}", json!({"baz": 1})),
            "test <undefined> <undefined> 1"
        );
    }

    /// OPA v1.20.2 answers `<undefined>` wherever Go prints `<no value>`: a missing key, a
    /// field of one, a `null`, a missing entry of `index`, and the template's own text.
    #[test]
    fn no_value_renders_undefined_as_in_opa() {
        assert_eq!(rendered("{{.missing}}", json!({})), "<undefined>");
        assert_eq!(rendered("{{.a.b.c}}", json!({})), "<undefined>");
        assert_eq!(
            rendered("{{.n}} {{index . \"zz\"}}", json!({"n": null})),
            "<undefined> <undefined>"
        );
        assert_eq!(rendered("<no value>", json!({})), "<undefined>");
        assert_eq!(
            rendered("{{if .missing}}yes{{else}}no{{end}}", json!({})),
            "no"
        );
        assert_eq!(
            rendered("{{range .missing}}x{{else}}none{{end}}", json!({})),
            "none"
        );
        // A field of a `null` is still Go's nil pointer error.
        assert!(
            failure("{{.n.b}}", json!({"n": null}))
                .ends_with("nil pointer evaluating interface {}.b")
        );
    }

    /// Go's `text/template` as OPA feeds it: numbers are `json.Number`, `null` is no value.
    #[test]
    fn values_print_and_compare_as_in_go() {
        let vars = json!({
            "s": "x", "n": 5, "f": 1.5, "zero": 0, "t": true, "null": null,
            "list": ["a", 1, null, {"k": "v"}], "map": {"b": 2, "a": [1, 2]}, "empty": [],
        });
        assert_eq!(rendered("{{.list}}", vars.clone()), "[a 1 <nil> map[k:v]]");
        assert_eq!(rendered("{{.map}}", vars.clone()), "map[a:[1 2] b:2]");
        assert_eq!(
            rendered("{{.null}}|{{.t}}|{{.f}}", vars.clone()),
            "<undefined>|true|1.5"
        );
        // A number of the data is a string type: true even when zero, equal to its digits.
        assert_eq!(rendered("{{if .zero}}yes{{end}}", vars.clone()), "yes");
        assert_eq!(
            rendered("{{eq .n \"5\"}} {{lt .s \"y\"}}", vars.clone()),
            "true true"
        );
        assert!(
            failure("{{eq .n 5}}", vars.clone())
                .ends_with("error calling eq: incompatible types for comparison")
        );
        assert_eq!(
            rendered(
                "{{eq 1 2 1}} {{ne 1 2}} {{le 2 2}} {{gt 1.5 2.5}}",
                vars.clone()
            ),
            "true true true false"
        );
        assert_eq!(
            rendered("{{len .list}} {{len .s}} {{len .map}}", vars.clone()),
            "4 1 2"
        );
        assert_eq!(
            rendered(
                "{{index .list 3 \"k\"}} {{index .map \"zz\"}}",
                vars.clone()
            ),
            "v <undefined>"
        );
        assert!(
            failure("{{index .list 9}}", vars.clone())
                .ends_with("error calling index: index out of range: 9")
        );
        assert_eq!(
            rendered("{{and 1 0 2}} {{or 0 \"\" 3}} {{not .t}}", vars.clone()),
            "0 3 false"
        );
        assert_eq!(rendered("{{print \"a\" 1 2 \"b\"}}", vars.clone()), "a1 2b");
        assert_eq!(rendered("{{println 1 \"a\"}}", vars.clone()), "1 a\n");
        assert_eq!(
            rendered("{{printf \"%s=%d %5.2f\" .s 7 2.5}}", vars.clone()),
            "x=7  2.50"
        );
        assert_eq!(
            rendered("{{html \"<a href='x'>&\"}}", vars.clone()),
            "&lt;a href=&#39;x&#39;&gt;&amp;"
        );
        assert_eq!(
            rendered("{{urlquery \"a b&c/é\"}}", vars.clone()),
            "a+b%26c%2F%C3%A9"
        );
        assert_eq!(
            rendered("{{\"x\" | printf \"%s-%s\" \"y\"}}", vars.clone()),
            "y-x"
        );
        assert_eq!(
            rendered("{{'a'}} {{0x1F}} {{1e3}} {{-2}}", vars.clone()),
            "97 31 1000 -2"
        );
        assert!(
            failure("{{.s.x}}", vars.clone()).ends_with("can't evaluate field x in type string")
        );
        assert!(failure("{{.null.x}}", vars).ends_with("nil pointer evaluating interface {}.x"));
    }

    #[test]
    fn control_structures_and_variables() {
        let vars = json!({"items": ["a", "b", "c"], "obj": {"y": 2, "x": 1}, "who": {"name": "n"}, "none": []});
        assert_eq!(
            rendered(
                "{{range .items}}{{if eq . \"b\"}}{{continue}}{{end}}{{.}}{{end}}",
                vars.clone()
            ),
            "ac"
        );
        assert_eq!(
            rendered(
                "{{range $i, $e := .items}}{{if eq $i 1}}{{break}}{{end}}{{$e}}{{end}}",
                vars.clone()
            ),
            "a"
        );
        assert_eq!(
            rendered(
                "{{range $k, $v := .obj}}{{$k}}={{$v}};{{end}}",
                vars.clone()
            ),
            "x=1;y=2;"
        );
        assert_eq!(
            rendered("{{range .none}}x{{else}}empty{{end}}", vars.clone()),
            "empty"
        );
        assert_eq!(rendered("{{range 3}}{{.}}{{end}}", vars.clone()), "012");
        assert_eq!(
            rendered(
                "{{with .who}}{{.name}}{{end}}{{with .none}}x{{else}}no{{end}}",
                vars.clone()
            ),
            "nno"
        );
        assert_eq!(
            rendered(
                "{{if .none}}a{{else if .items}}b{{else}}c{{end}}",
                vars.clone()
            ),
            "b"
        );
        assert_eq!(
            rendered(
                "{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}",
                vars.clone()
            ),
            "2"
        );
        assert_eq!(
            rendered(
                "{{$.who.name}} {{(index .items 1)}} {{(.who).name}}",
                vars.clone()
            ),
            "n b n"
        );
        assert_eq!(
            rendered("a  {{- /* note */ -}}  b {{- 1 -}} \n c", vars.clone()),
            "ab1c"
        );
        assert_eq!(
            rendered(
                "{{define \"t\"}}<{{.}}>{{end}}{{template \"t\" .who.name}}{{block \"b\" 3}}[{{.}}]{{end}}",
                vars
            ),
            "<n>[3]"
        );
    }

    #[test]
    fn malformed_templates_are_errors() {
        for (template, message) in [
            ("{{.x", "unclosed action"),
            ("{{end}}", "unexpected {{end}}"),
            ("{{if .x}}", "unexpected EOF"),
            ("{{nope}}", "function \"nope\" not defined"),
            ("{{js \"x\"}}", "not provided by this host"),
            ("{{$x}}", "undefined variable \"$x\""),
            ("{{break}}", "{{break}} outside {{range}}"),
            ("{{(1}}", "unclosed left paren"),
            ("{{\"a}}", "unterminated quoted string"),
            ("{{/* x }}", "unclosed comment"),
            (
                "{{template \"missing\"}}",
                "template \"missing\" not defined",
            ),
            ("{{1 | 2}}", "non executable command in pipeline stage 2"),
            ("{{nil}}", "nil is not a command"),
            ("{{1 2}}", "can't give argument to non-function 1"),
            ("{{99999999999999999999}}", "integer overflow"),
        ] {
            let error = failure(template, json!({}));
            assert!(error.contains(message), "{template}: {error}");
        }
        assert!(matches!(
            render("x", json!([])),
            Err(BuiltinError::Failed(message)) if message.contains("operand 2 must be object")
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// Templates made of the language's pieces, well formed or not: a text, or an error;
        /// never a panic.
        #[test]
        fn no_template_makes_the_engine_panic(
            template in "(\\{\\{-? |\\{\\{| -?\\}\\}|\\}\\}|/\\*|\\*/|if |range |else |end|with |define |template |block |break|continue|\\$[a-z]?|\\.[a-c]?|[-+ :=|(),'`\"a-c0-9é\\\\]|len |index |printf |eq |and |nil ){0,24}"
        ) {
            let vars = json!({"a": [1, "x", null], "b": {"c": "d"}, "c": 2.5});
            let mut context = BuiltinContext::new(1 << 20, u64::MAX, |_| false);
            context.begin_call();
            let _ = render_template(&[json!(template), vars], &mut context);
        }
    }

    #[test]
    fn hostile_templates_stop() {
        // Recursion through templates ends at the depth limit.
        let error = failure(
            "{{define \"r\"}}{{template \"r\" .}}{{end}}{{template \"r\" .}}",
            json!({}),
        );
        assert!(error.contains("exceeded maximum template depth"), "{error}");
        // Deep parentheses are refused when parsed.
        let deep = format!("{{{{{}1{}}}}}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(failure(&deep, json!({})).contains("max expression depth exceeded"));
        // Output past the memory limit.
        let mut context = BuiltinContext::new(1 << 16, u64::MAX, |_| false);
        context.begin_call();
        let answer = render_template(
            &[json!("{{range 1000000}}xxxxxxxx{{end}}"), json!({})],
            &mut context,
        );
        assert!(
            matches!(answer, Err(BuiltinError::MemoryLimit(_))),
            "{answer:?}"
        );
        // A loop past the deadline.
        let mut context = BuiltinContext::new(usize::MAX, 0, |_| true);
        context.begin_call();
        let answer = render_template(
            &[json!("{{range 1000000000}}{{end}}"), json!({})],
            &mut context,
        );
        assert_eq!(answer, Err(BuiltinError::TimeLimit));
    }
}
