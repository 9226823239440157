//! Reading a YAML document the way the reference service reads it: a tree of
//! positioned nodes whose plain scalars are typed by YAML 1.1's rules.
//!
//! The parser (saphyr-parser) only tokenizes; this module builds the tree from
//! its events so that every pair of a mapping is kept in document order, the
//! scalar text and style survive (YAML 1.1 and 1.2 type `yes`, `0x10` or `08`
//! differently), and merge keys (`<<`) apply where they stand, as the
//! reference's reader applies them.

use std::{borrow::Cow, collections::HashMap, fmt};

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span, StrInput, Tag};

/// How deep collections may nest before a document is refused: far beyond
/// any configuration, and shallow enough that walking the tree recursively
/// stays well inside a worker thread's stack.
const MAX_DEPTH: usize = 1_000;

/// How many nodes aliases may add to a document in all, so that a few nested
/// anchors cannot expand into an exponential tree.
const ALIAS_BUDGET: usize = 100_000;

/// A position in a file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Pos {
    fn of(span: Span) -> Self {
        Self {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// A node of the document with the position where it starts.
#[derive(Debug, Clone)]
pub(crate) struct Node<'s> {
    pub(crate) pos: Pos,
    pub(crate) kind: NodeKind<'s>,
}

/// What a node holds.
#[derive(Debug, Clone)]
pub(crate) enum NodeKind<'s> {
    Scalar(Scalar<'s>),
    Sequence(Vec<Node<'s>>),
    /// Every pair in document order, duplicates and merge keys included; see
    /// [`Node::entries`] for the pairs a reader sees.
    Mapping(Vec<(Node<'s>, Node<'s>)>),
}

/// A scalar as written, and how the reference types it.
#[derive(Debug, Clone)]
pub(crate) struct Scalar<'s> {
    pub(crate) text: Cow<'s, str>,
    pub(crate) value: Value,
}

/// The type and value of a scalar under YAML 1.1's resolution rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer above `i64::MAX` that fits `u64`.
    BigInt(u64),
    Float(f64),
    Str,
    /// The merge key `<<`.
    Merge,
}

impl Value {
    /// The YAML tag that names this type in error messages.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::Null => "!!null",
            Self::Bool(_) => "!!bool",
            Self::Int(_) | Self::BigInt(_) => "!!int",
            Self::Float(_) => "!!float",
            Self::Str => "!!str",
            Self::Merge => "!!merge",
        }
    }
}

impl<'s> Node<'s> {
    /// The scalar, if this node is one.
    pub(crate) fn scalar(&self) -> Option<&Scalar<'s>> {
        match &self.kind {
            NodeKind::Scalar(scalar) => Some(scalar),
            _ => None,
        }
    }

    /// Whether the node is a null scalar (`~`, `null` or nothing).
    pub(crate) fn is_null(&self) -> bool {
        matches!(self.scalar(), Some(s) if s.value == Value::Null)
    }

    /// The YAML tag of the node as error messages name it.
    pub(crate) fn tag(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar(scalar) => scalar.value.tag(),
            NodeKind::Sequence(_) => "!!seq",
            NodeKind::Mapping(_) => "!!map",
        }
    }

    /// The pairs of a mapping as a reader sees them: merge keys applied
    /// where they stand (a merged mapping overrides the keys before it, the
    /// keys after it override the merged ones, and in a list of mappings the
    /// first one wins) and, of duplicate keys, the last value.
    ///
    /// Keys that are not strings are kept with their own node, for the caller
    /// to refuse.
    ///
    /// # Errors
    ///
    /// The merge key's node when its value is neither a mapping nor a list of
    /// mappings.
    pub(crate) fn entries(&self) -> Result<Vec<Entry<'_, 's>>, &Node<'s>> {
        let mut entries = Vec::new();
        if let NodeKind::Mapping(pairs) = &self.kind {
            merge_into(&mut entries, pairs)?;
        }
        Ok(entries)
    }

    /// The node rendered as the reference renders a value in its messages.
    pub(crate) fn render(&self) -> String {
        struct Render<'n, 's>(&'n Node<'s>);
        impl fmt::Display for Render<'_, '_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match &self.0.kind {
                    NodeKind::Scalar(scalar) => match scalar.value {
                        Value::Null => f.write_str("<nil>"),
                        Value::Bool(value) => write!(f, "{value}"),
                        Value::Int(value) => write!(f, "{value}"),
                        Value::BigInt(value) => write!(f, "{value}"),
                        Value::Float(_) | Value::Str | Value::Merge => f.write_str(&scalar.text),
                    },
                    NodeKind::Sequence(items) => {
                        f.write_str("[")?;
                        for (i, item) in items.iter().enumerate() {
                            if i > 0 {
                                f.write_str(" ")?;
                            }
                            Render(item).fmt(f)?;
                        }
                        f.write_str("]")
                    }
                    NodeKind::Mapping(pairs) => {
                        f.write_str("map[")?;
                        for (i, (key, value)) in pairs.iter().enumerate() {
                            if i > 0 {
                                f.write_str(" ")?;
                            }
                            write!(f, "{}:{}", Render(key), Render(value))?;
                        }
                        f.write_str("]")
                    }
                }
            }
        }
        Render(self).to_string()
    }
}

