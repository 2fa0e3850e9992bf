//! InfluxDB line protocol, parsed straight into one Arrow batch per measurement.
//!
//! Grammar (InfluxDB's, as influxdb3 reads it):
//!
//! ```text
//! measurement[,tag_key=tag_value...] field_key=field_value[,field_key=field_value...] [timestamp]
//! ```
//!
//! - Escapes: in the measurement `\,` `\ ` `\\`; in tag keys, tag values and field keys
//!   `\,` `\=` `\ ` `\\`. A backslash before any other character is a literal backslash.
//!   Unescaped `=` is allowed in measurements and tag values.
//! - Field values: float (`1`, `-1.5`, `1e-3`, `.5`, `5.`), integer (`1i`, i64),
//!   unsigned (`1u`, u64), boolean (`t T true True TRUE f F false False FALSE`), and
//!   double-quoted strings where `\"` and `\\` are escapes and other backslashes are
//!   literal. NaN and infinities are refused (they are not in the grammar, and a float
//!   too large for f64 is refused rather than stored as infinity).
//! - Quoted strings may contain newlines, as InfluxDB allows: such a record spans several
//!   physical lines and is reported (and counted) under the number of the line it starts
//!   on. Outside a quoted string a newline always ends the record, also after a
//!   backslash. A string still open at the end of the body is refused as unterminated
//!   together with the rest of its physical line only; parsing resumes on the next line,
//!   so one stray quote cannot take the rest of the body with it.
//! - Sections are separated by one or more spaces. Leading spaces and tabs, trailing
//!   spaces, tabs and `\r` (so `\r\n` endings), blank lines and comment lines (`#` as the
//!   first non-blank character) are accepted; comments and blank lines are not counted.
//! - A missing timestamp means the server's `now_ns`; otherwise it is scaled by
//!   [`Precision`] with checked arithmetic.
//!
//! Every line is either appended to its measurement's batch or reported in
//! [`LpOutput::rejected`] with its 1-based physical line number; one bad line never
//! costs the valid lines around it (what `accept_partial` needs). A line that would
//! widen its measurement past [`WriteLimits::columns_per_table_max`] is such a line. The
//! limits that measure the body as a whole (measurements, files at flush, decoded bytes) refuse
//! it as a whole, as soon as they are crossed: [`Error::LimitExceeded`].
//!
//! The hot path keeps no per-line heap objects: tokens are borrowed from the body and
//! only a token that contains escapes is copied.

mod conflicts;
mod expired;
mod scan;
mod tables;
#[cfg(test)]
mod tests;
mod timestamp;
mod value;

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::limits::{FileBuckets, WriteLimits};
use crate::rows::FieldValue;
use crate::schema::MeasurementSchema;
pub use conflicts::reject_conflicting_rows;
pub use expired::reject_expired_rows;
use scan::{Line, ScanFailure};
use tables::Tables;
pub use timestamp::Precision;

/// Most tags plus fields one line may carry; wider lines are refused. Bounds the work of
/// the per-line duplicate check and the width of a batch one line can create.
const LINE_COLUMNS_MAX: usize = 1_024;

/// Longest excerpt of a rejected line kept in [`LineError::text`], in bytes.
const LINE_EXCERPT_BYTES_MAX: usize = 64;

/// One rejected line, as the HTTP layer reports it to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based number of the physical line the rejected record starts on.
    pub line: usize,
    /// What is wrong, naming the column or token (without the `line N: ` prefix that
    /// `Display` adds).
    pub error: String,
    /// The first 64 bytes of the line, cut on a character boundary (invalid UTF-8
    /// shown as U+FFFD), so the client can find the line.
    pub text: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.error)
    }
}

