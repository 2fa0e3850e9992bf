//! What Telegraf sends, rebuilt byte for byte from its source, for tests that replay it
//! against a real node (Telegraf itself is not packaged here).
//!
//! * `outputs.arc` (`plugins/outputs/arc/{arc,groups}.go`): metrics grouped by name into
//!   columnar maps `{"m": name, "columns": {...}}`; a column first seen at row N is
//!   backfilled with N nils, a row lacking a column gets a nil; `time` is
//!   `Time().UnixMilli()`; no `"tags"` key. One group is sent as a map, several as an
//!   array. Encoded by tinylib/msgp's `WriteIntf` (fixint/int16/32/64 for int64,
//!   fixint/uint8..64 for uint64, float64 always `0xcb`, fixstr/str8/16/32, fixmap/map16,
//!   fixarray/array16). Go iterates maps in random order: any order here is one
//!   Telegraf may send, and the tests use orders a decoder could trip on (`columns`
//!   before `m`, `time` first or last).
//! * `outputs.influxdb_v2` (`http.go`, `plugins/serializers/influx`): line protocol with
//!   tags in key order (Telegraf keeps them sorted), empty tags skipped, fields in metric
//!   order, NaN/Inf fields dropped, uint64 as `i` (clamped) unless `influx_uint_support`,
//!   nanosecond timestamps, one `\n` per line; `POST {url}/api/v2/write?bucket=B&org=O`,
//!   `Authorization: Token T`.
//! * Both gzip their bodies by default. The gzip *header* is Go's (`1f 8b 08 00`, mtime
//!   0, XFL 0, OS 255); the deflate stream is flate2's, since Go's compressor cannot
//!   be reproduced here, and any inflater reads both the same.
//! * Retry rules: `outputs.arc` returns an error for any non-2xx answer, which makes
//!   Telegraf keep the whole batch and send it again at the next flush; `outputs.influxdb_v2`
//!   drops the batch on 400, 406, 422 and any other 4xx, splits it on 413, retries 429,
//!   502, 503 and 504 after max(Retry-After, backoff), and keeps it on 401, 403 and 5xx.

use std::io::Write;
use std::time::Duration;

/// A Telegraf field value (`telegraf.Field.Value`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Float(f64),
    Int(i64),
    Uint(u64),
    Str(String),
    Bool(bool),
}

/// A Telegraf metric: tags sorted by key (as Telegraf keeps them), fields in order.
#[derive(Debug, Clone)]
pub struct Metric {
    pub name: String,
    pub tags: Vec<(String, String)>,
    pub fields: Vec<(String, Value)>,
    pub time_ns: i64,
}

impl Metric {
    pub fn new(
        name: &str,
        tags: &[(&str, &str)],
        fields: Vec<(&str, Value)>,
        time_ns: i64,
    ) -> Self {
        let mut tags: Vec<(String, String)> = tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        tags.sort();
        Metric {
            name: name.to_string(),
            tags,
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            time_ns,
        }
    }
}

/// A value as msgp's `WriteIntf` sees it.
#[derive(Debug, Clone)]
enum Intf {
    Nil,
    Bool(bool),
    F64(f64),
    I64(i64),
    U64(u64),
    Str(String),
    Map(Vec<(String, Intf)>),
    Array(Vec<Intf>),
}

