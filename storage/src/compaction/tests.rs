use super::plan::plan_table;
use super::*;
use crate::meta::{ColumnMeta, FILE_META_VERSION};
use crate::paths::parquet_path;
use crate::schema::{ColumnKind, FieldType};

/// The first merge the policy plans now.
fn first_merge(
    table: &TableKey,
    files: &[FileMeta],
    now: TimestampNs,
    settings: &CompactionSettings,
) -> Option<CompactionRequest> {
    plan_table(table, files, now, settings).into_iter().next()
}

const H: i64 = TimestampNs::HOUR_NS;
/// 2026-01-01T00:00:00Z
const DAY0: i64 = 1_767_225_600_000_000_000;

fn file(hour: i64, log_first: u64, log_last: u64) -> FileMeta {
    let start = TimestampNs(DAY0 + hour * H);
    FileMeta {
        version: FILE_META_VERSION,
        path: parquet_path("db", "cpu", start, LogIndex(log_first), LogIndex(log_last)),
        database: "db".into(),
        measurement: "cpu".into(),
        rows: 100,
        time_min: TimestampNs(start.0 + 10),
        time_max: TimestampNs(start.0 + H - 10),
        log_first: LogIndex(log_first),
        log_last: LogIndex(log_last),
        segment_files: 1,
        columns: vec![
            ColumnMeta::new("time", ColumnKind::Time),
            ColumnMeta::new("host", ColumnKind::Tag),
            ColumnMeta::new("v", ColumnKind::Field(FieldType::Float)),
        ]
        .into(),
        size_bytes: 1_000,
        compaction: None,
        tag_distinct: Vec::new(),
        sort_lead: None,
    }
}

fn output(of: &[&FileMeta], bucket_start: i64, bucket_ns: i64, index: u64) -> FileMeta {
    let mut out = of[0].clone();
    out.path = format!("out-{index}");
    out.log_first = of.iter().map(|f| f.log_first).min().unwrap();
    out.log_last = of.iter().map(|f| f.log_last).max().unwrap();
    out.time_min = of.iter().map(|f| f.time_min).min().unwrap();
    out.time_max = of.iter().map(|f| f.time_max).max().unwrap();
    out.compaction = Some(CompactionMark {
        index: LogIndex(index),
        bucket_start: TimestampNs(bucket_start),
        bucket_ns,
    });
    out
}

fn table() -> TableKey {
    TableKey::new("db", "cpu")
}

fn settings() -> CompactionSettings {
    CompactionSettings {
        closed_after_ms: 0,
        ..CompactionSettings::default()
    }
}

#[test]
fn an_output_supersedes_exactly_the_files_of_its_range_and_bucket() {
    let a = file(10, 1, 5);
    let b = file(10, 6, 9);
    let other_hour = file(11, 1, 5);
    let later = file(10, 10, 12);
    let o = output(&[&a, &b], DAY0 + 10 * H, H, 20);
    assert!(supersedes(&o, &a) && supersedes(&o, &b));
    assert!(!supersedes(&o, &other_hour), "same range, another hour");
    assert!(!supersedes(&o, &later), "same hour, later range");
    assert!(!supersedes(&o, &o), "never itself");
    assert!(!supersedes(&a, &b), "only outputs supersede");
}

#[test]
fn supersession_is_transitive_through_generations_left_by_a_crash() {
    // hour merge, then the day merge that consumed its output; a crash left all of
    // them on disk: only the day file survives.
    let a = file(10, 1, 5);
    let b = file(10, 6, 9);
    let c = file(3, 2, 2);
    let hour = output(&[&a, &b], DAY0 + 10 * H, H, 20);
    let day = output(&[&hour, &c], DAY0, DAY_NS, 30);
    let next_day = file(24, 3, 4);
    let (live, dead) = split_superseded(vec![
        a.clone(),
        b.clone(),
        c.clone(),
        hour.clone(),
        day.clone(),
        next_day.clone(),
    ]);
    let live: Vec<&str> = live.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(live, [day.path.as_str(), next_day.path.as_str()]);
    assert_eq!(dead.len(), 4);
}

#[test]
fn an_open_hour_waits_until_it_has_enough_files() {
    let now = TimestampNs(DAY0 + 10 * H + 1);
    let s = CompactionSettings {
        closed_after_ms: 3_600_000,
        ..settings()
    };
    let mut files = vec![file(10, 1, 1), file(10, 2, 2), file(10, 3, 3)];
    assert_eq!(first_merge(&table(), &files, now, &s), None);
    files.push(file(10, 4, 4));
    let plan = first_merge(&table(), &files, now, &s).unwrap();
    assert_eq!(plan.inputs.len(), 4);
    assert_eq!((plan.bucket_start.0, plan.bucket_ns), (DAY0 + 10 * H, H));
}

#[test]
fn a_closed_day_becomes_one_file() {
    let now = TimestampNs(DAY0 + DAY_NS + H);
    let files = vec![file(0, 1, 1), file(5, 1, 1), file(23, 2, 2), file(24, 3, 3)];
    let plan = first_merge(&table(), &files, now, &settings()).unwrap();
    assert_eq!((plan.bucket_start.0, plan.bucket_ns), (DAY0, DAY_NS));
    assert_eq!(plan.inputs.len(), 3, "the next day's file is not taken");
    // one file per day: nothing more to do.
    let day = output(&[&files[0], &files[1], &files[2]], DAY0, DAY_NS, 9);
    assert_eq!(
        first_merge(&table(), &[day, files[3].clone()], now, &settings()),
        None
    );
}