/// One pair of a mapping as a reader sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'n, 's> {
    pub(crate) key: &'n Node<'s>,
    pub(crate) value: &'n Node<'s>,
}

impl<'n> Entry<'n, '_> {
    /// The key's text when the key is a string.
    pub(crate) fn name(&self) -> Option<&'n str> {
        match self.key.scalar() {
            Some(scalar) if scalar.value == Value::Str => Some(&scalar.text),
            _ => None,
        }
    }
}

fn merge_into<'n, 's>(
    entries: &mut Vec<Entry<'n, 's>>,
    pairs: &'n [(Node<'s>, Node<'s>)],
) -> Result<(), &'n Node<'s>> {
    for (key, value) in pairs {
        if matches!(key.scalar(), Some(s) if s.value == Value::Merge) {
            match &value.kind {
                NodeKind::Mapping(merged) => merge_into(entries, merged)?,
                NodeKind::Sequence(items) => {
                    // Later mappings first, so that the first one's keys win.
                    for item in items.iter().rev() {
                        match &item.kind {
                            NodeKind::Mapping(merged) => merge_into(entries, merged)?,
                            _ => return Err(key),
                        }
                    }
                }
                NodeKind::Scalar(_) => return Err(key),
            }
            continue;
        }
        let entry = Entry { key, value };
        let same = |other: &Entry<'_, '_>| match (other.name(), entry.name()) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        match entries.iter_mut().find(|other| same(other)) {
            Some(existing) => *existing = entry,
            None => entries.push(entry),
        }
    }
    Ok(())
}

/// Why a document could not be read as YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) pos: Pos,
    pub(crate) message: String,
}

impl SyntaxError {
    fn at(pos: Pos, message: impl Into<String>) -> Self {
        Self {
            pos,
            message: message.into(),
        }
    }
}

impl From<ScanError> for SyntaxError {
    fn from(error: ScanError) -> Self {
        Self::at(
            Pos {
                line: error.marker().line(),
                column: error.marker().col() + 1,
            },
            error.info(),
        )
    }
}

/// Reads the first document of `source`: `None` when there is none (an empty
/// file, or only comments). Later documents are not read, as the reference
/// reads only the first.
pub(crate) fn parse(source: &str) -> Result<Option<Node<'_>>, SyntaxError> {
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut reader = Reader {
        parser: Parser::new(StrInput::new(source)),
        anchors: HashMap::new(),
        alias_budget: ALIAS_BUDGET,
    };
    reader.document()
}

struct Reader<'s> {
    parser: Parser<'s, StrInput<'s>>,
    anchors: HashMap<usize, Node<'s>>,
    alias_budget: usize,
}

impl<'s> Reader<'s> {
    fn next(&mut self) -> Result<(Event<'s>, Span), SyntaxError> {
        match self.parser.next_event() {
            Some(event) => Ok(event?),
            // The parser ends every stream with StreamEnd, which `document`
            // stops at, so this is an input it gave up on.
            None => Err(SyntaxError::at(
                Pos { line: 1, column: 1 },
                "unexpected end of input",
            )),
        }
    }

