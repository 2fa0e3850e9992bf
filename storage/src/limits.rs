//! How much one write may ask of a node, in the units that cost it something.
//!
//! A decoder holds every row of a write in memory before it is proposed, and each table
//! of the write later becomes Parquet files: one per hour of recent data and one per day
//! of history per flush (`file_span`). Counting
//! lines or objects bounds none of that; these limits bound what a write *builds*.
//!
//! | limit | default | what it bounds |
//! |---|---|---|
//! | `columns_per_table_max` | 500 | width of a measurement (time + tags + fields): the null padding every row of a sparse table costs, and the width of its Parquet files |
//! | `measurements_per_write_max` | 1,000 | tables one write opens (builders now, files at the next flush) |
//! | `write_files_max` (was `write_hours_max`) | 400 | files one write's rows make per measurement at flush: one per hour of the two newest days of its data, one per older day |
//! | `write_decoded_bytes_max` | 512 MiB | the Arrow bytes a write decodes to, nulls included, plus the report of rejected lines |
//!
//! Why these defaults:
//! - 500 columns is InfluxDB 3 Core's and Enterprise's `--num-total-columns-per-table-limit`
//!   (time included), so a client that writes to InfluxDB 3 fits in Quiver unchanged.
//!   InfluxDB's hosted products are stricter (Cloud Serverless 200; Cloud Dedicated and
//!   Clustered 250, raisable to 1,000), citing query and compaction cost of wide tables.
//! - 1,000 measurements is Telegraf's default `metric_batch_size`, so no Telegraf batch
//!   can reach it, and half of InfluxDB 3 Core's limit on tables across all databases
//!   (2,000): one request opening more tables than that is a bug or an attack.
//! - 400 files is a year of history in one request (a day file each) plus two days of
//!   hour files. Live collectors span one or two hours; a collector catching up after
//!   days offline and a backfill of a year fit; a longer one is split by time, which the
//!   error says. Each file is written and fsynced (with its directory) at flush, so the
//!   limit keeps one request from making a flush of thousands of files. (It was 168
//!   hours, a week, while every file held one hour: a backfill script had to know that.)
//! - 512 MiB is `http.decompressed_bytes_max`'s default and a quarter of the default
//!   buffer memory (`storage.memory_bytes_max`, 2 GiB); the decoded batches also become
//!   one log entry of about that size. Dense data decodes to a small multiple of its
//!   size at most (a number takes 8 bytes in Arrow, 1 to 20 on the wire), but padding
//!   multiplies: a row of a measurement with 500 float columns takes 4 KB padded, however
//!   short its line. This limit is what bounds that product; the column cap alone does
//!   not (rows × columns).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::file_span::{day_floor, FileSpans};
use crate::ids::TimestampNs;

/// Bytes charged for each column of each batch besides its values: the Arrow array and
/// builder structures, the schema field and the name. Keeps a write of many tiny
/// batches or many sparse columns from hiding its cost behind small value counts.
pub(crate) const COLUMN_BYTES_FIXED: usize = 256;

/// Limits on one write, checked while it is decoded. See the module documentation for
/// the defaults and their reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteLimits {
    /// Most columns a measurement may have, counting `time`, its tags and its fields,
    /// those already stored included. Line protocol refuses the lines that would add a
    /// column past it; MessagePack refuses the request.
    pub columns_per_table_max: usize,
    /// Most distinct measurements one write may name; over it the whole write is refused.
    pub measurements_per_write_max: usize,
    /// Most Parquet files one write's rows may make per measurement at flush (UTC hours of
    /// the two newest days of its rows, UTC days before; see `file_span`); over it the
    /// whole write is refused and the client is told to split by time. Called
    /// `write_hours_max` while every file held one hour: that name is still read.
    #[serde(alias = "write_hours_max")]
    pub write_files_max: usize,
    /// Most bytes of Arrow data one write may decode to, counting the nulls that pad
    /// sparse columns (and, for line protocol, the report of rejected lines); over it
    /// the whole write is refused.
    pub write_decoded_bytes_max: usize,
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits {
            columns_per_table_max: 500,
            measurements_per_write_max: 1_000,
            write_files_max: 400,
            write_decoded_bytes_max: 512 * 1024 * 1024,
        }
    }
}

