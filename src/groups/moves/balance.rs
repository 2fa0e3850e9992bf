//! Evening out the bytes each node stores. Replica counts alone leave nodes uneven:
//! groups differ in size (measurements hash unevenly onto groups, and some are
//! heavier), and with `replication × groups` not a multiple of the node count some
//! node holds one replica fewer. So the metadata group's leader (one decider, so two
//! plans never cross) looks every [`BALANCE_CHECK`] at each node's share of the
//! groups' Parquet bytes and, while one is more than [`TOLERANCE`] off the mean, moves
//! one replica from a node above to one below: the group whose size best halves the
//! pair's gap, and only when the move narrows it. A young cluster holding less than
//! `cluster.balance_bytes_min` moves nothing (its sizes say little yet); a node just
//! added holds nothing, so it receives replicas until it holds its share.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use quiver_raft::GroupId;

use super::{DataGroup, MoveRequest, Mover};

/// How far from the mean of the nodes' bytes a node may be before replicas move: 10 %
/// keeps every node within the 15 % the cluster promises, with room for the files
/// that flushes and merges add between two checks.
pub const TOLERANCE: f64 = 0.10;
/// How often the metadata leader checks the balance.
pub const BALANCE_CHECK: Duration = Duration::from_secs(10);
/// How soon after a move the balance is checked again: a group's size is the same on
/// every replica, so the loads are known at once from the new members; this leaves
/// one listing of the other groups' tables between two moves.
pub const AFTER_A_MOVE: Duration = Duration::from_secs(3);

/// The cluster as the balance sees it: each data group's members and Parquet bytes.
#[derive(Debug, Clone, Default)]
pub struct Holdings {
    /// Every node that may hold replicas.
    pub nodes: Vec<u64>,
    /// Each data group's voters.
    pub members: BTreeMap<GroupId, BTreeSet<u64>>,
    /// Each data group's bytes (one replica).
    pub bytes: BTreeMap<GroupId, u64>,
}

impl Holdings {
    /// Bytes each node stores: the sum of its groups' sizes.
    pub fn loads(&self) -> BTreeMap<u64, u64> {
        let mut loads: BTreeMap<u64, u64> = self.nodes.iter().map(|n| (*n, 0)).collect();
        for (group, members) in &self.members {
            let size = self.bytes.get(group).copied().unwrap_or(0);
            for node in members {
                *loads.entry(*node).or_default() += size;
            }
        }
        loads
    }

    /// The move that best narrows the gap between a node above the tolerance and one
    /// below, or `None` when every node is within it or no move narrows a gap.
    pub fn next_move(&self, tolerance: f64) -> Option<MoveRequest> {
        let loads = self.loads();
        if loads.len() < 2 {
            return None;
        }
        let mean = loads.values().sum::<u64>() as f64 / loads.len() as f64;
        let high = mean * (1.0 + tolerance);
        let low = mean * (1.0 - tolerance);
        if loads.values().all(|l| (low..=high).contains(&(*l as f64))) {
            return None;
        }
        let mut by_load: Vec<(u64, u64)> = loads.iter().map(|(n, l)| (*n, *l)).collect();
        by_load.sort_by_key(|(n, l)| (std::cmp::Reverse(*l), *n));
        // Fullest first, against emptiest first: the first pair with a narrowing move
        // where one side is out of bounds.
        for &(from, from_load) in &by_load {
            for &(to, to_load) in by_load.iter().rev() {
                if from_load <= to_load {
                    break;
                }
                if (from_load as f64) <= high && (to_load as f64) >= low {
                    continue;
                }
                let gap = from_load - to_load;
                let best = self
                    .members
                    .iter()
                    .filter(|(_, m)| m.contains(&from) && !m.contains(&to))
                    .filter_map(|(g, _)| Some((*g, *self.bytes.get(g)?)))
                    // Narrows the pair's gap: the group is smaller than the gap.
                    .filter(|(_, size)| *size > 0 && *size < gap)
                    .min_by_key(|(g, size)| ((gap as i64 - 2 * *size as i64).unsigned_abs(), *g));
                if let Some((group, _)) = best {
                    return Some(MoveRequest { group, from, to });
                }
            }
        }
        None
    }
}

impl Mover {
    /// Each data group's members and bytes as this node knows them: its own groups
    /// from their storage, the others from their members' last listing.
    pub fn holdings(&self) -> Holdings {
        let mut holdings = Holdings {
            nodes: self.nodes(),
            ..Default::default()
        };
        for group in 1..=self.groups.data_count() as GroupId {
            let members: BTreeSet<u64> = self
                .members_of(group)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            let bytes = match self.groups.data_group(group) {
                Some(DataGroup::Local(g)) => {
                    g.storage.summaries(None).iter().map(|s| s.file_bytes).sum()
                }
                _ => self
                    .groups
                    .remote()
                    .iter()
                    .find(|r| r.id() == group)
                    .map(|r| r.cached_catalog().iter().map(|t| t.file_bytes).sum())
                    .unwrap_or(0),
            };
            holdings.members.insert(group, members);
            holdings.bytes.insert(group, bytes);
        }
        holdings
    }

