//! Files outside a query's time range are not read; the predicate reaches Parquet.

use crate::support::{explain, files_in_plan, i64s, one_i64, query, strings, Fixture};

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