impl WriteLimits {
    /// Checks that every limit admits at least the smallest write (one measurement,
    /// one hour, `time` plus one field): what a configuration loader calls at start.
    pub fn validate(&self) -> Result<()> {
        let checks: [(&str, usize, usize); 4] = [
            ("columns_per_table_max", self.columns_per_table_max, 2),
            (
                "measurements_per_write_max",
                self.measurements_per_write_max,
                1,
            ),
            ("write_files_max", self.write_files_max, 1),
            ("write_decoded_bytes_max", self.write_decoded_bytes_max, 1),
        ];
        for (name, value, min) in checks {
            if value < min {
                return Err(Error::InvalidConfig(format!(
                    "limit {name} = {value} admits no write; it must be at least {min}"
                )));
            }
        }
        Ok(())
    }

    /// The error for a write naming more than `measurements_per_write_max` measurements.
    pub(crate) fn too_many_measurements(&self, measurement: &str) -> Error {
        let max = self.measurements_per_write_max;
        Error::LimitExceeded {
            limit: "measurements_per_write_max",
            value: max as u64 + 1,
            max: max as u64,
            detail: format!(
                "measurement {measurement:?} would be distinct measurement number {} of \
                 this write; split the write into requests of at most {max} measurements",
                max + 1
            ),
        }
    }
}

/// The files a write's rows will make at flush, counted against `write_files_max`: the
/// distinct hours of each UTC day, and at the end, with the write's newest row known,
/// one file per day older than the day before it (`file_span`).
#[derive(Debug)]
pub(crate) struct FileBuckets {
    /// Per distinct UTC day, a bit for each hour holding rows.
    days: HashMap<i64, u32>,
    /// The hour of the previous row: consecutive rows usually share it.
    last: Option<i64>,
    /// The newest time seen.
    newest: Option<i64>,
    max: usize,
}

impl FileBuckets {
    pub(crate) fn new(limits: &WriteLimits) -> Self {
        FileBuckets {
            days: HashMap::new(),
            last: None,
            newest: None,
            max: limits.write_files_max,
        }
    }

    /// Records the time of a row; an error once the write spans more days than the
    /// limit allows files (every day makes one at least).
    pub(crate) fn insert(&mut self, time_ns: i64) -> Result<()> {
        self.newest = Some(self.newest.map_or(time_ns, |n| n.max(time_ns)));
        let hour = TimestampNs(time_ns).hour_floor().0;
        if self.last == Some(hour) {
            return Ok(());
        }
        let day = day_floor(time_ns);
        let bit = (time_ns.saturating_sub(day) / TimestampNs::HOUR_NS).clamp(0, 23) as u32;
        if !self.days.contains_key(&day) && self.days.len() >= self.max {
            return Err(self.refusal(self.days.len() + 1));
        }
        *self.days.entry(day).or_default() |= 1 << bit;
        self.last = Some(hour);
        debug_assert!(self.days.len() <= self.max);
        Ok(())
    }

    /// The files the rows so far make at flush, by the write's own newest row (a flush
    /// whose segment holds newer rows makes as many or fewer: buckets only widen).
    pub(crate) fn files(&self) -> usize {
        let Some(newest) = self.newest else {
            return 0;
        };
        let spans = FileSpans::below(newest);
        self.days
            .iter()
            .map(|(&day, hours)| {
                if spans.width(day) == TimestampNs::HOUR_NS {
                    hours.count_ones() as usize
                } else {
                    1
                }
            })
            .sum()
    }

    /// The check once every row is in: an error if they make too many files.
    pub(crate) fn finish(&self) -> Result<()> {
        let files = self.files();
        if files > self.max {
            return Err(self.refusal(files));
        }
        Ok(())
    }

    fn refusal(&self, files: usize) -> Error {
        Error::LimitExceeded {
            limit: "write_files_max",
            value: files as u64,
            max: self.max as u64,
            detail: format!(
                "the write's rows would make {files} Parquet files per measurement at flush \
                 (one per UTC hour of the two newest days of its rows, one per day before), \
                 more than {}; backfills are welcome, but split them by time into requests \
                 of at most {} days",
                self.max,
                self.max.saturating_sub(48).max(1)
            ),
        }
    }
}

