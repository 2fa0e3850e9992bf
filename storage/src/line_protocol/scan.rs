//! Tokenizing one line-protocol record into borrowed pieces.
//!
//! The scanner walks bytes (every delimiter is ASCII, so positions it stops at are
//! character boundaries of the `&str`) and fills a reused [`Line`]. Tokens without
//! escapes are slices of the body; only escaped tokens are copied.

use std::borrow::Cow;

use super::value::{self, Value};
use super::LINE_COLUMNS_MAX;
use crate::schema::TIME_COLUMN;

/// One record's pieces, reused from line to line (cleared by [`scan_line`]).
#[derive(Default)]
pub(super) struct Line<'a> {
    pub(super) measurement: Cow<'a, str>,
    pub(super) tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub(super) fields: Vec<(Cow<'a, str>, Value<'a>)>,
    pub(super) timestamp: Option<i64>,
}

/// Where a successfully scanned record ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    /// Byte index just past the record's `\n` (or the end of the text).
    pub(super) end: usize,
    /// Physical lines the record occupies (more than one only through quoted strings).
    pub(super) lines: usize,
}

/// A record that could not be scanned, and where the next record starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScanFailure {
    pub(super) error: String,
    /// Byte index just past the damaged record's `\n` (or the end of the text).
    pub(super) end: usize,
    /// Physical lines the damaged record occupies.
    pub(super) lines: usize,
}

/// Which token is being read: decides where it stops and what a backslash escapes.
#[derive(Clone, Copy)]
enum Kind {
    Measurement,
    TagKey,
    TagValue,
    FieldKey,
}

const NORMAL: u8 = 0;
const STOP: u8 = 1;
const BACKSLASH: u8 = 2;

const fn classes(stops: &[u8]) -> [u8; 256] {
    let mut table = [NORMAL; 256];
    table[b'\\' as usize] = BACKSLASH;
    table[b'\n' as usize] = STOP;
    let mut i = 0;
    while i < stops.len() {
        table[stops[i] as usize] = STOP;
        i += 1;
    }
    table
}

const MEASUREMENT_CLASSES: [u8; 256] = classes(b", ");
const KEY_CLASSES: [u8; 256] = classes(b",= ");
const TAG_VALUE_CLASSES: [u8; 256] = classes(b", ");

impl Kind {
    fn classes(self) -> &'static [u8; 256] {
        match self {
            Kind::Measurement => &MEASUREMENT_CLASSES,
            Kind::TagKey | Kind::FieldKey => &KEY_CLASSES,
            Kind::TagValue => &TAG_VALUE_CLASSES,
        }
    }

    /// Characters a backslash escapes in this kind of token.
    fn escapes(self, c: u8) -> bool {
        match self {
            Kind::Measurement => matches!(c, b',' | b' ' | b'\\'),
            Kind::TagKey | Kind::TagValue | Kind::FieldKey => {
                matches!(c, b',' | b'=' | b' ' | b'\\')
            }
        }
    }
}

/// Index just past the next `\n` at or after `from`, or the end of `b`.
pub(super) fn next_line(b: &[u8], from: usize) -> usize {
    b.get(from..)
        .and_then(|rest| rest.iter().position(|&c| c == b'\n'))
        .map_or(b.len(), |i| from + i + 1)
}

