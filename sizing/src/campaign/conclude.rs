//! From findings to a conclusion: the starting-size table (50 % headroom below the
//! measured rates), the retention table (through the planner's own arithmetic, so the
//! report and `quiver sizing plan` agree), the bottleneck sentences, and the gates on
//! the chosen operating points.

use super::findings::Findings;
use super::settings::Settings;
use crate::plan::{plan, Assumptions, Calibration, Workload};
use crate::report::model::{GateOutcome, Recommendation, RetentionRow, SizeRow};
use crate::units::{format_duration, thousands};

/// Share of each measured capacity the recommendation keeps free.
pub const HEADROOM_FRACTION: f64 = 0.5;
/// Retentions of the retention table, days.
const RETENTION_DAYS: [u32; 4] = [7, 30, 90, 365];

/// The recommendation.
pub fn recommend(
    findings: &Findings,
    settings: &Settings,
    calibration: &Calibration,
) -> Recommendation {
    let keep = 1.0 - HEADROOM_FRACTION;
    let mut sizes = Vec::new();
    let mut sentences = Vec::new();
    for sweep in &findings.sweeps {
        let confirmed = sweep.confirmed_rows_per_s;
        let run = sweep
            .confirmed_run
            .as_deref()
            .and_then(|id| findings.run(id));
        // A sweep whose every step qualified can still have found its limit: when the
        // longer confirmation did not hold at the best step and stepped down, saying
        // "the limit is higher" would contradict the runs above it.
        let confirm_stepped_down = match (confirmed, sweep.best_qualified_rows_per_s) {
            (Some(c), Some(best)) => c < best * 0.999,
            _ => false,
        };
        let limit = match &sweep.stopped_because {
            Some(why) => format!("stopped {why}"),
            None if confirm_stepped_down => format!(
                "every step qualified, but {} rows/s did not hold for the {} confirmation",
                thousands(sweep.best_qualified_rows_per_s.unwrap_or(0.0)),
                format_duration(std::time::Duration::from_secs_f64(settings.confirm_s))
            ),
            None => format!(
                "no step failed within {} steps: the machine's limit is higher",
                sweep.steps.len()
            ),
        };
        sizes.push(SizeRow {
            what: format!("ingest, {}", sweep.label),
            measured: confirmed
                .map(|r| {
                    format!(
                        "{} rows/s for {}",
                        thousands(r),
                        format_duration(std::time::Duration::from_secs_f64(settings.confirm_s))
                    )
                })
                .unwrap_or_else(|| "no rate qualified".into()),
            recommended: confirmed
                .map(|r| format!("{} rows/s", thousands(r * keep)))
                .unwrap_or_else(|| "—".into()),
            limit: limit.clone(),
        });
        let at = run
            .map(|r| format!(" At the confirmed rate: {}", r.bottleneck.sentence))
            .unwrap_or_default();
        sentences.push(match (confirmed, &sweep.stopped_because) {
            (Some(rate), Some(why)) => format!(
                "{}: confirmed {} rows/s; ingest stopped scaling {why}.{at}",
                sweep.label,
                thousands(rate)
            ),
            (Some(rate), None) if confirm_stepped_down => format!(
                "{}: confirmed {} rows/s; {}.{at}",
                sweep.label,
                thousands(rate),
                limit
            ),
            (Some(rate), None) => format!(
                "{}: confirmed {} rows/s and no step failed: offer more (--start-rate) to find the limit.{at}",
                sweep.label,
                thousands(rate)
            ),
            (None, why) => format!(
                "{}: no rate held for the confirmation{}",
                sweep.label,
                why.as_ref().map(|w| format!("; the sweep stopped {w}")).unwrap_or_default()
            ),
        });
    }
    if let Some(profile) = &findings.query_profile {
        for d in &profile.datasets {
            let c = d.qualified_concurrency;
            sizes.push(SizeRow {
                what: format!(
                    "queries, {} rows over {} hosts",
                    thousands(d.rows as f64),
                    thousands(d.hosts as f64)
                ),
                measured: format!(
                    "{c} concurrent clients with the slowest p95 under {} ms",
                    profile.p95_target_ms
                ),
                recommended: format!(
                    "{} clients",
                    ((c as f64 * keep).floor() as u32).max(u32::from(c > 0))
                ),
                limit: d
                    .levels
                    .iter()
                    .find(|l| !l.held)
                    .map(|l| {
                        format!(
                            "{} clients: slowest p95 {:.0} ms",
                            l.concurrency,
                            l.slowest_p95_ms.iter().copied().fold(0.0, f64::max)
                        )
                    })
                    .unwrap_or_else(|| "every level held".into()),
            });
        }
    }
    if let Some(m) = &findings.mixed {
        sizes.push(SizeRow {
            what: format!(
                "mixed: {} rows/s of writes under queries",
                thousands(m.write_rate_rows_per_s)
            ),
            measured: format!("{} concurrent query clients held both", m.held_concurrency),
            recommended: format!(
                "{} clients",
                ((m.held_concurrency as f64 * keep).floor() as u32)
                    .max(u32::from(m.held_concurrency > 0))
            ),
            limit: m
                .levels
                .iter()
                .find(|l| !(l.write_held && l.queries.held))
                .map(|l| {
                    format!(
                        "{} clients: writes {}, slowest p95 {:.0} ms",
                        l.concurrency,
                        if l.write_held { "held" } else { "did not hold" },
                        l.queries
                            .slowest_p95_ms
                            .first()
                            .copied()
                            .unwrap_or(f64::NAN)
                    )
                })
                .unwrap_or_else(|| "every level held".into()),
        });
    }
    let rate = findings
        .default_sweep()
        .and_then(|s| s.confirmed_rows_per_s)
        .map(|r| r * keep)
        .unwrap_or(0.0);
    let mut retention = Vec::new();
    for replicas in [1u32, 3] {
        for days in RETENTION_DAYS {
            let workload = Workload {
                rows_per_s: rate,
                fields: calibration.fields,
                series: settings.hosts,
                retention_s: days as f64 * 86_400.0,
                replicas,
                query_concurrency: 0,
            };
            let p = plan(&workload, calibration, &Assumptions::default());
            retention.push(RetentionRow {
                days,
                rows_per_s: rate,
                replicas,
                parquet_gb: p.breakdown.data_gb,
                wal_gb: p.breakdown.wal_gb,
                compaction_gb: p.breakdown.compaction_gb,
                disk_gb_per_node: p.per_node.disk_gb,
                disk_gb_total: p.cluster_disk_gb,
            });
        }
    }
    Recommendation {
        headroom_fraction: HEADROOM_FRACTION,
        sizes,
        retention,
        sentences,
    }
}

