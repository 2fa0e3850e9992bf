//! Scenarios the seeded plan reaches too rarely to rely on: each drives the simulated
//! cluster into one path on purpose and checks what the client was told, then runs a
//! checkpoint (every node holds what the clients were told, and the same rows).

use std::time::{Duration, Instant};

use openraft::ServerState;
use quiver_raft::{WriteCommand, WriteError};
use quiver_storage::EntryCompression;

use super::model::{self, Outcome};
use super::net::LinkState;
use super::plan::NODES;
use super::Sim;

/// Longest a scenario waits for the cluster to reach a state it set up.
const REACH_TIMEOUT: Duration = Duration::from_secs(20);

impl Sim {
    /// The node that leads now, waiting for one.
    async fn leader(&self) -> u64 {
        let deadline = Instant::now() + REACH_TIMEOUT;
        loop {
            if let Some(id) = self
                .nodes
                .iter()
                .find_map(|n| n.node().filter(|r| r.is_leader()).map(|_| n.id))
            {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no leader within {REACH_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn cut_off(&self, node: u64) {
        let cut = LinkState {
            cut: true,
            ..LinkState::default()
        };
        for other in (1..=NODES).filter(|o| *o != node) {
            self.net.set_link(node, other, cut);
            self.net.set_link(other, node, cut);
        }
    }
}

/// Polls `check` until it holds, failing with `what` after [`REACH_TIMEOUT`].
async fn reach(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + REACH_TIMEOUT;
    while !check() {
        assert!(Instant::now() < deadline, "never reached: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A leader appends a client's entry, is cut off before any follower has it, and the
/// others elect a leader whose log replaces it. openraft then answers the proposal
/// "forward to leader", which Quiver took for "not written" and proposed again through
/// the new leader. But the entry was appended: with five voters a node holding it could
/// still be elected and commit it, and the second proposal would be a second copy. The
/// outcome is unknown, so the client is told so (504), and the checkpoint accepts the
/// batch once or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_entry_a_new_leader_replaced_is_answered_unknown() {
    let mut sim = Sim::formed(7_001, |node| node.write_timeout_ms = 15_000).await;
    let old = sim.leader().await;
    let raft = sim.nodes[(old - 1) as usize]
        .node()
        .cloned()
        .expect("the leader runs");
    let before = raft.raft.metrics().borrow().last_log_index;
    sim.cut_off(old);
    let batch = sim.next_batch;
    sim.next_batch += 1;
    let command = WriteCommand::encode(
        model::DATABASE,
        &[(model::MEASUREMENT.to_string(), model::batch(batch, 5))],
        EntryCompression::Zstd,
    )
    .expect("encode a write");
    let pending = tokio::spawn({
        let raft = raft.clone();
        async move { raft.write(command).await }
    });
    reach("the cut-off leader appended the entry", || {
        raft.raft.metrics().borrow().last_log_index > before
    })
    .await;
    reach("another node leads", || {
        sim.nodes.iter().any(|n| {
            n.id != old
                && n.node()
                    .is_some_and(|r| r.raft.metrics().borrow().state == ServerState::Leader)
        })
    })
    .await;
    sim.net.heal();
    let answer = pending.await.expect("the write task");
    sim.model.record(batch, 5, Outcome::Unknown);
    match &answer {
        Err(WriteError::Unknown(why)) => assert!(why.contains("removed here"), "{why}"),
        other => panic!("the replaced entry was answered {other:?}, not 'outcome unknown'"),
    }
    sim.checkpoint().await;
}
