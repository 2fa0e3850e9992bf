//! Files outside a query's time range are not read; the predicate reaches Parquet.

use crate::support::{
    explain, files_in_plan, i64s, one_i64, query, strings, Fixture, Row, HOSTS, HOUR_NS, MINUTE_NS,
    T0_NS,
};

/// Runs `sql`, checks its count, and returns the Parquet files its plan reads.
async fn count_and_files(fixture: &Fixture, sql: &str, expected: i64) -> Vec<String> {
    let engine = fixture.engine();
    let output = query(&engine, "db1", sql).await;
    assert_eq!(one_i64(&output), expected, "{sql}");
    // Verbose: the default display lists at most five file groups, and a scan of enough
    // files reads each as its own group.
    files_in_plan(&explain(&engine, "db1", &format!("VERBOSE {sql}")).await)
}

#[tokio::test]
async fn time_range_filter_prunes_files() {
    let fixture = Fixture::new();
    let sql = "SELECT count(*) FROM cpu \
               WHERE time >= '2024-01-01T02:00:00Z' AND time < '2024-01-01T04:00:00Z'";
    let files = count_and_files(&fixture, sql, 600).await;
    assert_eq!(
        files,
        vec![
            "db1/cpu/2024-01-01T02.parquet",
            "db1/cpu/2024-01-01T03.parquet"
        ]
    );

    // A filter on another column: no pruning by time, and no answer from row counts.
    let all = count_and_files(&fixture, "SELECT count(*) FROM cpu WHERE usage > 0", 2100).await;
    assert_eq!(all.len(), 6);
}

#[tokio::test]
async fn between_equality_and_timestamp_literals_prune() {
    let fixture = Fixture::new();
    let sql = "SELECT count(*) FROM cpu \
               WHERE time BETWEEN '2024-01-01T01:00:00Z' AND '2024-01-01T01:59:59.999999999Z'";
    assert_eq!(
        count_and_files(&fixture, sql, 300).await,
        vec!["db1/cpu/2024-01-01T01.parquet"]
    );

    // host-a's rows sit exactly on the minute.
    let sql = "SELECT count(*) FROM cpu WHERE time = TIMESTAMP '2024-01-01T03:00:00'";
    assert_eq!(
        count_and_files(&fixture, sql, 1).await,
        vec!["db1/cpu/2024-01-01T03.parquet"]
    );

    let sql = "SELECT count(*) FROM cpu WHERE time > '2024-01-01T04:30:00Z' AND host = 'host-b'";
    let files = count_and_files(&fixture, sql, 30 + 60 + 60).await;
    assert_eq!(
        files,
        vec![
            "db1/cpu/2024-01-01T04.parquet",
            "db1/cpu/2024-01-01T05.parquet"
        ]
    );
}

#[tokio::test]
async fn relative_time_filters_prune_everything_old() {
    let fixture = Fixture::new();
    let sql = "SELECT count(*) FROM cpu WHERE time > now() - INTERVAL '1 hour'";
    assert!(count_and_files(&fixture, sql, 0).await.is_empty());
}

#[tokio::test]
async fn filters_that_do_not_bound_time_keep_every_file() {
    let fixture = Fixture::new();
    let sql = "SELECT count(*) FROM cpu \
               WHERE time < '2024-01-01T01:00:00Z' OR host = 'host-a'";
    // Hour 0 (300 rows) plus host-a in hours 1..6 (6 * 60).
    assert_eq!(count_and_files(&fixture, sql, 300 + 360).await.len(), 6);
}

#[tokio::test]
async fn predicate_reaches_parquet_and_prunes_row_groups() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT count(*) FROM disk WHERE host = 'host-c'";
    let plan = explain(&engine, "db1", sql).await;
    let scan = plan
        .lines()
        .find(|line| line.contains("DataSourceExec") && line.contains(".parquet"))
        .unwrap_or_else(|| panic!("no parquet scan in\n{plan}"));
    assert!(scan.contains("predicate="), "{scan}");

    let analyzed = query(&engine, "db1", &format!("EXPLAIN ANALYZE {sql}")).await;
    let text = strings(&analyzed, 1)
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n");
    let metrics = text
        .lines()
        .find(|line| line.contains("DataSourceExec") && line.contains(".parquet"))
        .unwrap_or_else(|| panic!("no parquet scan in\n{text}"));
    // Two files of five row groups each (one per host): only host-c's two are read.
    assert!(
        metrics.contains("row_groups_pruned_statistics=10 total → 2 matched"),
        "{metrics}"
    );
}

#[tokio::test]
async fn limit_without_filter_reads_few_rows() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let output = query(&engine, "db1", "SELECT time, host FROM cpu LIMIT 7").await;
    assert_eq!(output.row_count(), 7);
    assert_eq!(i64s(&output, 0).len(), 7);
}

/// The Parquet scans of `plan`, one line each, as (files, predicate or "").
fn scans(plan: &str) -> Vec<(Vec<String>, String)> {
    plan.lines()
        .filter(|line| line.contains("DataSourceExec") && line.contains(".parquet"))
        .map(|line| {
            let predicate = line
                .split(", predicate=")
                .nth(1)
                .map(|rest| rest.split(", pruning_predicate=").next().unwrap_or(rest))
                .unwrap_or("")
                .to_string();
            (files_in_plan(line), predicate)
        })
        .collect()
}