/// tinylib/msgp's `Writer`, the methods `WriteIntf` reaches.
fn write_intf(out: &mut Vec<u8>, v: &Intf) {
    match v {
        Intf::Nil => out.push(0xc0),
        Intf::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Intf::F64(f) => {
            out.push(0xcb);
            out.extend_from_slice(&f.to_bits().to_be_bytes());
        }
        Intf::I64(i) => write_int64(out, *i),
        Intf::U64(u) => write_uint64(out, *u),
        Intf::Str(s) => {
            let n = s.len();
            if n <= 31 {
                out.push(0xa0 | n as u8);
            } else if n <= 0xff {
                out.extend_from_slice(&[0xd9, n as u8]);
            } else if n <= 0xffff {
                out.push(0xda);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            } else {
                out.push(0xdb);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            out.extend_from_slice(s.as_bytes());
        }
        Intf::Map(entries) => {
            header(out, entries.len(), 0x80, 0xde, 0xdf);
            for (k, v) in entries {
                write_intf(out, &Intf::Str(k.clone()));
                write_intf(out, v);
            }
        }
        Intf::Array(items) => {
            header(out, items.len(), 0x90, 0xdc, 0xdd);
            for v in items {
                write_intf(out, v);
            }
        }
    }
}

fn header(out: &mut Vec<u8>, n: usize, fix: u8, m16: u8, m32: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(m16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(m32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// msgp `WriteInt64`: signed markers only, even for positive values.
fn write_int64(out: &mut Vec<u8>, i: i64) {
    if i >= 0 {
        if i <= i64::from(i8::MAX) {
            out.push(i as u8);
        } else if i <= i64::from(i16::MAX) {
            out.push(0xd1);
            out.extend_from_slice(&(i as u16).to_be_bytes());
        } else if i <= i64::from(i32::MAX) {
            out.push(0xd2);
            out.extend_from_slice(&(i as u32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&(i as u64).to_be_bytes());
        }
    } else if i >= -32 {
        out.push(i as i8 as u8);
    } else if i >= i64::from(i8::MIN) {
        out.extend_from_slice(&[0xd0, i as i8 as u8]);
    } else if i >= i64::from(i16::MIN) {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

/// msgp `WriteUint64`: positive fixint, then unsigned markers.
fn write_uint64(out: &mut Vec<u8>, u: u64) {
    if u <= 127 {
        out.push(u as u8);
    } else if u <= 0xff {
        out.extend_from_slice(&[0xcc, u as u8]);
    } else if u <= 0xffff {
        out.push(0xcd);
        out.extend_from_slice(&(u as u16).to_be_bytes());
    } else if u <= 0xffff_ffff {
        out.push(0xce);
        out.extend_from_slice(&(u as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&u.to_be_bytes());
    }
}

fn intf_of(v: &Value) -> Intf {
    match v {
        Value::Float(f) => Intf::F64(*f),
        Value::Int(i) => Intf::I64(*i),
        Value::Uint(u) => Intf::U64(*u),
        Value::Str(s) => Intf::Str(s.clone()),
        Value::Bool(b) => Intf::Bool(*b),
    }
}

/// `groups.go`'s `group`: columns in the order they were first seen.
struct Group {
    name: String,
    rows: usize,
    columns: Vec<(String, Vec<Intf>)>,
}

impl Group {
    fn column(&mut self, key: &str) -> &mut Vec<Intf> {
        let i = match self.columns.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                // Backfill column with nil for previous rows.
                self.columns
                    .push((key.to_string(), vec![Intf::Nil; self.rows]));
                self.columns.len() - 1
            }
        };
        &mut self.columns[i].1
    }

    fn add(&mut self, m: &Metric) {
        let mut set: Vec<String> = Vec::new();
        for (k, v) in &m.fields {
            self.column(k).push(intf_of(v));
            set.push(k.clone());
        }
        for (k, v) in &m.tags {
            self.column(k).push(Intf::Str(v.clone()));
            set.push(k.clone());
        }
        // `time` has no backfill: every row appends to it.
        match self.columns.iter().position(|(k, _)| k == "time") {
            Some(i) => self.columns[i]
                .1
                .push(Intf::I64(m.time_ns.div_euclid(1_000_000))),
            None => self.columns.push((
                "time".into(),
                vec![Intf::I64(m.time_ns.div_euclid(1_000_000))],
            )),
        }
        set.push("time".into());
        for (k, values) in &mut self.columns {
            if !set.contains(k) {
                values.push(Intf::Nil);
            }
        }
        self.rows += 1;
    }
}

/// The MessagePack body `outputs.arc` builds for `metrics` (before gzip). Odd groups
/// put `columns` before `m`, and `time` is moved first in them: orders Go's map
/// iteration produces too.
pub fn arc_msgpack(metrics: &[Metric]) -> Vec<u8> {
    let mut groups: Vec<Group> = Vec::new();
    for m in metrics {
        let i = match groups.iter().position(|g| g.name == m.name) {
            Some(i) => i,
            None => {
                groups.push(Group {
                    name: m.name.clone(),
                    rows: 0,
                    columns: Vec::new(),
                });
                groups.len() - 1
            }
        };
        groups[i].add(m);
    }
    let messages: Vec<Intf> = groups
        .into_iter()
        .enumerate()
        .map(|(i, mut g)| {
            for (k, v) in &g.columns {
                assert_eq!(v.len(), g.rows, "column {k:?}: Telegraf drops such a group");
            }
            if i % 2 == 1 {
                g.columns.sort_by_key(|(k, _)| k != "time");
                let columns = Intf::Map(
                    g.columns
                        .into_iter()
                        .map(|(k, v)| (k, Intf::Array(v)))
                        .collect(),
                );
                Intf::Map(vec![
                    ("columns".into(), columns),
                    ("m".into(), Intf::Str(g.name)),
                ])
            } else {
                let columns = Intf::Map(
                    g.columns
                        .into_iter()
                        .map(|(k, v)| (k, Intf::Array(v)))
                        .collect(),
                );
                Intf::Map(vec![
                    ("m".into(), Intf::Str(g.name)),
                    ("columns".into(), columns),
                ])
            }
        })
        .collect();
    let data = match messages.len() {
        1 => messages.into_iter().next().unwrap_or(Intf::Nil),
        _ => Intf::Array(messages),
    };
    let mut out = Vec::new();
    write_intf(&mut out, &data);
    out
}

/// Go's `compress/gzip` header at the default level.
pub const GO_GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0x00, 0xff];

/// A gzip member with Go's header (see the module documentation).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::GzBuilder::new()
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    let out = e.finish().expect("gzip");
    assert_eq!(out[..10], GO_GZIP_HEADER);
    out
}

/// `outputs.arc`'s headers: `Content-Type`, `User-Agent`, `x-api-key`,
/// `x-arc-database`, `Content-Encoding` when gzipping (Go adds `Accept-Encoding`).
pub fn arc_headers(api_key: &str, database: &str, gzip: bool) -> Vec<(String, String)> {
    let mut h = vec![
        (
            "Content-Type".to_string(),
            "application/msgpack".to_string(),
        ),
        ("User-Agent".into(), USER_AGENT.into()),
        ("x-api-key".into(), api_key.into()),
        ("x-arc-database".into(), database.into()),
    ];
    if gzip {
        h.push(("Content-Encoding".into(), "gzip".into()));
    }
    h.push(("Accept-Encoding".into(), "gzip".into()));
    h
}

/// `internal.ProductToken()` of a release build.
pub const USER_AGENT: &str = "Telegraf/1.37.0 Go/1.25.1";

const ESCAPES: &[(char, &str)] = &[
    ('\t', "\\t"),
    ('\n', "\\n"),
    ('\x0c', "\\f"),
    ('\r', "\\r"),
    (',', "\\,"),
    (' ', "\\ "),
    ('=', "\\="),
];

fn escape(s: &str, set: &[(char, &str)]) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match set.iter().find(|(e, _)| *e == c) {
            Some((_, r)) => out.push_str(r),
            None => out.push(c),
        }
    }
    out
}

/// The influx serializer's line for one metric (`influx.go`, `escape.go`), or `None`
/// when no field survives (Telegraf skips the metric).
pub fn influx_line(m: &Metric, uint_support: bool) -> Option<String> {
    let mut line = escape(&m.name, &ESCAPES[..6]);
    for (k, v) in &m.tags {
        let k = escape(k, ESCAPES);
        let v = escape(v, ESCAPES);
        let (k, v) = (k.trim_end_matches('\\'), v.trim_end_matches('\\'));
        if k.is_empty() || v.is_empty() {
            continue;
        }
        line.push_str(&format!(",{k}={v}"));
    }
    line.push(' ');
    let mut pairs = Vec::new();
    for (k, v) in &m.fields {
        let value = match v {
            Value::Uint(u) if uint_support => format!("{u}u"),
            Value::Uint(u) => format!("{}i", (*u).min(i64::MAX as u64)),
            Value::Int(i) => format!("{i}i"),
            Value::Float(f) if !f.is_finite() => continue,
            // Go's strconv.FormatFloat(f, 'f', -1, 64) and Rust's Display agree: the
            // shortest digits that read back, never an exponent.
            Value::Float(f) => format!("{f}"),
            Value::Str(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            Value::Bool(b) => b.to_string(),
        };
        pairs.push(format!("{}={value}", escape(k, ESCAPES)));
    }
    if pairs.is_empty() {
        return None;
    }
    line.push_str(&pairs.join(","));
    line.push_str(&format!(" {}\n", m.time_ns));
    Some(line)
}

/// The influxdb_v2 body for `metrics` (before gzip).
pub fn influx_v2_body(metrics: &[Metric]) -> Vec<u8> {
    metrics
        .iter()
        .filter_map(|m| influx_line(m, false))
        .collect::<String>()
        .into_bytes()
}

/// `outputs.influxdb_v2`'s path and query (`url.Values.Encode` sorts the keys).
pub fn influx_v2_path(bucket: &str, org: &str) -> String {
    format!("/api/v2/write?bucket={bucket}&org={org}")
}

/// `outputs.influxdb_v2`'s headers.
pub fn influx_v2_headers(token: &str, gzip: bool) -> Vec<(String, String)> {
    let mut h = Vec::new();
    if gzip {
        h.push(("Content-Encoding".to_string(), "gzip".to_string()));
    }
    h.push(("Content-Type".into(), "text/plain; charset=utf-8".into()));
    h.push(("Authorization".into(), format!("Token {token}")));
    h.push(("User-Agent".into(), USER_AGENT.into()));
    h.push(("Accept-Encoding".into(), "gzip".into()));
    h
}

/// What Telegraf does with a batch after one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Accepted: the metrics leave the buffer.
    Delivered,
    /// Rejected for good: the metrics leave the buffer, logged with `reason`.
    Dropped { reason: String },
    /// Kept in the buffer and sent again; `after` is the wait influxdb_v2 imposes.
    Retry { after: Duration },
    /// influxdb_v2 only: split the batch in two and send each half.
    Split,
}

/// `outputs.arc`: any status outside 200..300 is an error, so the batch is kept.
pub fn arc_verdict(status: u16) -> Verdict {
    if (200..300).contains(&status) {
        Verdict::Delivered
    } else {
        Verdict::Retry {
            after: Duration::ZERO,
        }
    }
}

/// The JSON error body influxdb_v2 decodes (`genericRespError`) as Telegraf prints it.
fn influx_description(body: &str) -> String {
    let doc: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let field = |k: &str| {
        doc.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    format!("{}: {}", field("code"), field("message"))
}

/// `outputs.influxdb_v2`'s `writeBatch` switch; `retries` is its retry counter after
/// this answer.
pub fn influx_v2_verdict(
    status: u16,
    retry_after: Option<&str>,
    body: &str,
    retries: u32,
) -> Verdict {
    match status {
        200 | 201 | 202 | 204 | 206 | 207 | 208 => Verdict::Delivered,
        413 => Verdict::Split,
        400 | 406 | 422 => Verdict::Dropped {
            reason: influx_description(body),
        },
        401 | 403 => Verdict::Retry {
            after: Duration::ZERO,
        },
        429 | 502 | 503 | 504 => {
            let backoff = (f64::from(retries).powi(2) / 40.0).min(60.0);
            let header = retry_after
                .map(|h| h.parse::<f64>().unwrap_or(10.0).min(600.0))
                .unwrap_or(0.0);
            Verdict::Retry {
                after: Duration::from_millis((backoff.max(header) * 1000.0) as u64),
            }
        }
        400..=499 => Verdict::Dropped {
            reason: influx_description(body),
        },
        _ => Verdict::Retry {
            after: Duration::ZERO,
        },
    }
}
