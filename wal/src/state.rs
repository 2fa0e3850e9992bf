//! State shared by handles, readers and the writer thread.
//!
//! Two views of the log live here. The *logical* log (`start_index..next_index` plus
//! `pending`) moves as soon as an operation is queued, which is what makes appends
//! readable on return. The *physical* log (`segments`) moves when the writer thread has
//! written. A logical index is served from `pending` if present there, else from the
//! segments. That is correct because an index's bytes in a segment can only be stale
//! while a truncation covering it is queued, and any index re-appended after that
//! truncation sits in `pending` (under the newer op's sequence number) until written.

use std::{collections::BTreeMap, sync::Arc};

use bytes::Bytes;
use parking_lot::RwLock;

use crate::{
    config::WalConfig,
    error::{Error, Result},
    fs::WalFs,
    segment::SegmentView,
    stats::Counters,
};

/// A record queued for the writer but not yet in a segment file.
pub(crate) struct Pending {
    /// Sequence number of the append op that queued it; the writer only removes the
    /// entry if it still belongs to the op it just wrote.
    pub seq: u64,
    /// The record.
    pub payload: Bytes,
}

/// The log's state; see the module docs.
pub(crate) struct State {
    /// Segments, oldest first, contiguous. The last one is where appends go.
    pub segments: Vec<SegmentView>,
    /// Records queued but not yet written, by index.
    pub pending: BTreeMap<u64, Pending>,
    /// First index of the logical log; `None` for a log that never held a record and was
    /// never purged (its first append may use any index).
    pub start_index: Option<u64>,
    /// Index the next append must use (meaningless while `start_index` is `None`).
    pub next_index: u64,
    /// Sequence number for the next append op.
    pub seq_next: u64,
    /// Set by the writer on an I/O error; every later operation fails with it.
    pub poisoned: Option<String>,
}

impl State {
    /// State for a log whose segments recovery found, with the purge marker applied.
    pub fn recovered(segments: Vec<SegmentView>, purged_index: Option<u64>) -> State {
        let (start_index, next_index) = match (segments.first(), segments.last()) {
            (Some(first), Some(last)) => {
                let start = match purged_index {
                    Some(p) => first.first_index().max(p.saturating_add(1)),
                    None => first.first_index(),
                };
                (Some(start), last.next_index().max(start))
            }
            _ => match purged_index {
                Some(p) => (Some(p.saturating_add(1)), p.saturating_add(1)),
                None => (None, 0),
            },
        };
        State {
            segments,
            pending: BTreeMap::new(),
            start_index,
            next_index,
            seq_next: 0,
            poisoned: None,
        }
    }

    /// First index present, if any record is.
    pub fn first_index(&self) -> Option<u64> {
        self.start_index.filter(|&s| s < self.next_index)
    }

    /// Checks an append against the log and applies it to the logical state: records
    /// become pending. Returns the op's sequence number. Changes nothing on error.
    pub fn accept_append(&mut self, records: &[(u64, Bytes)]) -> Result<u64> {
        let seq = self.seq_next;
        if let Some(&(index_first, _)) = records.first() {
            // A log that never held anything accepts any first index.
            let index_expected = self.start_index.map_or(index_first, |_| self.next_index);
            for (k, (index, _)) in records.iter().enumerate() {
                let expected = index_expected.checked_add(k as u64);
                if expected != Some(*index) {
                    return Err(Error::NonContiguous {
                        expected: expected.unwrap_or(u64::MAX),
                        got: *index,
                    });
                }
            }
            let index_last = index_first + (records.len() as u64 - 1);
            self.next_index = index_last
                .checked_add(1)
                .ok_or(Error::IndexOverflow(index_last))?;
            self.start_index.get_or_insert(index_first);
            for (index, payload) in records {
                let payload = payload.clone();
                self.pending.insert(*index, Pending { seq, payload });
            }
        }
        self.seq_next += 1;
        Ok(seq)
    }

    /// Applies `truncate_from(index)` to the logical state. Returns the new next index,
    /// or `None` if there is nothing to remove. Never moves below the log's start.
    pub fn accept_truncate(&mut self, index: u64) -> Option<u64> {
        let next_index = index.max(self.start_index?);
        if next_index >= self.next_index {
            return None;
        }
        self.next_index = next_index;
        drop(self.pending.split_off(&next_index));
        Some(next_index)
    }

    /// Applies `purge_to(index)` to the logical state. Returns whether anything changed
    /// (purging below the start does not).
    pub fn accept_purge(&mut self, index: u64) -> bool {
        let start_index = index.saturating_add(1);
        if self.start_index.is_some_and(|s| start_index <= s) {
            return false;
        }
        if self.start_index.is_none() || self.next_index < start_index {
            self.next_index = start_index;
        }
        self.start_index = Some(start_index);
        self.pending = self.pending.split_off(&start_index);
        true
    }

    /// Fails with [`Error::Poisoned`] once the writer has hit an I/O error.
    pub fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// The segment whose index range covers `index` (it may not hold the record yet).
    pub fn segment_for(&self, index: u64) -> Option<&SegmentView> {
        let k = self
            .segments
            .partition_point(|view| view.first_index() <= index);
        self.segments.get(k.checked_sub(1)?)
    }
}

/// What the handles and the writer thread share.
pub(crate) struct Shared {
    /// Settings the WAL was opened with.
    pub config: WalConfig,
    /// The file system the log lives on.
    pub fs: Arc<dyn WalFs>,
    /// The log state.
    pub state: RwLock<State>,
    /// Counters for [`crate::WalStats`].
    pub counters: Counters,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(indexes: std::ops::RangeInclusive<u64>) -> Vec<(u64, Bytes)> {
        indexes.map(|i| (i, Bytes::from(vec![i as u8]))).collect()
    }

    #[test]
    fn logical_log_follows_appends_truncations_and_purges() -> Result<()> {
        let mut state = State::recovered(Vec::new(), None);
        assert_eq!(state.accept_truncate(5), None, "nothing to truncate yet");
        assert_eq!(state.accept_append(&records(10..=14))?, 0);
        assert_eq!((state.first_index(), state.next_index), (Some(10), 15));
        assert!(matches!(
            state.accept_append(&records(16..=16)),
            Err(Error::NonContiguous {
                expected: 15,
                got: 16
            })
        ));
        assert_eq!(state.accept_truncate(12), Some(12));
        assert_eq!(state.pending.keys().copied().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(
            state.accept_truncate(3),
            Some(10),
            "truncation keeps the start"
        );
        assert_eq!(state.first_index(), None);
        assert_eq!(state.accept_append(&records(10..=11))?, 1);
        assert!(!state.accept_purge(9), "below the start");
        assert!(state.accept_purge(10));
        assert_eq!((state.first_index(), state.next_index), (Some(11), 12));
        assert!(state.accept_purge(20));
        assert_eq!((state.first_index(), state.next_index), (None, 21));
        assert!(state.pending.is_empty());
        Ok(())
    }

    #[test]
    fn append_at_the_last_index_overflows_cleanly() {
        let mut state = State::recovered(Vec::new(), None);
        assert!(matches!(
            state.accept_append(&records(u64::MAX..=u64::MAX)),
            Err(Error::IndexOverflow(u64::MAX))
        ));
        assert_eq!(state.start_index, None, "a rejected append changes nothing");
    }
}
