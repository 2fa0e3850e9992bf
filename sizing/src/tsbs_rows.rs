//! Rows of the TSBS devops `cpu-only` shape: ten tags per host (`hostname`, `region`,
//! `datacenter`, `rack`, `os`, `arch`, `team`, `service`, `service_version`,
//! `service_environment`) and ten integer fields (`usage_user` .. `usage_guest_nice`).
//!
//! Most time-series evaluations use this shape, and it costs a server far more per row
//! than the Arc shape: ten tag values to parse and intern, ten integers, lines of about
//! 300 bytes. Row `seq` belongs to host `seq % hosts` at [`BatchShape::time_of`], as in
//! the Arc shape, so the same audit counts its batches (by `hostname`, named `host_N`).
//! The values are a deterministic function of the row, not TSBS's random walk: the
//! point is the server's cost per row, and a rerun must send the same bytes.

use std::io::Write;

use crate::batch::BatchShape;

/// TSBS's regions and their datacenters.
const REGIONS: [(&str, &[&str]); 9] = [
    (
        "us-east-1",
        &["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"],
    ),
    ("us-west-1", &["us-west-1a", "us-west-1b"]),
    ("us-west-2", &["us-west-2a", "us-west-2b", "us-west-2c"]),
    ("eu-west-1", &["eu-west-1a", "eu-west-1b", "eu-west-1c"]),
    ("eu-central-1", &["eu-central-1a", "eu-central-1b"]),
    ("ap-southeast-1", &["ap-southeast-1a", "ap-southeast-1b"]),
    ("ap-southeast-2", &["ap-southeast-2a", "ap-southeast-2b"]),
    ("ap-northeast-1", &["ap-northeast-1a", "ap-northeast-1c"]),
    ("sa-east-1", &["sa-east-1a", "sa-east-1b", "sa-east-1c"]),
];
const OSES: [&str; 3] = ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"];
const ARCHES: [&str; 2] = ["x64", "x86"];
const TEAMS: [&str; 4] = ["SF", "NYC", "LON", "CHI"];
const ENVIRONMENTS: [&str; 3] = ["production", "staging", "test"];

/// The ten tag columns, in TSBS's order.
pub const TAGS: [&str; 10] = [
    "hostname",
    "region",
    "datacenter",
    "rack",
    "os",
    "arch",
    "team",
    "service",
    "service_version",
    "service_environment",
];

/// The ten integer fields, in TSBS's order.
pub const FIELDS: [&str; 10] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];

/// The values of [`TAGS`] for host `host`, named `names[host]`.
fn tag_values(names: &[String], host: u64) -> [String; 10] {
    let h = host as usize;
    let (region, datacenters) = REGIONS[h % REGIONS.len()];
    [
        names[h].clone(),
        region.to_string(),
        datacenters[(h / REGIONS.len()) % datacenters.len()].to_string(),
        ((h * 37) % 100).to_string(),
        OSES[h % OSES.len()].to_string(),
        ARCHES[h % ARCHES.len()].to_string(),
        TEAMS[h % TEAMS.len()].to_string(),
        ((h * 13) % 20).to_string(),
        (h % 2).to_string(),
        ENVIRONMENTS[h % ENVIRONMENTS.len()].to_string(),
    ]
}

/// Field `field` of row `seq`: an integer percentage.
fn value(seq: u64, field: usize) -> i64 {
    let x = seq
        .wrapping_mul(6364136223846793005)
        .wrapping_add((field as u64 + 1).wrapping_mul(1442695040888963407));
    ((x >> 33) % 101) as i64
}

/// Each host's series key (`measurement,tag=value,...`), built once per batch.
fn series_keys(shape: &BatchShape, names: &[String]) -> Vec<String> {
    (0..shape.hosts)
        .map(|h| {
            let mut key = shape.measurement.clone();
            for (tag, value) in TAGS.iter().zip(tag_values(names, h)) {
                key.push(',');
                key.push_str(tag);
                key.push('=');
                key.push_str(&value);
            }
            key
        })
        .collect()
}

/// Rows `first..first + rows` as line protocol with nanosecond timestamps.
pub fn encode_lp(shape: &BatchShape, names: &[String], first: u64, rows: u64) -> Vec<u8> {
    let keys = series_keys(shape, names);
    let mut buf = Vec::with_capacity(rows as usize * 320);
    for seq in first..first + rows {
        buf.extend_from_slice(keys[(seq % shape.hosts) as usize].as_bytes());
        for (i, field) in FIELDS.iter().enumerate() {
            buf.push(if i == 0 { b' ' } else { b',' });
            // Writing into a Vec cannot fail.
            let _ = write!(buf, "{field}={}i", value(seq, i));
        }
        let _ = writeln!(buf, " {}", shape.time_of(seq));
    }
    buf
}

