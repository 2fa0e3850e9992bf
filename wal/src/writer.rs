//! The writer thread: the only code that writes, truncates or deletes files.
//!
//! It drains the operation queue in order. Consecutive appends form a group that is
//! encoded into one buffer, written with one `pwrite` (per segment touched) and, in
//! `fsync` mode, made durable with one `fdatasync` before every callback in the group
//! runs. While it syncs, new appends queue up and form the next group: that is the group
//! commit. A truncate, purge or sync op first commits the group before it, so the disk
//! sees operations in the order they were issued.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::{
    config::SyncMode,
    error::{Error, Result},
    format::{self, SEGMENT_HEADER_BYTES},
    fs::{sync_dir, WalFs},
    marker,
    segment::{Segment, SegmentView},
    state::Shared,
    wal::DurableCallback,
};

/// Payload bytes one group commit takes from the queue before it writes (one op more
/// if a single op is larger). Bounds the encode buffer and the latency of one group.
const GROUP_BYTES_MAX: usize = 16 << 20;
/// The encode buffer is shrunk back to this capacity after an oversized group.
const BUFFER_BYTES_KEEP_MAX: usize = GROUP_BYTES_MAX + (1 << 20);

/// An operation for the writer thread, in the order the handles issued them.
pub(crate) enum Op {
    /// Write records; call `on_durable` when they are durable (per the sync mode).
    Append(AppendOp),
    /// A truncate, purge or sync; `done` receives the outcome once it is durable.
    Control {
        control: Control,
        done: oneshot::Sender<Result<()>>,
    },
}

/// Records of one `append` call.
pub(crate) struct AppendOp {
    /// Sequence number matching the op's entries in the pending map.
    pub seq: u64,
    /// Consecutive records.
    pub records: Vec<(u64, Bytes)>,
    /// Called once with the outcome.
    pub on_durable: DurableCallback,
}

/// The non-append operations.
pub(crate) enum Control {
    /// Remove records at and after this index (already clamped by the handle).
    Truncate { next_index: u64 },
    /// Records at and before this index are no longer needed.
    Purge { purged_index: u64 },
    /// Make everything written so far durable.
    Sync,
}

impl Op {
    fn payload_bytes(&self) -> usize {
        match self {
            Op::Append(op) => op.records.iter().map(|(_, p)| p.len()).sum(),
            Op::Control { .. } => 0,
        }
    }
}

/// The writer thread's current-thread runtime; its timer bounds batch-mode waits.
///
/// Dropping a tokio runtime inside an async context panics, and `Wal::open` is called
/// from async code (quiver-raft's node start) and can fail after building one. This
/// wrapper shuts it down in the background instead, which is safe anywhere.
pub(crate) struct WriterRuntime(Option<tokio::runtime::Runtime>);

impl WriterRuntime {
    /// Builds the runtime.
    pub fn new() -> std::io::Result<WriterRuntime> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        Ok(WriterRuntime(Some(runtime)))
    }

    /// Runs `future` to completion; `None` only once dropped (never, in practice).
    fn block_on<F: std::future::Future>(&self, future: F) -> Option<F::Output> {
        self.0.as_ref().map(|runtime| runtime.block_on(future))
    }
}

impl Drop for WriterRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The segment appends go to, as the writer tracks it.
struct Active {
    segment: Arc<Segment>,
    len_bytes: u64,
    next_index: u64,
}

impl Active {
    fn of(view: &SegmentView) -> Active {
        Active {
            segment: Arc::clone(&view.segment),
            len_bytes: view.len_bytes,
            next_index: view.next_index(),
        }
    }
}

/// The writer's state; owned by its thread.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    fs: Arc<dyn WalFs>,
    dir: PathBuf,
    mode: SyncMode,
    sync_interval: Duration,
    segment_bytes_max: u64,
    ops_max: usize,
    active: Option<Active>,
    /// Encode buffer, reused across groups.
    buf: Vec<u8>,
    /// When data was first written after the last fdatasync of the active segment.
    dirty_since: Option<Instant>,
}

