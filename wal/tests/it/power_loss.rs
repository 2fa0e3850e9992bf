//! Item 14: fsync is what keeps acknowledged appends. Concurrent appenders run on the
//! simulated disk, the process dies at a random mutating call (a different one per
//! seed), the machine loses power or only the process restarts, and the reopened log
//! must hold every acknowledged record with its exact bytes, contiguously. The same run
//! on a disk that skips `fdatasync` must lose some, or the test proves nothing.

use std::sync::Arc;

use quiver_wal::{
    testing::{LyingFs, PowerLoss, SimFs},
    Error, SyncMode, WalConfig, WalFs,
};

use crate::{
    common::append_durable,
    sim::{
        append_concurrently, contents, journal, open_on, open_sim, record, sim_config, Reboot, Rng,
    },
};

const SEEDS: u64 = 60;
const TASKS: usize = 8;
const APPENDS_PER_TASK: usize = 20;
const SEGMENT_BYTES_MAX: u64 = 2048;

/// One run: what was acknowledged, whether the crash point was reached, and what the
/// reopened log holds (or why it did not open).
struct Run {
    acked: Vec<u64>,
    crashed: bool,
    reopened: Result<Vec<u64>, Error>,
    context: String,
}

/// Mutating calls of an uncrashed run, to spread crash points over.
async fn calls_of_a_whole_run(config: &WalConfig) -> u64 {
    let fs = SimFs::new(0);
    let wal = open_sim(&fs, config).expect("open");
    let before = fs.mutating_calls();
    let acked = append_concurrently(&wal, TASKS, APPENDS_PER_TASK).await;
    assert!(!acked.is_empty());
    drop(wal);
    fs.mutating_calls() - before
}

/// Opens a WAL on `wal_fs` (which writes to `sim`), crashes at a seeded call while
/// appenders run, reboots, reopens on `sim` itself.
async fn run(
    seed: u64,
    sim: &SimFs,
    wal_fs: Arc<dyn WalFs>,
    config: &WalConfig,
    calls_total: u64,
    reboot: Reboot,
) -> Run {
    let mut rng = Rng(seed);
    let wal = open_on(wal_fs, config).expect("open");
    let crash_after = rng.below(calls_total + 1);
    sim.crash_after(crash_after);
    let acked = append_concurrently(&wal, TASKS, APPENDS_PER_TASK).await;
    drop(wal);
    let crashed = sim.crashed();
    reboot.apply(sim);
    let context = format!(
        "seed {seed} ({} mode, crash after {crash_after} of ~{calls_total} calls, {reboot:?})",
        config.sync
    );
    let reopened = open_sim(sim, config).map(|wal| contents(&wal, &context));
    let context = format!("{context}\n{}", journal(sim));
    Run {
        acked,
        crashed,
        reopened,
        context,
    }
}