struct Cursor<'a> {
    text: &'a str,
    b: &'a [u8],
    pos: usize,
    /// Newlines crossed inside quoted strings so far.
    newlines: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn slice(&self, start: usize, end: usize) -> &'a str {
        debug_assert!(self.text.is_char_boundary(start) && self.text.is_char_boundary(end));
        self.text.get(start..end).unwrap_or_default()
    }

    /// Reads a token up to its first unescaped stop character (or the end).
    fn token(&mut self, kind: Kind) -> Cow<'a, str> {
        let classes = kind.classes();
        let start = self.pos;
        let mut escaped = false;
        while let Some(&c) = self.b.get(self.pos) {
            match classes[usize::from(c)] {
                NORMAL => self.pos += 1,
                BACKSLASH => {
                    match self.b.get(self.pos + 1) {
                        Some(&next) if kind.escapes(next) => {
                            escaped = true;
                            self.pos += 2;
                        }
                        // A backslash before anything else is literal.
                        _ => self.pos += 1,
                    }
                }
                _ => break,
            }
        }
        let raw = self.slice(start, self.pos);
        if escaped {
            Cow::Owned(unescape(raw, kind))
        } else {
            Cow::Borrowed(raw)
        }
    }

    /// Reads a field value token (not a string) up to `,`, whitespace or the line end.
    fn scalar(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(&c) = self.b.get(self.pos) {
            if matches!(c, b',' | b' ' | b'\t' | b'\r' | b'\n') {
                break;
            }
            self.pos += 1;
        }
        self.slice(start, self.pos)
    }

    fn skip_spaces(&mut self) -> usize {
        let start = self.pos;
        while self.peek() == Some(b' ') {
            self.pos += 1;
        }
        self.pos - start
    }

    /// If only trailing whitespace is left on this line, consumes it and its `\n`.
    fn line_end(&self) -> Option<Span> {
        let mut p = self.pos;
        while let Some(&c) = self.b.get(p) {
            match c {
                b' ' | b'\t' | b'\r' => p += 1,
                b'\n' => {
                    return Some(Span {
                        end: p + 1,
                        lines: self.newlines + 1,
                    })
                }
                _ => return None,
            }
        }
        Some(Span {
            end: p,
            lines: self.newlines + 1,
        })
    }

    fn fail(&self, error: String) -> ScanFailure {
        ScanFailure {
            error,
            end: next_line(self.b, self.pos),
            lines: self.newlines + 1,
        }
    }
}

fn unescape(raw: &str, kind: Kind) -> String {
    let b = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1).is_some_and(|&c| kind.escapes(c)) {
            out.push_str(raw.get(copied..i).unwrap_or_default());
            copied = i + 1; // keep the escaped character, drop the backslash
            i += 2;
        } else {
            i += 1;
        }
    }
    out.push_str(raw.get(copied..).unwrap_or_default());
    out
}

/// Scans the record that starts at `start` (its first non-blank byte) into `line`.
pub(super) fn scan_line<'a>(
    text: &'a str,
    start: usize,
    line: &mut Line<'a>,
) -> Result<Span, ScanFailure> {
    line.tags.clear();
    line.fields.clear();
    line.timestamp = None;
    let mut cur = Cursor {
        text,
        b: text.as_bytes(),
        pos: start,
        newlines: 0,
    };
    line.measurement = cur.token(Kind::Measurement);
    if line.measurement.is_empty() {
        return Err(cur.fail("missing measurement".into()));
    }
    while cur.peek() == Some(b',') {
        cur.pos += 1;
        let key = cur.token(Kind::TagKey);
        if key.is_empty() {
            return Err(cur.fail(format!(
                "empty tag key after measurement {:?}",
                line.measurement
            )));
        }
        if cur.peek() != Some(b'=') {
            return Err(cur.fail(format!("tag {key:?}: missing '=' and value")));
        }
        cur.pos += 1;
        let value = cur.token(Kind::TagValue);
        if value.is_empty() {
            return Err(cur.fail(format!("tag {key:?}: empty value")));
        }
        if line.tags.len() >= LINE_COLUMNS_MAX {
            return Err(cur.fail(format!("more than {LINE_COLUMNS_MAX} tags and fields")));
        }
        line.tags.push((key, value));
    }
    if cur.skip_spaces() == 0 || cur.line_end().is_some() {
        return Err(cur.fail(format!(
            "missing fields after measurement {:?}",
            line.measurement
        )));
    }
    loop {
        let key = cur.token(Kind::FieldKey);
        if key.is_empty() {
            return Err(cur.fail(format!("empty field key at byte {}", cur.pos - start)));
        }
        if cur.peek() != Some(b'=') {
            return Err(cur.fail(format!("field {key:?}: missing '=' and value")));
        }
        cur.pos += 1;
        let parsed = if cur.peek() == Some(b'"') {
            let opened = cur.pos;
            match value::quoted(cur.text, opened) {
                Ok(quoted) => {
                    cur.pos = quoted.end;
                    cur.newlines += quoted.newlines;
                    Ok(Value::String(quoted.value))
                }
                Err(error) => {
                    // Unterminated: give up on this physical line only.
                    cur.pos = opened;
                    return Err(cur.fail(format!("field {key:?}: {error}")));
                }
            }
        } else {
            value::scalar(cur.scalar())
        };
        match parsed {
            Ok(v) => {
                if line.tags.len() + line.fields.len() >= LINE_COLUMNS_MAX {
                    return Err(cur.fail(format!("more than {LINE_COLUMNS_MAX} tags and fields")));
                }
                line.fields.push((key, v));
            }
            Err(error) => return Err(cur.fail(format!("field {key:?}: {error}"))),
        }
        if cur.peek() == Some(b',') {
            cur.pos += 1;
            continue;
        }
        break;
    }
    let spaces = cur.skip_spaces();
    if let Some(span) = cur.line_end() {
        return Ok(span);
    }
    if spaces == 0 {
        let after = line
            .fields
            .last()
            .map(|(k, _)| k.as_ref())
            .unwrap_or_default();
        return Err(cur.fail(format!(
            "unexpected {:?} after field {after:?}",
            rest_of_line(&cur)
        )));
    }
    let token = cur.scalar();
    line.timestamp = Some(super::timestamp::parse(token).map_err(|e| cur.fail(e))?);
    cur.line_end().ok_or_else(|| {
        cur.fail(format!(
            "unexpected {:?} after the timestamp",
            rest_of_line(&cur)
        ))
    })
}