impl Writer {
    /// A writer for the segments currently in `shared`'s state.
    pub fn new(shared: Arc<Shared>) -> Writer {
        let config = shared.config.clone();
        let active = shared.state.read().segments.last().map(Active::of);
        Writer {
            fs: Arc::clone(&shared.fs),
            shared,
            dir: config.dir,
            mode: config.sync,
            sync_interval: Duration::from_millis(config.sync_interval_ms),
            segment_bytes_max: config.segment_bytes_max,
            ops_max: config.queue_len_max,
            active,
            buf: Vec::new(),
            dirty_since: None,
        }
    }

    /// The thread's body: serve the queue until every handle is gone.
    pub fn run(mut self, mut queue: mpsc::Receiver<Op>, runtime: WriterRuntime) {
        let mut ops = Vec::new();
        while let Some(first) = self.next_op(&mut queue, &runtime) {
            let mut bytes = first.payload_bytes();
            ops.push(first);
            while bytes < GROUP_BYTES_MAX && ops.len() < self.ops_max {
                let Ok(op) = queue.try_recv() else { break };
                bytes += op.payload_bytes();
                ops.push(op);
            }
            self.process(&mut ops);
            debug_assert!(ops.is_empty());
        }
        // Every handle is gone. Batch mode owes one last sync.
        if self.dirty_since.is_some() && self.mode.syncs() && self.poisoned().is_none() {
            if let Err(e) = self.sync_active() {
                self.poison(&e);
            }
        }
    }

    /// Waits for the next op. In batch mode, wakes up to fdatasync when written data has
    /// been unsynced for `sync_interval`.
    fn next_op(&mut self, queue: &mut mpsc::Receiver<Op>, runtime: &WriterRuntime) -> Option<Op> {
        loop {
            let deadline = match (self.mode, self.dirty_since) {
                (SyncMode::Batch, Some(since)) => since + self.sync_interval,
                _ => return queue.blocking_recv(),
            };
            let now = Instant::now();
            if now < deadline {
                // Built inside `block_on`: the timer needs the runtime's context.
                let wait = async { tokio::time::timeout(deadline - now, queue.recv()).await };
                match runtime.block_on(wait) {
                    Some(Ok(op)) => return op,
                    Some(Err(_elapsed)) => {}
                    // No runtime (see `WriterRuntime`): wait without a deadline.
                    None => return queue.blocking_recv(),
                }
            }
            // Deadline passed. Callbacks already ran after write(2); an error here can
            // only poison the log for later operations.
            if let Err(e) = self.sync_active() {
                self.poison(&e);
            }
        }
    }

    /// Runs a batch of ops in order, emptying `ops`.
    fn process(&mut self, ops: &mut Vec<Op>) {
        let mut group = Vec::new();
        for op in ops.drain(..) {
            match op {
                Op::Append(op) => group.push(op),
                Op::Control { control, done } => {
                    self.commit(std::mem::take(&mut group));
                    let result = self.control(control);
                    // The caller may have stopped waiting; the op is done regardless.
                    let _ = done.send(result);
                }
            }
        }
        self.commit(group);
    }

    /// Writes a group of appends, syncs per mode, then runs their callbacks.
    fn commit(&mut self, group: Vec<AppendOp>) {
        if group.is_empty() {
            return;
        }
        let result = match self.poisoned() {
            Some(reason) => Err(Error::Poisoned(reason)),
            None => {
                let result = self.write_group(&group).and_then(|()| match self.mode {
                    // Clean when the group held no records: earlier groups are synced.
                    SyncMode::Fsync if self.dirty_since.is_some() => self.sync_active(),
                    SyncMode::Fsync | SyncMode::Batch | SyncMode::None => Ok(()),
                });
                if let Err(e) = &result {
                    self.poison(e);
                }
                result
            }
        };
        for op in group {
            (op.on_durable)(result.clone());
        }
    }

