//! Generated batches: Arc's shape (`time`, a `host` tag from N hosts, three f64 fields)
//! or TSBS's `cpu-only` shape ([`crate::tsbs_rows`]). Every row is unique: row `seq`
//! belongs to host `seq % hosts` at time `start + (seq / hosts) * interval`.

use crate::tsbs_rows;

/// Which rows a run generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// Arc's shape: a `host` tag and three float fields (about 50 bytes a row).
    #[default]
    Arc,
    /// TSBS devops `cpu-only`: ten tags and ten integer fields (about 300 bytes of line
    /// protocol a row), the shape most time-series evaluations use.
    Tsbs,
}

impl RowKind {
    /// The tag that names a row's host (the audit computes a row's batch from it).
    pub fn host_column(self) -> &'static str {
        match self {
            RowKind::Arc => "host",
            RowKind::Tsbs => "hostname",
        }
    }

    /// Host names `host-0 ..` (Arc) or `host_0 ..` (TSBS); both have a five-character
    /// prefix before the number, which the audit relies on.
    pub fn host_names(self, hosts: u64) -> Vec<String> {
        let separator = match self {
            RowKind::Arc => '-',
            RowKind::Tsbs => '_',
        };
        (0..hosts).map(|h| format!("host{separator}{h}")).collect()
    }
}

/// What the generated rows look like.
#[derive(Debug, Clone)]
pub struct BatchShape {
    /// Measurement name.
    pub measurement: String,
    /// Distinct `host` tag values.
    pub hosts: u64,
    /// Time of row 0, in nanoseconds.
    pub start_ns: i64,
    /// Time step between a host's consecutive rows, in nanoseconds.
    pub interval_ns: i64,
    /// Arc's rows or TSBS's.
    pub kind: RowKind,
}

impl BatchShape {
    /// The time of row `seq`.
    pub fn time_of(&self, seq: u64) -> i64 {
        self.start_ns + (seq / self.hosts) as i64 * self.interval_ns
    }
}

/// Field values are a cheap deterministic function of the row, rounded to 2 decimals.
fn field(seq: u64, salt: u64) -> f64 {
    let x = seq
        .wrapping_mul(6364136223846793005)
        .wrapping_add(salt.wrapping_mul(1442695040888963407));
    ((x >> 33) % 10_000) as f64 / 100.0
}

/// Encodes rows `first..first + rows` as one columnar MessagePack object.
pub fn encode_columnar_batch(
    shape: &BatchShape,
    host_names: &[String],
    first: u64,
    rows: u64,
) -> Vec<u8> {
    if shape.kind == RowKind::Tsbs {
        return tsbs_rows::encode_columnar(shape, host_names, first, rows);
    }
    let n = rows as u32;
    let mut buf = Vec::with_capacity(rows as usize * 48 + 256);
    // Writing into a Vec cannot fail; the results are ignored on purpose.
    let _ = rmp::encode::write_map_len(&mut buf, 2);
    let _ = rmp::encode::write_str(&mut buf, "m");
    let _ = rmp::encode::write_str(&mut buf, &shape.measurement);
    let _ = rmp::encode::write_str(&mut buf, "columns");
    let _ = rmp::encode::write_map_len(&mut buf, 5);
    let _ = rmp::encode::write_str(&mut buf, "time");
    let _ = rmp::encode::write_array_len(&mut buf, n);
    for seq in first..first + rows {
        let _ = rmp::encode::write_i64(&mut buf, shape.time_of(seq));
    }
    let _ = rmp::encode::write_str(&mut buf, "host");
    let _ = rmp::encode::write_array_len(&mut buf, n);
    for seq in first..first + rows {
        let _ = rmp::encode::write_str(&mut buf, &host_names[(seq % shape.hosts) as usize]);
    }
    for (salt, name) in [(1u64, "usage_user"), (2, "usage_system"), (3, "usage_idle")] {
        let _ = rmp::encode::write_str(&mut buf, name);
        let _ = rmp::encode::write_array_len(&mut buf, n);
        for seq in first..first + rows {
            let _ = rmp::encode::write_f64(&mut buf, field(seq, salt));
        }
    }
    buf
}

/// Encodes rows `first..first + rows` as line protocol with nanosecond timestamps: the
/// same rows [`encode_columnar_batch`] makes, so the two formats compare like for like.
pub fn encode_lp_batch(
    shape: &BatchShape,
    host_names: &[String],
    first: u64,
    rows: u64,
) -> Vec<u8> {
    use std::io::Write;
    if shape.kind == RowKind::Tsbs {
        return tsbs_rows::encode_lp(shape, host_names, first, rows);
    }
    let mut buf = Vec::with_capacity(rows as usize * 110);
    for seq in first..first + rows {
        // Writing into a Vec cannot fail.
        let _ = writeln!(
            buf,
            "{},host={} usage_user={},usage_system={},usage_idle={} {}",
            shape.measurement,
            host_names[(seq % shape.hosts) as usize],
            field(seq, 1),
            field(seq, 2),
            field(seq, 3),
            shape.time_of(seq)
        );
    }
    buf
}

/// Host names `host-0 .. host-{n-1}` (Arc's shape).
pub fn host_names(hosts: u64) -> Vec<String> {
    RowKind::Arc.host_names(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_unique_and_decodable() {
        let shape = BatchShape {
            measurement: "cpu".into(),
            hosts: 3,
            start_ns: 1_700_000_000_000_000_000,
            interval_ns: 1_000,
            kind: RowKind::Arc,
        };
        let names = host_names(3);
        let bytes = encode_columnar_batch(&shape, &names, 0, 7);
        let v: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        let times = v["columns"]["time"].as_array().unwrap();
        let hosts = v["columns"]["host"].as_array().unwrap();
        let mut keys: Vec<(String, i64)> = times
            .iter()
            .zip(hosts)
            .map(|(t, h)| (h.as_str().unwrap().to_string(), t.as_i64().unwrap()))
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 7);
        let lp = String::from_utf8(encode_lp_batch(&shape, &names, 0, 7)).unwrap();
        let first = lp.lines().next().unwrap();
        assert_eq!(
            first,
            format!(
                "cpu,host=host-0 usage_user={},usage_system={},usage_idle={} 1700000000000000000",
                field(0, 1),
                field(0, 2),
                field(0, 3)
            )
        );
        assert_eq!(lp.lines().count(), 7);
        let f = field(5, 1);
        assert_eq!((f * 100.0).round() / 100.0, f);
    }
}
