//! The query profile: an aggregation mix at rising concurrency over seeded datasets,
//! keeping the highest concurrency whose slowest query type stays under the p95 target
//! in every repeat.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::report::model::{QueryLevel, QueryTypeStats};
use crate::resources::sampler::{Sampler, Targets};
use crate::stats::{mean, Percentiles};
use crate::target::Target;

/// Longest one query may take before the tool counts it as failed.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);
/// Shortest run of the one-client level. Its node CPU per query and resident memory
/// are the planner's query cost and memory per series, and they come from the
/// once-a-second samples: a level over sooner than two sample intervals (a `--quick`
/// mix over 1 M rows takes a fraction of a second) would leave them unmeasured and
/// the calibration on reference values.
const ONE_CLIENT_LEVEL_MIN: Duration = Duration::from_secs(2);

/// The mix: (name, SQL with `{table}`, `{last_hour}` and `{last_6h}` for the dataset's
/// end minus one and six hours, as RFC 3339 literals).
pub fn mix() -> Vec<(String, String)> {
    [
        (
            "last_hour",
            "SELECT count(*), avg(usage_user), max(usage_system) FROM {table} WHERE time >= TIMESTAMP '{last_hour}'",
        ),
        (
            "hourly_buckets",
            "SELECT time_bucket(INTERVAL '1 hour', time) AS hour, count(*), avg(usage_user) FROM {table} GROUP BY hour ORDER BY hour",
        ),
        (
            "5min_buckets_6h",
            "SELECT time_bucket(INTERVAL '5 minutes', time) AS m, max(usage_idle) FROM {table} WHERE time >= TIMESTAMP '{last_6h}' GROUP BY m ORDER BY m",
        ),
        (
            "top10_hosts",
            "SELECT host, avg(usage_user) AS a FROM {table} GROUP BY host ORDER BY a DESC, host LIMIT 10",
        ),
        (
            "one_host_day",
            "SELECT date_trunc('hour', time) AS hour, avg(usage_user), max(usage_system) FROM {table} WHERE host = 'host-42' GROUP BY hour ORDER BY hour",
        ),
    ]
    .into_iter()
    .map(|(n, q)| (n.to_string(), q.to_string()))
    .collect()
}

/// The mix with its placeholders filled for `table`, whose data ends at `end_ns`.
pub fn mix_for(table: &str, end_ns: i64) -> Vec<(String, String)> {
    let at = |ns: i64| {
        chrono::DateTime::from_timestamp_nanos(ns)
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    let hour_ns = 3_600 * 1_000_000_000i64;
    mix()
        .into_iter()
        .map(|(name, sql)| {
            let sql = sql
                .replace("{table}", &format!("\"{table}\""))
                .replace("{last_hour}", &at(end_ns - hour_ns))
                .replace("{last_6h}", &at(end_ns - 6 * hour_ns));
            (name, sql)
        })
        .collect()
}

/// One query's result: its type, latency in ms, and whether it answered 200.
type Answer = (usize, f64, bool);

/// Runs one query.
async fn one(target: &Target, sql: &str) -> (f64, bool) {
    let url = format!("{}/api/v1/query", target.first_url());
    let started = Instant::now();
    let ok = match target
        .post(&url)
        .timeout(QUERY_TIMEOUT)
        .json(&json!({ "sql": sql }))
        .send()
        .await
    {
        Ok(r) => {
            let ok = r.status().is_success();
            // Read the whole body: the client's time includes the transfer.
            ok && r.bytes().await.is_ok()
        }
        Err(_) => false,
    };
    (started.elapsed().as_secs_f64() * 1e3, ok)
}

/// `clients` clients, each running the mix `rounds` times in its own order (or until
/// `until`, when given, with at least one round); returns every answer and the wall
/// time.
pub async fn run_clients(
    target: &Target,
    queries: &[(String, String)],
    clients: u32,
    rounds: u32,
    until: Option<Instant>,
) -> (Vec<Answer>, f64) {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients as usize);
    for client in 0..clients {
        let target = target.clone();
        let queries = queries.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            let n = queries.len().max(1);
            let mut round = 0u32;
            loop {
                // Each client starts the mix at a different type, so types overlap.
                for k in 0..n {
                    let i = (k + client as usize + round as usize) % n;
                    let (ms, ok) = one(&target, &queries[i].1).await;
                    answers.push((i, ms, ok));
                }
                round += 1;
                let more = match until {
                    Some(end) => Instant::now() < end,
                    None => round < rounds,
                };
                if !more {
                    return answers;
                }
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        if let Ok(answers) = t.await {
            all.extend(answers);
        }
    }
    (all, started.elapsed().as_secs_f64())
}

/// Per-type stats of a set of answers.
pub fn type_stats(queries: &[(String, String)], answers: &[Answer]) -> Vec<QueryTypeStats> {
    let mut by_type: BTreeMap<usize, (Vec<f64>, u64)> = BTreeMap::new();
    for (i, ms, ok) in answers {
        let entry = by_type.entry(*i).or_default();
        if *ok {
            entry.0.push(*ms);
        } else {
            entry.1 += 1;
        }
    }
    queries
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let (latencies, errors) = by_type.remove(&i).unwrap_or_default();
            QueryTypeStats {
                name: name.clone(),
                count: latencies.len() as u64,
                errors,
                latency_ms: Percentiles::from_ms(&latencies),
            }
        })
        .collect()
}