    /// One round of the byte balance, on the metadata leader only: makes at most one
    /// move. `bytes_min`: below this much data (one replica of every group) nothing
    /// moves. Returns the move made.
    pub async fn balance_bytes(&self, bytes_min: u64) -> Option<MoveRequest> {
        if !self.groups.first().node.is_leader() {
            return None;
        }
        // A node down would count with its replicas and could be picked as a target;
        // re-replication (`repair`) goes first.
        if !self.nodes_down().is_empty() {
            return None;
        }
        let holdings = self.holdings();
        if holdings.bytes.values().sum::<u64>() < bytes_min
            || holdings.members.values().any(|m| m.is_empty())
        {
            return None;
        }
        let request = holdings.next_move(TOLERANCE)?;
        match self.move_anywhere(request).await {
            Ok(_) => Some(request),
            Err(e) => {
                tracing::info!(group = request.group, from = request.from, to = request.to,
                    error = %e, "a move to even out the nodes' bytes failed; tried again later");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holdings(nodes: u64, members: &[(GroupId, &[u64], u64)]) -> Holdings {
        Holdings {
            nodes: (1..=nodes).collect(),
            members: members
                .iter()
                .map(|(g, m, _)| (*g, m.iter().copied().collect()))
                .collect(),
            bytes: members.iter().map(|(g, _, b)| (*g, *b)).collect(),
        }
    }

    /// Applies moves until none is proposed; returns the moves.
    fn settle(h: &mut Holdings) -> Vec<MoveRequest> {
        let mut moves = Vec::new();
        while let Some(m) = h.next_move(TOLERANCE) {
            let members = h.members.get_mut(&m.group).expect("group");
            assert!(members.remove(&m.from) && members.insert(m.to), "{m:?}");
            moves.push(m);
            assert!(moves.len() < 100, "moves never end: {moves:?}");
        }
        moves
    }

    #[test]
    fn the_node_holding_one_replica_fewer_takes_a_larger_group() {
        // Eight equal-count groups on five nodes: node 5 holds four, the rest five, and
        // the groups differ in size.
        let mut h = holdings(
            5,
            &[
                (1, &[1, 2, 3], 500),
                (2, &[1, 4, 5], 300),
                (3, &[2, 3, 4], 600),
                (4, &[1, 2, 5], 300),
                (5, &[3, 4, 5], 400),
                (6, &[1, 2, 3], 450),
                (7, &[1, 4, 5], 350),
                (8, &[2, 3, 4], 500),
            ],
        );
        let moves = settle(&mut h);
        assert!(!moves.is_empty());
        let loads = h.loads();
        let mean = loads.values().sum::<u64>() as f64 / 5.0;
        for (node, load) in loads {
            let off = (load as f64 - mean).abs() / mean;
            assert!(off <= TOLERANCE, "node {node}: {load} against {mean}");
        }
    }

    #[test]
    fn a_new_empty_node_receives_replicas_until_it_holds_its_share() {
        let mut h = holdings(
            4,
            &[
                (1, &[1, 2, 3], 100),
                (2, &[1, 2, 3], 100),
                (3, &[1, 2, 3], 100),
                (4, &[1, 2, 3], 100),
            ],
        );
        let moves = settle(&mut h);
        assert_eq!(moves.iter().filter(|m| m.to == 4).count(), 3, "{moves:?}");
        assert!(h.loads().values().all(|l| *l == 300));
    }

    #[test]
    fn nodes_within_the_tolerance_move_nothing_and_a_gap_no_group_narrows_stays() {
        let h = holdings(3, &[(1, &[1, 2, 3], 100), (2, &[1, 2, 3], 7)]);
        assert_eq!(h.next_move(TOLERANCE), None);
        // Node 3 holds nothing, but the only group it could take is as large as the
        // gap: moving it would only swap which node is empty.
        let h = holdings(3, &[(1, &[1, 2], 100)]);
        assert_eq!(h.next_move(TOLERANCE), None);
    }

    proptest::proptest! {
        /// Each move lowers the sum of squared loads (a group smaller than the gap
        /// moved from the fuller node to the emptier), so moves always end.
        #[test]
        fn every_move_narrows_and_the_moves_end(
            sizes in proptest::collection::vec(0u64..1_000, 1..12),
            nodes in 3u64..7,
            seed in 0u64..1_000,
        ) {
            let mut h = Holdings { nodes: (1..=nodes).collect(), ..Default::default() };
            for (i, size) in sizes.iter().enumerate() {
                let g = i as GroupId + 1;
                let first = (seed + i as u64) % nodes;
                let members = (0..3).map(|k| (first + k) % nodes + 1).collect();
                h.members.insert(g, members);
                h.bytes.insert(g, *size);
            }
            let squares = |h: &Holdings| h.loads().values().map(|l| (*l as u128).pow(2)).sum::<u128>();
            let mut moves = 0;
            while let Some(m) = h.next_move(TOLERANCE) {
                let before = squares(&h);
                let members = h.members.get_mut(&m.group).expect("group");
                proptest::prop_assert!(members.remove(&m.from) && members.insert(m.to));
                proptest::prop_assert!(squares(&h) < before);
                moves += 1;
                proptest::prop_assert!(moves < 1_000);
            }
        }
    }
}