/// One measurement's accepted rows.
#[derive(Debug, Clone)]
pub struct LpTable {
    /// The measurement the rows belong to.
    pub measurement: String,
    /// The rows, in body order.
    pub batch: RecordBatch,
    /// The 1-based line each row came from (`lines[i]` is row `i`'s): so rows refused
    /// later, by the schema check against stored data, are reported by line.
    pub lines: Vec<usize>,
}

/// What one body parsed into: the batches to write and the lines that were refused.
#[derive(Debug, Clone)]
pub struct LpOutput {
    /// One batch per measurement, in the order measurements first appear; only
    /// measurements with at least one accepted line are listed.
    pub tables: Vec<LpTable>,
    /// Records seen (blank and comment lines excluded); accepted rows plus
    /// `rejected.len()` always equals this.
    pub lines_total: usize,
    /// Every rejected record, in body order.
    pub rejected: Vec<LineError>,
}

/// Parses a line-protocol body. Bad lines are reported in [`LpOutput::rejected`] and
/// the rest is kept; whether a partial result is acceptable is the caller's policy.
/// `now_ns` stamps lines without a timestamp. Fails as a whole only when the body
/// crosses a limit that measures the whole body ([`Error::LimitExceeded`]).
pub fn parse_line_protocol(
    body: &[u8],
    precision: Precision,
    now_ns: i64,
    limits: &WriteLimits,
) -> Result<LpOutput> {
    parse_line_protocol_for(body, precision, now_ns, limits, &|_| None)
}

