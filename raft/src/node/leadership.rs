//! Handing leadership to another voter, so leaders can be spread over the nodes.
//!
//! openraft 0.9 has no leader transfer, and a voter that stands for election while a
//! leader lives always loses: every follower refuses votes for one maximal election
//! timeout after it last heard the leader (the leader lease). So the leader steps
//! aside instead: it stops taking proposals (callers wait for the next leader, as
//! during an election), lets the entries in flight commit, stops its heartbeats, waits
//! until the chosen voter's log matches its own and the followers' leases have run
//! out, then asks that voter to stand. The voter's log is at least as long as anyone's,
//! and it stands one election timeout before any follower's own timer fires, so it wins
//! unless it fails meanwhile; then the cluster elects as after any leader loss. Writes
//! to the group pause for about one maximal election timeout; none is refused.

use super::*;

/// Longest the leader waits for its entries in flight to commit, and for the chosen
/// voter's log to match, before it gives up and leads on.
const HANDOVER_CATCH_UP_MS: u64 = 2_000;
/// Added to the maximal election timeout before the chosen voter stands: heartbeats
/// already sent may still arrive and renew a follower's lease.
const LEASE_MARGIN_MS: u64 = 100;

/// Why leadership was not handed over; the leader leads on.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// Only a leader hands over, and only one handover runs at a time.
    #[error("not handed over: {0}")]
    NotNow(String),
    /// The steps ran but the chosen voter does not lead.
    #[error("handover to node {to} did not take: {why}")]
    DidNotTake {
        /// The voter asked to stand.
        to: NodeId,
        /// What was seen.
        why: String,
    },
}

/// Clears the yielding flag and restarts heartbeats however the handover ends.
struct Yielding<'a> {
    node: &'a RaftNode,
}

impl Drop for Yielding<'_> {
    fn drop(&mut self) {
        self.node.raft.runtime_config().heartbeat(true);
        self.node.yielding.store(false, Ordering::SeqCst);
    }
}

impl RaftNode {
    /// Whether this leader is handing leadership over now: proposals and read indexes
    /// are answered "not the leader" meanwhile, and callers wait for the next one.
    pub(super) fn is_yielding(&self) -> bool {
        self.yielding.load(Ordering::SeqCst)
    }

    /// On the leader: hands leadership to voter `to` (see the module comment). Returns
    /// once `to` leads, or with the reason it does not (this node may lead on, or
    /// another voter may have been elected).
    pub async fn hand_over(&self, to: NodeId) -> Result<(), HandoverError> {
        let me = self.config.node_id;
        let not_now = |why: &str| Err(HandoverError::NotNow(why.to_string()));
        if to == me {
            return not_now("the node asked to lead already leads");
        }
        if !self.is_leader() {
            return not_now("this node does not lead the group");
        }
        if self.membership_in_change() {
            return not_now("the group's membership is changing");
        }
        if !self.voters().iter().any(|(id, _)| *id == to) {
            return not_now("the node asked to lead is not a voter of the group");
        }
        let Some(addr) = self.member_addr(to) else {
            return not_now("the node asked to lead has no address");
        };
        if self
            .yielding
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return not_now("a handover is already running");
        }
        let _yielding = Yielding { node: self };
        let catch_up = Some(Duration::from_millis(HANDOVER_CATCH_UP_MS));
        // Entries taken before the pause commit under this leader: their callers hear
        // the outcome, never "unknown".
        let settled = self
            .raft
            .wait(catch_up)
            .metrics(
                |m| m.last_applied.map(|l| l.index) >= m.last_log_index,
                "entries in flight applied",
            )
            .await
            .map_err(|e| HandoverError::NotNow(format!("entries in flight: {e}")))?;
        let last = settled.last_log_index;
        self.raft
            .wait(catch_up)
            .metrics(
                |m| {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(&to))
                        .is_some_and(|matched| matched.map(|l| l.index) >= last)
                },
                "the chosen voter's log matches",
            )
            .await
            .map_err(|e| HandoverError::NotNow(format!("node {to} is behind: {e}")))?;
        self.raft.runtime_config().heartbeat(false);
        tokio::time::sleep(Duration::from_millis(
            self.config.election_timeout_ms_max + LEASE_MARGIN_MS,
        ))
        .await;
        let deadline = Instant::now()
            + Duration::from_millis(self.config.election_timeout_ms_max + FORWARD_MARGIN_MS);
        let stood = self
            .forward(
                &addr,
                &LeaderRequest::StandForElection {
                    last_log_index: last.unwrap_or(0),
                },
                deadline,
            )
            .await;
        if let Err(e) = stood {
            return Err(HandoverError::DidNotTake {
                to,
                why: format!("asked to stand, it answered: {e}"),
            });
        }
        let took = self
            .raft
            .wait(Some(Duration::from_millis(
                self.config.election_timeout_ms_max * 4 + FORWARD_MARGIN_MS,
            )))
            .metrics(
                |m| m.current_leader.is_some_and(|l| l != me),
                "another leader",
            )
            .await;
        match took {
            Ok(m) if m.current_leader == Some(to) => {
                metrics::counter!("quiver_leadership_handovers_total").increment(1);
                tracing::info!(group = self.config.group, to, "leadership handed over");
                Ok(())
            }
            Ok(m) => Err(HandoverError::DidNotTake {
                to,
                why: format!("node {:?} was elected instead", m.current_leader),
            }),
            Err(e) => Err(HandoverError::DidNotTake {
                to,
                why: format!("no other leader yet: {e}"),
            }),
        }
    }

    /// From any member: asks the group's leader to hand leadership to voter `to`
    /// (forwarded like a write). Used before a leader's replica is removed, so the
    /// entries it took commit under it rather than being left with unknown outcomes.
    pub async fn ask_leader_to_hand_over(&self, to: NodeId) -> Result<(), WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        self.on_leader(LeaderRequest::HandOver { to }, deadline)
            .await
            .map(|_| ())
    }

    /// On the voter a leader hands over to: stands for election at once, when its log
    /// holds the leader's last entry and it may stand (vote barrier open, taking
    /// entries); the leader has waited out the followers' leases.
    pub(super) async fn stand_for_election(
        &self,
        last_log_index: u64,
    ) -> Result<LeaderAnswer, WriteError> {
        let m = self.raft.metrics().borrow().clone();
        if !m
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == self.config.node_id)
        {
            return Err(WriteError::Unavailable("not a voter of the group".into()));
        }
        if let Some(reason) = self.barrier.refusal() {
            return Err(WriteError::Unavailable(format!("may not stand: {reason}")));
        }
        if self.refusing_entries.load(Ordering::Relaxed) {
            return Err(WriteError::Unavailable(
                "may not stand: refusing entries".into(),
            ));
        }
        if m.last_log_index.unwrap_or(0) < last_log_index {
            return Err(WriteError::Unavailable(format!(
                "log ends at {:?}, before the leader's {last_log_index}",
                m.last_log_index
            )));
        }
        self.raft
            .trigger()
            .elect()
            .await
            .map_err(|e| WriteError::Unavailable(format!("raft stopped: {e}")))?;
        Ok(LeaderAnswer::Standing)
    }
}
