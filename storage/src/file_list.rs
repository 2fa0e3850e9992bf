//! A table's Parquet files, kept in log order (what flushes, compactions and snapshots
//! reason in) and findable by time, so a query over a few hours of a table with
//! hundreds of thousands of files looks at those hours' files only.
//!
//! Shared copy-on-write: a query's snapshot takes the list as it is in O(1) (an `Arc`),
//! and a change copies the list only while such a snapshot is still alive. The time
//! index is built on the first search after a change and shared by every snapshot of
//! that version.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use crate::meta::FileMeta;

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct FileList {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone, Default)]
struct Inner {
    /// In log order: by `(log_last, time_min)`.
    files: Vec<FileMeta>,
    /// Built lazily after each change.
    by_time: OnceLock<TimeIndex>,
}

#[derive(Debug, Clone, Default)]
struct TimeIndex {
    /// Positions in `files`, by `time_min`.
    order: Vec<u32>,
    /// `time_min` of each entry of `order`, for the binary search.
    time_min: Vec<i64>,
    /// The widest `time_max - time_min` of any file: how far before a range a file
    /// reaching into it can start.
    span_ns_max: i64,
}

/// Makes `file` share `previous`'s column list when the two are equal: the files of a
/// table nearly always have the same columns, and one list per file was most of the
/// memory a table's million files took.
fn share_columns(file: &mut FileMeta, previous: Option<&FileMeta>) {
    if let Some(previous) = previous {
        if !Arc::ptr_eq(&file.columns, &previous.columns) && file.columns == previous.columns {
            file.columns = previous.columns.clone();
        }
    }
}

impl FileList {
    /// A list of `files` in any order.
    pub fn from_files(mut files: Vec<FileMeta>) -> Self {
        files.sort_by_key(|f| (f.log_last, f.time_min));
        for i in 1..files.len() {
            let (before, rest) = files.split_at_mut(i);
            share_columns(&mut rest[0], before.last());
        }
        FileList {
            inner: Arc::new(Inner {
                files,
                by_time: OnceLock::new(),
            }),
        }
    }

    /// The files for a change; the time index is rebuilt at the next search.
    fn files_mut(&mut self) -> &mut Vec<FileMeta> {
        let inner = Arc::make_mut(&mut self.inner);
        inner.by_time = OnceLock::new();
        &mut inner.files
    }

    /// Adds a file where log order puts it.
    pub fn insert(&mut self, mut meta: FileMeta) {
        let key = (meta.log_last, meta.time_min);
        let files = self.files_mut();
        let at = files.partition_point(|f| (f.log_last, f.time_min) <= key);
        let neighbour = at.checked_sub(1).and_then(|i| files.get(i));
        share_columns(&mut meta, neighbour.or(files.get(at)));
        files.insert(at, meta);
    }

    /// Adds the files of the newest segment (they follow every file in log order).
    pub fn append(&mut self, mut new: Vec<FileMeta>) {
        if new.is_empty() {
            return;
        }
        let files = self.files_mut();
        for i in 0..new.len() {
            let (before, rest) = new.split_at_mut(i);
            share_columns(&mut rest[0], before.last().or(files.last()));
        }
        debug_assert!(
            files
                .last()
                .zip(new.first())
                .is_none_or(|(a, b)| a.log_last <= b.log_last),
            "a segment's files come after every file already listed"
        );
        files.extend(new);
    }

    /// Removes and returns the files `remove` picks, keeping the others in order.
    pub fn take_where(&mut self, mut remove: impl FnMut(&FileMeta) -> bool) -> Vec<FileMeta> {
        if !self.inner.files.iter().any(&mut remove) {
            return Vec::new();
        }
        let files = self.files_mut();
        let (taken, kept): (Vec<FileMeta>, Vec<FileMeta>) =
            std::mem::take(files).into_iter().partition(remove);
        *files = kept;
        taken
    }

    /// The files that may hold rows with `time` in `[min_ns, max_ns]` (both inclusive),
    /// in log order, found through the time index.
    pub fn overlapping(&self, min_ns: i64, max_ns: i64) -> Vec<&FileMeta> {
        if min_ns > max_ns {
            return Vec::new();
        }
        let index = self.inner.by_time.get_or_init(|| self.build_index());
        let earliest_start = min_ns.saturating_sub(index.span_ns_max);
        let from = index.time_min.partition_point(|&t| t < earliest_start);
        let to = index.time_min.partition_point(|&t| t <= max_ns);
        let mut positions: Vec<u32> = index.order[from..to]
            .iter()
            .copied()
            .filter(|&p| self.inner.files[p as usize].time_max.0 >= min_ns)
            .collect();
        positions.sort_unstable();
        positions
            .into_iter()
            .map(|p| &self.inner.files[p as usize])
            .collect()
    }

