//! The cluster simulation: three real nodes (`RaftNode` over real storage) in one
//! process, their WAL disks simulated (power loss modelled exactly, fsync failures
//! injected), their network simulated (partitions, delays, lost answers), driven by a
//! seeded scenario of writes, crashes, restarts, partitions, slow links and disk faults.
//!
//! After every step, no node holds more rows than clients may have written (nothing
//! duplicated or invented). At every checkpoint (every `CHECK_EVERY` steps and at the
//! end) the network heals, every node runs, the replicas converge, and every node must
//! hold every acknowledged batch exactly once, no batch refused as "not written", and
//! the same rows as the others (what `quiver verify`'s digest compares, compared row by
//! row here).
//!
//! A seed fixes the scenario: the steps are drawn from it before anything runs (see
//! [`plan`]). It does not fix thread interleavings, so a replay runs the same scenario,
//! not the same instruction sequence. What stands between this and an exact replay:
//! openraft draws election timeouts from `thread_rng`; `tokio::select!` (in openraft and
//! here) picks its first branch from the runtime's generator, which only a runtime built
//! with `--cfg tokio_unstable` can seed (`Builder::rng_seed`: the whole tree rebuilt
//! with other flags); and the WAL writer, sled's flusher, compaction and `spawn_blocking`
//! work run on real threads against the real clock. A failure that depends on the
//! interleaving comes back when the seed is run many times (seed 158 failed about one
//! run in 18): `QUIVER_SIM_REPEAT` runs one seed that many times, `QUIVER_SIM_PARALLEL`
//! at once. Replay one seed, or run more:
//!
//! ```text
//! QUIVER_SIM_SEED=1234 cargo test --workspace --locked --test it sim:: -- --nocapture
//! QUIVER_SIM_SEED=1234 QUIVER_SIM_REPEAT=40 QUIVER_SIM_PARALLEL=6 cargo test --workspace --locked --test it sim::
//! QUIVER_SIM_SEEDS=2000 QUIVER_SIM_STEPS=1000 cargo test --workspace --locked --test it sim::
//! QUIVER_SIM_SEEDS=200 QUIVER_SIM_PARALLEL=6 cargo test --workspace --locked --test it sim::
//! ```

mod model;
mod net;
mod node;
mod plan;
mod scenarios;

use std::time::{Duration, Instant};

use futures::StreamExt;
use tracing::Instrument;

use quiver_raft::{CommandResult, WriteCommand, WriteError};
use quiver_storage::EntryCompression;

use model::{Model, Outcome};
use net::{LinkState, SimNet};
use node::{Crash, SimNode};
use openraft::ServerState;
use plan::{Step, NODES};

/// Seeds each of the two tests runs by default (CI: 2 × 100 seeds; run thousands with
/// `QUIVER_SIM_SEEDS`).
const SEEDS_PER_TEST: u64 = 100;
/// Seeds each test runs at once by default (`QUIVER_SIM_PARALLEL`): six clusters share
/// two cores, and the load on their timers is a fault model of its own (see
/// [`run_all`]). 500 seeds passed at twelve at a time.
const PARALLEL: usize = 3;
/// Steps per seed by default.
const STEPS: usize = 150;
/// Steps between checkpoints.
const CHECK_EVERY: usize = 30;
/// Longest the replicas may take to converge at a checkpoint.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// The continuous query's name.
const CQ_NAME: &str = "cq1";
/// Longest one membership change of a scenario may take before the scenario goes on.
const MEMBERSHIP_STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Least share of a seed's batches acknowledged, in percent.
const LIVENESS_ACKED_PCT_MIN: usize = 20;
/// Most share of a seed's batches whose outcome is unknown, in percent.
const LIVENESS_UNKNOWN_PCT_MAX: usize = 25;
/// Steps of history printed with a failure.
const HISTORY_SHOWN: usize = 40;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The seeds test `part` (0 or 1) runs: one replayed seed, or its half of the range.
fn seeds(part: u64) -> Vec<u64> {
    if let Some(seed) = env_u64("QUIVER_SIM_SEED") {
        let repeat = env_u64("QUIVER_SIM_REPEAT").unwrap_or(1) as usize;
        return if part == 0 {
            vec![seed; repeat]
        } else {
            Vec::new()
        };
    }
    let count = env_u64("QUIVER_SIM_SEEDS").unwrap_or(2 * SEEDS_PER_TEST);
    let first = env_u64("QUIVER_SIM_FIRST").unwrap_or(0);
    (first..first + count).filter(|s| s % 2 == part).collect()
}