/// Memory that every write being decoded on the node shares (the node's write budget,
/// `http.write_bytes_in_flight_max`). `write_decoded_bytes_max` bounds one write; this
/// bounds them together while they decode, so that writers that will each be refused
/// at their own limit cannot together decode the node out of memory first (eight
/// sparse 9.6 MB bodies reached 5.8 GB resident against a 1 GiB budget).
pub trait DecodeMemory: Send + Sync {
    /// Takes `bytes` more for a decoding write, or says why not.
    fn reserve(&self, bytes: usize) -> std::result::Result<(), DecodeMemoryRefusal>;
    /// Gives back `bytes` taken by [`DecodeMemory::reserve`].
    fn release(&self, bytes: usize);
}

/// Why [`DecodeMemory::reserve`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeMemoryRefusal {
    /// Other writes hold it now: retry later.
    Busy,
    /// More than the whole of it.
    TooLarge {
        /// The whole of it.
        bytes_max: usize,
    },
}

/// Granularity of reservations: a decoder asks the shared memory for this much at a
/// time, not for every builder that grows.
const DECODE_RESERVE_STEP_BYTES: usize = 1 << 20;
/// What a decoder holds for each byte it counts: Arrow builders grow by doubling, so
/// their buffers reach up to twice the bytes they hold (measured: eight sparse writers
/// reserving 512 MiB of counted bytes peaked at 1,125 MiB resident).
const DECODE_GROWTH_FACTOR: usize = 2;

thread_local! {
    static DECODE_MEMORY: std::cell::RefCell<Option<std::sync::Arc<dyn DecodeMemory>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `decode` (on this thread) with every byte its decoders build reserved from
/// `memory` as it grows, and released when they are done.
pub fn decoding_within<T>(
    memory: std::sync::Arc<dyn DecodeMemory>,
    decode: impl FnOnce() -> T,
) -> T {
    let previous = DECODE_MEMORY.with(|m| m.replace(Some(memory)));
    let out = decode();
    DECODE_MEMORY.with(|m| *m.borrow_mut() = previous);
    out
}

/// The Arrow bytes a write has decoded to so far, against `write_decoded_bytes_max`
/// and, within [`decoding_within`], against the node's shared [`DecodeMemory`].
pub(crate) struct ByteBudget {
    used: usize,
    max: usize,
    shared: Option<std::sync::Arc<dyn DecodeMemory>>,
    /// Bytes taken from `shared`, at least `used`.
    reserved: usize,
}

impl std::fmt::Debug for ByteBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBudget")
            .field("used", &self.used)
            .field("max", &self.max)
            .field("reserved", &self.reserved)
            .finish()
    }
}

impl Drop for ByteBudget {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.release(self.reserved);
        }
    }
}

impl ByteBudget {
    pub(crate) fn new(limits: &WriteLimits) -> Self {
        ByteBudget {
            used: 0,
            max: limits.write_decoded_bytes_max,
            shared: DECODE_MEMORY.with(|m| m.borrow().clone()),
            reserved: 0,
        }
    }

