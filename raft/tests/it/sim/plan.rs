//! The scenario of one seed: a list of steps drawn from the seed alone, before anything
//! runs, so the same seed always asks for the same writes, crashes, partitions, slow
//! links and disk faults in the same order.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::node::Crash;

/// Nodes in the simulated cluster.
pub const NODES: u64 = 3;

/// One thing that happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A client sends a batch of `rows` rows to node `via` (any node: followers forward).
    Write { via: u64, rows: u32 },
    /// Node `node` goes down.
    Crash { node: u64, how: Crash },
    /// Every node that is down starts again.
    RestartAll,
    /// Node `node` is cut off from both others, in both directions.
    Isolate { node: u64 },
    /// Calls from `from` to `to` are delayed (by up to `jitter_ms` more, so they
    /// overtake each other), lose answers, and Raft calls are sometimes delivered twice.
    Degrade {
        from: u64,
        to: u64,
        delay_ms: u64,
        answer_loss_pct: u8,
        jitter_ms: u64,
        duplicate_pct: u8,
    },
    /// A client deletes the rows of the batch sent `back` batches before the last one
    /// (a time range that holds exactly that batch's rows).
    Delete { back: u32 },
    /// Node `node` is replaced as an operator replaces a machine: removed from the
    /// voters, wiped, started empty, added as a learner and promoted.
    Replace { node: u64 },
    /// A client sets the database's retention so that the first hour of rows expires
    /// (`model::retention_ns`); the leader's compaction drops those files.
    Retention,
    /// The leader runs the continuous query's next window, as its runner does: it
    /// creates the query first if it does not exist yet.
    CqWindow,
    /// Every link works normally again.
    Heal,
    /// Node `node`'s next WAL fdatasync fails (its log is poisoned and Raft stops).
    FsyncFails { node: u64 },
    /// Node `node`'s next `count` segment writes fail.
    PersistFails { node: u64, count: u32 },
    /// Everything heals, every node runs; then every invariant is checked on every node.
    Checkpoint,
}

impl Step {
    /// The step's kind, for timing reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Write { .. } => "write",
            Step::Crash { .. } => "crash",
            Step::RestartAll => "restart",
            Step::Isolate { .. } => "isolate",
            Step::Degrade { .. } => "degrade",
            Step::Delete { .. } => "delete",
            Step::Replace { .. } => "replace",
            Step::Retention => "retention",
            Step::CqWindow => "cq-window",
            Step::Heal => "heal",
            Step::FsyncFails { .. } => "fsync-fails",
            Step::PersistFails { .. } => "persist-fails",
            Step::Checkpoint => "checkpoint",
        }
    }
}

/// The steps of `seed`: `steps` of them, a checkpoint every `check_every` and one last.
pub fn plan(seed: u64, steps: usize, check_every: usize) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(steps + steps / check_every.max(1) + 1);
    // A wipe (or an old copy) loses a node's acknowledged entries; a second one before the first node
    // has caught up (at the next checkpoint) would leave no majority holding them,
    // which no system survives: it becomes a power loss instead.
    let mut wiped_since_checkpoint = false;
    for i in 0..steps {
        if i > 0 && i % check_every.max(1) == 0 {
            out.push(Step::Checkpoint);
            wiped_since_checkpoint = false;
        }
        let node = rng.random_range(1..=NODES);
        let roll = rng.random_range(0..100u32);
        out.push(match roll {
            0 => Step::Retention,
            1..=4 => Step::CqWindow,
            5..=66 => Step::Write {
                via: node,
                rows: rng.random_range(1..=40),
            },
            67..=69 => Step::Delete {
                back: rng.random_range(0..20),
            },
            70..=73 => Step::Crash {
                node,
                how: Crash::Process,
            },
            74..=77 => Step::Crash {
                node,
                how: Crash::Power,
            },
            78 if !wiped_since_checkpoint => {
                wiped_since_checkpoint = true;
                match rng.random_range(0..3u8) {
                    0 => Step::Replace { node },
                    1 => Step::Crash {
                        node,
                        how: Crash::OldCopy,
                    },
                    _ => Step::Crash {
                        node,
                        how: Crash::Wipe,
                    },
                }
            }
            78 => Step::Crash {
                node,
                how: Crash::Power,
            },
            79..=83 => Step::RestartAll,
            84..=86 => Step::Isolate { node },
            87..=89 => {
                let to = 1 + (node + rng.random_range(0..NODES - 1)) % NODES;
                Step::Degrade {
                    from: node,
                    to,
                    delay_ms: rng.random_range(0..60),
                    answer_loss_pct: rng.random_range(0..30),
                    jitter_ms: rng.random_range(0..40),
                    duplicate_pct: rng.random_range(0..25),
                }
            }
            90..=94 => Step::Heal,
            95..=96 => Step::FsyncFails { node },
            _ => Step::PersistFails {
                node,
                count: rng.random_range(1..4),
            },
        });
    }
    out.push(Step::Checkpoint);
    out
}
