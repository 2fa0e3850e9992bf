//! How much time one flushed Parquet file covers: an hour for recent rows, a day for
//! history.
//!
//! A flush writes a file per time bucket of every table it freezes. Hour buckets suit
//! live data (a query over the last hour reads one file per table; merges later fold
//! closed days into day files). For history they do not: a 60-day backfill of 20
//! measurements made 28,800 hour files, every one fsynced at flush and every one merged
//! again afterwards. So rows whose UTC day ended more than a day before the newest row
//! of the same segment go to one file per day, the file the merges would have made.
//!
//! The rule depends on nothing but the rows (never the clock), so every replica
//! flushing the same segment writes the same files under the same names. A day file's
//! rows lie in one day: the compaction and lifecycle plans already treat a flushed file
//! that spans two hours of one day as a day bucket.

use crate::compaction::DAY_NS;
use crate::ids::TimestampNs;

/// The buckets of one segment (or one write): hours from the start of the day before
/// the newest row's day, days before that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileSpans {
    /// The first time bucketed by the hour (a UTC midnight, or `i64::MIN`).
    hourly_from: i64,
}

/// The start of the UTC day `t` falls in (saturating like [`TimestampNs::hour_floor`]).
pub(crate) fn day_floor(t: i64) -> i64 {
    t.div_euclid(DAY_NS).saturating_mul(DAY_NS)
}

impl FileSpans {
    /// The spans of rows whose newest time is `newest`.
    pub(crate) fn below(newest: i64) -> FileSpans {
        FileSpans {
            hourly_from: day_floor(newest).saturating_sub(DAY_NS),
        }
    }

    /// The spans of `times` (hour buckets only if there are none).
    pub(crate) fn of(times: impl IntoIterator<Item = i64>) -> FileSpans {
        times.into_iter().max().map_or(
            FileSpans {
                hourly_from: i64::MIN,
            },
            FileSpans::below,
        )
    }

    /// The start of the bucket `t` falls in: its hour, or its day for history.
    pub(crate) fn bucket(&self, t: i64) -> i64 {
        if t >= self.hourly_from {
            TimestampNs(t).hour_floor().0
        } else {
            day_floor(t)
        }
    }

    /// The width of the bucket starting at `start` (as returned by [`Self::bucket`]).
    pub(crate) fn width(&self, start: i64) -> i64 {
        if start >= self.hourly_from {
            TimestampNs::HOUR_NS
        } else {
            DAY_NS
        }
    }

    /// Whether any bucket of these spans is a day (some rows lie before
    /// `hourly_from`): then a time's offset into its bucket needs more bits.
    pub(crate) fn has_days_from(&self, earliest: i64) -> bool {
        earliest < self.hourly_from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = TimestampNs::HOUR_NS;

    #[test]
    fn the_newest_two_days_go_by_the_hour_and_older_rows_by_the_day() {
        let newest = 10 * DAY_NS + 5 * H + 7;
        let spans = FileSpans::below(newest);
        assert_eq!(spans.bucket(newest), 10 * DAY_NS + 5 * H);
        // Yesterday is still hourly: a late row of last night makes no day file.
        assert_eq!(spans.bucket(9 * DAY_NS + 23 * H + 1), 9 * DAY_NS + 23 * H);
        assert_eq!(spans.width(9 * DAY_NS), H);
        // The day before is history.
        assert_eq!(spans.bucket(8 * DAY_NS + 23 * H + 1), 8 * DAY_NS);
        assert_eq!(spans.width(8 * DAY_NS), DAY_NS);
        assert_eq!(spans.bucket(-1), -DAY_NS);
    }

    #[test]
    fn a_bucket_holds_its_times_and_buckets_never_overlap() {
        let newest = 3 * DAY_NS + 2 * H;
        let spans = FileSpans::below(newest);
        let mut bounds: Vec<(i64, i64)> = Vec::new();
        for t in (-2 * DAY_NS..=newest).step_by((H / 3) as usize) {
            let start = spans.bucket(t);
            assert!(start <= t && t < start + spans.width(start), "{t}");
            if bounds.last().is_none_or(|&(s, _)| s != start) {
                bounds.push((start, spans.width(start)));
            }
        }
        for pair in bounds.windows(2) {
            assert_eq!(pair[0].0 + pair[0].1, pair[1].0, "{pair:?}");
        }
    }

    #[test]
    fn the_extremes_of_time_saturate_instead_of_overflowing() {
        let spans = FileSpans::below(i64::MAX);
        assert!(spans.bucket(i64::MIN) <= i64::MIN / 2);
        let spans = FileSpans::below(i64::MIN);
        assert_eq!(spans.bucket(i64::MIN), TimestampNs(i64::MIN).hour_floor().0);
        assert_eq!(FileSpans::of(std::iter::empty()).bucket(5 * H + 1), 5 * H);
    }
}
