//! Membership changes asked of the leader, and the members' addresses.

use super::*;

impl RaftNode {
    /// Adds a learner; it starts receiving the log (or a snapshot) at once.
    pub async fn add_learner(&self, node_id: NodeId, addr: String) -> Result<(), WriteError> {
        self.on_leader(
            LeaderRequest::AddLearner { node_id, addr },
            self.membership_deadline(),
        )
        .await
        .map(|_| ())
    }

    /// Promotes learners to voters and removes members.
    pub async fn change_voters(
        &self,
        add: BTreeSet<NodeId>,
        remove: BTreeSet<NodeId>,
    ) -> Result<(), WriteError> {
        self.on_leader(
            LeaderRequest::ChangeVoters { add, remove },
            self.membership_deadline(),
        )
        .await
        .map(|_| ())
    }

    /// Membership changes wait for a learner to catch up: they get a long deadline.
    pub(super) fn membership_deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(MEMBERSHIP_TIMEOUT_MS)
    }

    /// The addresses of every member (voters and learners), from the current membership.
    pub fn member_addrs(&self) -> Vec<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(_, n)| n.addr.clone())
            .collect()
    }

    /// The address of a member, from the current membership.
    pub fn member_addr(&self, id: NodeId) -> Option<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    }
}

impl RaftNode {
    /// Stands for election now, to take leadership from another member: used to bring
    /// a group's leadership back to the member placement prefers, so leaders (and the
    /// work of proposing) are spread over the nodes. Only a voter that follows a known
    /// leader, may stand (its vote barrier open, its volumes taking entries) and has
    /// applied its whole log stands; Raft's own rule still elects it only if its log
    /// is as long as a majority's. Returns whether it stood.
    pub async fn stand_for_leadership(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        let me = self.config.node_id;
        let follows_other = m.current_leader.is_some_and(|l| l != me);
        let voter = m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == me);
        let caught_up = m.last_applied.map(|l| l.index) == m.last_log_index;
        let may_stand =
            self.barrier.refusal().is_none() && !self.refusing_entries.load(Ordering::Relaxed);
        if !(follows_other && voter && caught_up && may_stand) {
            return false;
        }
        tracing::info!(group = self.config.group, leader = ?m.current_leader,
            "standing for election: this member is the group's preferred leader");
        metrics::counter!("quiver_leadership_elections_stood_total").increment(1);
        self.raft.trigger().elect().await.is_ok()
    }
}
