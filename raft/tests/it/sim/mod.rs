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
        "seed {seed}: {} steps in {:.1} s; batches acked {}, refused {}, unknown {}; deletes acked {}; {} restarts by the supervisor",
        scenario.len(),
        started.elapsed().as_secs_f64(),
        sim.model.count(Outcome::Acked),
        sim.model.count(Outcome::Refused),
        sim.model.count(Outcome::Unknown),
        sim.model.deletes_acked(),
        sim.supervisor_restarts
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
        let mut reference: Option<(u64, model::Content)> = None;
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
            match &reference {
                None => reference = Some((node.id, content)),
                Some((id, other)) if *other != content => {
                    let differing: Vec<&i64> = other
                        .keys()
                        .chain(content.keys())
                        .filter(|b| other.get(b) != content.get(b))
                        .take(10)
                        .collect();
                    self.fail(&format!(
                        "nodes {id} and {} hold different rows (batches {differing:?})",
                        node.id
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
        if nodes.len() as u64 != NODES || nodes.iter().any(|n| n.unready_reason().is_some()) {
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
        let written = std::fs::write(&record, self.history.join("\n"))
            .map(|()| format!("the whole history: {}", record.display()))
            .unwrap_or_else(|e| format!("(the history could not be written: {e})"));
        panic!(
            "simulation seed {seed} failed: {what}\n\nlast steps:\n{}\n\n{written}\nreplay: QUIVER_SIM_SEED={seed} cargo test --workspace --locked --test it sim:: -- --nocapture\n(if it passes, the failure depends on the interleaving: add QUIVER_SIM_REPEAT=40 QUIVER_SIM_PARALLEL=6)",
            self.history[from..].join("\n"),
            seed = self.seed,
        );
    }
}
