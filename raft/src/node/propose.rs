//! Proposing: writes, policies and deletes reach the leader (here or forwarded), are
//! committed within their deadline and applied here before the caller hears.

use super::*;

pub(super) fn client_write_error(
    e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
) -> WriteError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => WriteError::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            WriteError::Unavailable(e.to_string())
        }
        RaftError::Fatal(e) => WriteError::Unavailable(format!("raft stopped: {e}")),
    }
}

impl RaftNode {
    /// On a leader: why a write cannot commit now because too few voters take entries:
    /// this one takes them (the caller checked its own volumes and memory), the
    /// followers named in `takers` do not (their disk or buffers). Proposing anyway would
    /// only time out (an unknown outcome, 504) where a refusal (503) is the truth.
    pub(super) fn takers_refusal(
        &self,
        m: &openraft::RaftMetrics<NodeId, BasicNode>,
    ) -> Option<String> {
        let refusing = self.takers.refusing();
        if refusing.is_empty() {
            return None;
        }
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        let refusing: Vec<&(NodeId, String)> = refusing
            .iter()
            .filter(|(id, _)| voters.contains(id) && *id != self.config.node_id)
            .collect();
        let able = voters.len() - refusing.len();
        (able < voters.len() / 2 + 1).then(|| {
            let who: Vec<String> = refusing
                .iter()
                .map(|(id, why)| format!("node {id}: {why}"))
                .collect();
            format!(
                "too few voters can take entries now ({able} of {}): {}",
                voters.len(),
                who.join("; ")
            )
        })
    }

    /// On a leader: why it cannot commit, when no quorum has acknowledged it for longer
    /// than an election would take. openraft 0.9 leaders do not step down by themselves.
    pub(super) fn quorum_lost(
        &self,
        m: &openraft::RaftMetrics<NodeId, BasicNode>,
    ) -> Option<String> {
        let voters = m.membership_config.membership().voter_ids().count();
        if voters <= 1 {
            return None;
        }
        let limit_ms = self.config.election_timeout_ms_max * QUORUM_LOST_ELECTIONS;
        match m.millis_since_quorum_ack {
            Some(ms) if ms > limit_ms => Some(format!(
                "leading without a quorum: last acknowledged {ms} ms ago"
            )),
            _ => None,
        }
    }

    /// Proposes rows and waits until they are committed and applied, on whichever node
    /// leads (forwarded when it is not this one), within `write_timeout_ms`. Once the
    /// leader answers, this node also waits until it has applied the entry itself, so a
    /// local read here right after sees the write (read-your-writes through a follower).
    pub async fn write(&self, command: WriteCommand) -> Result<CommandResult, WriteError> {
        self.commit(LeaderRequest::Write(command)).await
    }

    /// Proposes a change of the replicated settings (tokens, lifecycle rules), like
    /// [`RaftNode::write`]: committed on the leader, applied here before it returns.
    pub async fn change_policy(
        &self,
        change: quiver_storage::PolicyChange,
    ) -> Result<CommandResult, WriteError> {
        self.commit(LeaderRequest::Policy(change)).await
    }

    /// Proposes a delete like [`RaftNode::write`]; returns the entry's index too (the
    /// tombstone's, which tells which rows it hides).
    pub async fn delete(
        &self,
        command: crate::command::DeleteCommand,
    ) -> Result<(CommandResult, u64), WriteError> {
        self.commit_indexed(LeaderRequest::Delete(command)).await
    }

    pub(super) async fn commit(&self, request: LeaderRequest) -> Result<CommandResult, WriteError> {
        self.commit_indexed(request).await.map(|(result, _)| result)
    }

