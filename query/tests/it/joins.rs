//! Joins against a grouped subquery (TSBS's `lastpoint`): the hash table is built on
//! the grouped side, and the answer is the one computed here from the rows, with ties
//! at the newest time, rows whose tag is null, a series found only in an old file, a
//! delete hiding a series' newest rows, and rows still in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, DictionaryArray, RecordBatch};
use arrow::datatypes::Int32Type;
use quiver_storage::lifecycle::{DeletePredicate, TagCondition, TagOp};
use quiver_storage::TimestampNs;

use crate::support::{
    batch, explain, i64s, query, rows_for_hour, snapshot, strings, write_parquet, Fixture, Row,
    HOUR_NS, T0_NS,
};

const LASTPOINT: &str = "SELECT c.* FROM last c JOIN \
    (SELECT host, max(time) AS newest FROM last GROUP BY host) m \
    ON c.host = m.host AND c.time = m.newest ORDER BY c.host, c.count";

/// Where host-e's rows stop being visible: a delete hides them from here on.
const DELETED_FROM_NS: i64 = T0_NS + HOUR_NS + 30 * 60_000_000_000;

/// A memory batch of `rows` whose host is null in every row.
fn batch_with_null_host(rows: &[Row]) -> RecordBatch {
    let full = batch(rows, true);
    let nulls: DictionaryArray<Int32Type> = rows.iter().map(|_| None::<&str>).collect();
    let mut columns: Vec<ArrayRef> = full.columns().to_vec();
    columns[1] = Arc::new(nulls);
    RecordBatch::try_new(full.schema(), columns).expect("null-host batch")
}

/// `lp.last`: hour 0 in a file (with host-old, found nowhere else), hour 1 in a file
/// (host-e's second half deleted), hour 2 of hosts a and b in memory with a tie at
/// host-a's newest time, and a batch of null-host rows newer than everything.
/// Returns the fixture and the rows a query may see (null hosts included).
fn lastpoint_fixture() -> (Fixture, Vec<Row>) {
    let fixture = Fixture::new();
    let root = fixture.root();
    let mut hour0 = rows_for_hour(0);
    let mut old = rows_for_hour(0);
    old.retain(|r| r.host == "host-a");
    for r in &mut old {
        r.host = "host-old".to_string();
        r.count += 7;
    }
    hour0.extend(old);
    hour0.sort_by(|a, b| (&a.host, a.time_ns).cmp(&(&b.host, b.time_ns)));
    let hour1 = rows_for_hour(1);
    let mut files = vec![
        write_parquet(&root, "lp/last/h0.parquet", &hour0, true),
        write_parquet(&root, "lp/last/h1.parquet", &hour1, true),
    ];
    // The delete below (tombstone 0) still hides rows of the hour-1 file.
    files[1].tombstones = vec![0];
    let mut hour2 = rows_for_hour(2);
    hour2.retain(|r| r.host == "host-a" || r.host == "host-b");
    let newest_a = hour2
        .iter()
        .filter(|r| r.host == "host-a")
        .max_by_key(|r| r.time_ns)
        .cloned()
        .expect("host-a rows");
    hour2.push(Row {
        count: newest_a.count + 1_000_000,
        ..newest_a
    });
    let mut null_hosts = rows_for_hour(3);
    null_hosts.truncate(10);
    let mut table = snapshot(
        "lp",
        "last",
        vec![batch(&hour2, true), batch_with_null_host(&null_hosts)],
        files,
    );
    table.tombstones = vec![DeletePredicate {
        time_from: Some(TimestampNs(DELETED_FROM_NS)),
        time_before: None,
        tags: vec![TagCondition {
            tag: "host".to_string(),
            op: TagOp::Eq,
            values: vec!["host-e".to_string()],
        }],
    }];
    fixture.source.insert(table);

    let mut visible: Vec<Row> = hour0;
    visible.extend(
        hour1
            .into_iter()
            .filter(|r| !(r.host == "host-e" && r.time_ns >= DELETED_FROM_NS)),
    );
    visible.extend(hour2);
    (fixture, visible)
}

/// The newest rows of every non-null host, as (host, time, count), by host then count.
fn expected_lastpoint(visible: &[Row]) -> Vec<(String, i64, i64)> {
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    for r in visible {
        let t = newest.entry(r.host.as_str()).or_insert(i64::MIN);
        *t = (*t).max(r.time_ns);
    }
    let mut out: Vec<(String, i64, i64)> = visible
        .iter()
        .filter(|r| newest.get(r.host.as_str()) == Some(&r.time_ns))
        .map(|r| (r.host.clone(), r.time_ns, r.count))
        .collect();
    out.sort_by(|a, b| (&a.0, a.2).cmp(&(&b.0, b.2)));
    out
}

#[tokio::test]
async fn lastpoint_join_returns_every_newest_row() {
    let (fixture, visible) = lastpoint_fixture();
    let engine = fixture.engine();
    let output = query(&engine, "lp", LASTPOINT).await;
    let hosts = strings(&output, 1);
    let times = i64s(&output, 0);
    let counts = i64s(&output, 3);
    let got: Vec<(String, i64, i64)> = hosts
        .into_iter()
        .zip(times)
        .zip(counts)
        .map(|((h, t), c)| (h.expect("host"), t.expect("time"), c.expect("count")))
        .collect();
    let expected = expected_lastpoint(&visible);
    assert_eq!(got, expected);
    // The cases the fixture is built for are all in the answer.
    assert_eq!(
        got.iter().filter(|r| r.0 == "host-a").count(),
        2,
        "tie kept"
    );
    assert!(
        got.iter().any(|r| r.0 == "host-old"),
        "old-file series kept"
    );
    let e = got.iter().find(|r| r.0 == "host-e").expect("host-e");
    assert!(e.1 < DELETED_FROM_NS, "deleted rows stay hidden");
}

#[tokio::test]
async fn lastpoint_join_builds_on_the_grouped_side() {
    let (fixture, _) = lastpoint_fixture();
    let engine = fixture.engine();
    let plan = explain(&engine, "lp", LASTPOINT).await;
    // DataFusion turns the inner join into a semi join with the table on the left
    // (the build side); swapped, the grouped subquery is built and the table probes.
    assert!(plan.contains("join_type=RightSemi"), "{plan}");
}

#[tokio::test]
async fn swapped_inner_join_keeps_its_columns() {
    let (fixture, visible) = lastpoint_fixture();
    let engine = fixture.engine();
    let sql = "SELECT m.newest, c.host, c.count FROM last c JOIN \
               (SELECT host, max(time) AS newest FROM last GROUP BY host) m \
               ON c.host = m.host AND c.time = m.newest ORDER BY c.host, c.count";
    let output = query(&engine, "lp", sql).await;
    let got: Vec<(String, i64, i64)> = strings(&output, 1)
        .into_iter()
        .zip(i64s(&output, 0))
        .zip(i64s(&output, 2))
        .map(|((h, t), c)| (h.expect("host"), t.expect("time"), c.expect("count")))
        .collect();
    assert_eq!(got, expected_lastpoint(&visible));
}

#[tokio::test]
async fn aggregate_over_a_larger_table_is_not_built() {
    // The grouped side reads `cpu` (2,100 rows), the other side `disk` (600 rows):
    // the grouped side may be as large as its input, so nothing is swapped to it.
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT d.host, d.time FROM disk d JOIN \
               (SELECT host, max(time) AS newest FROM cpu GROUP BY host) m \
               ON d.host = m.host AND d.time = m.newest";
    let plan = explain(&engine, "db1", sql).await;
    assert!(plan.contains("join_type=LeftSemi"), "{plan}");
}
