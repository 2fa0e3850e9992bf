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