    fn document(&mut self) -> Result<Option<Node<'s>>, SyntaxError> {
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::Nothing => {}
                Event::StreamEnd => return Ok(None),
                Event::DocumentStart(_) => {
                    let (event, span) = self.next()?;
                    if event == Event::DocumentEnd {
                        return Ok(None);
                    }
                    // A document holding only a null reads as no document.
                    let node = self.node(event, span, 0)?;
                    return Ok((!node.is_null()).then_some(node));
                }
                _ => return Err(SyntaxError::at(Pos::of(span), "expected a document")),
            }
        }
    }

    fn node(
        &mut self,
        event: Event<'s>,
        span: Span,
        depth: usize,
    ) -> Result<Node<'s>, SyntaxError> {
        let pos = Pos::of(span);
        if depth > MAX_DEPTH {
            return Err(SyntaxError::at(
                pos,
                format!("collections nest more than {MAX_DEPTH} levels deep"),
            ));
        }
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                let value = resolve(&text, style, tag.as_deref())
                    .map_err(|message| SyntaxError::at(pos, message))?;
                let kind = NodeKind::Scalar(Scalar { text, value });
                (Node { pos, kind }, anchor)
            }
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if event == Event::SequenceEnd {
                        break;
                    }
                    items.push(self.node(event, span, depth + 1)?);
                }
                let kind = NodeKind::Sequence(items);
                (Node { pos, kind }, anchor)
            }
            Event::MappingStart(anchor, _) => {
                let mut pairs = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if event == Event::MappingEnd {
                        break;
                    }
                    let key = self.node(event, span, depth + 1)?;
                    let (event, span) = self.next()?;
                    let value = self.node(event, span, depth + 1)?;
                    pairs.push((key, value));
                }
                let kind = NodeKind::Mapping(pairs);
                (Node { pos, kind }, anchor)
            }
            Event::Alias(anchor) => {
                let Some(target) = self.anchors.get(&anchor) else {
                    return Err(SyntaxError::at(pos, "unknown anchor"));
                };
                let size = size(target, self.alias_budget)
                    .ok_or_else(|| SyntaxError::at(pos, "document contains excessive aliasing"))?;
                self.alias_budget -= size;
                // An alias is read as a copy of its anchor's node.
                (target.clone(), 0)
            }
            _ => return Err(SyntaxError::at(pos, "unexpected event")),
        };
        // Anchor ids start at 1; 0 means none.
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(node)
    }
}

/// The number of nodes in `node`'s tree, or `None` once it exceeds `limit`.
fn size(node: &Node<'_>, limit: usize) -> Option<usize> {
    let mut count = 0usize;
    let mut pending = vec![node];
    while let Some(node) = pending.pop() {
        count += 1;
        if count > limit {
            return None;
        }
        match &node.kind {
            NodeKind::Scalar(_) => {}
            NodeKind::Sequence(items) => pending.extend(items),
            NodeKind::Mapping(pairs) => {
                for (key, value) in pairs {
                    pending.push(key);
                    pending.push(value);
                }
            }
        }
    }
    Some(count)
}

/// The tag suffixes of YAML's core schema (`!!str`, ...).
const CORE_TAG_HANDLE: &str = "tag:yaml.org,2002:";

/// Types a scalar as the reference does: quoted and block scalars are
/// strings; plain scalars follow YAML 1.1 (booleans `yes`/`no`/`on`/`off`/
/// `y`/`n` in three casings, nulls `~`/`null`/empty, integers with `0x`,
/// `0o`, `0b` or a leading `0` for octal and `_` separators, floats); a core
/// schema tag (`!!str`, `!!int`, ...) asks for its type; any other tag reads
/// the text as a string.
fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    let wanted = match tag {
        Some(tag) if tag.handle == CORE_TAG_HANDLE => tag.suffix.as_str(),
        Some(_) => return Ok(Value::Str),
        None if style == ScalarStyle::Plain => return Ok(resolve_plain(text)),
        None => return Ok(Value::Str),
    };
    let value = resolve_plain(text);
    let fits = match wanted {
        "str" | "binary" | "timestamp" => return Ok(Value::Str),
        "null" => value == Value::Null,
        "bool" => matches!(value, Value::Bool(_)),
        "int" => matches!(value, Value::Int(_) | Value::BigInt(_)),
        "float" => match value {
            Value::Int(int) => return Ok(Value::Float(int as f64)),
            Value::BigInt(int) => return Ok(Value::Float(int as f64)),
            Value::Float(_) => true,
            _ => false,
        },
        "merge" => value == Value::Merge,
        _ => false,
    };
    if fits {
        Ok(value)
    } else {
        Err(format!(
            "cannot decode {} `{text}` as a !!{wanted}",
            value.tag()
        ))
    }
}