/// Rows `first..first + rows` as one columnar MessagePack object (Arc's format), tags
/// listed as such.
pub fn encode_columnar(shape: &BatchShape, names: &[String], first: u64, rows: u64) -> Vec<u8> {
    let n = rows as u32;
    let tags: Vec<[String; 10]> = (0..shape.hosts).map(|h| tag_values(names, h)).collect();
    let mut buf = Vec::with_capacity(rows as usize * 120 + 1024);
    // Writing into a Vec cannot fail; the results are ignored on purpose.
    let _ = rmp::encode::write_map_len(&mut buf, 3);
    let _ = rmp::encode::write_str(&mut buf, "m");
    let _ = rmp::encode::write_str(&mut buf, &shape.measurement);
    let _ = rmp::encode::write_str(&mut buf, "tags");
    let _ = rmp::encode::write_array_len(&mut buf, TAGS.len() as u32);
    for tag in TAGS {
        let _ = rmp::encode::write_str(&mut buf, tag);
    }
    let _ = rmp::encode::write_str(&mut buf, "columns");
    let _ = rmp::encode::write_map_len(&mut buf, (1 + TAGS.len() + FIELDS.len()) as u32);
    let _ = rmp::encode::write_str(&mut buf, "time");
    let _ = rmp::encode::write_array_len(&mut buf, n);
    for seq in first..first + rows {
        let _ = rmp::encode::write_i64(&mut buf, shape.time_of(seq));
    }
    for (t, tag) in TAGS.iter().enumerate() {
        let _ = rmp::encode::write_str(&mut buf, tag);
        let _ = rmp::encode::write_array_len(&mut buf, n);
        for seq in first..first + rows {
            let _ = rmp::encode::write_str(&mut buf, &tags[(seq % shape.hosts) as usize][t]);
        }
    }
    for (i, field) in FIELDS.iter().enumerate() {
        let _ = rmp::encode::write_str(&mut buf, field);
        let _ = rmp::encode::write_array_len(&mut buf, n);
        for seq in first..first + rows {
            let _ = rmp::encode::write_sint(&mut buf, value(seq, i));
        }
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::RowKind;

    fn shape() -> BatchShape {
        BatchShape {
            measurement: "cpu".into(),
            hosts: 10,
            start_ns: 1_451_606_400_000_000_000,
            interval_ns: 10_000_000_000,
            kind: RowKind::Tsbs,
        }
    }

    #[test]
    fn line_protocol_rows_carry_ten_tags_and_ten_integer_fields() {
        let shape = shape();
        let names = RowKind::Tsbs.host_names(shape.hosts);
        let lp = String::from_utf8(encode_lp(&shape, &names, 0, 25)).unwrap();
        let lines: Vec<&str> = lp.lines().collect();
        assert_eq!(lines.len(), 25);
        let first = lines[0];
        assert!(
            first.starts_with("cpu,hostname=host_0,region=us-east-1,datacenter=us-east-1a,"),
            "{first}"
        );
        let (series, rest) = first.split_once(' ').unwrap();
        assert_eq!(series.split(',').count(), 11);
        let (fields, time) = rest.split_once(' ').unwrap();
        assert_eq!(time, "1451606400000000000");
        let fields: Vec<&str> = fields.split(',').collect();
        assert_eq!(fields.len(), 10);
        assert!(fields.iter().all(|f| f.ends_with('i') && f.contains('=')));
        // Row 10 is host 0's second point, 10 s later.
        assert!(lines[10].ends_with(" 1451606410000000000"));
        assert!(lines[10].starts_with("cpu,hostname=host_0,"));
    }

    #[test]
    fn columnar_rows_decode_with_tags_listed() {
        let shape = shape();
        let names = RowKind::Tsbs.host_names(shape.hosts);
        let bytes = encode_columnar(&shape, &names, 3, 7);
        let v: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(v["tags"].as_array().unwrap().len(), 10);
        let columns = v["columns"].as_object().unwrap();
        assert_eq!(columns.len(), 21);
        assert_eq!(columns["hostname"][0], "host_3");
        assert_eq!(columns["usage_user"].as_array().unwrap().len(), 7);
        assert!(columns["usage_idle"][0].as_i64().unwrap() <= 100);
    }
}