    pub(super) async fn commit_indexed(
        &self,
        request: LeaderRequest,
    ) -> Result<(CommandResult, u64), WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        let (result, index) = match self.on_leader(request, deadline).await? {
            LeaderAnswer::Committed { result, index } => (result, index),
            other => return Err(WriteError::Unknown(format!("unexpected answer {other:?}"))),
        };
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(APPLY_WAIT_MS_MIN));
        if self
            .raft
            .wait(Some(wait))
            .applied_index_at_least(Some(index), "forwarded entry applied here")
            .await
            .is_err()
        {
            // Committed all the same: answering an error would make the client send it
            // twice. The read-your-writes promise is what slipped; count it.
            metrics::counter!("quiver_write_visibility_waits_expired_total").increment(1);
            tracing::warn!(
                index,
                "a committed entry was not yet applied on this node at its deadline"
            );
        }
        Ok((result, index))
    }

    /// Waits until this node has applied everything committed when the call began, as
    /// the leader confirms it: a read after this sees every write acknowledged before.
    pub async fn read_barrier(&self) -> Result<(), WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        let index = match self.on_leader(LeaderRequest::ReadIndex, deadline).await? {
            LeaderAnswer::ReadIndex(index) => index,
            other => {
                return Err(WriteError::Unavailable(format!(
                    "unexpected answer {other:?}"
                )))
            }
        };
        self.raft
            .wait(Some(Duration::from_millis(self.config.leader_wait_ms * 4)))
            .applied_index_at_least(index, "read index applied")
            .await
            .map(|_| ())
            .map_err(|e| WriteError::Unavailable(format!("read index not applied: {e}")))
    }

    /// Runs `request` on the leader: here when this node leads, else forwarded. While
    /// no leader is known, or the one asked says it no longer leads (so nothing was
    /// done), waits and tries again until `leader_wait_ms` (or `deadline`) has passed.
    pub(super) async fn on_leader(
        &self,
        request: LeaderRequest,
        deadline: Instant,
    ) -> Result<LeaderAnswer, WriteError> {
        let leader_deadline =
            deadline.min(Instant::now() + Duration::from_millis(self.config.leader_wait_ms));
        loop {
            let leader = self.raft.metrics().borrow().current_leader;
            let result = match leader {
                Some(id) if id == self.config.node_id => {
                    self.serve_leader_until(request.clone(), deadline).await
                }
                Some(id) => match self.member_addr(id) {
                    Some(addr) => self.forward(&addr, &request, deadline).await,
                    None => Err(WriteError::NotLeader { leader: None }),
                },
                None => Err(WriteError::NotLeader { leader: None }),
            };
            match result {
                Err(WriteError::NotLeader { leader }) if Instant::now() < leader_deadline => {
                    metrics::counter!("quiver_leader_retries_total").increment(1);
                    let wait = leader_deadline.saturating_duration_since(Instant::now());
                    // Wake on the next metrics change (a new leader), or after a beat.
                    let _ = self
                        .raft
                        .wait(Some(wait.min(Duration::from_millis(50))))
                        .metrics(
                            |m| m.current_leader.is_some() && m.current_leader != leader,
                            "a leader",
                        )
                        .await;
                }
                other => return other,
            }
        }
    }

    pub(super) async fn forward(
        &self,
        addr: &str,
        request: &LeaderRequest,
        deadline: Instant,
    ) -> Result<LeaderAnswer, WriteError> {
        // The leader holds the request to the same deadline; the margin covers the trip.
        let timeout = deadline.saturating_duration_since(Instant::now())
            + Duration::from_millis(FORWARD_MARGIN_MS);
        let answer: Result<Result<LeaderAnswer, WriteError>, PeerError> =
            self.peers.call(addr, FORWARD_PATH, request, timeout).await;
        metrics::counter!("quiver_forwarded_total").increment(1);
        match answer {
            Ok(result) => result,
            // Never reached the leader: as good as "not the leader", so it is retried.
            Err(PeerError::Refused { .. }) => Err(WriteError::NotLeader { leader: None }),
            // The leader refused the call before acting on it (wrong secret, bad request).
            Err(e @ PeerError::Protocol { .. }) if e.refused_before_acting() => {
                Err(WriteError::Unavailable(e.to_string()))
            }
            Err(e) => Err(WriteError::Unknown(e.to_string())),
        }
    }

    /// Serves a request as the leader (the `/internal/forward` handler calls this) within
    /// `write_timeout_ms`. A node that does not lead answers `NotLeader` and does nothing.
    pub async fn serve_leader(&self, request: LeaderRequest) -> Result<LeaderAnswer, WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        self.serve_leader_until(request, deadline).await
    }

    pub(super) async fn serve_leader_until(
        &self,
        request: LeaderRequest,
        deadline: Instant,
    ) -> Result<LeaderAnswer, WriteError> {
        if let LeaderRequest::StandForElection { last_log_index } = request {
            return self.stand_for_election(last_log_index).await;
        }
        if self.is_yielding() {
            // Handing leadership over: nothing is done, so the caller waits for the
            // next leader as during an election.
            return Err(WriteError::NotLeader {
                leader: Some(self.config.node_id),
            });
        }
        match request {
            LeaderRequest::HandOver { to } => {
                if !self.is_leader() {
                    let leader = self.raft.metrics().borrow().current_leader;
                    return Err(WriteError::NotLeader { leader });
                }
                self.hand_over(to)
                    .await
                    .map(|()| LeaderAnswer::Standing)
                    .map_err(|e| WriteError::Unavailable(e.to_string()))
            }
            LeaderRequest::StandForElection { .. } => Err(WriteError::Unavailable(
                "a request to stand reached the leader's path".into(),
            )),
            LeaderRequest::Write(command) => {
                let m = self.raft.metrics().borrow().clone();
                // Refused before anything is appended: a true 503.
                if let Some(reason) = self.takers_refusal(&m).or_else(|| self.quorum_lost(&m)) {
                    return Err(WriteError::Unavailable(reason));
                }
                self.propose_until(Command::Write(command), deadline)
                    .await
                    .map(|(result, index)| LeaderAnswer::Committed { result, index })
            }
            LeaderRequest::Policy(change) => self
                .propose_until(Command::Policy(change), deadline)
                .await
                .map(|(result, index)| LeaderAnswer::Committed { result, index }),
            LeaderRequest::Delete(delete) => self
                .propose_until(Command::Delete(delete), deadline)
                .await
                .map(|(result, index)| LeaderAnswer::Committed { result, index }),
            LeaderRequest::ReadIndex => match self.raft.ensure_linearizable().await {
                Ok(read) => Ok(LeaderAnswer::ReadIndex(read.map(|l| l.index))),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    Err(WriteError::NotLeader {
                        leader: f.leader_id,
                    })
                }
                Err(e) => Err(WriteError::Unavailable(e.to_string())),
            },
            LeaderRequest::AddLearner { node_id, addr } => self
                .raft
                .add_learner(node_id, BasicNode::new(addr), true)
                .await
                .map(|_| LeaderAnswer::MembershipChanged)
                .map_err(client_write_error),
            LeaderRequest::ChangeVoters { add, remove } => {
                if !add.is_empty() {
                    self.raft
                        .change_membership(ChangeMembers::AddVoterIds(add), false)
                        .await
                        .map_err(client_write_error)?;
                }
                if !remove.is_empty() {
                    self.raft
                        .change_membership(ChangeMembers::RemoveVoters(remove), false)
                        .await
                        .map_err(client_write_error)?;
                }
                Ok(LeaderAnswer::MembershipChanged)
            }
        }
    }

    pub(super) async fn propose(&self, command: Command) -> Result<CommandResult, WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        self.propose_until(command, deadline)
            .await
            .map(|(result, _)| result)
    }

    /// Proposes `command` and waits for its commit and apply until `deadline`. Past the
    /// deadline, or when Raft stops after taking the entry, the outcome is unknown
    /// (the entry may be in the log and be committed later); a Raft already stopped
    /// when the call began appended nothing.
    pub(super) async fn propose_until(
        &self,
        command: Command,
        deadline: Instant,
    ) -> Result<(CommandResult, u64), WriteError> {
        if let Some(fatal) = self.fatal() {
            return Err(WriteError::Unavailable(format!("raft stopped: {fatal}")));
        }
        if self.is_yielding() {
            return Err(WriteError::NotLeader {
                leader: Some(self.config.node_id),
            });
        }
        let budget = deadline.saturating_duration_since(Instant::now());
        let mut command = command;
        let tracked = command.stamp_proposal().map(|id| self.log.track(id));
        match tokio::time::timeout(budget, self.raft.client_write(command)).await {
            Ok(Ok(response)) => Ok((response.data, response.log_id.index)),
            Ok(Err(RaftError::Fatal(e))) => Err(WriteError::Unknown(format!(
                "raft stopped while the entry was pending: {e}"
            ))),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))))
                if tracked.as_ref().is_some_and(|t| t.appended()) =>
            {
                // Appended here, then removed by a new leader's log: another node may
                // still hold and commit it. Proposing it again could write it twice.
                metrics::counter!("quiver_write_outcomes_unknown_total", "reason" => "truncated")
                    .increment(1);
                Err(WriteError::Unknown(
                    "the entry was appended, then leadership changed and it was removed here; \
                     another node may still commit it"
                        .to_string(),
                ))
            }
            Ok(Err(e)) => Err(client_write_error(e)),
            Err(_) => {
                metrics::counter!("quiver_write_deadlines_expired_total").increment(1);
                Err(WriteError::Unknown(format!(
                    "not committed within http.write_timeout_ms ({} ms); it may still be",
                    self.config.write_timeout_ms
                )))
            }
        }
    }

    /// On the leader: proposes one window of a continuous query, which this node ran.
    /// Elsewhere `NotLeader`: only the leader computes windows.
    pub async fn propose_cq_window(
        &self,
        window: crate::command::CqWindowCommand,
    ) -> Result<CommandResult, WriteError> {
        if !self.is_leader() {
            return Err(WriteError::NotLeader { leader: None });
        }
        self.propose(Command::CqWindow(window)).await
    }

    /// Flushes every live buffer and waits until all segments are written (used by a
    /// clean shutdown and by tests).
    pub async fn flush_all(&self) -> Result<(), WriteError> {
        let tables = self.storage.tables_with_live_rows();
        if !tables.is_empty() {
            self.propose(Command::Flush(FlushCommand { tables }))
                .await?;
        }
        Ok(())
    }
}
