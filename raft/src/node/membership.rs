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

    /// Every member (voters and learners) with its address, from the current
    /// membership.
    pub fn member_addrs_by_id(&self) -> Vec<(NodeId, String)> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
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

    /// The voters (id, address) of the current membership, in id order; during a joint
    /// change, those of the configuration being moved to.
    pub fn voters(&self) -> Vec<(NodeId, String)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        let last = membership
            .get_joint_config()
            .last()
            .cloned()
            .unwrap_or_default();
        last.iter()
            .filter_map(|id| Some((*id, membership.get_node(id)?.addr.clone())))
            .collect()
    }

    /// Whether a membership change is half done (joint configuration).
    pub fn membership_in_change(&self) -> bool {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_joint_config()
            .len()
            > 1
    }
}
