//! Acked = persisted, checked at the end of an import: per measurement, the rows the
//! node acknowledged and their time range, against what a linearizable count over that
//! range finds. A lower bound: rows that were there before count too, so the check
//! proves nothing acknowledged is missing, not that nothing else is there.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::send::Sender;

/// A line's measurement and timestamp (in ns; `None` when the line has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LineInfo {
    measurement: String,
    time: Option<i64>,
}

/// What the node acknowledged of one measurement.
#[derive(Debug, Default, Clone)]
struct Tally {
    rows: u64,
    /// Rows without a timestamp (stamped by the node: counted over all time).
    untimed: u64,
    min: Option<i64>,
    max: Option<i64>,
}

/// Everything the node acknowledged during this import, per measurement.
#[derive(Debug, Default)]
pub struct Acked {
    tallies: BTreeMap<String, Tally>,
}

impl Acked {
    /// Counts a chunk's lines but the refused ones (1-based line numbers); `unlisted`
    /// refused lines the node did not name are taken off every measurement of the chunk,
    /// so the count stays a lower bound.
    pub(super) fn add_chunk(
        &mut self,
        lines: &[Option<LineInfo>],
        refused: &[usize],
        unlisted: u64,
    ) {
        let mut touched: Vec<&str> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(line) = line else { continue };
            if refused.contains(&(i + 1)) {
                continue;
            }
            let t = self.tallies.entry(line.measurement.clone()).or_default();
            t.rows += 1;
            match line.time {
                Some(time) => {
                    t.min = Some(t.min.map_or(time, |m| m.min(time)));
                    t.max = Some(t.max.map_or(time, |m| m.max(time)));
                }
                None => t.untimed += 1,
            }
            if !touched.contains(&line.measurement.as_str()) {
                touched.push(&line.measurement);
            }
        }
        if unlisted > 0 {
            for m in touched {
                if let Some(t) = self.tallies.get_mut(m) {
                    t.rows = t.rows.saturating_sub(unlisted);
                }
            }
        }
    }

    /// Rows acknowledged in all.
    pub fn rows(&self) -> u64 {
        self.tallies.values().map(|t| t.rows).sum()
    }
}

/// The comparison's outcome.
pub(super) struct Report {
    /// One line per measurement, for the operator.
    pub(super) lines: Vec<String>,
    /// Measurements holding fewer rows than acknowledged.
    pub(super) missing: Vec<String>,
}

/// Counts every acknowledged measurement's rows on the node.
pub(super) async fn compare(sender: &Sender, acked: &Acked) -> Result<Report> {
    let mut report = Report {
        lines: Vec::new(),
        missing: Vec::new(),
    };
    for (measurement, tally) in &acked.tallies {
        let quoted = format!("\"{}\"", measurement.replace('"', "\"\""));
        let range = match (tally.untimed, tally.min, tally.max) {
            (0, Some(min), Some(max)) => format!(
                " WHERE time >= to_timestamp_nanos({min}) AND time <= to_timestamp_nanos({max})"
            ),
            _ => String::new(),
        };
        let rows = sender
            .query(&format!("SELECT count(*) FROM {quoted}{range}"))
            .await?;
        let stored = rows
            .first()
            .and_then(|r| r.first())
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        let verdict = if stored >= tally.rows {
            "ok"
        } else {
            "MISSING ROWS"
        };
        report.lines.push(format!(
            "{measurement}: {} rows acknowledged, {stored} stored over their time range: {verdict}",
            tally.rows
        ));
        if stored < tally.rows {
            report.missing.push(measurement.clone());
        }
    }
    Ok(report)
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub(super) fn bar(file: &Path, total: u64, position: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(file.display().to_string());
    bar.set_position(position);
    bar
}

/// Each line of a chunk of line protocol: its measurement and timestamp, or `None` for
/// a blank line or a comment. Index `i` is the chunk's line `i + 1`, as the node numbers
/// them in its refusals. A line too broken to read is counted under its first word;
/// the node refuses it anyway.
pub(super) fn scan(chunk: &[u8], unit_ns: i64) -> Vec<Option<LineInfo>> {
    let text = String::from_utf8_lossy(chunk);
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    lines.into_iter().map(|l| scan_line(l, unit_ns)).collect()
}

fn scan_line(line: &str, unit_ns: i64) -> Option<LineInfo> {
    let line = line.strip_suffix('\r').unwrap_or(line).trim_start();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    // Unescaped spaces outside quoted strings split series, fields and timestamp.
    let mut splits: Vec<usize> = Vec::new();
    let mut measurement_end = None;
    let (mut escaped, mut quoted) = (false, false);
    let mut previous: Option<char> = None;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            previous = None; // an escaped space separates nothing
            continue;
        }
        match c {
            '\\' => escaped = true,
            '"' if !splits.is_empty() => quoted = !quoted,
            ',' if splits.is_empty() && measurement_end.is_none() => measurement_end = Some(i),
            // A run of spaces is one separator, starting at its first.
            ' ' if !quoted && previous != Some(' ') => splits.push(i),
            _ => {}
        }
        previous = Some(c);
    }
    let series_end = splits.first().copied().unwrap_or(line.len());
    let name_end = measurement_end.map_or(series_end, |m| m.min(series_end));
    let measurement = unescape(&line[..name_end]);
    let time = match splits.get(1) {
        Some(&at) => line[at + 1..]
            .trim()
            .parse::<i64>()
            .ok()
            .map(|t| t.saturating_mul(unit_ns)),
        None => None,
    };
    Some(LineInfo { measurement, time })
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ (',' | ' ' | '=')) => out.push(n),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(m: &str, t: Option<i64>) -> Option<LineInfo> {
        Some(LineInfo {
            measurement: m.into(),
            time: t,
        })
    }

    #[test]
    fn lines_name_their_measurement_and_time() {
        let chunk =
            b"cpu,host=a v=1 10\n\n# note\nmy\\ m v=\"a b\" 20\r\nm2 v=1\ndisk  v=1i   30\n";
        assert_eq!(
            scan(chunk, 1_000),
            vec![
                info("cpu", Some(10_000)),
                None,
                None,
                info("my m", Some(20_000)),
                info("m2", None),
                info("disk", Some(30_000)),
            ]
        );
    }

    #[test]
    fn refused_lines_do_not_count_and_unlisted_ones_lower_every_measurement() {
        let lines = scan(b"a v=1 5\nb v=1 6\na v=1 7\nb v=x 8\n", 1);
        let mut acked = Acked::default();
        acked.add_chunk(&lines, &[4], 0);
        assert_eq!(acked.tallies["a"].rows, 2);
        assert_eq!(acked.tallies["b"].rows, 1);
        assert_eq!(
            (acked.tallies["a"].min, acked.tallies["a"].max),
            (Some(5), Some(7))
        );
        let mut acked = Acked::default();
        acked.add_chunk(&lines, &[], 1);
        assert_eq!(acked.rows(), 2, "one unlisted refusal is taken off a and b");
    }
}
