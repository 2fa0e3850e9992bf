//! Answers checked against values computed from the generated rows.

use std::collections::BTreeMap;

use crate::support::{
    assert_close, explain, f64s, i64s, one_i64, query, rows_for_hour, strings, Fixture, FILE_HOURS,
    HOUR_NS, T0_NS,
};

#[tokio::test]
async fn count_spans_memory_and_parquet() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let output = query(&engine, "db1", "SELECT count(*) FROM cpu").await;
    assert_eq!(one_i64(&output), fixture.cpu.len() as i64);
    assert_eq!(fixture.cpu.len(), 7 * 300);
}

#[tokio::test]
async fn per_host_aggregates_match_rows() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT host, count(*), sum(usage), avg(usage), min(usage), max(usage), sum(count) \
               FROM cpu GROUP BY host ORDER BY host";
    let output = query(&engine, "db1", sql).await;

    let mut expected: BTreeMap<&str, Vec<&crate::support::Row>> = BTreeMap::new();
    for row in &fixture.cpu {
        expected.entry(row.host.as_str()).or_default().push(row);
    }
    let hosts = strings(&output, 0);
    let counts = i64s(&output, 1);
    let sums = f64s(&output, 2);
    let avgs = f64s(&output, 3);
    let mins = f64s(&output, 4);
    let maxs = f64s(&output, 5);
    let count_sums = i64s(&output, 6);
    assert_eq!(hosts.len(), expected.len());
    for (i, (host, rows)) in expected.iter().enumerate() {
        let usage: Vec<f64> = rows.iter().map(|r| r.usage).collect();
        let sum: f64 = usage.iter().sum();
        assert_eq!(hosts[i].as_deref(), Some(*host));
        assert_eq!(counts[i], Some(rows.len() as i64));
        assert_close(sums[i].expect("sum"), sum);
        assert_close(avgs[i].expect("avg"), sum / usage.len() as f64);
        assert_close(
            mins[i].expect("min"),
            usage.iter().cloned().fold(f64::MAX, f64::min),
        );
        assert_close(
            maxs[i].expect("max"),
            usage.iter().cloned().fold(f64::MIN, f64::max),
        );
        assert_eq!(
            count_sums[i],
            Some(rows.iter().map(|r| r.count).sum::<i64>())
        );
    }
}

#[tokio::test]
async fn hourly_buckets_with_time_bucket_and_date_trunc() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let mut expected: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for row in &fixture.cpu {
        let hour_start = row.time_ns - (row.time_ns - T0_NS).rem_euclid(HOUR_NS);
        let entry = expected.entry(hour_start).or_default();
        entry.0 += 1;
        entry.1 += row.count;
    }
    assert_eq!(expected.len() as i64, FILE_HOURS + 1);

    for bucket in [
        "time_bucket(INTERVAL '1 hour', time)",
        "date_trunc('hour', time)",
    ] {
        let sql = format!(
            "SELECT {bucket} AS bucket, count(*) AS n, sum(count) AS total \
             FROM cpu GROUP BY 1 ORDER BY 1"
        );
        let output = query(&engine, "db1", &sql).await;
        let buckets = i64s(&output, 0);
        let counts = i64s(&output, 1);
        let totals = i64s(&output, 2);
        for (i, (hour_start, (n, total))) in expected.iter().enumerate() {
            assert_eq!(buckets[i], Some(*hour_start), "{bucket}");
            assert_eq!(counts[i], Some(*n), "{bucket}");
            assert_eq!(totals[i], Some(*total), "{bucket}");
        }
    }
}

#[tokio::test]
async fn time_bucket_uses_duckdb_origins() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    // 2024-01-03 is a Wednesday; DuckDB's week buckets start on Mondays (2024-01-01).
    let sql = "SELECT \
        time_bucket(INTERVAL '7 days', TIMESTAMP '2024-01-03T12:00:00') AS week, \
        time_bucket(INTERVAL '1 month', TIMESTAMP '2024-02-15T08:00:00') AS month, \
        time_bucket(INTERVAL '15 minutes', TIMESTAMP '2024-01-01T10:07:00') AS quarter_hour, \
        time_bucket(INTERVAL '1 day', TIMESTAMP '2024-01-03T12:00:00', \
                    TIMESTAMP '2024-01-01T06:00:00') AS with_origin";
    let output = query(&engine, "db1", sql).await;
    let text: Vec<String> = (0..4)
        .map(|i| strings(&output, i)[0].clone().expect("value"))
        .collect();
    assert_eq!(
        text,
        vec![
            "2024-01-01T00:00:00",
            "2024-02-01T00:00:00",
            "2024-01-01T10:00:00",
            "2024-01-03T06:00:00"
        ]
    );
}