/// The gates: every sweep's operating point confirmed, durability in every run, the
/// query and mixed operating points, the cluster's, and every step that could not run.
pub fn gates(findings: &Findings, settings: &Settings) -> Vec<GateOutcome> {
    let mut gates = Vec::new();
    for sweep in &findings.sweeps {
        gates.push(GateOutcome {
            name: format!("ingest {}: operating point confirmed", sweep.label),
            passed: sweep.confirmed_rows_per_s.is_some(),
            detail: match (sweep.confirmed_rows_per_s, sweep.confirms.last()) {
                (Some(r), _) => {
                    format!("{} rows/s held for {} s", thousands(r), settings.confirm_s)
                }
                (None, Some(last)) => format!(
                    "no confirmation held; last: {}",
                    findings
                        .run(last)
                        .map(|r| r
                            .gates_failed
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; "))
                        .unwrap_or_default()
                ),
                (None, None) => format!(
                    "no rate qualified{}",
                    sweep
                        .stopped_because
                        .as_ref()
                        .map(|w| format!(": {w}"))
                        .unwrap_or_default()
                ),
            },
        });
    }
    let broken: Vec<String> = findings
        .runs
        .iter()
        .filter(|r| r.gates_failed.iter().any(|g| g.is_durability()))
        .map(|r| {
            let what: Vec<String> = r
                .gates_failed
                .iter()
                .filter(|g| g.is_durability())
                .map(ToString::to_string)
                .collect();
            format!("{}: {}", r.id, what.join("; "))
        })
        .collect();
    gates.push(GateOutcome {
        name: "durability: persisted == acknowledged per batch, no failure counter, in every run"
            .into(),
        passed: broken.is_empty(),
        detail: if broken.is_empty() {
            format!(
                "{} runs, every acknowledged batch stored whole and once",
                findings.runs.len()
            )
        } else {
            broken.join(" | ")
        },
    });
    if let Some(profile) = &findings.query_profile {
        for d in &profile.datasets {
            gates.push(GateOutcome {
                name: format!("queries over {} hosts: one client under the p95 target", thousands(d.hosts as f64)),
                passed: d.qualified_concurrency >= 1,
                detail: format!(
                    "highest concurrency held: {} (slowest p95 at one client: {:.0} ms, target {:.0} ms)",
                    d.qualified_concurrency,
                    d.levels.first().map(|l| l.slowest_p95_ms.iter().copied().fold(0.0, f64::max)).unwrap_or(f64::NAN),
                    profile.p95_target_ms
                ),
            });
        }
    }
    if let Some(m) = &findings.mixed {
        gates.push(GateOutcome {
            name: "mixed: writes and the p95 target held together at some query concurrency".into(),
            passed: m.held_concurrency >= 1,
            detail: format!("held up to {} clients", m.held_concurrency),
        });
    }
    if let Some(c) = &findings.cluster {
        if let Some(d) = &c.drill {
            gates.push(GateOutcome {
                name: "cluster: the failover drill lost no acknowledged row".into(),
                passed: d.acked_rows_lost == 0,
                detail: format!(
                    "{} drills, {} acknowledged rows lost, new leader after {:.0} ms (median)",
                    d.drills, d.acked_rows_lost, d.detection_ms_median
                ),
            });
        }
    }
    for (step, error) in &findings.step_errors {
        gates.push(GateOutcome {
            name: format!("{step}: ran"),
            passed: false,
            detail: error.clone(),
        });
    }
    gates
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::settings::{Configuration, Placement, RunArgs};
    use crate::load::WireFormat;
    use crate::report::model::Sweep;
    use crate::resources::probe::Machine;

    fn settings() -> Settings {
        let args = RunArgs {
            out: std::env::temp_dir().join("quiver-conclude-test"),
            quick: true,
            duration: None,
            data_dir: None,
            wal_dir: None,
            nodes: 1,
            urls: Vec::new(),
            token: None,
            p99_ms_max: 1000.0,
            query_p95_target_s: 2.0,
            query_rows: None,
            memory_budget_mb: Some(4_000.0),
            start_rate: None,
            rate_max: None,
            keep_data: false,
        };
        match Settings::from_args(&args, 8_000.0) {
            Ok(s) => s,
            Err(e) => panic!("settings: {e}"),
        }
    }

    fn findings(sweep: Sweep) -> Findings {
        Findings {
            machine: Machine {
                hostname: "test".into(),
                cores: 2,
                memory_total_mb: 8_000.0,
                cpu_model: None,
                kernel: None,
                volumes: Vec::new(),
            },
            runs: Vec::new(),
            sweeps: vec![sweep],
            bytes_per_row: Vec::new(),
            query_profile: None,
            mixed: None,
            cluster: None,
            budget: None,
            memory_base_mb: None,
            step_errors: Vec::new(),
        }
    }

    fn sweep(best: Option<f64>, confirmed: Option<f64>, stopped: Option<&str>) -> Sweep {
        let configuration = Configuration {
            format: WireFormat::Msgpack,
            wal_sync: "fsync".into(),
            placement: Placement::DataVolume,
            nodes: 1,
        };
        Sweep {
            label: configuration.label(),
            configuration,
            steps: vec!["s0".into(), "s1".into(), "s2".into(), "s3".into()],
            best_qualified_rows_per_s: best,
            confirms: Vec::new(),
            confirmed_rows_per_s: confirmed,
            confirmed_run: None,
            stopped_because: stopped.map(String::from),
        }
    }

    #[test]
    fn a_confirmation_that_stepped_down_is_not_reported_as_an_unfound_limit() {
        // Seen in a --quick campaign: every step qualified up to 1,080,000 rows/s, the
        // confirmation held only 691,200, and the report said "the machine's limit is
        // higher" next to it.
        let s = settings();
        let f = findings(sweep(Some(1_080_000.0), Some(691_200.0), None));
        let r = recommend(&f, &s, &Calibration::reference());
        let limit = &r.sizes[0].limit;
        assert!(
            limit.contains("1,080,000 rows/s did not hold") && !limit.contains("higher"),
            "{limit}"
        );
        assert_eq!(r.sizes[0].recommended, "345,600 rows/s");
        assert!(!r.sentences[0].contains("offer more"), "{}", r.sentences[0]);
    }

    #[test]
    fn a_sweep_whose_every_step_and_confirmation_held_says_the_limit_is_higher() {
        let s = settings();
        let f = findings(sweep(Some(1_080_000.0), Some(1_080_000.0), None));
        let r = recommend(&f, &s, &Calibration::reference());
        assert!(
            r.sizes[0].limit.contains("limit is higher"),
            "{:?}",
            r.sizes[0]
        );
        assert!(r.sentences[0].contains("offer more (--start-rate)"));
    }

    #[test]
    fn a_sweep_without_a_confirmed_rate_fails_its_gate_naming_why() {
        let s = settings();
        let f = findings(sweep(None, None, Some("at 40,000 rows/s: p99 2138 ms")));
        let g = gates(&f, &s);
        let ingest = g
            .iter()
            .find(|g| g.name.starts_with("ingest "))
            .map(|g| (g.passed, g.detail.clone()));
        assert_eq!(
            ingest,
            Some((
                false,
                "no rate qualified: at 40,000 rows/s: p99 2138 ms".to_string()
            ))
        );
    }
}
