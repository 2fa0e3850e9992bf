use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Float64Array, RecordBatch, TimestampNanosecondArray};

use super::*;
use crate::ids::TimestampNs;
use crate::meta::FILE_META_VERSION;
use crate::paths::parquet_path;
use crate::schema::FieldType;

/// A file description the size of a real one (~450 bytes of JSON).
fn file_meta(i: u64) -> FileMeta {
    let hour = TimestampNs(1_700_000_000_000_000_000 + (i as i64 % 5_000) * TimestampNs::HOUR_NS);
    let (log_first, log_last) = (LogIndex(i * 10 + 1), LogIndex(i * 10 + 10));
    FileMeta {
        version: FILE_META_VERSION,
        path: parquet_path("telemetry", "cpu", hour, log_first, log_last),
        database: "telemetry".into(),
        measurement: "cpu".into(),
        rows: 10_000 + i,
        time_min: hour,
        time_max: TimestampNs(hour.0 + TimestampNs::HOUR_NS - 1),
        log_first,
        log_last,
        segment_files: 1,
        columns: vec![
            ColumnMeta::new("time", ColumnKind::Time),
            ColumnMeta::new("host", ColumnKind::Tag),
            ColumnMeta::new("region", ColumnKind::Tag),
            ColumnMeta::new("usage_idle", ColumnKind::Field(FieldType::Float)),
            ColumnMeta::new("usage_user", ColumnKind::Field(FieldType::Float)),
            ColumnMeta::new("usage_system", ColumnKind::Field(FieldType::Float)),
        ]
        .into(),
        size_bytes: 1_000_000 + i,
        compaction: None,
        tag_distinct: Vec::new(),
        sort_lead: None,
    }
}

fn live_batch() -> RecordBatch {
    let schema = canonical_schema([("v", ColumnKind::Field(FieldType::Float))]);
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![1, 2])),
            Arc::new(Float64Array::from(vec![1.0, 2.0])),
        ],
    )
    .unwrap()
}

fn image_of(files: Vec<FileMeta>) -> MemoryImage {
    MemoryImage {
        tables: vec![TableImage {
            key: TableKey::new("telemetry", "cpu"),
            frozen: Vec::new(),
            active: vec![Buffered {
                index: LogIndex(1_000_001),
                batch: live_batch(),
            }],
        }],
        files,
        policies: Default::default(),
        compactions: Vec::new(),
        sort_leads: None,
        generation: 0,
    }
}

#[test]
fn replicated_settings_travel_in_the_image() {
    use crate::policies::{PolicyChange, Scope, TokenRecord};
    let mut image = image_of(Vec::new());
    image.policies.apply(
        LogIndex(7),
        PolicyChange::CreateToken(TokenRecord {
            id: "t1".into(),
            name: "telegraf".into(),
            sha256: "ab".repeat(32),
            scopes: vec![Scope::Write],
            databases: Some(vec!["telemetry".into()]),
            created_index: LogIndex(0),
            created_at_ms: 1,
            scram: Some(crate::policies::ScramSecret {
                salt: "c2FsdA==".into(),
                iterations: 4096,
                stored_key: "c3RvcmVk".into(),
                server_key: "c2VydmVy".into(),
            }),
        }),
    );
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    let back = read_image(&mut bytes.as_slice()).unwrap();
    assert_eq!(back.policies, image.policies);
    assert_eq!(back.policies.tokens["t1"].created_index, LogIndex(7));
}

/// A table's sort lead is replicated state: a node restarting from a snapshot must
/// write (and merge) its files in the order its peers do.
#[test]
fn sort_leads_and_frozen_segments_leads_travel_in_the_image() {
    let mut with_lead = file_meta(1);
    with_lead.sort_lead = Some("region".into());
    let mut image = image_of(vec![with_lead.clone()]);
    image.sort_leads = Some(vec![
        (TableKey::new("telemetry", "cpu"), Some("region".into())),
        (TableKey::new("telemetry", "mem"), None),
    ]);
    image.tables[0].frozen.push(Frozen {
        log_first: LogIndex(1),
        log_last: LogIndex(2),
        schema: live_batch().schema(),
        batches: vec![live_batch()],
        rows: 2,
        bytes: 16,
        sort_lead: Some("region".into()),
    });
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    let back = read_image(&mut bytes.as_slice()).unwrap();
    assert_eq!(back.sort_leads, image.sort_leads);
    assert_eq!(back.files, vec![with_lead]);
    assert_eq!(
        back.tables[0].frozen[0].sort_lead.as_deref(),
        Some("region")
    );
    // An image written before leads says so: its tables keep name order.
    let mut old = image_of(Vec::new());
    old.sort_leads = None;
    let mut bytes = Vec::new();
    write_image(&old, &mut bytes).unwrap();
    assert_eq!(read_image(&mut bytes.as_slice()).unwrap().sort_leads, None);
}