#[test]
fn a_day_too_big_for_one_file_is_merged_per_hour() {
    let now = TimestampNs(DAY0 + DAY_NS + H);
    let s = CompactionSettings {
        day_file_bytes_max: 2_500,
        ..settings()
    };
    let files = vec![file(1, 1, 1), file(1, 2, 2), file(2, 3, 3)];
    let plan = first_merge(&table(), &files, now, &s).unwrap();
    assert_eq!((plan.bucket_start.0, plan.bucket_ns), (DAY0 + H, H));
    assert_eq!(plan.inputs.len(), 2);
}

#[test]
fn the_memory_bound_limits_how_many_files_merge() {
    let now = TimestampNs(DAY0 + 10 * H + 1);
    let files: Vec<FileMeta> = (1..=6).map(|i| file(10, i, i)).collect();
    let one = plan::merge_memory(&[&files[0]]);
    let s = CompactionSettings {
        memory_bytes_max: one * 3,
        closed_after_ms: 3_600_000,
        ..settings()
    };
    let plan = first_merge(&table(), &files, now, &s).unwrap();
    assert_eq!(plan.inputs.len(), 3, "a prefix in log order that fits");
    assert_eq!(plan.inputs[0].log_first, LogIndex(1));
    let tight = CompactionSettings {
        memory_bytes_max: one,
        ..s
    };
    assert_eq!(first_merge(&table(), &files, now, &tight), None);
}

fn with_lead(mut f: FileMeta, lead: Option<&str>, hosts: u32) -> FileMeta {
    f.sort_lead = lead.map(str::to_string);
    f.tag_distinct = vec![hosts];
    f
}

#[test]
fn files_sorted_by_different_leads_merge_only_in_runs_that_agree() {
    let now = TimestampNs(DAY0 + DAY_NS + H);
    // Name order (written before leads), one series (any order suits it), then files
    // led by `host`: two runs, each contiguous in log order.
    let files = vec![
        with_lead(file(0, 1, 1), None, 5),
        with_lead(file(1, 2, 2), None, 1),
        with_lead(file(2, 3, 3), Some("host"), 5),
        with_lead(file(3, 4, 4), Some("host"), 5),
    ];
    let plan = first_merge(&table(), &files, now, &settings()).unwrap();
    assert_eq!((plan.bucket_start.0, plan.bucket_ns), (DAY0, DAY_NS));
    let logs: Vec<u64> = plan.inputs.iter().map(|i| i.log_first.0).collect();
    assert_eq!(logs, [1, 2], "the old-order run, with the one-series file");
    let merged = with_lead(output(&[&files[0], &files[1]], DAY0, DAY_NS, 9), None, 5);
    let rest = vec![merged.clone(), files[2].clone(), files[3].clone()];
    let plan = first_merge(&table(), &rest, now, &settings()).unwrap();
    let logs: Vec<u64> = plan.inputs.iter().map(|i| i.log_first.0).collect();
    assert_eq!(logs, [3, 4], "then the host-led run");
    let lone = vec![
        merged,
        with_lead(
            output(&[&files[2], &files[3]], DAY0, DAY_NS, 10),
            Some("host"),
            5,
        ),
    ];
    assert_eq!(
        first_merge(&table(), &lone, now, &settings()),
        None,
        "two runs of one file"
    );
}

#[test]
fn a_backlog_of_many_days_is_planned_in_one_check_without_overlap() {
    // 200 closed days of two hour files each, and today's open hours: one merge per
    // closed day up to the per-check bound, and no input named by two merges.
    let days = 200i64;
    let mut files = Vec::new();
    for d in 0..days {
        files.push(file(d * 24, d as u64 * 2 + 1, d as u64 * 2 + 1));
        files.push(file(d * 24 + 5, d as u64 * 2 + 2, d as u64 * 2 + 2));
    }
    let today = days * 24;
    let s = CompactionSettings {
        closed_after_ms: 3_600_000,
        hour_files_min: 2,
        ..settings()
    };
    for (i, log) in [(0, 1_000u64), (0, 1_001), (1, 1_002)] {
        files.push(file(today + i, log, log));
    }
    let now = TimestampNs(DAY0 + today * H + H + 1);
    let planned = plan_table(&table(), &files, now, &s);
    assert_eq!(planned.len(), super::plan::MERGES_PER_CHECK_MAX);
    assert!(planned.iter().all(|p| p.bucket_ns == DAY_NS));
    let mut named: Vec<&str> = planned
        .iter()
        .flat_map(|p| p.inputs.iter().map(|i| i.path.as_str()))
        .collect();
    let all = named.len();
    named.sort_unstable();
    named.dedup();
    assert_eq!(named.len(), all, "an input in two merges");
    // Once the older days are merged, the rest and today's full hour come in one check.
    let rest: Vec<FileMeta> = files[2 * super::plan::MERGES_PER_CHECK_MAX..].to_vec();
    let planned = plan_table(&table(), &rest, now, &s);
    let day_merges = planned.iter().filter(|p| p.bucket_ns == DAY_NS).count();
    assert_eq!(
        day_merges,
        days as usize - super::plan::MERGES_PER_CHECK_MAX
    );
    let hour_merges: Vec<_> = planned.iter().filter(|p| p.bucket_ns == H).collect();
    assert_eq!(
        hour_merges.len(),
        1,
        "today's first hour (two files); its second has one"
    );
    assert_eq!(hour_merges[0].bucket_start.0, DAY0 + today * H);
}
