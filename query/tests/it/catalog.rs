//! Databases are schemas, measurements are tables, resolved when a query is planned.

use futures::StreamExt;
use quiver_query::Error;

use crate::support::{batch, one_i64, query, rows_for_hour, snapshot, strings, Fixture};

#[tokio::test]
async fn database_dot_measurement_addresses_another_database() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let from_db1 = query(&engine, "db1", "SELECT count(*) FROM other.\"CPU_Upper\"").await;
    assert_eq!(one_i64(&from_db1), 300);
    let from_other = query(&engine, "other", "SELECT count(*) FROM db1.cpu").await;
    assert_eq!(one_i64(&from_other), 2100);
    let joined = query(
        &engine,
        "db1",
        "SELECT count(*) FROM db1.mem m JOIN other.\"CPU_Upper\" u ON m.time = u.time",
    )
    .await;
    assert_eq!(one_i64(&joined), 300);
}

#[tokio::test]
async fn upper_case_names_resolve_quoted_or_by_unique_case_fold() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let quoted = query(&engine, "other", "SELECT count(*) FROM \"CPU_Upper\"").await;
    assert_eq!(one_i64(&quoted), 300);
    let folded = query(&engine, "other", "SELECT count(*) FROM cpu_upper").await;
    assert_eq!(one_i64(&folded), 300);
    let folded_db = query(&engine, "db1", "SELECT count(*) FROM OTHER.CPU_UPPER").await;
    assert_eq!(one_i64(&folded_db), 300);
}

#[tokio::test]
async fn unknown_table_is_a_sql_error() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let err = engine
        .execute("db1", "SELECT * FROM nope")
        .await
        .expect_err("unknown table");
    assert!(matches!(err, Error::Sql(_)), "{err:?}");
    assert_eq!(err.http_status(), 400);
    assert!(err.to_string().contains("nope"), "{err}");
    let err = engine
        .execute("nodb", "SELECT * FROM cpu")
        .await
        .expect_err("empty database");
    assert!(matches!(err, Error::Sql(_)), "{err:?}");
}

#[tokio::test]
async fn measurements_are_queryable_as_soon_as_they_exist() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    assert!(engine.execute("db1", "SELECT * FROM fresh").await.is_err());
    fixture.source.insert(snapshot(
        "db1",
        "fresh",
        vec![batch(&rows_for_hour(0), true)],
        vec![],
    ));
    let output = query(&engine, "db1", "SELECT count(*) FROM fresh").await;
    assert_eq!(one_i64(&output), 300);
}

#[tokio::test]
async fn show_tables_and_information_schema_list_measurements() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT table_schema, table_name FROM information_schema.tables \
               WHERE table_catalog = 'quiver' AND table_schema <> 'information_schema' \
               ORDER BY 1, 2";
    let output = query(&engine, "db1", sql).await;
    let names: Vec<String> = strings(&output, 0)
        .into_iter()
        .zip(strings(&output, 1))
        .map(|(s, t)| format!("{}.{}", s.unwrap_or_default(), t.unwrap_or_default()))
        .collect();
    assert_eq!(
        names,
        vec!["db1.cpu", "db1.disk", "db1.mem", "other.CPU_Upper"]
    );

    let shown = query(&engine, "db1", "SHOW TABLES").await;
    assert!(shown.row_count() >= 4);
    let described = query(&engine, "db1", "DESCRIBE cpu").await;
    let columns = strings(&described, 0);
    assert_eq!(columns.len(), 6);
    assert_eq!(columns[0].as_deref(), Some("time"));
}

#[tokio::test]
async fn stream_yields_the_same_rows_as_collect() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let mut stream = engine
        .execute_stream("db1", "SELECT * FROM cpu WHERE host = 'host-d'")
        .await
        .expect("stream");
    assert_eq!(stream.schema().fields().len(), 6);
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        rows += batch.expect("batch").num_rows();
    }
    assert_eq!(rows, 7 * 60);
}
