//! The time-series SQL of API.md, each answer checked against values computed here from
//! the generated rows. Called by `query_values` in every phase (buffer only, Parquet only,
//! mixed, after a restart).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::Node;
use crate::query_values::{close, rfc3339, Row, DB, HOSTS, T0_S};

/// DuckDB's `time_bucket` origin for widths without months: Monday 2000-01-03.
const DUCKDB_ORIGIN_S: i64 = 946_857_600;

/// Counts of rows per bucket start, as `(rfc3339, count)` in time order.
fn buckets(rows: &[Row], bucket_of: impl Fn(i64) -> i64) -> Vec<(String, u64)> {
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    for r in rows {
        *counts.entry(bucket_of(r.time_s)).or_default() += 1;
    }
    counts.into_iter().map(|(b, c)| (rfc3339(b), c)).collect()
}

fn as_buckets(got: &[Vec<Value>]) -> Vec<(String, u64)> {
    got.iter()
        .map(|r| {
            (
                r[0].as_str().unwrap_or_default().to_string(),
                r[1].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

fn count(rows: &[Row], keep: impl Fn(&Row) -> bool) -> u64 {
    rows.iter().filter(|r| keep(r)).count() as u64
}

async fn one_u64(node: &Node, sql: &str) -> Option<u64> {
    node.rows(DB, sql).await[0][0].as_u64()
}

/// DuckDB's `quantile_cont`: linear interpolation at position `q * (n - 1)`.
fn quantile_cont(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let position = q * (sorted.len() - 1) as f64;
    let lower = position.floor() as usize;
    let upper = (lower + 1).min(sorted.len() - 1);
    sorted[lower] + (sorted[upper] - sorted[lower]) * (position - lower as f64)
}

pub(crate) async fn check(node: &Node, rows: &[Row], phase: &str) {
    check_buckets(node, rows, phase).await;
    check_now_and_intervals(node, rows, phase).await;
    check_literal_timestamps(node, rows, phase).await;
    check_quantiles(node, rows, phase).await;
    check_distinct(node, rows, phase).await;
    check_catalog(node, phase).await;
}

async fn check_buckets(node: &Node, rows: &[Row], phase: &str) {
    let origin = T0_S + 300;
    let sql = format!(
        "SELECT date_bin(INTERVAL '15 minutes', time, TIMESTAMP '{}') AS b, count(*) \
         FROM cpu GROUP BY b ORDER BY b",
        rfc3339(origin)
    );
    let want = buckets(rows, |t| origin + (t - origin).div_euclid(900) * 900);
    assert_eq!(
        as_buckets(&node.rows(DB, &sql).await),
        want,
        "{phase}: {sql}"
    );

    let sql = "SELECT time_bucket(INTERVAL '7 minutes', time) AS b, count(*) \
               FROM cpu GROUP BY b ORDER BY b";
    let want = buckets(rows, |t| {
        DUCKDB_ORIGIN_S + (t - DUCKDB_ORIGIN_S).div_euclid(420) * 420
    });
    assert_eq!(
        as_buckets(&node.rows(DB, sql).await),
        want,
        "{phase}: {sql}"
    );

    let sql = "SELECT date_trunc('day', time) AS d, count(*) FROM cpu GROUP BY d ORDER BY d";
    let want = buckets(rows, |t| t.div_euclid(86_400) * 86_400);
    assert_eq!(
        as_buckets(&node.rows(DB, sql).await),
        want,
        "{phase}: {sql}"
    );
}

async fn check_now_and_intervals(node: &Node, rows: &[Row], phase: &str) {
    let got = node.rows(DB, "SELECT now()").await;
    let server_now = got[0][0]
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp());
    let here = chrono::Utc::now().timestamp();
    assert!(
        server_now.is_some_and(|t| (t - here).abs() < 300),
        "{phase}: now() = {got:?}, test clock {here}"
    );
    let all = rows.len() as u64;
    let sql = "SELECT count(*) FROM cpu WHERE time > now() - INTERVAL '36500 days'";
    assert_eq!(one_u64(node, sql).await, Some(all), "{phase}: {sql}");
    let sql = "SELECT count(*) FROM cpu WHERE time > now()";
    assert_eq!(one_u64(node, sql).await, Some(0), "{phase}: {sql}");

    let limit = T0_S + 7200;
    let sql = format!(
        "SELECT count(*) FROM cpu WHERE time + INTERVAL '90 minutes' < '{}'",
        rfc3339(limit)
    );
    let want = count(rows, |r| r.time_s + 5400 < limit);
    assert_eq!(one_u64(node, &sql).await, Some(want), "{phase}: {sql}");

    let middle = rfc3339(T0_S + 1800);
    let sql = format!(
        "SELECT count(*) FROM cpu WHERE time >= TIMESTAMP '{middle}' - INTERVAL '30 minutes' \
         AND time < TIMESTAMP '{middle}' + INTERVAL '30 minutes'"
    );
    let want = count(rows, |r| r.time_s >= T0_S && r.time_s < T0_S + 3600);
    assert_eq!(one_u64(node, &sql).await, Some(want), "{phase}: {sql}");

    let sql = "SELECT min(time) - INTERVAL '1 day', max(time) + INTERVAL '1 hour' FROM cpu";
    let got = node.rows(DB, sql).await;
    let min = rows.iter().map(|r| r.time_s).min().unwrap_or_default();
    let max = rows.iter().map(|r| r.time_s).max().unwrap_or_default();
    assert_eq!(
        got[0][0].as_str(),
        Some(rfc3339(min - 86_400).as_str()),
        "{phase}"
    );
    assert_eq!(
        got[0][1].as_str(),
        Some(rfc3339(max + 3600).as_str()),
        "{phase}"
    );
}

async fn check_literal_timestamps(node: &Node, rows: &[Row], phase: &str) {
    let exact = T0_S + 12;
    let sql = format!("SELECT count(*) FROM cpu WHERE time = '{}'", rfc3339(exact));
    let want = count(rows, |r| r.time_s == exact);
    assert_eq!(want, HOSTS as u64);
    assert_eq!(one_u64(node, &sql).await, Some(want), "{phase}: {sql}");

    // A space instead of `T` and no zone: UTC, as in DuckDB.
    let (lo, hi) = (T0_S + 1800, T0_S + 3600);
    let spaced = |t: i64| rfc3339(t).replace('T', " ").replace('Z', "");
    let sql = format!(
        "SELECT count(*) FROM cpu WHERE time BETWEEN '{}' AND '{}'",
        spaced(lo),
        rfc3339(hi)
    );
    let want = count(rows, |r| r.time_s >= lo && r.time_s <= hi);
    assert_eq!(one_u64(node, &sql).await, Some(want), "{phase}: {sql}");

    let sql = format!(
        "SELECT count(*) FROM cpu WHERE time > TIMESTAMP '{}'",
        rfc3339(hi)
    );
    let want = count(rows, |r| r.time_s > hi);
    assert_eq!(one_u64(node, &sql).await, Some(want), "{phase}: {sql}");
}

async fn check_quantiles(node: &Node, rows: &[Row], phase: &str) {
    let sql = "SELECT host, quantile_cont(value, 0.9), median(value), \
               approx_percentile_cont(value, 0.5), \
               approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY value) \
               FROM cpu GROUP BY host ORDER BY host";
    let got = node.rows(DB, sql).await;
    assert_eq!(got.len(), HOSTS, "{phase}");
    for (h, row) in got.iter().enumerate() {
        let values: Vec<f64> = rows
            .iter()
            .filter(|r| r.host == h)
            .map(|r| r.value)
            .collect();
        let p90 = quantile_cont(&values, 0.9);
        let p50 = quantile_cont(&values, 0.5);
        let number = |i: usize| row[i].as_f64().unwrap_or(f64::NAN);
        // DataFusion quantizes the interpolation weight to 1e-6 of one step.
        assert!(
            (number(1) - p90).abs() < 1e-6,
            "{phase}: p90 h{h}: {row:?} vs {p90}"
        );
        assert!(
            close(number(2), p50),
            "{phase}: median h{h}: {row:?} vs {p50}"
        );
        let range = values.iter().cloned().fold(f64::MIN, f64::max)
            - values.iter().cloned().fold(f64::MAX, f64::min);
        for i in [3, 4] {
            assert!(
                (number(i) - p50).abs() <= 0.02 * range,
                "{phase}: approximate median h{h}: {row:?} vs {p50}"
            );
        }
    }
}

async fn check_distinct(node: &Node, rows: &[Row], phase: &str) {
    let sql = "SELECT count(DISTINCT host), count(DISTINCT n) FROM cpu";
    let got = node.rows(DB, sql).await;
    let ns: BTreeSet<i64> = rows.iter().map(|r| r.n).collect();
    assert_eq!(got[0][0].as_u64(), Some(HOSTS as u64), "{phase}: {sql}");
    assert_eq!(got[0][1].as_u64(), Some(ns.len() as u64), "{phase}: {sql}");
}

async fn check_catalog(node: &Node, phase: &str) {
    let tables = node.rows(DB, "SHOW TABLES").await;
    assert!(
        tables
            .iter()
            .any(|r| r[1].as_str() == Some(DB) && r[2].as_str() == Some("cpu")),
        "{phase}: SHOW TABLES: {tables:?}"
    );
    let sql = format!(
        "SELECT column_name, data_type FROM information_schema.columns \
         WHERE table_schema = '{DB}' AND table_name = 'cpu' ORDER BY ordinal_position"
    );
    let columns: Vec<String> = node
        .rows(DB, &sql)
        .await
        .iter()
        .map(|r| r[0].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(columns, ["time", "host", "n", "value"], "{phase}: {sql}");
}
