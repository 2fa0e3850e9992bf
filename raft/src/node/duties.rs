//! The node's background duties: writing frozen segments, flush and compaction
//! decisions on the leader, releasing the log cache, polling followers.

use super::*;

/// Snapshots are at least this many build times apart: building them takes at most
/// about 1/20 of the node's time.
const SNAPSHOT_BUILD_SHARE: u32 = 20;

impl RaftNode {
    /// Starts the background duties; they end when Raft shuts down. They log in the
    /// caller's span, as openraft's own tasks do (the simulation tells its clusters
    /// apart by it).
    pub fn spawn_background(&self) -> Vec<JoinHandle<()>> {
        let mut tasks = vec![
            tokio::spawn(self.clone().persist_loop().in_current_span()),
            tokio::spawn(self.clone().flush_policy_loop().in_current_span()),
            tokio::spawn(self.clone().compaction_loop().in_current_span()),
            tokio::spawn(self.clone().log_cache_loop().in_current_span()),
        ];
        if self.storage.sweep_due() {
            let state_machine = self.state_machine.clone();
            let covered = quiver_storage::LogIndex(self.covered_at_open);
            tasks.push(tokio::spawn(
                async move { state_machine.sweep_files(covered).await }.in_current_span(),
            ));
        }
        if self.bootstrap_pending.load(Ordering::Relaxed) {
            tasks.push(tokio::spawn(
                self.clone().bootstrap_loop().in_current_span(),
            ));
        }
        if self.barrier.awaits_vote_floor() {
            tasks.push(tokio::spawn(
                self.clone().vote_floor_loop().in_current_span(),
            ));
        }
        if self.config.peers.len() > 1 {
            tasks.push(tokio::spawn(self.clone().takers_loop().in_current_span()));
        }
        tasks.push(tokio::spawn(
            self.clone().joint_membership_loop().in_current_span(),
        ));
        tasks
    }

    /// On the leader, asks every other voter every [`TAKERS_POLL_MS`] whether it takes
    /// entries, so a follower whose disk filled is known before a write is proposed to
    /// it (and one that has room again, before the next write is refused). Replication
    /// teaches the same, but only when entries are sent.
    pub(super) async fn takers_loop(self) {
        loop {
            tokio::time::sleep(Duration::from_millis(TAKERS_POLL_MS)).await;
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            if !self.is_leader() {
                continue;
            }
            for (id, addr) in self.other_peers() {
                match self.peer_state_of(addr).await {
                    Ok(PeerState {
                        entries_refused: Some(reason),
                        ..
                    }) => self.takers.refused(*id, &reason),
                    Ok(_) => self.takers.took(*id),
                    // Unreachable: the quorum check covers it.
                    Err(_) => {}
                }
            }
        }
    }

