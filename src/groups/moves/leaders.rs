//! Spreading the data groups' leaders over the nodes. A leader does a group's
//! proposing, replication and apply-then-answer work, so a node leading many groups
//! does more than its share; openraft elects whichever voter times out first.
//!
//! Each node checks now and then whether it leads more groups than its share
//! (`ceil(groups / nodes)`); if so it hands one over (`RaftNode::hand_over`) to a
//! voter of that group that leads at least two fewer, asking the other nodes how many
//! they lead. Every handover narrows the spread, so two nodes never trade a group back
//! and forth; a node that leads no more than its share does nothing.

use futures::future::join_all;
use quiver_raft::GroupId;

use super::{DataGroup, Mover};

/// Where a node says which data groups it leads.
pub const LEADING_PATH: &str = "/internal/leading";

/// How long a node waits for another's count of the groups it leads.
const LEADING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Mover {
    /// The data groups this node leads now.
    pub fn leading_here(&self) -> Vec<GroupId> {
        self.groups
            .routes()
            .into_iter()
            .filter_map(|route| match route {
                super::super::Route::Local(g) if g.node.is_leader() => Some(g.id),
                _ => None,
            })
            .collect()
    }

    /// One round of spreading leaders: hands at most one group this node leads over to
    /// a voter leading fewer. Returns the group and the node it went to.
    pub async fn balance_leaders(&self) -> Option<(GroupId, u64)> {
        let led = self.leading_here();
        let mine = led.len();
        let nodes = self.nodes();
        let groups = self.groups.data_count();
        if nodes.len() < 2 || groups == 0 {
            return None;
        }
        let share = groups.div_ceil(nodes.len());
        if mine <= share {
            return None;
        }
        let others = nodes.iter().copied().filter(|id| *id != self.node_id);
        let counts: Vec<(u64, usize)> = join_all(others.map(|id| async move {
            let addr = self.address_of(id)?;
            let answer: Result<Vec<GroupId>, _> = self
                .client
                .call(&addr, LEADING_PATH, &(), LEADING_TIMEOUT)
                .await;
            answer.ok().map(|leading| (id, leading.len()))
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
        for group in led {
            if self.driving.lock().contains(&group) {
                continue;
            }
            let Some(DataGroup::Local(local)) = self.groups.data_group(group) else {
                continue;
            };
            // A move under way (a joint change, or a learner catching up on this
            // leader) would fail if its leader stepped aside.
            let has_learner = local
                .node
                .raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .learner_ids()
                .next()
                .is_some();
            if local.node.membership_in_change() || has_learner {
                continue;
            }
            let voters = local.node.voters();
            // A node that did not answer is not handed a group.
            let Some((to, _)) = counts
                .iter()
                .filter(|(id, n)| voters.iter().any(|(v, _)| v == id) && n + 2 <= mine)
                .min_by_key(|(id, n)| (*n, *id))
            else {
                continue;
            };
            let to = *to;
            match local.node.hand_over(to).await {
                Ok(()) => return Some((group, to)),
                Err(e) => {
                    metrics::counter!("quiver_leadership_handovers_failed_total").increment(1);
                    tracing::info!(group, to, error = %e, "leadership not handed over");
                    return None;
                }
            }
        }
        None
    }
}
