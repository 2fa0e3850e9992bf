//! Only read-only statements run; everything else is refused with a clear message.

use quiver_query::Error;

use crate::support::{one_i64, query, Fixture};

async fn refused(sql: &str, expected_in_message: &str) {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    match engine.execute("db1", sql).await {
        Err(err @ Error::Refused(_)) => {
            assert_eq!(err.http_status(), 400);
            let message = err.to_string();
            assert!(message.contains("read-only"), "{sql}: {message}");
            assert!(message.contains(expected_in_message), "{sql}: {message}");
        }
        other => panic!("{sql}: expected a refusal, got {other:?}"),
    }
    // Nothing was changed by the attempt.
    let output = query(&engine, "db1", "SELECT count(*) FROM cpu").await;
    assert_eq!(one_i64(&output), 2100);
}

#[tokio::test]
async fn ddl_is_refused() {
    refused("CREATE TABLE t (a INT)", "DDL (CREATE TABLE)").await;
    refused("CREATE TABLE t AS SELECT * FROM cpu", "DDL (CREATE TABLE)").await;
    refused("CREATE VIEW v AS SELECT * FROM cpu", "DDL (CREATE VIEW)").await;
    refused("DROP TABLE cpu", "DDL (DROP TABLE)").await;
    refused("ALTER TABLE cpu ADD COLUMN x INT", "DDL (ALTER TABLE)").await;
    refused("CREATE SCHEMA s", "DDL (CREATE SCHEMA)").await;
    refused(
        "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/etc/'",
        "DDL (CREATE EXTERNAL TABLE)",
    )
    .await;
    refused("EXPLAIN CREATE TABLE t (a INT)", "DDL (CREATE TABLE)").await;
}

#[tokio::test]
async fn dml_is_refused() {
    refused("INSERT INTO cpu (usage) VALUES (1.0)", "DML (INSERT INTO)").await;
    refused("UPDATE cpu SET usage = 1.0", "DML (UPDATE)").await;
    refused("DELETE FROM cpu", "DML (DELETE FROM)").await;
}

#[tokio::test]
async fn copy_is_refused() {
    refused("COPY cpu TO '/tmp/quiver-copy.parquet'", "COPY").await;
    refused("COPY (SELECT * FROM cpu) TO '/tmp/quiver-copy.csv'", "COPY").await;
}

#[tokio::test]
async fn session_statements_are_refused() {
    refused("SET datafusion.execution.target_partitions = 1", "SET").await;
    refused("RESET datafusion.execution.batch_size", "RESET").await;
    refused("PREPARE p AS SELECT * FROM cpu", "PREPARE").await;
    refused("BEGIN TRANSACTION", "statement").await;
}

#[tokio::test]
async fn files_cannot_be_read() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    for sql in [
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'file:///etc/hosts'",
        "SELECT * FROM read_parquet('/etc/passwd')",
        "SELECT * FROM read_csv('/etc/passwd')",
    ] {
        let err = engine.execute("db1", sql).await.expect_err(sql);
        assert_eq!(err.http_status(), 400, "{sql}: {err}");
    }
}

#[tokio::test]
async fn several_statements_are_refused() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let err = engine
        .execute("db1", "SELECT 1; DROP TABLE cpu")
        .await
        .expect_err("two statements");
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(err.to_string().contains("one statement per query"), "{err}");
}

#[tokio::test]
async fn read_only_statements_run() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    for sql in [
        "SELECT 1",
        "WITH h AS (SELECT host FROM cpu) SELECT count(*) FROM h",
        "EXPLAIN SELECT * FROM cpu",
        "EXPLAIN ANALYZE SELECT count(*) FROM cpu",
        "DESCRIBE cpu",
        "SHOW TABLES",
        "SHOW COLUMNS FROM cpu",
        "SELECT * FROM generate_series(1, 3)",
    ] {
        query(&engine, "db1", sql).await;
    }
}

/// 1,000 ORs once overflowed the stack and aborted the whole process.
#[tokio::test]
async fn long_operator_chains_are_refused_instead_of_overflowing_the_stack() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let chain = |n: usize| {
        let terms: Vec<String> = (0..n).map(|i| format!("count = {i}")).collect();
        format!("SELECT count(*) FROM cpu WHERE {}", terms.join(" OR "))
    };
    let err = engine
        .execute("db1", &chain(5_000))
        .await
        .expect_err("too deep");
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(err.to_string().contains("IN (...)"), "{err}");

    // count = 0..119 matches hour 0: host-a's 60 minutes and host-b's first 20.
    let output = query(&engine, "db1", &chain(120)).await;
    assert_eq!(one_i64(&output), 80);

    let values: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    let in_list = format!(
        "SELECT count(*) FROM cpu WHERE count IN ({})",
        values.join(",")
    );
    assert_eq!(one_i64(&query(&engine, "db1", &in_list).await), 2100);
}