    /// Encodes and writes every record of the group, rotating segments as they fill.
    fn write_group(&mut self, group: &[AppendOp]) -> Result<()> {
        let mut offsets = Vec::new();
        let mut written = Vec::new();
        self.buf.clear();
        for op in group {
            for (index, payload) in &op.records {
                let rotate = match &self.active {
                    None => true,
                    Some(active) => {
                        let has_records =
                            active.next_index > active.segment.first_index || !offsets.is_empty();
                        let len_bytes = active.len_bytes + self.buf.len() as u64;
                        has_records && len_bytes >= self.segment_bytes_max
                    }
                };
                if rotate {
                    self.flush(&mut offsets, &mut written)?;
                    self.rotate(*index)?;
                }
                let Some(active) = &self.active else {
                    return Err(Error::Internal("no active segment after rotation".into()));
                };
                let index_expected = active.next_index + offsets.len() as u64;
                if *index != index_expected {
                    let bug = format!("writer got index {index}, expected {index_expected}");
                    debug_assert!(false, "{bug}");
                    return Err(Error::Internal(bug));
                }
                offsets.push(active.len_bytes + self.buf.len() as u64);
                format::encode_frame(&mut self.buf, *index, payload);
                written.push((*index, op.seq));
            }
        }
        self.flush(&mut offsets, &mut written)?;
        if self.buf.capacity() > BUFFER_BYTES_KEEP_MAX {
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// Writes the encode buffer to the active segment and publishes the new frames to
    /// readers (dropping their pending copies).
    fn flush(&mut self, offsets: &mut Vec<u64>, written: &mut Vec<(u64, u64)>) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(active) = self.active.as_mut() else {
            return Err(Error::Internal("flush without an active segment".into()));
        };
        active.segment.write_at(&self.buf, active.len_bytes)?;
        let len_bytes = active.len_bytes + self.buf.len() as u64;
        self.shared.counters.written(self.buf.len() as u64);
        {
            let mut state = self.shared.state.write();
            let Some(view) = state.segments.last_mut() else {
                return Err(Error::Internal("active segment missing from state".into()));
            };
            debug_assert!(Arc::ptr_eq(&view.segment, &active.segment));
            view.extend(offsets, len_bytes);
            for (index, seq) in written.drain(..) {
                if state.pending.get(&index).is_some_and(|p| p.seq == seq) {
                    state.pending.remove(&index);
                }
            }
        }
        active.len_bytes = len_bytes;
        active.next_index += offsets.len() as u64;
        offsets.clear();
        self.buf.clear();
        self.dirty_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Starts a new segment at `first_index`, syncing the old one first.
    fn rotate(&mut self, first_index: u64) -> Result<()> {
        debug_assert!(self.buf.is_empty(), "flush before rotating");
        if self.active.is_some() && self.mode.syncs() {
            self.sync_active()?;
        }
        let segment = Arc::new(Segment::create(&*self.fs, &self.dir, first_index)?);
        self.shared.counters.written(SEGMENT_HEADER_BYTES as u64);
        if self.mode.syncs() {
            self.fsync(|| segment.sync_data())?;
            self.fsync(|| sync_dir(&*self.fs, &self.dir))?;
        }
        let view = SegmentView::empty(Arc::clone(&segment));
        self.active = Some(Active::of(&view));
        self.shared.state.write().segments.push(view);
        self.dirty_since = None;
        Ok(())
    }

    /// Runs a control op unless poisoned; poisons on failure.
    fn control(&mut self, control: Control) -> Result<()> {
        if let Some(reason) = self.poisoned() {
            return Err(Error::Poisoned(reason));
        }
        let result = match control {
            Control::Truncate { next_index } => self.truncate(next_index),
            Control::Purge { purged_index } => self.purge(purged_index, true),
            Control::Sync if self.dirty_since.is_some() && self.mode.syncs() => self.sync_active(),
            Control::Sync => Ok(()),
        };
        if let Err(e) = &result {
            self.poison(e);
        }
        result
    }

    /// Removes records at and after `next_index`. Deletes whole segments newest first,
    /// makes that durable, then cuts the segment holding `next_index`, so a crash midway
    /// leaves a contiguous prefix of the old log, never a gap.
    fn truncate(&mut self, next_index: u64) -> Result<()> {
        let (deleted, cut) = {
            let mut state = self.shared.state.write();
            let mut deleted = Vec::new();
            // The first segment survives (perhaps emptied): its header keeps the start.
            while state.segments.len() > 1
                && state
                    .segments
                    .last()
                    .is_some_and(|v| v.first_index() >= next_index)
            {
                deleted.extend(state.segments.pop().map(|v| v.segment));
            }
            let mut cut = None;
            if let Some(view) = state.segments.last_mut() {
                let keep = next_index.saturating_sub(view.first_index()) as usize;
                if let Some(&offset) = view.offsets.get(keep) {
                    view.offsets.truncate(keep);
                    view.len_bytes = offset;
                    cut = Some((Arc::clone(&view.segment), offset));
                }
            }
            self.active = state.segments.last().map(Active::of);
            (deleted, cut)
        };
        for segment in &deleted {
            self.fs
                .remove_file(&segment.path)
                .map_err(|e| Error::io(&segment.path, e))?;
        }
        if !deleted.is_empty() {
            self.dirty_since = None;
            if self.mode.syncs() {
                self.fsync(|| sync_dir(&*self.fs, &self.dir))?;
            }
        }
        if let Some((segment, offset)) = cut {
            {
                let _reshape = segment.reshape_write();
                segment.set_len(offset)?;
            }
            if self.mode.syncs() {
                self.fsync(|| segment.sync_data())?;
                self.dirty_since = None;
            }
        }
        Ok(())
    }

    /// Drops segments that hold only records `<= purged_index`. Writes the purge marker
    /// first (when `write_marker`; recovery finishing an interrupted purge passes false),
    /// then, if nothing would be left, starts an empty segment at `purged_index + 1`, then
    /// deletes oldest first, so a crash midway leaves a suffix of the old log.
    pub fn purge(&mut self, purged_index: u64, write_marker: bool) -> Result<()> {
        let start_index = purged_index.saturating_add(1);
        if write_marker {
            let (file, tmp) = marker::write_tmp(&*self.fs, &self.dir, purged_index)?;
            if self.mode.syncs() {
                self.fsync(|| file.sync_data().map_err(|e| Error::io(&tmp, e)))?;
            }
            marker::install(&*self.fs, &self.dir)?;
            if self.mode.syncs() {
                self.fsync(|| sync_dir(&*self.fs, &self.dir))?;
            }
        }
        let (all_purged, last_is_start) = {
            let state = self.shared.state.read();
            let last = state.segments.last();
            (
                last.is_none_or(|v| v.next_index() <= start_index),
                last.is_some_and(|v| v.offsets.is_empty() && v.first_index() == start_index),
            )
        };
        if all_purged && !last_is_start {
            self.rotate(start_index)?;
        }
        let deleted: Vec<Arc<Segment>> = {
            let mut state = self.shared.state.write();
            let last = state.segments.len().saturating_sub(1);
            let count = state.segments[..last]
                .iter()
                .take_while(|v| v.next_index() <= start_index)
                .count();
            state.segments.drain(..count).map(|v| v.segment).collect()
        };
        for segment in &deleted {
            self.fs
                .remove_file(&segment.path)
                .map_err(|e| Error::io(&segment.path, e))?;
        }
        if !deleted.is_empty() && self.mode.syncs() {
            self.fsync(|| sync_dir(&*self.fs, &self.dir))?;
        }
        Ok(())
    }

    /// fdatasyncs the active segment.
    fn sync_active(&mut self) -> Result<()> {
        if let Some(active) = &self.active {
            let segment = Arc::clone(&active.segment);
            self.fsync(|| segment.sync_data())?;
        }
        self.dirty_since = None;
        Ok(())
    }

    /// Runs one fsync-like call, timing and counting it.
    fn fsync(&self, call: impl FnOnce() -> Result<()>) -> Result<()> {
        let started = Instant::now();
        call()?;
        self.shared.counters.fsync(started.elapsed());
        Ok(())
    }

    fn poisoned(&self) -> Option<String> {
        self.shared.state.read().poisoned.clone()
    }

    /// Marks the log failed. A failed fsync may have dropped dirty pages, so nothing is
    /// retried, not even the periodic batch-mode sync; the first error is kept.
    fn poison(&mut self, error: &Error) {
        self.dirty_since = None;
        tracing::error!(%error, "WAL poisoned; every later operation will fail until reopened");
        let mut state = self.shared.state.write();
        if state.poisoned.is_none() {
            state.poisoned = Some(error.to_string());
        }
    }
}