#[tokio::test]
async fn time_bounds_filter_only_files_that_reach_outside_them() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    // Strictly after 02:00: host-a's first row of hour 2 sits exactly on it, so the hour
    // 2 file reaches outside the bound; hours 3 to 5 lie inside it, and so does the
    // buffered hour 6.
    let from = T0_NS + 2 * HOUR_NS;
    let sql = "SELECT count(*), sum(count) FROM cpu WHERE time > '2024-01-01T02:00:00Z'";
    let output = query(&engine, "db1", sql).await;
    let expected: Vec<&Row> = fixture.cpu.iter().filter(|r| r.time_ns > from).collect();
    assert_eq!(one_i64(&output), expected.len() as i64);
    assert_eq!(
        i64s(&output, 1),
        vec![Some(expected.iter().map(|r| r.count).sum::<i64>())]
    );

    let plan = explain(&engine, "db1", sql).await;
    let found = scans(&plan);
    let edge: Vec<&(Vec<String>, String)> = found
        .iter()
        .filter(|(files, _)| files.iter().any(|f| f.ends_with("T02.parquet")))
        .collect();
    assert_eq!(edge.len(), 1, "{plan}");
    assert_eq!(edge[0].0, vec!["db1/cpu/2024-01-01T02.parquet"], "{plan}");
    assert!(edge[0].1.contains("time@"), "{plan}");
    let inside: Vec<String> = found
        .iter()
        .filter(|(files, _)| !files.iter().any(|f| f.ends_with("T02.parquet")))
        .flat_map(|(files, predicate)| {
            assert!(!predicate.contains("time"), "{plan}");
            files.clone()
        })
        .collect();
    assert_eq!(inside.len(), 3, "{plan}");

    // `now()` is folded into a literal before the table is asked: every file lies
    // before it, so no scan filters by it, and every row counts.
    let sql = "SELECT count(*) FROM cpu WHERE time <= now()";
    let output = query(&engine, "db1", sql).await;
    assert_eq!(one_i64(&output), fixture.cpu.len() as i64);
    let plan = explain(&engine, "db1", sql).await;
    let found = scans(&plan);
    assert_eq!(found.len(), 1, "{plan}");
    assert!(!found[0].1.contains("time"), "{plan}");

    // With a tag filter as well: that one still reaches every file.
    let sql = "SELECT count(*) FROM cpu \
               WHERE time > '2024-01-01T02:00:00Z' AND time <= '2024-01-01T06:30:00Z' \
               AND host = 'host-a'";
    let until = T0_NS + 6 * HOUR_NS + 30 * MINUTE_NS;
    let expected = fixture
        .cpu
        .iter()
        .filter(|r| r.time_ns > from && r.time_ns <= until && r.host == "host-a")
        .count();
    assert_eq!(one_i64(&query(&engine, "db1", sql).await), expected as i64);
    let plan = explain(&engine, "db1", sql).await;
    for (files, predicate) in scans(&plan) {
        assert!(predicate.contains("host"), "{plan}");
        let edge = files.iter().any(|f| f.ends_with("T02.parquet"));
        assert_eq!(predicate.contains("time@"), edge, "{plan}");
    }
}

#[tokio::test]
async fn time_bounds_filter_buffered_rows() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    // Hour 6 is buffered; its second half is outside the bound, and `mem` is buffered
    // only.
    let until = T0_NS + 6 * HOUR_NS + 30 * MINUTE_NS;
    let sql = "SELECT count(*), max(time) FROM cpu WHERE time < '2024-01-01T06:30:00Z'";
    let output = query(&engine, "db1", sql).await;
    let expected: Vec<&Row> = fixture.cpu.iter().filter(|r| r.time_ns < until).collect();
    assert_eq!(one_i64(&output), expected.len() as i64);
    let sql = "SELECT host, count(*) FROM mem \
               WHERE time BETWEEN '2024-01-01T00:30:00Z' AND '2024-01-01T01:00:00Z' \
               GROUP BY host ORDER BY host";
    let output = query(&engine, "db1", sql).await;
    // Minutes 30..=59 of hour 0 for every host, and 01:00:00 exactly for host-a only.
    assert_eq!(
        i64s(&output, 1),
        vec![Some(31), Some(30), Some(30), Some(30), Some(30)]
    );
    // A limit with only exact bounds reaches the scan; buffered rows are still filtered.
    let sql = "SELECT time FROM cpu WHERE time >= '2024-01-01T06:59:00Z' LIMIT 100";
    let output = query(&engine, "db1", sql).await;
    let from = T0_NS + 6 * HOUR_NS + 59 * MINUTE_NS;
    let times = i64s(&output, 0);
    assert_eq!(times.len(), HOSTS.len());
    assert!(
        times.iter().all(|t| t.is_some_and(|t| t >= from)),
        "{times:?}"
    );
    let sql = "SELECT time FROM cpu WHERE time >= '2024-01-01T05:00:00Z' LIMIT 3";
    let times = i64s(&query(&engine, "db1", sql).await, 0);
    assert_eq!(times.len(), 3);
    let from = T0_NS + 5 * HOUR_NS;
    assert!(
        times.iter().all(|t| t.is_some_and(|t| t >= from)),
        "{times:?}"
    );
}
