//! How much one write may ask of a node, in the units that cost it something.
//!
//! A decoder holds every row of a write in memory before it is proposed, and each table
//! of the write later becomes Parquet files: one per hour of data per flush. Counting
//! lines or objects bounds none of that; these limits bound what a write *builds*.
//!
//! | limit | default | what it bounds |
//! |---|---|---|
//! | `columns_per_table_max` | 500 | width of a measurement (time + tags + fields): the null padding every row of a sparse table costs, and the width of its Parquet files |
//! | `measurements_per_write_max` | 1,000 | tables one write opens (builders now, files at the next flush) |
//! | `write_hours_max` | 168 | distinct hours one write touches: each becomes a Parquet file per measurement at flush |
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
//! - 168 hours is a week of data per request. Live collectors span one or two hours; a
//!   collector catching up after days offline still fits; a longer backfill is split by
//!   time, which the error says. Each distinct hour is a file written and fsynced (with its
//!   directory) at flush, so the limit keeps one request from making a flush of thousands
//!   of files.
//! - 512 MiB is `http.decompressed_bytes_max`'s default and a quarter of the default
//!   buffer memory (`storage.memory_bytes_max`, 2 GiB); the decoded batches also become
//!   one log entry of about that size. Dense data decodes to a small multiple of its
//!   size at most (a number takes 8 bytes in Arrow, 1 to 20 on the wire), but padding
//!   multiplies: a row of a measurement with 500 float columns takes 4 KB padded, however
//!   short its line. This limit is what bounds that product; the column cap alone does
//!   not (rows × columns).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
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
    /// Most distinct hours (UTC, `time` floored to the hour) one write's rows may fall
    /// in; over it the whole write is refused and the client is told to split by time.
    pub write_hours_max: usize,
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
            write_hours_max: 168,
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
            ("write_hours_max", self.write_hours_max, 1),
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

/// The distinct hours a write's rows fall in, counted up to `write_hours_max`.
#[derive(Debug)]
pub(crate) struct HourSet {
    seen: HashSet<i64>,
    /// The hour of the previous row: consecutive rows usually share it.
    last: Option<i64>,
    max: usize,
}

impl HourSet {
    pub(crate) fn new(limits: &WriteLimits) -> Self {
        HourSet {
            seen: HashSet::new(),
            last: None,
            max: limits.write_hours_max,
        }
    }

    /// Records the hour of `time_ns`; an error once the write spans more hours than the
    /// limit allows.
    pub(crate) fn insert(&mut self, time_ns: i64) -> Result<()> {
        let hour = TimestampNs(time_ns).hour_floor().0;
        if self.last == Some(hour) {
            return Ok(());
        }
        if self.seen.contains(&hour) {
            self.last = Some(hour);
            return Ok(());
        }
        if self.seen.len() >= self.max {
            return Err(Error::LimitExceeded {
                limit: "write_hours_max",
                value: self.max as u64 + 1,
                max: self.max as u64,
                detail: format!(
                    "the write's rows fall in more than {} distinct hours, and each hour \
                     becomes a Parquet file per measurement at flush; backfills are welcome, \
                     but split them by time into requests spanning at most {} hours",
                    self.max, self.max
                ),
            });
        }
        self.seen.insert(hour);
        self.last = Some(hour);
        debug_assert!(self.seen.len() <= self.max);
        Ok(())
    }

    /// Distinct hours seen so far.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
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
            write_hours_max: 0,
            ..WriteLimits::default()
        };
        let err = zero.validate().unwrap_err().to_string();
        assert!(err.contains("write_hours_max"), "{err}");
        let narrow = WriteLimits {
            columns_per_table_max: 1,
            ..WriteLimits::default()
        };
        assert!(narrow.validate().is_err());
    }

    #[test]
    fn hours_are_counted_once_each_and_refused_past_the_limit() {
        let limits = WriteLimits {
            write_hours_max: 3,
            ..WriteLimits::default()
        };
        let mut hours = HourSet::new(&limits);
        let h = TimestampNs::HOUR_NS;
        for t in [0, 1, h - 1, h, 0, 2 * h + 5, h + 1, -1 + 3 * h] {
            hours.insert(t).unwrap();
        }
        assert_eq!(hours.len(), 3);
        let err = hours.insert(-1).unwrap_err().to_string();
        assert!(
            err.contains("write_hours_max") && err.contains("split them by time"),
            "{err}"
        );
        // A refused hour is not recorded; known hours still pass.
        assert_eq!(hours.len(), 3);
        assert!(hours.insert(-1).is_err(), "refused again, not cached");
        hours.insert(h).unwrap();
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
