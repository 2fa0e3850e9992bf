//! Which nodes are members of which data group.
//!
//! Placement is a pure function of the node ids, the number of data groups and the
//! replication, so every node computes the same members for every group without asking
//! anyone (a write never waits on a lookup). Replicas are dealt to the nodes in id order
//! round-robin (group `g`'s `i`-th replica goes to node `((g - 1) × replication + i)
//! mod nodes`): each node holds `groups × replication / nodes` groups, rounded up or
//! down. The inputs are
//! recorded at the first start and a start with others is refused
//! ([`super::layout`]), since other inputs would name other members for groups that
//! hold rows. These are a group's first members: replicas then move
//! ([`super::moves`]), and a node prefers the members it last learned.

use quiver_raft::{GroupId, FIRST_GROUP};

/// The node ids that are members of data group `group` (`1..=groups`), in id order.
/// `nodes` must be sorted and without duplicates; the metadata group (0) has every
/// node.
pub fn members(group: GroupId, nodes: &[u64], replication: usize) -> Vec<u64> {
    debug_assert!(
        nodes.windows(2).all(|w| w[0] < w[1]),
        "nodes sorted, unique"
    );
    if group == FIRST_GROUP || replication >= nodes.len() {
        return nodes.to_vec();
    }
    // Replicas are dealt out round-robin: group g's i-th replica is the
    // ((g - 1) × replication + i)-th slot, modulo the nodes.
    let start = (group as usize - 1) * replication.max(1);
    let mut chosen: Vec<u64> = (0..replication.max(1))
        .map(|i| nodes[(start + i) % nodes.len()])
        .collect();
    chosen.sort_unstable();
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_holds_an_even_share_of_the_groups() {
        let nodes = [1, 2, 3, 4, 5];
        let mut held = [0usize; 5];
        for g in 1..=8 {
            let m = members(g, &nodes, 3);
            assert_eq!(m.len(), 3, "group {g}: {m:?}");
            for id in m {
                held[(id - 1) as usize] += 1;
            }
        }
        // 8 groups × 3 replicas over 5 nodes: 4.8 each, so 4 or 5.
        assert!(held.iter().all(|&h| (4..=5).contains(&h)), "{held:?}");
        assert_eq!(held.iter().sum::<usize>(), 24);
    }

    #[test]
    fn the_metadata_group_and_full_replication_take_every_node() {
        let nodes = [1, 2, 3, 7];
        assert_eq!(members(0, &nodes, 3), vec![1, 2, 3, 7]);
        assert_eq!(members(5, &nodes, 4), vec![1, 2, 3, 7]);
        assert_eq!(members(5, &nodes, 9), vec![1, 2, 3, 7]);
    }

    #[test]
    fn members_wrap_around_the_node_list_and_never_repeat() {
        let nodes = [10, 20, 30, 40, 50];
        // Group 5's replicas are slots 12, 13, 14: nodes 2, 3, 4 (0-based).
        assert_eq!(members(5, &nodes, 3), vec![30, 40, 50]);
        for g in 1..=20 {
            let mut m = members(g, &nodes, 3);
            m.dedup();
            assert_eq!(m.len(), 3);
        }
    }
}
