//! Finishing a membership change left half done: openraft changes membership in two
//! steps (a joint configuration, then the target), and proposes the second only from
//! the caller of the first. A caller that went away in between (a `cluster remove` that
//! timed out, a leader that crashed) leaves the cluster joint for good (found by the
//! simulation).

use std::time::Duration;

use openraft::ChangeMembers;

use crate::node::RaftNode;

/// How often the leader looks for a membership change left half done.
const JOINT_CHECK_MS: u64 = 1_000;
/// Checks in a row a committed joint membership must be seen, with no second step
/// proposed, before the leader finishes it: openraft proposes the second step as soon
/// as the first commits, so one that lasts this long was abandoned.
const JOINT_ABANDONED_CHECKS: u32 = 3;

impl RaftNode {
    /// On the leader, finishes a membership change whose caller went away between its
    /// two steps (a `cluster remove` that timed out, a leader that crashed): openraft
    /// leaves such a cluster in the joint configuration, where every decision needs a
    /// majority of the old voters and of the new, so a node the operator removed and
    /// wiped would hold the cluster's availability hostage. The target of the change,
    /// the joint configuration's last half, becomes the membership.
    pub(crate) async fn joint_membership_loop(self) {
        let mut seen = 0u32;
        loop {
            tokio::time::sleep(Duration::from_millis(JOINT_CHECK_MS)).await;
            let metrics = self.raft.metrics().borrow().clone();
            if metrics.running_state.is_err() {
                return;
            }
            let stored = &metrics.membership_config;
            let configs = stored.membership().get_joint_config();
            let abandoned = self.is_leader()
                && configs.len() > 1
                && stored.log_id().is_some()
                && stored.log_id() <= &metrics.last_applied;
            seen = if abandoned { seen + 1 } else { 0 };
            if seen < JOINT_ABANDONED_CHECKS {
                continue;
            }
            seen = 0;
            let Some(target) = configs.last().cloned() else {
                continue;
            };
            tracing::warn!(
                voters = ?target,
                "a membership change was left half done; finishing it"
            );
            match self
                .raft
                .change_membership(ChangeMembers::ReplaceAllVoters(target), false)
                .await
            {
                Ok(_) => {
                    metrics::counter!("quiver_raft_membership_changes_finished_total").increment(1)
                }
                Err(e) => tracing::warn!(error = %e, "finishing the membership change failed"),
            }
        }
    }
}