/// What is left of the current physical line, shortened for an error message.
fn rest_of_line<'a>(cur: &Cursor<'a>) -> &'a str {
    let end = next_line(cur.b, cur.pos);
    let rest = cur.slice(cur.pos, end);
    let rest = rest.trim_start_matches(' ').trim_end_matches(['\n', '\r']);
    let mut cut = rest.len().min(32);
    while !rest.is_char_boundary(cut) {
        cut -= 1;
    }
    rest.get(..cut).unwrap_or_default()
}

/// Above this many names a line's duplicate check sorts instead of comparing pairs.
const PAIRWISE_NAMES_MAX: usize = 32;

/// Refuses names the data model cannot hold: `time`, duplicate tag or field keys, and a
/// tag and a field sharing a name (they would be one column).
pub(super) fn check_names(line: &Line<'_>) -> Result<(), String> {
    let tags = &line.tags;
    let fields = &line.fields;
    if let Some((k, _)) = tags.iter().find(|(k, _)| k == TIME_COLUMN) {
        return Err(format!(
            "tag {k:?}: {TIME_COLUMN:?} is the timestamp column"
        ));
    }
    if let Some((k, _)) = fields.iter().find(|(k, _)| k == TIME_COLUMN) {
        return Err(format!(
            "field {k:?}: {TIME_COLUMN:?} is the timestamp column"
        ));
    }
    if tags.len() + fields.len() <= PAIRWISE_NAMES_MAX {
        for (i, (k, _)) in tags.iter().enumerate() {
            if tags[..i].iter().any(|(other, _)| other == k) {
                return Err(format!("duplicate tag key {k:?}"));
            }
        }
        for (i, (k, _)) in fields.iter().enumerate() {
            if fields[..i].iter().any(|(other, _)| other == k) {
                return Err(format!("duplicate field key {k:?}"));
            }
        }
        for (k, _) in fields {
            if tags.iter().any(|(t, _)| t == k) {
                return Err(format!("tag and field both named {k:?}"));
            }
        }
        return Ok(());
    }
    // Wide lines: one sort instead of a quadratic scan (allocates, but only here).
    let mut names: Vec<(&str, bool)> = tags
        .iter()
        .map(|(k, _)| (k.as_ref(), true))
        .chain(fields.iter().map(|(k, _)| (k.as_ref(), false)))
        .collect();
    names.sort_unstable();
    for pair in names.windows(2) {
        let ((a, a_tag), (b, b_tag)) = (pair[0], pair[1]);
        if a == b {
            return Err(match (a_tag, b_tag) {
                (true, true) => format!("duplicate tag key {a:?}"),
                (false, false) => format!("duplicate field key {a:?}"),
                _ => format!("tag and field both named {a:?}"),
            });
        }
    }
    Ok(())
}