fn steps() -> usize {
    env_u64("QUIVER_SIM_STEPS").map_or(STEPS, |s| s as usize)
}

/// Runs `seeds`, `QUIVER_SIM_PARALLEL` at once (default [`PARALLEL`]). A simulated cluster
/// spends most of its time waiting on timers (about a tenth of a core), so several can
/// share the cores, and the load that puts on timers is a fault model of its own: it
/// found the interrupted-purge bug (`log_store::a_purge_past_an_empty_wal_...`) and
/// the others docs/operations.md lists.
async fn run_all(seeds: Vec<u64>) {
    let parallel = env_u64("QUIVER_SIM_PARALLEL").map_or(PARALLEL, |p| p.max(1) as usize);
    let steps = steps();
    futures::stream::iter(seeds)
        .for_each_concurrent(parallel, |seed| {
            run(seed, steps).instrument(tracing::info_span!("sim", seed))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_clusters_lose_and_duplicate_nothing_even_seeds() {
    run_all(seeds(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_clusters_lose_and_duplicate_nothing_odd_seeds() {
    run_all(seeds(1)).await;
}

struct Sim {
    seed: u64,
    _root: tempfile::TempDir,
    net: SimNet,
    nodes: Vec<SimNode>,
    model: Model,
    next_batch: i64,
    history: Vec<String>,
    supervisor_restarts: u64,
    /// Nodes put back on an old copy of their disks.
    old_copies_restored: usize,
    /// Nodes replaced (removed, wiped, added and promoted).
    replaced: usize,
    /// Retention rules sent.
    retention_sent: usize,
    /// Acknowledged batches expired at the last checkpoint.
    expired_seen: usize,
}

/// Runs one seed's scenario; panics with the seed, the step and the history on the
/// first violated invariant.
async fn run(seed: u64, steps: usize) {
    if std::env::var("QUIVER_SIM_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("QUIVER_SIM_LOG"))
            .with_test_writer()
            .try_init();
    }
    let started = Instant::now();
    let mut sim = Sim::formed(seed, |_| {}).await;
    let scenario = plan::plan(seed, steps, CHECK_EVERY);
    let mut spent: std::collections::BTreeMap<&'static str, Duration> = Default::default();
    for (i, step) in scenario.iter().enumerate() {
        sim.history.push(format!("#{i} {step:?}"));
        let at = Instant::now();
        sim.step(step).await;
        *spent.entry(step.kind()).or_default() += at.elapsed();
        sim.supervise().await;
        sim.check_bounds(i);
    }
    for node in &mut sim.nodes {
        node.crash(&sim.net, Crash::Process).await;
    }
    // A change that refuses every write, or makes every outcome unknown, must not pass.
    // Faults refuse many writes (a batch sent to a node that is down, isolated or
    // without a leader is refused); over the 200 seeds of CI the fewest acknowledged
    // was 29% and the most unknown 10% (`LIVENESS_*`).
    let (acked, refused, unknown) = (
        sim.model.count(Outcome::Acked),
        sim.model.count(Outcome::Refused),
        sim.model.count(Outcome::Unknown),
    );
    let sent = acked + refused + unknown;
    if sent >= 20
        && (acked * 100 < sent * LIVENESS_ACKED_PCT_MIN
            || unknown * 100 > sent * LIVENESS_UNKNOWN_PCT_MAX)
    {
        sim.fail(&format!(
            "liveness: of {sent} batches {acked} acknowledged, {refused} refused, {unknown} \
             unknown (at least {LIVENESS_ACKED_PCT_MIN}% must be acknowledged, at most \
             {LIVENESS_UNKNOWN_PCT_MAX}% unknown)"
        ));
    }
    println!(
        "seed {seed}: {} steps in {:.1} s; batches acked {}, refused {}, unknown {}; deletes acked {}; {} restarts by the supervisor; {} old copies restored, {} nodes replaced, {} retention rules sent, {} batches expired; {} query windows acked",
        scenario.len(),
        started.elapsed().as_secs_f64(),
        sim.model.count(Outcome::Acked),
        sim.model.count(Outcome::Refused),
        sim.model.count(Outcome::Unknown),
        sim.model.deletes_acked(),
        sim.supervisor_restarts,
        sim.old_copies_restored,
        sim.replaced,
        sim.retention_sent,
        sim.expired_seen,
        sim.model.windows_acked()
    );
    if std::env::var("QUIVER_SIM_TIMES").is_ok() {
        println!("  time by step kind: {spent:?}");
    }
}

impl Sim {
    /// A cluster of [`NODES`] nodes, `adjust`ed before they start, formed: the cluster
    /// forms before anything goes wrong, since a node that has not yet caught up once
    /// cannot tell a lost log from a new one, and two such nodes of three cannot elect
    /// anyone (the same as losing a majority).
    async fn formed(seed: u64, adjust: impl Fn(&mut SimNode)) -> Sim {
        let root = tempfile::tempdir().expect("a temporary directory");
        let net = SimNet::new(seed);
        let peers: Vec<(u64, String)> = (1..=NODES).map(|id| (id, format!("sim-{id}"))).collect();
        let mut sim = Sim {
            seed,
            nodes: (1..=NODES)
                .map(|id| SimNode::new(root.path(), id, peers.clone(), seed))
                .collect(),
            _root: root,
            net,
            model: Model::default(),
            next_batch: 0,
            history: Vec::new(),
            supervisor_restarts: 0,
            old_copies_restored: 0,
            replaced: 0,
            retention_sent: 0,
            expired_seen: 0,
        };
        for node in &mut sim.nodes {
            adjust(node);
            node.start(&sim.net).await;
        }
        sim.checkpoint().await;
        sim
    }

    fn node(&mut self, id: u64) -> &mut SimNode {
        &mut self.nodes[(id - 1) as usize]
    }

    async fn step(&mut self, step: &Step) {
        match *step {
            Step::Write { via, rows } => self.write(via, rows).await,
            Step::Crash { node, how } => {
                let net = self.net.clone();
                if how == Crash::OldCopy {
                    let age = self.node(node).old_copy_age();
                    self.history.push(match age {
                        Some(age) => format!("   disks put back as they were {age:?} ago"),
                        None => "   no copy of its disks yet: a process crash".into(),
                    });
                    self.old_copies_restored += usize::from(age.is_some());
                }
                self.node(node).crash(&net, how).await;
            }
            Step::RestartAll => self.restart_all().await,
            Step::Isolate { node } => {
                for other in (1..=NODES).filter(|o| *o != node) {
                    let cut = LinkState {
                        cut: true,
                        ..LinkState::default()
                    };
                    self.net.set_link(node, other, cut);
                    self.net.set_link(other, node, cut);
                }
            }
            Step::Degrade {
                from,
                to,
                delay_ms,
                answer_loss_pct,
                jitter_ms,
                duplicate_pct,
            } => self.net.set_link(
                from,
                to,
                LinkState {
                    cut: false,
                    delay_ms,
                    answer_loss_pct,
                    jitter_ms,
                    duplicate_pct,
                },
            ),
            Step::Delete { back } => self.delete(back).await,
            Step::Replace { node } => self.replace(node).await,
            Step::Retention => self.retention().await,
            Step::CqWindow => self.cq_window().await,
            Step::Heal => self.net.heal(),
            Step::FsyncFails { node } => {
                if self.node(node).is_up() {
                    self.node(node).fail_next_fsync();
                }
            }
            Step::PersistFails { node, count } => {
                if let Some(storage) = self.node(node).storage() {
                    storage.inject_persist_failures(count);
                }
            }
            Step::Checkpoint => self.checkpoint().await,
        }
    }

    async fn restart_all(&mut self) {
        let net = self.net.clone();
        for node in &mut self.nodes {
            if !node.is_up() {
                node.start(&net).await;
            }
        }
    }

    /// A client sends one batch through node `via` (or any running node).
    async fn write(&mut self, via: u64, rows: u32) {
        let target = if self.node(via).is_up() {
            Some(via)
        } else {
            (1..=NODES).find(|id| self.nodes[(*id - 1) as usize].is_up())
        };
        let Some(target) = target else {
            self.history.push("   no node runs: nothing sent".into());
            return;
        };
        let id = self.next_batch;
        self.next_batch += 1;
        let command = WriteCommand::encode(
            model::DATABASE,
            &[(model::MEASUREMENT.to_string(), model::batch(id, rows))],
            // Both forms, as a cluster mid-way through changing the setting holds them.
            if id % 2 == 0 {
                EntryCompression::Zstd
            } else {
                EntryCompression::None
            },
        )
        .expect("encode a write");
        let Some(node) = self.node(target).node().cloned() else {
            return;
        };
        let outcome = match node.write(command).await {
            Ok(CommandResult::Written { .. }) => Outcome::Acked,
            Ok(other) => self.fail(&format!("batch {id}: unexpected apply result {other:?}")),
            Err(WriteError::NotLeader { .. } | WriteError::Unavailable(_)) => Outcome::Refused,
            Err(WriteError::Unknown(_)) => Outcome::Unknown,
        };
        self.history.push(format!(
            "   batch {id} ({rows} rows) via {target}: {outcome:?}"
        ));
        self.model.record(id, rows, outcome);
    }

    /// Any running node but `not`.
    fn running_other_than(&self, not: u64) -> Option<quiver_raft::RaftNode> {
        self.nodes
            .iter()
            .filter(|n| n.id != not)
            .find_map(|n| n.node().cloned())
    }

    /// Replaces node `id` as an operator replaces a machine (see `Step::Replace`). Each
    /// membership change runs within [`MEMBERSHIP_STEP_TIMEOUT`]; one a fault interrupts
    /// is left for the next checkpoint to finish.
    async fn replace(&mut self, id: u64) {
        let Some(via) = self.running_other_than(id) else {
            self.history
                .push("   no other node runs: not replaced".into());
            return;
        };
        let removed = tokio::time::timeout(
            MEMBERSHIP_STEP_TIMEOUT,
            via.change_voters(Default::default(), [id].into()),
        )
        .await;
        self.history
            .push(format!("   node {id} removed from the voters: {removed:?}"));
        if !matches!(removed, Ok(Ok(_))) {
            // An operator wipes a machine only once its removal is confirmed: a voter
            // wiped while still counted could be half of a two-voter majority.
            self.history
                .push(format!("   removal not confirmed: node {id} kept as it is"));
            return;
        }
        let net = self.net.clone();
        self.node(id).crash(&net, Crash::Wipe).await;
        self.node(id).start(&net).await;
        let addr = self.node(id).addr.clone();
        let added = tokio::time::timeout(MEMBERSHIP_STEP_TIMEOUT, via.add_learner(id, addr)).await;
        let promoted = tokio::time::timeout(
            MEMBERSHIP_STEP_TIMEOUT,
            via.change_voters([id].into(), Default::default()),
        )
        .await;
        self.history.push(format!(
            "   node {id} started empty, added as a learner: {added:?}, promoted: {promoted:?}"
        ));
        self.replaced += 1;
    }

    /// The voters of the leader's membership once it is applied and not joint (empty
    /// while there is no leader or a change is under way).
    fn settled_voters(&self) -> std::collections::BTreeSet<u64> {
        let Some(leader) = self
            .nodes
            .iter()
            .find_map(|n| n.node().filter(|r| r.is_leader()).cloned())
        else {
            return Default::default();
        };
        let metrics = leader.raft.metrics().borrow().clone();
        let stored = &metrics.membership_config;
        let applied = stored.log_id() <= &metrics.last_applied;
        let joint = stored.membership().get_joint_config().len() > 1;
        if !applied || joint {
            return Default::default();
        }
        stored.membership().voter_ids().collect()
    }

    /// Makes every node a voter again (a replacement a fault interrupted), within the
    /// convergence deadline.
    async fn restore_membership(&mut self, deadline: Instant) {
        loop {
            let voters = self.settled_voters();
            let missing: Vec<u64> = (1..=NODES).filter(|id| !voters.contains(id)).collect();
            if !voters.is_empty() && missing.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let states: Vec<String> = self
                    .nodes
                    .iter()
                    .filter_map(|n| n.node())
                    .map(|r| {
                        let m = r.raft.metrics().borrow().clone();
                        format!(
                            "node {}: {:?} leader {:?} applied {:?} membership {:?}",
                            m.id, m.state, m.current_leader, m.last_applied, m.membership_config
                        )
                    })
                    .collect();
                self.fail(&format!(
                    "membership not restored: voters {voters:?}; {}",
                    states.join("; ")
                ));
            }
            for id in missing.into_iter().filter(|_| !voters.is_empty()) {
                if let Some(via) = self.running_other_than(id) {
                    let addr = self.node(id).addr.clone();
                    let _ =
                        tokio::time::timeout(MEMBERSHIP_STEP_TIMEOUT, via.add_learner(id, addr))
                            .await;
                    let promoted = tokio::time::timeout(
                        MEMBERSHIP_STEP_TIMEOUT,
                        via.change_voters([id].into(), Default::default()),
                    )
                    .await;
                    self.history.push(format!(
                        "   checkpoint: node {id} made a voter again: {promoted:?}"
                    ));
                }
            }
            self.supervise().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A client deletes the rows of one earlier batch, through any running node.
    async fn delete(&mut self, back: u32) {
        let batch = self.next_batch - 1 - i64::from(back);
        let Some(rows) = self.model.rows_of(batch) else {
            return;
        };
        let Some(target) = (1..=NODES).find(|id| self.nodes[(*id - 1) as usize].is_up()) else {
            self.history.push("   no node runs: no delete sent".into());
            return;
        };
        let Some(node) = self.node(target).node().cloned() else {
            return;
        };
        let (from, before) = model::time_range(batch, rows);
        let command = quiver_raft::DeleteCommand {
            table: quiver_storage::TableKey::new(model::DATABASE, model::MEASUREMENT),
            predicate: quiver_storage::lifecycle::DeletePredicate {
                time_from: Some(quiver_storage::TimestampNs(from)),
                time_before: Some(quiver_storage::TimestampNs(before)),
                tags: Vec::new(),
            },
            proposal: 0,
        };
        let outcome = match node.delete(command).await {
            Ok(_) => Outcome::Acked,
            Err(WriteError::NotLeader { .. } | WriteError::Unavailable(_)) => Outcome::Refused,
            Err(WriteError::Unknown(_)) => Outcome::Unknown,
        };
        self.history.push(format!(
            "   delete of batch {batch} via {target}: {outcome:?}"
        ));
        self.model.record_delete(batch, outcome);
    }

    /// A client sets the retention that expires the first hour of rows, through any
    /// running node.
    async fn retention(&mut self) {
        let Some(node) = self.nodes.iter().find_map(|n| n.node().cloned()) else {
            self.history
                .push("   no node runs: no retention sent".into());
            return;
        };
        let change = quiver_storage::PolicyChange::SetRetention {
            database: model::DATABASE.into(),
            measurement: None,
            duration_ns: model::retention_ns(),
        };
        let outcome = match node.change_policy(change).await {
            Ok(_) => Outcome::Acked,
            Err(WriteError::NotLeader { .. } | WriteError::Unavailable(_)) => Outcome::Refused,
            Err(WriteError::Unknown(_)) => Outcome::Unknown,
        };
        self.history.push(format!("   retention set: {outcome:?}"));
        self.model.record_retention(outcome);
        self.retention_sent += 1;
    }

    /// The leader and its storage, if a node leads.
    fn leader_and_storage(
        &self,
    ) -> Option<(
        quiver_raft::RaftNode,
        std::sync::Arc<quiver_storage::Storage>,
    )> {
        self.nodes.iter().find_map(|n| {
            let node = n.node().filter(|r| r.is_leader())?;
            Some((node.clone(), n.storage()?.clone()))
        })
    }

    /// What the continuous-query runner does on the leader: reads the query's next
    /// window from the leader's state, computes its row and proposes it. The query is
    /// created first; a window whose proposal had an unknown outcome is proposed again
    /// (the query's progress did not move, or it did and the window is found done).
    async fn cq_window(&mut self) {
        let Some((leader, storage)) = self.leader_and_storage() else {
            self.history.push("   no leader: no window run".into());
            return;
        };
        let key = quiver_storage::lifecycle::cq_key(model::DATABASE, CQ_NAME);
        let next = storage.with_policies(|p| p.continuous_queries.get(&key).map(|q| q.next_window));
        let Some(next) = next else {
            let query = quiver_storage::lifecycle::ContinuousQuery {
                name: CQ_NAME.into(),
                database: model::DATABASE.into(),
                query: "SELECT count(*) FROM cpu".into(),
                into: model::CQ_TARGET.into(),
                every_ns: model::CQ_EVERY_NS,
                lag_ns: 0,
                next_window: quiver_storage::TimestampNs(model::cq_first_window()),
                last_window_end: None,
                windows_written: 0,
                created_index: Default::default(),
            };
            let created = leader
                .change_policy(quiver_storage::PolicyChange::CreateContinuousQuery(query))
                .await;
            self.history.push(format!(
                "   continuous query created: {:?}",
                created.map(|_| ())
            ));
            return;
        };
        let window = (next.0 - model::cq_first_window()) / model::CQ_EVERY_NS;
        let command = quiver_raft::CqWindowCommand {
            name: CQ_NAME.into(),
            window_start: next,
            window_end: quiver_storage::TimestampNs(next.0 + model::CQ_EVERY_NS),
            rows: WriteCommand::encode(
                model::DATABASE,
                &[(model::CQ_TARGET.to_string(), model::cq_row(window))],
                EntryCompression::Zstd,
            )
            .expect("encode a window"),
        };
        let answer = leader.propose_cq_window(command).await;
        let outcome = match &answer {
            Ok(CommandResult::CqWindow(
                quiver_storage::lifecycle::CqWindowOutcome::Written { .. }
                | quiver_storage::lifecycle::CqWindowOutcome::AlreadyDone,
            )) => Outcome::Acked,
            Ok(other) => {
                self.fail(&format!("window {window} answered {other:?}"));
            }
            Err(WriteError::NotLeader { .. } | WriteError::Unavailable(_)) => Outcome::Refused,
            Err(WriteError::Unknown(_)) => Outcome::Unknown,
        };
        self.history
            .push(format!("   window {window}: {outcome:?}"));
        self.model.record_window(window, outcome);
    }

    /// What a supervisor (systemd, Kubernetes) does: a node whose Raft stopped for good
    /// exits, and is started again.
    async fn supervise(&mut self) {
        let net = self.net.clone();
        for node in &mut self.nodes {
            let stopped = node.node().and_then(|n| n.fatal());
            if let Some(reason) = stopped {
                self.history
                    .push(format!("   node {} stopped ({reason}): restarted", node.id));
                node.crash(&net, Crash::Process).await;
                node.start(&net).await;
                self.supervisor_restarts += 1;
            }
        }
    }

    /// After every step: no node holds more rows than were ever possibly written.
    fn check_bounds(&self, step: usize) {
        let possible = self.model.rows_possible();
        for node in &self.nodes {
            if let Some(raft) = node.node() {
                let state = raft.raft.metrics().borrow().state;
                if raft.vote_withheld()
                    && matches!(state, ServerState::Candidate | ServerState::Leader)
                {
                    self.fail(&format!(
                        "after step {step}: node {} is {state:?} while its vote barrier withholds its vote (it may lack entries it acknowledged)",
                        node.id
                    ));
                }
            }
            if let Some(storage) = node.storage() {
                let held = model::rows_held(storage);
                if held > possible {
                    self.fail(&format!(
                        "after step {step}: node {} holds {held} rows, more than the {possible} that may have been written; its files:\n{}",
                        node.id,
                        model::describe(storage)
                    ));
                }
            }
        }
    }

    /// Heals everything, waits for the replicas to converge, and checks every node's
    /// rows against what the clients were told.
    async fn checkpoint(&mut self) {
        self.net.heal();
        self.restart_all().await;
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        self.restore_membership(deadline).await;
        loop {
            self.supervise().await;
            if self.converged() {
                break;
            }
            if Instant::now() > deadline {
                let states: Vec<String> = self
                    .nodes
                    .iter()
                    .filter_map(|n| n.node())
                    .map(|n| {
                        let m = n.raft.metrics().borrow().clone();
                        format!(
                            "node {}: {:?} leader {:?} last_log {:?} applied {:?} unready {:?}",
                            m.id,
                            m.state,
                            m.current_leader,
                            m.last_log_index,
                            m.last_applied.map(|l| l.index),
                            n.unready_reason()
                        )
                    })
                    .collect();
                self.fail(&format!(
                    "replicas did not converge in {CONVERGE_TIMEOUT:?}:\n{}",
                    states.join("\n")
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut reference: Option<(u64, (model::Content, model::Content))> = None;
        for node in &self.nodes {
            let Some(storage) = node.storage() else {
                continue;
            };
            let content = model::content(storage);
            let read: u64 = content.values().map(|seqs| seqs.len() as u64).sum();
            let held = model::rows_visible(storage);
            if read != held {
                self.fail(&format!(
                    "node {}: {read} rows read back, but its memory and files say {held} are visible",
                    node.id
                ));
            }
            let violations = self.model.violations(&content);
            if !violations.is_empty() {
                self.fail(&format!(
                    "node {}:\n  {}\nits files:\n{}",
                    node.id,
                    violations[..violations.len().min(10)].join("\n  "),
                    model::describe(storage)
                ));
            }
            self.expired_seen = self.model.expired_in(&content);
            let windows = model::content_of(storage, model::CQ_TARGET);
            let wrong = self.model.window_violations(&windows);
            if !wrong.is_empty() {
                self.fail(&format!(
                    "node {}, the continuous query's target:\n  {}",
                    node.id,
                    wrong[..wrong.len().min(10)].join("\n  ")
                ));
            }
            let content = (content, windows);
            match &reference {
                None => reference = Some((node.id, content)),
                Some((id, other)) if *other != content => {
                    let differing: Vec<&i64> = other
                        .0
                        .keys()
                        .chain(content.0.keys())
                        .filter(|b| other.0.get(b) != content.0.get(b))
                        .take(10)
                        .collect();
                    self.fail(&format!(
                        "nodes {id} and {} hold different rows (batches {differing:?}; windows {:?} and {:?})",
                        node.id,
                        other.1.keys().collect::<Vec<_>>(),
                        content.1.keys().collect::<Vec<_>>()
                    ));
                }
                Some(_) => {}
            }
        }
        self.history.push("   checkpoint passed".into());
    }

    /// Every node runs and is ready, one leads, and all have applied its whole log.
    fn converged(&self) -> bool {
        let nodes: Vec<_> = self.nodes.iter().filter_map(|n| n.node()).collect();
        // A checkpoint brings every node back as a full voter (the plan allows one lost
        // disk per window on that basis): a barrier still closed is not converged.
        if nodes.len() as u64 != NODES
            || nodes
                .iter()
                .any(|n| n.unready_reason().is_some() || n.vote_withheld())
        {
            return false;
        }
        let Some(leader) = nodes.iter().find(|n| n.is_leader()) else {
            return false;
        };
        let target = leader.raft.metrics().borrow().last_log_index;
        nodes
            .iter()
            .all(|n| n.raft.metrics().borrow().last_applied.map(|l| l.index) == target)
    }

    fn fail(&self, what: &str) -> ! {
        let shown = env_u64("QUIVER_SIM_HISTORY").map_or(HISTORY_SHOWN, |n| n as usize);
        let from = self.history.len().saturating_sub(shown);
        // The whole schedule of faults and every client's answer, for the report: a
        // seed fixes the scenario but not the interleaving, so this is what happened.
        let record = std::env::temp_dir().join(format!("quiver-sim-seed-{}.txt", self.seed));
        let written = std::fs::write(&record, format!("{what}\n\n{}", self.history.join("\n")))
            .map(|()| format!("the whole history: {}", record.display()))
            .unwrap_or_else(|e| format!("(the history could not be written: {e})"));
        panic!(
            "simulation seed {seed} failed: {what}\n\nlast steps:\n{}\n\n{written}\nreplay: QUIVER_SIM_SEED={seed} cargo test --workspace --locked --test it sim:: -- --nocapture\n(if it passes, the failure depends on the interleaving: add QUIVER_SIM_REPEAT=40 QUIVER_SIM_PARALLEL=6)",
            self.history[from..].join("\n"),
            seed = self.seed,
        );
    }
}