    /// Writes frozen segments as Parquet, retrying failures with backoff (the segment
    /// stays in memory meanwhile), and takes a snapshot once the flushed data makes one
    /// cheap, so the log below it can be purged.
    pub(super) async fn persist_loop(self) {
        let mut last_snapshot = Instant::now();
        let mut persisted_since_snapshot = false;
        let mut disk_low_logged = false;
        loop {
            if let Some(free) = self.data_volume_low() {
                if !disk_low_logged {
                    tracing::warn!(free_bytes = free, free_bytes_min = self.config.data_free_bytes_min,
                        "data volume below storage.free_bytes_min: segments stay in memory until space returns");
                    disk_low_logged = true;
                }
                metrics::gauge!("quiver_flush_waiting_for_disk").set(1.0);
                tokio::time::sleep(Duration::from_millis(DISK_RECHECK_MS)).await;
                continue;
            }
            if disk_low_logged {
                tracing::info!("data volume has room again: writing segments");
                disk_low_logged = false;
                metrics::gauge!("quiver_flush_waiting_for_disk").set(0.0);
            }
            match self.storage.persist_next().await {
                Ok(true) => {
                    persisted_since_snapshot = true;
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    // The table waits out its own backoff inside storage; the others go on.
                    tracing::error!(error = %e, "writing a segment failed; it stays in memory and is retried");
                    metrics::counter!("quiver_flush_failures_total").increment(1);
                    continue;
                }
            }
            if persisted_since_snapshot && last_snapshot.elapsed() >= self.snapshot_gap() {
                if self.raft.trigger().snapshot().await.is_err() {
                    return;
                }
                last_snapshot = Instant::now();
                persisted_since_snapshot = false;
            }
            let mut wait = if persisted_since_snapshot {
                self.snapshot_gap().saturating_sub(last_snapshot.elapsed())
            } else {
                Duration::from_secs(3600)
            };
            if let Some(retry) = self.storage.next_persist_retry() {
                wait = wait.min(retry);
            }
            tokio::select! {
                _ = self.storage.frozen_ready() => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// Free bytes of the data volume when below `data_free_bytes_min`.
    pub(super) fn data_volume_low(&self) -> Option<u64> {
        if self.config.data_free_bytes_min == 0 {
            return None;
        }
        let free = fs2::available_space(&self.storage.config().dir).ok()?;
        (free < self.config.data_free_bytes_min).then_some(free)
    }

    /// On the leader, proposes a flush entry whenever a buffer passes a threshold.
    /// Releases cached log entries nobody will read from memory again: those applied
    /// here and, on a leader, matched by every follower (a lagging follower keeps its
    /// entries cached, up to the cache's cap). Under sustained ingest the cache
    /// otherwise held its whole cap (256 MiB) of entries already in Parquet or buffers.
    pub(super) async fn log_cache_loop(self) {
        let mut tick = tokio::time::interval(LOG_CACHE_RELEASE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let through = {
                let metrics = self.raft.metrics();
                let m = metrics.borrow();
                if m.running_state.is_err() {
                    return;
                }
                let applied = m.last_applied.map(|l| l.index);
                let matched = match &m.replication {
                    // Every member's matched index; one not yet known keeps everything.
                    Some(progress) => progress
                        .values()
                        .map(|matched| matched.map(|l| l.index))
                        .try_fold(u64::MAX, |low, m| m.map(|m| low.min(m))),
                    None => Some(u64::MAX),
                };
                applied.zip(matched).map(|(a, m)| a.min(m))
            };
            if let Some(index) = through {
                self.log.release_cached_through(index);
            }
            metrics::gauge!("quiver_raft_log_cache_bytes").set(self.log.cached_bytes() as f64);
        }
    }

    pub(super) async fn flush_policy_loop(self) {
        let interval = Duration::from_millis(self.config.flush_check_interval_ms);
        loop {
            tokio::time::sleep(interval).await;
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            if !self.is_leader() {
                continue;
            }
            let tables = self.storage.flush_candidates(Instant::now());
            if tables.is_empty() {
                continue;
            }
            tracing::debug!(tables = tables.len(), "proposing a flush");
            if let Err(e) = self.propose(Command::Flush(FlushCommand { tables })).await {
                tracing::warn!(error = %e, "flush proposal failed");
            }
        }
    }

    /// Compaction on this node: on the leader, proposes merges its policy finds due;
    /// on every node, carries out committed merges one at a time (on a low-priority
    /// thread) and deletes replaced files after their grace period. Merges wait while
    /// the data volume is low: an output is written before its inputs go.
    pub(super) async fn compaction_loop(self) {
        let interval = Duration::from_millis(self.config.compaction_check_interval_ms.max(1));
        let mut next_policy = Instant::now() + interval;
        let mut last_snapshot_asked: Option<Instant> = None;
        loop {
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            self.storage.delete_condemned().await;
            // Removed files leave the disk only once a snapshot no longer lists them.
            let awaiting_snapshot = self.storage.condemned_awaiting_snapshot();
            let snapshot_gap = self.snapshot_gap();
            if awaiting_snapshot && last_snapshot_asked.is_none_or(|t| t.elapsed() >= snapshot_gap)
            {
                if self.raft.trigger().snapshot().await.is_err() {
                    return;
                }
                last_snapshot_asked = Some(Instant::now());
            }
            if Instant::now() >= next_policy {
                next_policy = Instant::now() + interval;
                if self.is_leader() && self.data_volume_low().is_none() {
                    self.propose_compactions().await;
                }
            }
            let mut ran = false;
            if self.data_volume_low().is_none() {
                match self.storage.compact_next().await {
                    Ok(did) => ran = did,
                    Err(e) => {
                        // The job stays queued; it is tried again at the next check.
                        tracing::error!(error = %e, "compaction failed; retrying later");
                        metrics::counter!("quiver_compaction_failures_total").increment(1);
                    }
                }
            }
            metrics::gauge!("quiver_compaction_backlog")
                .set(self.storage.compaction_backlog() as f64);
            if ran {
                continue;
            }
            let mut wait = next_policy.saturating_duration_since(Instant::now());
            if let Some(due) = self.storage.next_condemned_due() {
                wait = wait.min(due);
            }
            if awaiting_snapshot {
                wait = wait.min(snapshot_gap);
            }
            tokio::select! {
                _ = self.storage.compaction_queued() => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// Least time between two snapshots: `raft.snapshot_interval_ms_min`, or
    /// [`SNAPSHOT_BUILD_SHARE`] times the last build when that is longer. A snapshot's
    /// manifest grows with the file count (about 400 MB at a million files, 2.5-3.5 s to
    /// build), and a compaction backlog asks for one every interval so replaced files
    /// may go: at 10 s that kept the disk busy writing snapshots.
    pub(super) fn snapshot_gap(&self) -> Duration {
        Duration::from_millis(self.config.snapshot_interval_ms_min)
            .max(self.state_machine.last_snapshot_build() * SNAPSHOT_BUILD_SHARE)
    }

    /// Proposes every job the compaction policy finds due now, [`COMPACTIONS_IN_FLIGHT`]
    /// at a time: openraft appends proposals that wait together as one write of the
    /// log, so a backlog of months costs a few `fsync`s, not one per merge.
    pub(super) async fn propose_compactions(&self) {
        use futures::StreamExt;
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let requests = self
            .storage
            .compaction_candidates(quiver_storage::TimestampNs(now_ns));
        let mut answers = futures::stream::iter(requests)
            .map(|request| async move {
                let table = request.table.clone();
                (table, self.propose(Command::Compact(request)).await)
            })
            .buffered(COMPACTIONS_IN_FLIGHT);
        while let Some((table, answer)) = answers.next().await {
            match answer {
                Ok(CommandResult::Compaction(outcome)) => {
                    tracing::debug!(%table, ?outcome, "compaction proposed")
                }
                Ok(other) => tracing::warn!(%table, ?other, "unexpected answer to a compaction"),
                Err(e) => {
                    // Not leader any more, or the log refuses: the rest waits for the next
                    // check (a job proposed twice is refused at apply, its inputs taken).
                    tracing::warn!(%table, error = %e, "compaction proposal failed");
                    return;
                }
            }
        }
    }
}

/// Compaction proposals waiting for their commit at once.
const COMPACTIONS_IN_FLIGHT: usize = 32;