/// YAML 1.1's resolution of a plain scalar, as the reference's reader does it.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Value::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Value::Bool(false);
        }
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        "<<" => return Value::Merge,
        _ => {}
    }
    match text.as_bytes().first() {
        Some(b'.') => match text.parse::<f64>() {
            Ok(float) if float.is_finite() => Value::Float(float),
            _ => Value::Str,
        },
        Some(b'0'..=b'9' | b'+' | b'-') => {
            let plain: String = text.chars().filter(|c| *c != '_').collect();
            if let Some(int) = parse_int(&plain) {
                return match i64::try_from(int) {
                    Ok(int) => Value::Int(int),
                    Err(_) => match u64::try_from(int) {
                        Ok(int) => Value::BigInt(int),
                        Err(_) => Value::Str,
                    },
                };
            }
            // An overflowing float is refused by the reference's number
            // parser and stays a string.
            if is_float_syntax(&plain)
                && let Ok(float) = plain.parse::<f64>()
                && float.is_finite()
            {
                return Value::Float(float);
            }
            Value::Str
        }
        _ => Value::Str,
    }
}

/// An integer with an optional sign and a base prefix (`0x`, `0o`, `0b`, or
/// a leading `0` for octal), as a signed parse with automatic base reads it;
/// `None` unless it fits `i64` (signed) or `u64` (unsigned, no sign).
fn parse_int(text: &str) -> Option<i128> {
    let (negative, signed, digits) = match text.as_bytes().first()? {
        b'-' => (true, true, &text[1..]),
        b'+' => (false, true, &text[1..]),
        _ => (false, false, text),
    };
    let lower = digits.get(..2).map(str::to_ascii_lowercase);
    let (radix, digits) = match lower.as_deref() {
        Some("0x") => (16, &digits[2..]),
        Some("0o") => (8, &digits[2..]),
        Some("0b") => (2, &digits[2..]),
        _ if digits.len() > 1 && digits.starts_with('0') => (8, &digits[1..]),
        _ => (10, digits),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    let value = if negative {
        -i128::from(magnitude)
    } else {
        i128::from(magnitude)
    };
    let fits = if signed {
        i64::try_from(value).is_ok()
    } else {
        true
    };
    fits.then_some(value)
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`: the reference's
/// test for a float written as a plain scalar.
fn is_float_syntax(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(source: &str) -> Node<'_> {
        parse(source).expect("parses").expect("a document")
    }

    fn value_of(source: &str) -> Value {
        let node = root(source);
        let entries = node.entries().expect("no bad merge");
        entries[0].value.scalar().expect("a scalar").value
    }

    #[test]
    fn plain_scalars_follow_yaml_1_1() {
        for (text, expected) in [
            ("yes", Value::Bool(true)),
            ("Y", Value::Bool(true)),
            ("On", Value::Bool(true)),
            ("TRUE", Value::Bool(true)),
            ("n", Value::Bool(false)),
            ("OFF", Value::Bool(false)),
            ("No", Value::Bool(false)),
            ("yEs", Value::Str),
            ("~", Value::Null),
            ("", Value::Null),
            ("NULL", Value::Null),
            ("404", Value::Int(404)),
            ("-7", Value::Int(-7)),
            ("+7", Value::Int(7)),
            ("1_000", Value::Int(1000)),
            ("0x10", Value::Int(16)),
            ("0o17", Value::Int(15)),
            ("017", Value::Int(15)),
            ("0b101", Value::Int(5)),
            ("-0x10", Value::Int(-16)),
            ("9223372036854775807", Value::Int(i64::MAX)),
            ("9223372036854775808", Value::BigInt(1 << 63)),
            ("1.5", Value::Float(1.5)),
            ("1e3", Value::Float(1000.0)),
            ("08", Value::Float(8.0)),
            (".5", Value::Float(0.5)),
            ("99999999999999999999", Value::Float(1e20)),
            ("1e400", Value::Str),
            ("0x", Value::Str),
            ("-", Value::Str),
            ("2001-12-14", Value::Str),
            ("abc", Value::Str),
            ("<<", Value::Merge),
        ] {
            assert_eq!(resolve_plain(text), expected, "{text:?}");
        }
        assert!(matches!(resolve_plain(".inf"), Value::Float(f) if f.is_infinite()));
    }

    #[test]
    fn quoted_and_block_scalars_are_strings() {
        assert_eq!(value_of("a: 'yes'"), Value::Str);
        assert_eq!(value_of("a: \"404\""), Value::Str);
        assert_eq!(value_of("a: |\n  yes\n"), Value::Str);
        assert_eq!(value_of("a: !!str 404"), Value::Str);
        assert_eq!(value_of("a: !custom yes"), Value::Str);
        assert_eq!(value_of("a: !!int \"12\""), Value::Int(12));
        assert!(parse("a: !!int abc").is_err());
    }

    #[test]
    fn duplicate_keys_keep_the_last_value_and_merges_apply_in_place() {
        let node = root("a: 1\nb: 2\na: 3\n");
        let entries = node.entries().expect("no bad merge");
        let pairs: Vec<_> = entries
            .iter()
            .map(|e| (e.name().expect("string key"), e.value.render()))
            .collect();
        assert_eq!(pairs, [("a", "3".to_owned()), ("b", "2".to_owned())]);

        // A merge overrides the keys before it; keys after it override it;
        // in a list of merged mappings the first wins.
        let node = root(
            "base: &base {a: 1, b: 1}\nother: &other {b: 2, c: 2}\n\
             m: {a: 0, <<: [*base, *other], c: 3}\n",
        );
        let entries = node.entries().expect("no bad merge");
        let merged = entries[2].value.entries().expect("no bad merge");
        let pairs: Vec<_> = merged
            .iter()
            .map(|e| (e.name().expect("string key"), e.value.render()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("a", "1".to_owned()),
                ("b", "1".to_owned()),
                ("c", "3".to_owned())
            ]
        );

        let node = root("m: {<<: 1}\n");
        let entries = node.entries().expect("no bad merge");
        assert!(entries[0].value.entries().is_err());
    }

    #[test]
    fn positions_are_one_based() {
        let node = root("a:\n  b: c\n");
        let entries = node.entries().expect("no bad merge");
        let inner = entries[0].value.entries().expect("no bad merge");
        assert_eq!(inner[0].key.pos, Pos { line: 2, column: 3 });
        assert_eq!(inner[0].value.pos, Pos { line: 2, column: 6 });
    }

    #[test]
    fn empty_documents_syntax_errors_and_alias_bombs() {
        assert!(parse("").expect("parses").is_none());
        assert!(parse("# only a comment\n").expect("parses").is_none());
        assert!(parse("---\n...\n").expect("parses").is_none());
        // Only the first document is read.
        assert!(parse("a: 1\n---\nb: [\n").expect("parses").is_some());
        let error = parse("a: [1, 2\nb: c\n").expect_err("unclosed sequence");
        assert!(error.pos.line >= 1);
        assert!(parse("a: *nowhere\n").is_err());

        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let prev = i - 1;
            bomb.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        let error = parse(&bomb).expect_err("expands to 10^8 nodes");
        assert_eq!(error.message, "document contains excessive aliasing");

        let deep = format!(
            "a: {}{}",
            "[".repeat(MAX_DEPTH + 5),
            "]".repeat(MAX_DEPTH + 5)
        );
        assert!(parse(&deep).is_err());
    }

    #[test]
    fn render_matches_the_reference_messages() {
        let node = root("a: [x, 1, ~, yes, [b, c], {k: v}]\n");
        let entries = node.entries().expect("no bad merge");
        assert_eq!(entries[0].value.render(), "[x 1 <nil> true [b c] map[k:v]]");
    }
}