/// Version 1 put the whole manifest in one frame header, which the reader refused past
/// 1 MiB: a node with ~2,400 files could not read its own snapshot after a restart.
#[test]
fn manifest_of_100k_files_survives_a_restart() {
    let files: Vec<FileMeta> = (0..100_000).map(file_meta).collect();
    let image = image_of(files.clone());
    let started = Instant::now();
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    let written = started.elapsed();
    let started = Instant::now();
    let back = read_image(&mut bytes.as_slice()).unwrap();
    let read = started.elapsed();
    eprintln!(
        "memory image of {} files: {} bytes, written in {written:?}, read in {read:?}",
        files.len(),
        bytes.len()
    );
    assert_eq!(back.files, files);
    assert_eq!(back.tables.len(), 1);
    assert_eq!(back.tables[0].active[0].batch, live_batch());
}

/// Writes a frame the way version 1 did, with no bound on the header.
fn v1_frame(out: &mut Vec<u8>, kind: u8, header: &[u8], body: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c_append(crc32c::crc32c(header), body);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Nodes upgraded from version 1 hold version 1 snapshots, some with a manifest header
/// larger than the 1 MiB every other header is held to.
#[test]
fn version_1_image_with_a_large_manifest_still_reads() {
    let files: Vec<FileMeta> = (0..3_000).map(file_meta).collect();
    let manifest = serde_json::to_vec(&files).unwrap();
    assert!(manifest.len() as u64 > HEADER_BYTES_MAX, "the bug's size");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION_1.to_le_bytes());
    v1_frame(&mut bytes, b'M', &manifest, &[]);
    let active = serde_json::to_vec(&ActiveHeader {
        key: TableKey::new("telemetry", "cpu"),
        index: LogIndex(7),
    })
    .unwrap();
    v1_frame(
        &mut bytes,
        b'A',
        &active,
        &encode_batch(&live_batch()).unwrap(),
    );
    v1_frame(&mut bytes, b'E', &[], &[]);

    let back = read_image(&mut bytes.as_slice()).unwrap();
    assert_eq!(back.files, files);
    assert_eq!(back.tables[0].active[0].index, LogIndex(7));
    assert_eq!(back.tables[0].active[0].batch, live_batch());
}

/// The writer refuses exactly what the reader refuses, bound by bound.
#[test]
fn writer_refuses_what_the_reader_refuses() {
    let cases: [(u8, u64, u64); 2] = [
        (KIND_FROZEN, HEADER_BYTES_MAX, 0),
        (KIND_FILE, 0, FILE_META_BYTES_MAX),
    ];
    for (kind, header_bytes, body_bytes) in cases {
        for extra in [0u64, 1] {
            let header = vec![b' '; (header_bytes + extra * u64::from(header_bytes > 0)) as usize];
            let body = vec![b' '; (body_bytes + extra * u64::from(body_bytes > 0)) as usize];
            let mut written = Vec::new();
            let outcome = write_frame(&mut written, kind, &header, &body);
            if extra == 0 {
                outcome.unwrap();
                let mut frame = Frame::default();
                read_frame(&mut written.as_slice(), HEADER_BYTES_MAX, &mut frame).unwrap();
                assert_eq!(
                    (frame.header.len(), frame.body.len()),
                    (header.len(), body.len())
                );
            } else {
                assert!(
                    matches!(outcome, Err(Error::TooLarge { .. })),
                    "writer accepted a {} frame past its bound",
                    kind as char
                );
                // What the writer refused, the reader refuses too.
                let mut forged = Vec::new();
                v1_frame(&mut forged, kind, &header, &body);
                let mut frame = Frame::default();
                assert!(read_frame(&mut forged.as_slice(), HEADER_BYTES_MAX, &mut frame).is_err());
            }
        }
    }
}

#[test]
fn manifest_with_fewer_files_than_announced_is_corrupt() {
    let image = image_of((0..3).map(file_meta).collect());
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    // Rewrite the announcement to promise 4 files.
    let mut forged = Vec::new();
    forged.extend_from_slice(MAGIC);
    forged.extend_from_slice(&VERSION.to_le_bytes());
    write_frame(&mut forged, KIND_MANIFEST, br#"{"files":4}"#, &[]).unwrap();
    let original_manifest_frame = 1 + 4 + br#"{"files":3}"#.len() + 8 + 4;
    forged.extend_from_slice(&bytes[12 + original_manifest_frame..]);
    let err = read_image(&mut forged.as_slice()).unwrap_err();
    assert!(err.to_string().contains("announces 4 files"), "{err}");
}

#[test]
fn damaged_length_fails_without_allocating_it() {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION_1.to_le_bytes());
    // A version 1 manifest header claiming 4 GiB, then end of input.
    bytes.push(b'M');
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(b"[]");
    let err = read_image(&mut bytes.as_slice()).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}
