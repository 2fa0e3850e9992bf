//! A table joined to an aggregate of itself (the newest row per host) builds its hash
//! table on the aggregate, not on the whole table, and answers the same.

use std::collections::BTreeMap;

use crate::support::{explain, i64s, query, rows_for_hour, strings, Fixture, Row};

const LASTPOINT: &str = "SELECT c.host, c.count FROM {t} c INNER JOIN \
     (SELECT host, max(time) AS max_time FROM {t} GROUP BY host) m \
     ON c.host = m.host AND c.time = m.max_time ORDER BY c.host";

/// The newest row of each host, as (host, count).
fn newest(rows: &[Row]) -> Vec<(String, i64)> {
    let mut by_host: BTreeMap<&str, &Row> = BTreeMap::new();
    for row in rows {
        let slot = by_host.entry(&row.host).or_insert(row);
        if row.time_ns > slot.time_ns {
            *slot = row;
        }
    }
    by_host
        .into_iter()
        .map(|(h, r)| (h.to_string(), r.count))
        .collect()
}

/// The subtree under the first hash join's build (left) side, as plan lines.
fn build_side(plan: &str) -> Vec<&str> {
    let lines: Vec<&str> = plan.lines().collect();
    let Some(at) = lines.iter().position(|l| l.contains("HashJoinExec")) else {
        panic!("no hash join in\n{plan}");
    };
    let indent = |l: &str| l.len() - l.trim_start().len();
    let child = indent(lines[at]) + 2;
    let mut subtree = Vec::new();
    for line in &lines[at + 1..] {
        let depth = indent(line);
        if depth < child || (depth == child && !subtree.is_empty()) {
            break;
        }
        subtree.push(*line);
    }
    subtree
}

async fn check(fixture: &Fixture, table: &str, rows: &[Row]) {
    let engine = fixture.engine();
    let sql = LASTPOINT.replace("{t}", table);
    let output = query(&engine, "db1", &sql).await;
    let got: Vec<(String, i64)> = strings(&output, 0)
        .into_iter()
        .map(|h| h.unwrap_or_default())
        .zip(i64s(&output, 1).into_iter().map(|c| c.unwrap_or(-1)))
        .collect();
    assert_eq!(got, newest(rows), "{table}");
    let plan = explain(&engine, "db1", &sql).await;
    let build = build_side(&plan);
    assert!(
        build.iter().any(|l| l.contains("AggregateExec")),
        "{table}: the hash table is built on the whole table, not the aggregate:\n{plan}"
    );
}

#[tokio::test]
async fn the_newest_row_per_host_builds_on_the_aggregate() {
    let fixture = Fixture::new();
    // Files only.
    let disk: Vec<Row> = (0..2).flat_map(rows_for_hour).collect();
    check(&fixture, "disk", &disk).await;
    // Files and rows still in memory.
    check(&fixture, "cpu", &fixture.cpu).await;
    // Memory only.
    let mem: Vec<Row> = (0..2).flat_map(rows_for_hour).collect();
    check(&fixture, "mem", &mem).await;
}

#[tokio::test]
async fn a_small_side_stays_the_build_side() {
    // The left side is estimated at a fraction of the table the aggregate reads: the
    // rule leaves the join as DataFusion planned it, built on the filtered side.
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT c.host, m.n FROM (SELECT * FROM disk WHERE count < 3) c INNER JOIN \
               (SELECT host, count(*) AS n FROM disk GROUP BY host) m ON c.host = m.host \
               ORDER BY c.host, c.count";
    let output = query(&engine, "db1", sql).await;
    assert_eq!(
        strings(&output, 0),
        vec![Some("host-a".to_string()); 3],
        "host-a's first three minutes of hour 0 have count 0, 1, 2"
    );
    assert_eq!(i64s(&output, 1), vec![Some(120); 3]);
    let plan = explain(&engine, "db1", sql).await;
    assert!(
        !build_side(&plan)
            .iter()
            .any(|l| l.contains("AggregateExec")),
        "built on the aggregate although the other side is smaller:\n{plan}"
    );
}
