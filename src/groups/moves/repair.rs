//! Re-replicating a dead node's replicas. A node that stops answering leaves every data
//! group it was a voter of one replica short: with three voters, one more loss takes the
//! group's majority (no writes, no linearizable reads). Waiting for an operator to run
//! `drain` can take a night; so the metadata group's leader (one decider, the same as
//! the byte balance) asks every node now and then whether it is up, and once a node has
//! not answered for `cluster.rereplicate_after_ms` it moves that node's replicas, one
//! group at a time, to the live nodes storing the fewest bytes that do not hold the
//! group: the same move as `quiver cluster move` (learner, catch-up with the files,
//! promotion, removal of the dead voter through joint consensus, which the two live
//! voters carry).
//!
//! The grace period keeps a restart or a short partition from copying a node's data
//! (a node that is back catches up from the log instead). A node that comes back after
//! its replicas moved finds itself removed and deletes its copies
//! (`Mover::retire_if_removed`); the byte balance then gives it replicas again. While
//! any node is down the byte balance makes no move: it would count the dead node's
//! replicas and could pick it as a target.
//!
//! The time a node has been down is measured by the deciding node from its own first
//! failed probe: a new metadata leader starts counting afresh, which only delays a
//! repair.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use quiver_raft::GroupId;

use super::leaders::LEADING_PATH;
use super::{MoveRequest, Mover};

/// How long a node waits for another to say it is up.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the metadata leader probes the nodes.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

/// What the decider knows of the nodes that did not answer.
#[derive(Debug, Default)]
pub struct Liveness {
    /// Since when each silent node has not answered (cleared when it answers, and when
    /// this node stops deciding).
    down_since: BTreeMap<u64, Instant>,
}

impl Liveness {
    /// The nodes that did not answer the last probe, and for how long they have not.
    pub fn down(&self) -> BTreeMap<u64, Duration> {
        self.down_since
            .iter()
            .map(|(id, since)| (*id, since.elapsed()))
            .collect()
    }
}

/// The node a dead node's replica of a group goes to: a live node that is not a member
/// of it, the one storing the fewest bytes (then the fewest replicas, then the lowest
/// id). `None` when every live node already holds the group.
pub fn replacement(
    members: &std::collections::BTreeSet<u64>,
    live: &[u64],
    loads: &BTreeMap<u64, u64>,
    replicas: &BTreeMap<u64, usize>,
) -> Option<u64> {
    live.iter()
        .copied()
        .filter(|n| !members.contains(n))
        .min_by_key(|n| {
            (
                loads.get(n).copied().unwrap_or(0),
                replicas.get(n).copied().unwrap_or(0),
                *n,
            )
        })
}

impl Mover {
    /// Asks every other node whether it is up and records who did not answer. Only the
    /// metadata leader keeps the record; any other node forgets it (a node that later
    /// decides again starts counting afresh). Returns the nodes down and for how long.
    pub async fn probe_nodes(&self) -> BTreeMap<u64, Duration> {
        if !self.groups.first().node.is_leader() {
            self.liveness.lock().down_since.clear();
            return BTreeMap::new();
        }
        let others: Vec<u64> = self
            .nodes()
            .into_iter()
            .filter(|id| *id != self.node_id)
            .collect();
        let answers = join_all(others.iter().map(|id| async move {
            let Some(addr) = self.address_of(*id) else {
                return (*id, false);
            };
            let answer: Result<Vec<GroupId>, _> = self
                .client
                .call(&addr, LEADING_PATH, &(), PROBE_TIMEOUT)
                .await;
            (*id, answer.is_ok())
        }))
        .await;
        let now = Instant::now();
        let mut liveness = self.liveness.lock();
        liveness.down_since.retain(|id, _| others.contains(id));
        for (id, up) in answers {
            if up {
                if liveness.down_since.remove(&id).is_some() {
                    tracing::info!(node = id, "node answers again");
                }
            } else if let std::collections::btree_map::Entry::Vacant(v) =
                liveness.down_since.entry(id)
            {
                tracing::warn!(node = id, "node does not answer");
                v.insert(now);
            }
        }
        let down = liveness.down();
        metrics::gauge!("quiver_cluster_nodes_down").set(down.len() as f64);
        down
    }

    /// The nodes the decider last found down (empty on any other node).
    pub fn nodes_down(&self) -> BTreeMap<u64, Duration> {
        self.liveness.lock().down()
    }

    /// Data groups with a voter that is down now, as the decider sees them.
    pub fn under_replicated(&self) -> Vec<GroupId> {
        let down = self.nodes_down();
        (1..=self.groups.data_count() as GroupId)
            .filter(|g| {
                self.members_of(*g)
                    .iter()
                    .any(|(id, _)| down.contains_key(id))
            })
            .collect()
    }

    /// One round of repair on the metadata leader: moves one replica of a node down for
    /// longer than `after` to a live node. Returns the move made.
    pub async fn replace_dead_replicas(&self, after: Duration) -> Option<MoveRequest> {
        let down = self.probe_nodes().await;
        let under = self.under_replicated();
        metrics::gauge!("quiver_groups_under_replicated").set(under.len() as f64);
        let dead: Vec<u64> = down
            .iter()
            .filter(|(_, for_how_long)| **for_how_long >= after)
            .map(|(id, _)| *id)
            .collect();
        if dead.is_empty() || under.is_empty() {
            return None;
        }
        let holdings = self.holdings();
        let live: Vec<u64> = holdings
            .nodes
            .iter()
            .copied()
            .filter(|n| !down.contains_key(n))
            .collect();
        let loads = holdings.loads();
        let mut replicas: BTreeMap<u64, usize> = BTreeMap::new();
        for members in holdings.members.values() {
            for n in members {
                *replicas.entry(*n).or_default() += 1;
            }
        }
        for (group, members) in &holdings.members {
            let Some(from) = dead.iter().copied().find(|d| members.contains(d)) else {
                continue;
            };
            let Some(to) = replacement(members, &live, &loads, &replicas) else {
                tracing::warn!(
                    group,
                    node = from,
                    "a dead node's replica has nowhere to go: every live node holds the group"
                );
                continue;
            };
            let request = MoveRequest {
                group: *group,
                from,
                to,
            };
            tracing::warn!(group, from, to, "re-replicating a dead node's replica");
            return match self.move_anywhere(request).await {
                Ok(_) => {
                    metrics::counter!("quiver_group_rereplications_total").increment(1);
                    Some(request)
                }
                Err(e) => {
                    tracing::warn!(group, from, to, error = %e,
                        "re-replicating a dead node's replica failed; tried again later");
                    None
                }
            };
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replacement_is_the_live_non_member_storing_least() {
        let members = [1, 2, 3].into_iter().collect();
        let loads = [(4, 500), (5, 100), (6, 100)].into_iter().collect();
        let replicas = [(4, 2), (5, 3), (6, 2)].into_iter().collect();
        // Node 5 and 6 store as little; 6 holds fewer replicas.
        assert_eq!(
            replacement(&members, &[1, 2, 4, 5, 6], &loads, &replicas),
            Some(6)
        );
        // A down node (not in `live`) is never chosen.
        assert_eq!(
            replacement(&members, &[1, 2, 4, 5], &loads, &replicas),
            Some(5)
        );
        // Every live node holds the group: nowhere to go.
        assert_eq!(replacement(&members, &[1, 2], &loads, &replicas), None);
    }
}