#[tokio::test]
async fn buffer_only_table_answers_from_memory() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let rows: Vec<_> = (0..2).flat_map(rows_for_hour).collect();
    let output = query(
        &engine,
        "db1",
        "SELECT count(*), max(count), sum(usage) FROM mem",
    )
    .await;
    assert_eq!(i64s(&output, 0), vec![Some(rows.len() as i64)]);
    assert_eq!(i64s(&output, 1), vec![rows.iter().map(|r| r.count).max()]);
    assert_close(
        f64s(&output, 2)[0].expect("sum"),
        rows.iter().map(|r| r.usage).sum(),
    );
}

#[tokio::test]
async fn parquet_only_table_answers_from_files() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let rows: Vec<_> = (0..2).flat_map(rows_for_hour).collect();
    let sql = "SELECT count(*), min(time), sum(usage) FROM disk WHERE host = 'host-c'";
    let output = query(&engine, "db1", sql).await;
    let host_c: Vec<_> = rows.iter().filter(|r| r.host == "host-c").collect();
    assert_eq!(i64s(&output, 0), vec![Some(host_c.len() as i64)]);
    assert_eq!(
        i64s(&output, 1),
        vec![host_c.iter().map(|r| r.time_ns).min()]
    );
    assert_close(
        f64s(&output, 2)[0].expect("sum"),
        host_c.iter().map(|r| r.usage).sum(),
    );
}

#[tokio::test]
async fn file_missing_newer_column_reads_nulls() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT count(*), count(temp) FROM cpu WHERE time < '2024-01-01T01:00:00Z'";
    let output = query(&engine, "db1", sql).await;
    assert_eq!(i64s(&output, 0), vec![Some(300)]);
    assert_eq!(i64s(&output, 1), vec![Some(0)]);

    let output = query(&engine, "db1", "SELECT count(temp), sum(temp) FROM cpu").await;
    let with_temp: Vec<f64> = fixture.cpu.iter().filter_map(|r| r.temp).collect();
    assert_eq!(i64s(&output, 0), vec![Some(with_temp.len() as i64)]);
    assert_close(f64s(&output, 1)[0].expect("sum"), with_temp.iter().sum());

    let sql = "SELECT temp FROM cpu WHERE time < '2024-01-01T01:00:00Z' LIMIT 3";
    let output = query(&engine, "db1", sql).await;
    assert_eq!(f64s(&output, 0), vec![None, None, None]);
}

/// `count(*)` over files only is answered from the catalog's row counts, and stays right
/// when a filter or a limit means the counts cannot be used.
#[tokio::test]
async fn count_of_files_comes_from_catalog_row_counts() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let plan = explain(&engine, "db1", "SELECT count(*) FROM disk").await;
    assert!(!plan.contains("DataSourceExec"), "no scan needed:\n{plan}");
    let output = query(&engine, "db1", "SELECT count(*) FROM disk").await;
    assert_eq!(one_i64(&output), 600);
    let output = query(&engine, "db1", "SELECT count(*) FROM cpu").await;
    assert_eq!(one_i64(&output), fixture.cpu.len() as i64);

    let limited = "SELECT count(*) FROM (SELECT * FROM disk LIMIT 7)";
    assert_eq!(one_i64(&query(&engine, "db1", limited).await), 7);
    let filtered = "SELECT count(*) FROM disk WHERE host = 'host-a'";
    assert_eq!(one_i64(&query(&engine, "db1", filtered).await), 120);
}

/// Tags are string views inside the engine; results, nested ones included, carry plain
/// strings.
#[tokio::test]
async fn tags_leave_the_engine_as_plain_strings_even_nested() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType;

    let fixture = Fixture::new();
    let engine = fixture.engine();
    let output = query(
        &engine,
        "db1",
        "SELECT host, array_agg(DISTINCT region) AS regions FROM cpu GROUP BY host ORDER BY host",
    )
    .await;
    assert_eq!(output.schema.field(0).data_type(), &DataType::Utf8);
    let DataType::List(item) = output.schema.field(1).data_type() else {
        panic!("{:?}", output.schema);
    };
    assert_eq!(item.data_type(), &DataType::Utf8);
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for r in &fixture.cpu {
        expected.insert(r.host.clone(), r.region.clone());
    }
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for batch in &output.batches {
        assert_eq!(batch.schema(), output.schema, "batches match the schema");
        let hosts = batch.column(0).as_string::<i32>();
        let regions = batch.column(1).as_list::<i32>();
        for i in 0..batch.num_rows() {
            let list = regions.value(i);
            let list = list.as_string::<i32>();
            assert_eq!(list.len(), 1, "one region per host");
            got.insert(hosts.value(i).to_string(), list.value(0).to_string());
        }
    }
    assert_eq!(got, expected);
}

