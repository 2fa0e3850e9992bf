//! A table joined to an aggregate of itself (the newest row per host) builds its hash
//! table on the aggregate, not on the whole table, and answers the same.

use std::collections::BTreeMap;

use quiver_storage::{ParquetFileRef, TableSource};

use crate::support::{
    batch, explain, i64s, query, rows_for_hour, snapshot, strings, write_parquet, Fixture, Row,
    HOSTS, T0_NS,
};

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

/// Adds `db1.uncounted`: the files of `db1.disk`, described without distinct tag counts
/// (as files written before storage counted them).
fn add_uncounted(fixture: &Fixture) {
    let disk = fixture.source.table("db1", "disk").expect("db1.disk");
    let files = disk
        .files
        .all()
        .into_iter()
        .map(|file| ParquetFileRef {
            tag_distinct: Vec::new(),
            ..file
        })
        .collect();
    fixture
        .source
        .insert(snapshot("db1", "uncounted", vec![], files));
}

#[tokio::test]
async fn the_newest_row_per_host_builds_on_the_aggregate() {
    let fixture = Fixture::new();
    add_uncounted(&fixture);
    // Files only, with distinct counts (DataFusion estimates the aggregate itself) and
    // without (files written before they were counted: the build-side rule decides).
    let disk: Vec<Row> = (0..2).flat_map(rows_for_hour).collect();
    check(&fixture, "disk", &disk).await;
    check(&fixture, "uncounted", &disk).await;
    // Files and rows still in memory.
    check(&fixture, "cpu", &fixture.cpu).await;
    // Memory only.
    let mem: Vec<Row> = (0..2).flat_map(rows_for_hour).collect();
    check(&fixture, "mem", &mem).await;
}

#[tokio::test]
async fn a_small_side_stays_the_build_side() {
    // The left side is estimated at a fraction of the table the aggregate reads: the
    // rule leaves the join as DataFusion planned it, built on the filtered side. (Files
    // without distinct counts: with them, the aggregate is estimated at its five hosts
    // and is rightly the smaller side.)
    let fixture = Fixture::new();
    add_uncounted(&fixture);
    let engine = fixture.engine();
    let sql = "SELECT c.host, m.n FROM (SELECT * FROM uncounted WHERE count < 3) c INNER JOIN \
               (SELECT host, count(*) AS n FROM uncounted GROUP BY host) m ON c.host = m.host \
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

/// More rows than DataFusion builds a join's table from in one piece (128 Ki), over the
/// five hosts, one a second each, sorted by host then time as storage writes them.
fn many_rows() -> Vec<Row> {
    const PER_HOST: i64 = 30_000;
    HOSTS
        .iter()
        .enumerate()
        .flat_map(|(h, host)| {
            (0..PER_HOST).map(move |i| Row {
                time_ns: T0_NS + i * 1_000_000_000 + h as i64,
                host: host.to_string(),
                region: "eu".to_string(),
                count: h as i64 * PER_HOST + i,
                temp: None,
                usage: 0.5,
            })
        })
        .collect()
}

#[tokio::test]
async fn tag_distinct_counts_size_the_aggregate_so_its_table_is_built_once() {
    // Without distinct counts an aggregate by host is estimated at one group per row it
    // reads (150,000 here): too many for one hash table, so the join is split by a hash
    // of every probe row. The counts files carry (and memory batches' dictionaries)
    // say five groups: the table is built once and the probe side is filtered by it.
    let fixture = Fixture::new();
    let rows = many_rows();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_parquet(dir.path(), "db1/wide/2024-01-01T00.parquet", &rows, true);
    assert_eq!(file.tag_distinct("host"), Some(5));
    assert_eq!(file.tag_distinct("region"), Some(1));
    // The fixture's store is rooted in its own directory: move the file there.
    let target = fixture.root().join("db1/wide/2024-01-01T00.parquet");
    std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
    std::fs::rename(dir.path().join("db1/wide/2024-01-01T00.parquet"), &target).expect("move");
    fixture
        .source
        .insert(snapshot("db1", "wide", vec![], vec![file]));
    fixture
        .source
        .insert(snapshot("db1", "widemem", vec![batch(&rows, true)], vec![]));
    for table in ["wide", "widemem"] {
        check(&fixture, table, &rows).await;
        let plan = explain(&fixture.engine(), "db1", &LASTPOINT.replace("{t}", table)).await;
        assert!(
            plan.contains("HashJoinExec: mode=CollectLeft"),
            "{table}: the join is not built in one piece on the five hosts:\n{plan}"
        );
    }
}