/// Slowest type's p95 (an error-only type counts as infinitely slow).
pub fn slowest_p95(stats: &[QueryTypeStats]) -> f64 {
    stats
        .iter()
        .map(|s| {
            if s.count == 0 {
                f64::INFINITY
            } else {
                s.latency_ms.p95
            }
        })
        .fold(0.0, f64::max)
}

/// Runs every level `repeats` times with the sampler on; `node_pid` is read for the
/// CPU used at one client.
pub async fn profile_levels(
    target: &Target,
    sampled: &Targets,
    queries: &[(String, String)],
    concurrency: &[u32],
    repeats: u32,
    rounds: u32,
    p95_target_ms: f64,
) -> (Vec<QueryLevel>, Option<f64>) {
    let mut levels = Vec::new();
    let mut cpu_ms_per_query = None;
    for &clients in concurrency {
        let sampler = Sampler::start(sampled.clone(), target.client.clone());
        let mut level = QueryLevel {
            concurrency: clients,
            qps: Vec::new(),
            repeats: Vec::new(),
            slowest_p95_ms: Vec::new(),
            held: true,
            node_cpu_cores_mean: None,
            node_rss_mb_max: None,
        };
        let mut answered = 0usize;
        for _ in 0..repeats.max(1) {
            let (mut answers, mut wall_s) =
                run_clients(target, queries, clients, rounds, None).await;
            if clients == 1 && wall_s < ONE_CLIENT_LEVEL_MIN.as_secs_f64() {
                let left = ONE_CLIENT_LEVEL_MIN.as_secs_f64() - wall_s;
                let until = Instant::now() + Duration::from_secs_f64(left);
                let (more, more_s) = run_clients(target, queries, clients, 1, Some(until)).await;
                answers.extend(more);
                wall_s += more_s;
            }
            answered += answers.len();
            let stats = type_stats(queries, &answers);
            let slowest = slowest_p95(&stats);
            let errors: u64 = stats.iter().map(|s| s.errors).sum();
            level.held &= errors == 0 && slowest <= p95_target_ms;
            level.qps.push(answers.len() as f64 / wall_s.max(1e-9));
            level.slowest_p95_ms.push(slowest);
            level.repeats.push(stats);
        }
        let sampled_level = sampler.stop().await;
        let summary = super::write_run::summarize(&sampled_level, 1);
        level.node_cpu_cores_mean = summary.node_cpu_cores_mean;
        level.node_rss_mb_max = summary.node_rss_mb_max;
        if clients == 1 {
            // CPU-seconds of the node over the level ÷ queries answered.
            let seconds = sampled_level.samples.last().map(|s| s.t_s).unwrap_or(0.0);
            let cores = mean(sampled_level.samples.iter().filter_map(|s| {
                s.nodes
                    .iter()
                    .filter_map(|n| n.cpu_cores)
                    .reduce(|a, b| a + b)
            }));
            cpu_ms_per_query = cores.map(|c| c * seconds * 1e3 / answered.max(1) as f64);
        }
        levels.push(level);
    }
    (levels, cpu_ms_per_query)
}