/// [`parse_line_protocol`] for a database whose measurements may already exist:
/// `stored` gives a measurement's current schema, and a line whose field or tag
/// conflicts with it is rejected (naming the column) while the lines around it are
/// kept. What InfluxDB does, and what a body whose first line has the wrong type needs
/// (otherwise that line's type would win inside the batch and refuse the right ones).
/// Stored columns count towards [`WriteLimits::columns_per_table_max`].
pub fn parse_line_protocol_for(
    body: &[u8],
    precision: Precision,
    now_ns: i64,
    limits: &WriteLimits,
    stored: &dyn Fn(&str) -> Option<MeasurementSchema>,
) -> Result<LpOutput> {
    let mut parser = Parser {
        precision,
        now_ns,
        tables: Tables::new(stored, limits),
        files: FileBuckets::new(limits),
        refused: None,
        rejected: Vec::new(),
        lines_total: 0,
        line: Line::default(),
        tag_refs: Vec::new(),
        field_refs: Vec::new(),
    };
    // Lines are checked for UTF-8 in runs: a run of valid lines is parsed as `&str`,
    // and each line holding invalid bytes is refused on its own.
    let mut pos = 0;
    let mut line_no = 1;
    while pos < body.len() && parser.refused.is_none() {
        let rest = &body[pos..];
        match std::str::from_utf8(rest) {
            Ok(text) => {
                parser.parse_text(text, line_no);
                break;
            }
            Err(e) => {
                let bad = pos + e.valid_up_to();
                let line_start = body[pos..bad]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(pos, |i| pos + i + 1);
                if let Ok(text) = std::str::from_utf8(&body[pos..line_start]) {
                    line_no = parser.parse_text(text, line_no);
                }
                if parser.refused.is_some() {
                    break;
                }
                let line_end = body[bad..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(body.len(), |i| bad + i);
                parser.invalid_utf8_line(&body[line_start..line_end], bad - line_start, line_no);
                line_no += 1;
                pos = line_end + 1;
            }
        }
    }
    match parser.refused.take() {
        Some(error) => Err(error),
        None => {
            parser.files.finish()?;
            Ok(parser.finish())
        }
    }
}

/// Why a line was not accepted: the line alone, or the whole body (a limit that
/// measures the body was crossed).
enum Refusal {
    Line(String),
    Body(Error),
}

impl From<String> for Refusal {
    fn from(error: String) -> Self {
        Refusal::Line(error)
    }
}

/// Fills the empty excerpts of `rejected` from `body`, in one pass over the body up to
/// the last line needed. Only the first `limit` entries are filled (the rest are never
/// shown). `rejected` must be sorted by line.
pub fn fill_excerpts(body: &[u8], rejected: &mut [LineError], limit: usize) {
    debug_assert!(rejected.windows(2).all(|w| w[0].line <= w[1].line));
    let mut wanted = rejected
        .iter_mut()
        .take(limit)
        .filter(|e| e.text.is_empty())
        .peekable();
    let mut line_no = 1;
    let mut start = 0;
    while let Some(entry) = wanted.peek_mut() {
        let end = body[start..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(body.len(), |i| start + i);
        if entry.line < line_no {
            wanted.next(); // Out of order or line 0: no text to show.
            continue;
        }
        if entry.line == line_no {
            let raw = &body[start..end];
            entry.text = excerpt(raw.strip_suffix(b"\r").unwrap_or(raw));
            wanted.next();
            continue;
        }
        if end >= body.len() {
            break;
        }
        start = end + 1;
        line_no += 1;
    }
}

struct Parser<'a, 's> {
    precision: Precision,
    now_ns: i64,
    tables: Tables<'s>,
    /// The files the accepted rows make at flush, against `write_files_max`.
    files: FileBuckets,
    /// Set when the body crossed a body-wide limit: parsing stops, the body is refused.
    refused: Option<Error>,
    rejected: Vec<LineError>,
    lines_total: usize,
    /// Scratch for the line being parsed, reused for every line.
    line: Line<'a>,
    /// Spare allocations for the borrowed views `RowBatchBuilder::push_row` takes; kept
    /// empty between lines (see [`recycle`]).
    tag_refs: Vec<(&'static str, &'static str)>,
    field_refs: Vec<(&'static str, FieldValue<'static>)>,
}

impl<'a, 's> Parser<'a, 's> {
    /// Parses valid UTF-8 text that starts a physical line; its first line is number
    /// `line_no`. Returns the number of the line after it. Stops early when the body is
    /// refused as a whole.
    fn parse_text(&mut self, text: &'a str, mut line_no: usize) -> usize {
        let b = text.as_bytes();
        let mut pos = 0;
        while pos < b.len() && self.refused.is_none() {
            let line_start = pos;
            let mut p = pos;
            while p < b.len() && (b[p] == b' ' || b[p] == b'\t' || b[p] == b'\r') {
                p += 1;
            }
            if p >= b.len() || b[p] == b'\n' || b[p] == b'#' {
                // Blank or comment line: not a record.
                pos = scan::next_line(b, p);
                line_no += 1;
                continue;
            }
            self.lines_total += 1;
            match scan::scan_line(text, p, &mut self.line) {
                Ok(span) => {
                    let record = text.get(line_start..span.end).unwrap_or_default();
                    match self.accept(line_no, record) {
                        Ok(()) => {}
                        Err(Refusal::Line(error)) => self.reject(line_no, error, record),
                        Err(Refusal::Body(error)) => self.refused = Some(error),
                    }
                    debug_assert!(span.end > pos, "a record consumes input");
                    pos = span.end;
                    line_no += span.lines;
                }
                Err(ScanFailure {
                    mut error,
                    end,
                    lines,
                }) => {
                    if lines > 1 {
                        error.push_str(&format!(
                            " (the record spans lines {line_no}-{}: a quoted string continued it)",
                            line_no + lines - 1
                        ));
                    }
                    self.reject(
                        line_no,
                        error,
                        text.get(line_start..end).unwrap_or_default(),
                    );
                    debug_assert!(end > pos, "a failed record consumes input");
                    pos = end;
                    line_no += lines;
                }
            }
        }
        line_no
    }

    /// Checks a scanned line and appends it to its measurement's batch.
    fn accept(&mut self, line_no: usize, record: &str) -> Result<(), Refusal> {
        let line = &self.line;
        scan::check_names(line)?;
        let time_ns = match line.timestamp {
            Some(t) => self.precision.to_ns(t).ok_or_else(|| {
                format!(
                    "timestamp {t} out of range for precision {}",
                    self.precision.name()
                )
            })?,
            None => self.now_ns,
        };
        let mut tags: Vec<(&str, &str)> = recycle(std::mem::take(&mut self.tag_refs));
        tags.extend(line.tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref())));
        let mut fields: Vec<(&str, FieldValue<'_>)> = recycle(std::mem::take(&mut self.field_refs));
        fields.extend(line.fields.iter().map(|(k, v)| (k.as_ref(), v.as_field())));
        let result = self
            .tables
            .push(&line.measurement, time_ns, &tags, &fields, line_no, || {
                excerpt(record_text(record).as_bytes())
            });
        self.tag_refs = recycle(tags);
        self.field_refs = recycle(fields);
        result?;
        self.files.insert(time_ns).map_err(Refusal::Body)
    }

    fn reject(&mut self, line: usize, error: String, record: &str) {
        let text = excerpt(record_text(record).as_bytes());
        self.push_rejection(LineError { line, error, text });
    }

    /// Records a rejection and charges its report to the write's byte budget: a body of
    /// millions of bad lines costs a few hundred bytes of report per line, more than the
    /// line itself, so the reports count like decoded rows do.
    fn push_rejection(&mut self, rejection: LineError) {
        let bytes = std::mem::size_of::<LineError>() + rejection.error.len() + rejection.text.len();
        self.rejected.push(rejection);
        if let Err(error) = self.tables.charge(bytes) {
            self.refused = Some(error);
        }
    }

    fn invalid_utf8_line(&mut self, raw: &[u8], bad_at: usize, line_no: usize) {
        let first = raw.iter().position(|c| !matches!(c, b' ' | b'\t' | b'\r'));
        if first.is_some_and(|i| raw[i] == b'#') {
            return; // A comment may hold anything.
        }
        self.lines_total += 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        self.push_rejection(LineError {
            line: line_no,
            error: format!("invalid UTF-8 at byte {bad_at} of the line"),
            text: excerpt(raw),
        });
    }

    fn finish(mut self) -> LpOutput {
        let tables = self.tables.finish(&mut self.rejected);
        let rows: usize = tables.iter().map(|t| t.batch.num_rows()).sum();
        debug_assert_eq!(
            rows + self.rejected.len(),
            self.lines_total,
            "every record is either a row or rejected"
        );
        debug_assert!(tables.iter().all(|t| t.batch.num_rows() > 0));
        LpOutput {
            tables,
            lines_total: self.lines_total,
            rejected: self.rejected,
        }
    }
}

/// Reuses an emptied vector's allocation for elements of the same layout but another
/// lifetime, so the per-line borrowed views cost no allocation once warm. (The standard
/// library collects a `Vec`'s `into_iter` in place when layouts match; the closure never
/// runs because the vector is empty.)
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// A record without its line ending.
fn record_text(record: &str) -> &str {
    let record = record.strip_suffix('\n').unwrap_or(record);
    record.strip_suffix('\r').unwrap_or(record)
}

/// The first [`LINE_EXCERPT_BYTES_MAX`] bytes of `raw`, cut on a character boundary.
/// Invalid UTF-8 becomes U+FFFD, which is longer than the byte it replaces, so the
/// result is cut again to stay within the limit.
fn excerpt(raw: &[u8]) -> String {
    let head = &raw[..raw.len().min(LINE_EXCERPT_BYTES_MAX)];
    let mut text = match std::str::from_utf8(head) {
        Ok(s) => return s.to_string(),
        // Only a character cut in half at the end: drop the partial character.
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(head).into_owned(),
    };
    let mut cut = text.len().min(LINE_EXCERPT_BYTES_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    debug_assert!(text.len() <= LINE_EXCERPT_BYTES_MAX);
    text
}