    fn build_index(&self) -> TimeIndex {
        let files = &self.inner.files;
        debug_assert!(
            u32::try_from(files.len()).is_ok(),
            "a table holds fewer than 2^32 files"
        );
        let mut order: Vec<u32> = (0..files.len() as u32).collect();
        order.sort_by_key(|&p| files[p as usize].time_min);
        let time_min = order
            .iter()
            .map(|&p| files[p as usize].time_min.0)
            .collect();
        let span_ns_max = files
            .iter()
            .map(|f| f.time_max.0.saturating_sub(f.time_min.0))
            .max()
            .unwrap_or(0)
            .max(0);
        TimeIndex {
            order,
            time_min,
            span_ns_max,
        }
    }
}

impl Deref for FileList {
    type Target = [FileMeta];

    fn deref(&self) -> &[FileMeta] {
        &self.inner.files
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{LogIndex, TimestampNs};

    fn file(log: u64, min: i64, max: i64) -> FileMeta {
        FileMeta {
            version: crate::meta::FILE_META_VERSION,
            path: format!("f{log}"),
            database: "db".into(),
            measurement: "m".into(),
            rows: 1,
            time_min: TimestampNs(min),
            time_max: TimestampNs(max),
            log_first: LogIndex(log),
            log_last: LogIndex(log),
            segment_files: 1,
            columns: Vec::new().into(),
            size_bytes: 1,
            compaction: None,
            tag_distinct: Vec::new(),
            sort_lead: None,
        }
    }

    fn with_columns(mut meta: FileMeta, names: &[&str]) -> FileMeta {
        meta.columns = names
            .iter()
            .map(|n| crate::meta::ColumnMeta::new(n, crate::schema::ColumnKind::Tag))
            .collect::<Vec<_>>()
            .into();
        meta
    }

    #[test]
    fn files_with_equal_columns_share_one_list() {
        let ab = |log| with_columns(file(log, 0, 1), &["a", "b"]);
        let abc = |log| with_columns(file(log, 0, 1), &["a", "b", "c"]);
        let mut list = FileList::from_files(vec![ab(3), ab(1), ab(2)]);
        list.append(vec![ab(4), abc(5), abc(6)]);
        list.insert(ab(0));
        let shared = |i: usize, j: usize| Arc::ptr_eq(&list[i].columns, &list[j].columns);
        assert!(shared(0, 1) && shared(1, 2) && shared(2, 3) && shared(3, 4));
        assert!(!shared(4, 5), "different columns stay apart");
        assert!(shared(5, 6));
        assert_eq!(list[6].columns.len(), 3);
    }

    fn paths(files: Vec<&FileMeta>) -> Vec<String> {
        files.into_iter().map(|f| f.path.clone()).collect()
    }

    #[test]
    fn overlapping_equals_a_full_scan_in_log_order() {
        // Hour files written out of time order, and one wide (day) file.
        let mut list = FileList::default();
        let hour = 100;
        for (log, h) in [(1, 5), (2, 0), (3, 9), (4, 2), (5, 7), (6, 3)] {
            list.insert(file(log, h * hour, h * hour + hour - 1));
        }
        list.insert(file(7, 0, 24 * hour - 1));
        for (lo, hi) in [
            (0, 0),
            (250, 260),
            (299, 300),
            (-50, 10_000),
            (950, 960),
            (5_000, 6_000),
            (10, 5),
        ] {
            let scanned: Vec<&FileMeta> = list
                .iter()
                .filter(|f| lo <= hi && f.time_max.0 >= lo && f.time_min.0 <= hi)
                .collect();
            assert_eq!(
                paths(list.overlapping(lo, hi)),
                paths(scanned),
                "[{lo}, {hi}]"
            );
        }
    }

    #[test]
    fn a_snapshot_keeps_its_version_and_changes_rebuild_the_index() {
        let mut list = FileList::from_files(vec![file(2, 200, 299), file(1, 100, 199)]);
        assert_eq!(paths(list.overlapping(150, 250)), ["f1", "f2"]);
        let snapshot = list.clone();
        let taken = list.take_where(|f| f.path == "f1");
        assert_eq!(taken.len(), 1);
        list.append(vec![file(3, 150, 160)]);
        assert_eq!(paths(list.overlapping(150, 250)), ["f2", "f3"]);
        assert_eq!(paths(snapshot.overlapping(150, 250)), ["f1", "f2"]);
        assert!(list.take_where(|_| false).is_empty());
    }
}