/// Acknowledged indexes the reopened log lacks.
fn lost(run: &Run) -> Vec<u64> {
    let held = run.reopened.as_deref().unwrap_or(&[]);
    let held_range = held.first().zip(held.last());
    run.acked
        .iter()
        .copied()
        .filter(|i| held_range.is_none_or(|(first, last)| i < first || i > last))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_power_loss_at_any_point_in_fsync_mode() {
    let config = sim_config(SyncMode::Fsync, SEGMENT_BYTES_MAX);
    let calls_total = calls_of_a_whole_run(&config).await;
    let mut crashed_with_acks = 0;
    for seed in 0..SEEDS {
        let reboot = Reboot::ALL[(seed % 3) as usize];
        let sim = SimFs::new(seed);
        let run = run(
            seed,
            &sim,
            Arc::new(sim.clone()),
            &config,
            calls_total,
            reboot,
        )
        .await;
        let held = match &run.reopened {
            Ok(held) => held,
            Err(e) => panic!("{}: reopen failed: {e}", run.context),
        };
        assert!(held.first().is_none_or(|&i| i == 1), "{}", run.context);
        assert_eq!(lost(&run), Vec::<u64>::new(), "{}", run.context);
        if run.crashed && !run.acked.is_empty() {
            crashed_with_acks += 1;
        }
    }
    assert!(
        crashed_with_acks >= SEEDS / 2,
        "only {crashed_with_acks} seeds crashed after an acknowledgement"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_power_loss_test_catches_a_disk_that_skips_fdatasync() {
    let config = sim_config(SyncMode::Fsync, SEGMENT_BYTES_MAX);
    let calls_total = calls_of_a_whole_run(&config).await;
    let mut caught = 0;
    for seed in 0..SEEDS {
        let mode = [PowerLoss::Strict, PowerLoss::Torn][(seed % 2) as usize];
        let sim = SimFs::new(seed);
        let lying: Arc<dyn WalFs> = Arc::new(LyingFs::new(Arc::new(sim.clone())));
        let run = run(
            seed,
            &sim,
            lying,
            &config,
            calls_total,
            Reboot::PowerLoss(mode),
        )
        .await;
        if run.reopened.is_err() || !lost(&run).is_empty() {
            caught += 1;
        }
    }
    assert!(
        caught > 0,
        "no seed lost an acknowledged append without fdatasync"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_mode_power_loss_may_lose_acknowledged_appends_but_opens_cleanly() {
    let config = sim_config(SyncMode::Batch, SEGMENT_BYTES_MAX);
    let calls_total = calls_of_a_whole_run(&config).await;
    let mut torn_tails = 0;
    for seed in 0..SEEDS {
        let mode = [PowerLoss::Strict, PowerLoss::Torn][(seed % 2) as usize];
        let sim = SimFs::new(seed);
        let wal_fs = Arc::new(sim.clone());
        let run = run(
            seed,
            &sim,
            wal_fs,
            &config,
            calls_total,
            Reboot::PowerLoss(mode),
        )
        .await;
        // Torn tails are cut, never reported as corruption; survivors are exact (checked
        // by `contents`) and start at the first index ever written.
        match &run.reopened {
            Ok(held) => assert!(held.first().is_none_or(|&i| i == 1), "{}", run.context),
            Err(e) => panic!("{}: reopen failed: {e}", run.context),
        }
        let wal = open_sim(&sim, &config).expect("second reopen");
        torn_tails += usize::from(wal.recovery_report().torn_tail.is_some());
    }
    // Reopening twice must be clean: the first reopen already cut every torn tail.
    assert_eq!(torn_tails, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_keeps_acknowledged_appends_across_a_process_crash() {
    for sync in [SyncMode::Fsync, SyncMode::Batch, SyncMode::None] {
        let config = sim_config(sync, SEGMENT_BYTES_MAX);
        let calls_total = calls_of_a_whole_run(&config).await;
        for seed in 0..SEEDS / 3 {
            let sim = SimFs::new(seed);
            let wal_fs = Arc::new(sim.clone());
            let run = run(seed, &sim, wal_fs, &config, calls_total, Reboot::Restart).await;
            if let Err(e) = &run.reopened {
                panic!("{}: reopen failed: {e}", run.context);
            }
            assert_eq!(lost(&run), Vec::<u64>::new(), "{}", run.context);
        }
    }
}

#[tokio::test]
async fn wal_dir_created_on_open_survives_power_loss() {
    let sim = SimFs::new(1);
    let config = sim_config(SyncMode::Fsync, SEGMENT_BYTES_MAX);
    {
        // `/data` and `/data/wal` do not exist yet: open creates both.
        let wal = open_sim(&sim, &config).expect("open");
        append_durable(&wal, vec![(1, record(1))])
            .await
            .expect("append");
    }
    sim.power_loss(PowerLoss::Strict);
    let wal = open_sim(&sim, &config).expect("reopen");
    assert_eq!(contents(&wal, &journal(&sim)), [1]);
}
