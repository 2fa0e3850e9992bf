//! Every query has a deadline and a memory limit, and says clearly which one it hit.

use std::time::{Duration, Instant};

use quiver_query::{Error, QueryConfig};

use crate::support::{one_i64, query, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_query_times_out() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        timeout_ms: 300,
        ..QueryConfig::default()
    });
    // 10^13 rows generated and summed: hours of work, in batches (so it yields, and the
    // cancelled query stops at its next batch; joins that would not are refused, see
    // `huge_cross_join_is_refused_before_it_runs`).
    let sql = "SELECT sum(value % 7) FROM generate_series(1, 10000000000000)";
    let started = Instant::now();
    let err = engine.execute("db1", sql).await.expect_err("must time out");
    assert!(matches!(err, Error::Timeout { ms: 300 }), "{err:?}");
    assert_eq!(err.http_status(), 504);
    assert!(err.to_string().contains("300 ms"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );

    // The engine is still usable afterwards. The cancelled query's tasks stop at their
    // next yield; until then they hold the query threads, so the next query may itself
    // time out once or twice.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match engine.execute("db1", "SELECT count(*) FROM cpu").await {
            Ok(output) => {
                assert_eq!(one_i64(&output), 2100);
                break;
            }
            Err(Error::Timeout { .. }) if Instant::now() < deadline => continue,
            Err(err) => panic!("engine unusable after a timeout: {err}"),
        }
    }
}

#[tokio::test]
async fn huge_cross_join_is_refused_before_it_runs() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        ..QueryConfig::default()
    });
    // 2100^3 = 9.3e9 row triples: over the default limit of 1e9 pairs.
    let sql = "SELECT count(*) FROM cpu a, cpu b, cpu c WHERE a.usage + b.usage + c.usage < 0";
    let started = Instant::now();
    let err = engine.execute("db1", sql).await.expect_err("refused");
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert_eq!(err.http_status(), 400);
    let message = err.to_string();
    assert!(message.contains("row pairs"), "{message}");
    assert!(message.contains("query.join_pairs_max"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at planning, not after running: {:?}",
        started.elapsed()
    );

    // A cross join under the limit runs, with the right answer.
    let sql = "SELECT count(*) FROM cpu a, cpu b WHERE a.usage > b.usage";
    let output = query(&engine, "db1", sql).await;
    let usages: Vec<f64> = fixture.cpu.iter().map(|r| r.usage).collect();
    let expected = usages
        .iter()
        .map(|a| usages.iter().filter(|b| a > *b).count() as i64)
        .sum::<i64>();
    assert_eq!(one_i64(&output), expected);

    // The limit is a setting: lowered, the same join is refused.
    let strict = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        join_pairs_max: 1000,
        ..QueryConfig::default()
    });
    let err = strict.execute("db1", sql).await.expect_err("refused");
    assert!(err.to_string().contains("2100 x 2100"), "{err}");

    // Sides without a sound bound pass even the strict limit: DataFusion estimates a
    // grouped aggregate at its input's 2100 rows, but it holds one row per host.
    let sql = "SELECT count(*) FROM \
               (SELECT host, avg(usage) AS a FROM cpu GROUP BY host) x, \
               (SELECT host, avg(usage) AS a FROM cpu GROUP BY host) y WHERE x.a > y.a";
    let output = query(&strict, "db1", sql).await;
    let mut sums: std::collections::BTreeMap<&str, (f64, f64)> = Default::default();
    for r in &fixture.cpu {
        let e = sums.entry(r.host.as_str()).or_default();
        *e = (e.0 + r.usage, e.1 + 1.0);
    }
    let avgs: Vec<f64> = sums.values().map(|(s, n)| s / n).collect();
    let expected = avgs
        .iter()
        .map(|a| avgs.iter().filter(|b| a > *b).count() as i64)
        .sum::<i64>();
    assert_eq!(one_i64(&output), expected);
}

#[tokio::test]
async fn big_sort_exceeds_memory_limit() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        memory_bytes_max: 64 * 1024,
        ..QueryConfig::default()
    });
    let sql = "SELECT a.time, b.usage FROM cpu a JOIN cpu b ON a.host = b.host ORDER BY b.usage";
    let err = engine
        .execute("db1", sql)
        .await
        .expect_err("must run out of memory");
    assert!(matches!(err, Error::ResourcesExhausted(_)), "{err:?}");
    assert_eq!(err.http_status(), 507);
    assert!(err.to_string().contains("memory limit"), "{err}");
}

#[tokio::test]
async fn oversized_result_exceeds_memory_limit() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 1,
        memory_bytes_max: 16 * 1024,
        ..QueryConfig::default()
    });
    let err = engine
        .execute("db1", "SELECT * FROM mem")
        .await
        .expect_err("result too big");
    assert!(matches!(err, Error::ResourcesExhausted(_)), "{err:?}");

    // A small result fits the same limit.
    let output = query(&engine, "db1", "SELECT count(*) FROM mem").await;
    assert_eq!(one_i64(&output), 600);
}

#[tokio::test]
async fn queries_together_share_the_node_memory_limit() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        memory_bytes_max: 1024 * 1024 * 1024,
        node_memory_bytes_max: 64 * 1024,
        ..QueryConfig::default()
    });
    let sql = "SELECT a.time, b.usage FROM cpu a JOIN cpu b ON a.host = b.host ORDER BY b.usage";
    let err = engine
        .execute("db1", sql)
        .await
        .expect_err("must run out of node memory");
    assert!(matches!(err, Error::ResourcesExhausted(_)), "{err:?}");
    assert_eq!(err.http_status(), 507);
    let message = err.to_string();
    assert!(
        message.contains("shared memory limit of 65536 bytes"),
        "{message}"
    );
    assert!(message.contains("query.node_memory_bytes_max"), "{message}");
    // A failed query gives its memory back once its cancelled tasks have unwound.
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.stats().memory_bytes != 0 {
        assert!(
            Instant::now() < deadline,
            "memory held: {:?}",
            engine.stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let output = query(&engine, "db1", "SELECT count(*) FROM cpu").await;
    assert_eq!(one_i64(&output), 2100);
}

#[tokio::test]
async fn a_dropped_stream_frees_its_slot() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        concurrency_max: 1,
        queue_max: 0,
        ..QueryConfig::default()
    });
    let stream = engine
        .execute_stream("db1", "SELECT * FROM cpu")
        .await
        .expect("first query runs");
    assert_eq!(engine.stats().running, 1);
    let err = engine
        .execute("db1", "SELECT 1")
        .await
        .expect_err("no slot and no queue");
    assert!(matches!(err, Error::Busy { running: 1, .. }), "{err:?}");
    assert_eq!(err.retry_after_s(), Some(1));
    drop(stream);
    assert_eq!(engine.stats().running, 0);
    let output = query(&engine, "db1", "SELECT count(*) FROM cpu").await;
    assert_eq!(one_i64(&output), 2100);
}