/// `DISTINCT` over tags reads them in runs (files are sorted by tags); the repeated rows
/// are dropped before the grouping (`CollapseRunsExec`), and no value may go with them.
#[tokio::test]
async fn distinct_tags_drop_repeated_rows_but_no_value() {
    use std::collections::BTreeSet;

    let fixture = Fixture::new();
    let engine = fixture.engine();
    let hosts: BTreeSet<&str> = fixture.cpu.iter().map(|r| r.host.as_str()).collect();

    let sql = "SELECT count(DISTINCT host) FROM cpu";
    let plan = explain(&engine, "db1", sql).await;
    assert!(plan.contains("CollapseRunsExec: columns=[host]"), "{plan}");
    assert_eq!(
        one_i64(&query(&engine, "db1", sql).await),
        hosts.len() as i64
    );

    let sql = "SELECT DISTINCT host, region FROM cpu ORDER BY host, region";
    assert!(explain(&engine, "db1", sql)
        .await
        .contains("CollapseRunsExec"));
    let output = query(&engine, "db1", sql).await;
    let pairs: BTreeSet<(String, String)> = fixture
        .cpu
        .iter()
        .map(|r| (r.host.clone(), r.region.clone()))
        .collect();
    let got: Vec<(String, String)> = strings(&output, 0)
        .into_iter()
        .zip(strings(&output, 1))
        .map(|(h, r)| (h.expect("host"), r.expect("region")))
        .collect();
    assert_eq!(got, pairs.into_iter().collect::<Vec<_>>());

    // One distinct count per group: the grouping underneath is (region, host).
    let sql = "SELECT region, count(DISTINCT host) FROM cpu GROUP BY region ORDER BY region";
    let output = query(&engine, "db1", sql).await;
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &fixture.cpu {
        expected
            .entry(r.region.clone())
            .or_default()
            .insert(r.host.clone());
    }
    let regions: Vec<Option<String>> = expected.keys().cloned().map(Some).collect();
    let counts: Vec<Option<i64>> = expected.values().map(|h| Some(h.len() as i64)).collect();
    assert_eq!(strings(&output, 0), regions);
    assert_eq!(i64s(&output, 1), counts);

    // An aggregate that depends on every row keeps every row.
    let plan = explain(
        &engine,
        "db1",
        "SELECT host, count(*) FROM cpu GROUP BY host",
    )
    .await;
    assert!(!plan.contains("CollapseRunsExec"), "{plan}");
}

/// `group_runs = false` plans DataFusion's own operators, with the same answers.
#[tokio::test]
async fn grouping_run_by_run_can_be_turned_off_without_changing_answers() {
    let fixture = Fixture::new();
    let with_runs = fixture.engine();
    let without = fixture.engine_with(quiver_query::QueryConfig {
        target_partitions: 2,
        group_runs: false,
        ..quiver_query::QueryConfig::default()
    });
    for sql in [
        "SELECT count(DISTINCT host) FROM cpu",
        "SELECT host, count(*), min(usage), max(usage), sum(count) FROM cpu \
         GROUP BY host ORDER BY host",
    ] {
        let plan = explain(&without, "db1", sql).await;
        assert!(
            !plan.contains("CollapseRunsExec") && !plan.contains("RunPartialAggregateExec"),
            "{plan}"
        );
        let plan = explain(&with_runs, "db1", sql).await;
        assert!(
            plan.contains("CollapseRunsExec") || plan.contains("RunPartialAggregateExec"),
            "{plan}"
        );
        let a = query(&with_runs, "db1", sql).await;
        let b = query(&without, "db1", sql).await;
        let pretty = |o: &quiver_query::QueryOutput| {
            arrow::util::pretty::pretty_format_batches(&o.batches)
                .expect("format")
                .to_string()
        };
        assert_eq!(pretty(&a), pretty(&b), "{sql}");
    }
}