    /// Makes the shared reservation cover what `used` counted bytes hold (see
    /// [`DecodeMemory`], [`DECODE_GROWTH_FACTOR`]).
    fn cover(&mut self, counted: usize) -> Result<()> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let used = counted.saturating_mul(DECODE_GROWTH_FACTOR);
        if used <= self.reserved {
            return Ok(());
        }
        let wanted =
            (used - self.reserved).div_ceil(DECODE_RESERVE_STEP_BYTES) * DECODE_RESERVE_STEP_BYTES;
        match shared.reserve(wanted) {
            Ok(()) => {
                self.reserved += wanted;
                debug_assert!(self.reserved >= used);
                Ok(())
            }
            Err(DecodeMemoryRefusal::Busy) => Err(Error::NodeBusy(format!(
                "decoding this write needs {used} bytes and the write memory budget \
                 (http.write_bytes_in_flight_max) is held by other writes; retry later"
            ))),
            Err(DecodeMemoryRefusal::TooLarge { bytes_max }) => Err(Error::LimitExceeded {
                limit: "http.write_bytes_in_flight_max",
                value: (self.reserved + wanted) as u64,
                max: bytes_max as u64,
                detail: "the write decodes to more than the whole write memory budget; \
                         split it into smaller requests"
                    .to_string(),
            }),
        }
    }

    /// Bytes still available: what a decoder may reserve up front.
    pub(crate) fn remaining(&self) -> usize {
        self.max - self.used
    }

    /// Bytes used so far.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Takes `bytes` from the budget, or refuses the write.
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<()> {
        match self.used.checked_add(bytes) {
            Some(used) if used <= self.max => {
                self.cover(used)?;
                self.used = used;
                Ok(())
            }
            _ => Err(self.exceeded(self.used.saturating_add(bytes))),
        }
    }

    /// Replaces a charge of `before` bytes by one of `after` (a builder that grew).
    pub(crate) fn recharge(&mut self, before: usize, after: usize) -> Result<()> {
        debug_assert!(before <= self.used);
        let base = self.used - before.min(self.used);
        match base.checked_add(after) {
            Some(used) if used <= self.max => {
                self.cover(used)?;
                self.used = used;
                Ok(())
            }
            _ => Err(self.exceeded(base.saturating_add(after))),
        }
    }

    fn exceeded(&self, value: usize) -> Error {
        Error::LimitExceeded {
            limit: "write_decoded_bytes_max",
            value: value as u64,
            max: self.max as u64,
            detail: format!(
                "the write decodes to at least {value} bytes (its columns, sparse ones padded \
                 with nulls for every row of their measurement, and the report of any rejected \
                 lines); split it into smaller requests, write fewer distinct fields per \
                 measurement, or fix the rejected lines"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zero_is_refused() {
        WriteLimits::default().validate().unwrap();
        let zero = WriteLimits {
            write_files_max: 0,
            ..WriteLimits::default()
        };
        let err = zero.validate().unwrap_err().to_string();
        assert!(err.contains("write_files_max"), "{err}");
        let narrow = WriteLimits {
            columns_per_table_max: 1,
            ..WriteLimits::default()
        };
        assert!(narrow.validate().is_err());
    }

    #[test]
    fn recent_hours_are_counted_once_each_and_refused_past_the_limit() {
        let limits = WriteLimits {
            write_files_max: 3,
            ..WriteLimits::default()
        };
        let mut files = FileBuckets::new(&limits);
        let h = TimestampNs::HOUR_NS;
        for t in [0, 1, h - 1, h, 0, 2 * h + 5, h + 1, -1 + 3 * h] {
            files.insert(t).unwrap();
        }
        assert_eq!(files.files(), 3);
        files.finish().unwrap();
        files.insert(3 * h).unwrap();
        let err = files.finish().unwrap_err().to_string();
        assert!(
            err.contains("write_files_max") && err.contains("split them by time"),
            "{err}"
        );
    }

    #[test]
    fn history_counts_a_file_per_day_and_the_old_name_is_read() {
        let limits = WriteLimits {
            write_files_max: 60,
            ..WriteLimits::default()
        };
        let h = TimestampNs::HOUR_NS;
        let day = 24 * h;
        // 50 days of hourly rows, oldest first: 48 day files and 2 x 24 hour files.
        let mut files = FileBuckets::new(&limits);
        for t in (0..50 * day).step_by(h as usize) {
            files.insert(t).unwrap();
        }
        assert_eq!(files.files(), 48 + 48);
        assert!(files.finish().is_err());
        // The same newest first: the same count (the end decides, not the order).
        let mut files = FileBuckets::new(&limits);
        for t in (0..50 * 24).rev().map(|i| i * h) {
            files.insert(t).unwrap();
        }
        assert_eq!(files.files(), 96);
        // A day past the limit is refused as it comes: every day makes a file.
        let mut files = FileBuckets::new(&limits);
        for d in 0..60 {
            files.insert(d * day).unwrap();
        }
        files.finish().unwrap();
        assert!(files.insert(60 * day).is_err());
        let old: WriteLimits = serde_json::from_str(r#"{"write_hours_max": 7}"#).unwrap();
        assert_eq!(old.write_files_max, 7);
    }

    #[test]
    fn the_byte_budget_refuses_overflow_and_recharges() {
        let limits = WriteLimits {
            write_decoded_bytes_max: 100,
            ..WriteLimits::default()
        };
        let mut budget = ByteBudget::new(&limits);
        budget.charge(60).unwrap();
        budget.recharge(60, 90).unwrap();
        assert_eq!(budget.used(), 90);
        assert_eq!(budget.remaining(), 10);
        let err = budget.charge(11).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LimitExceeded {
                    limit: "write_decoded_bytes_max",
                    value: 101,
                    max: 100,
                    ..
                }
            ),
            "{err}"
        );
        assert!(budget.charge(usize::MAX).is_err());
        assert_eq!(budget.used(), 90);
    }
}
