//! Properties of the line-protocol parser: random points written with a small serializer
//! parse back to exactly the same values, types, tags and times; arbitrary bytes never
//! panic and keep the line accounting straight; one garbage line costs only itself.

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt64Type,
};
use proptest::prelude::*;
use quiver_storage::{LpOutput, Precision, WriteLimits};

const NOW: i64 = 1_700_000_000_000_000_000;

/// Parses with the default limits, which these small bodies never reach.
fn parse_line_protocol(body: &[u8], precision: Precision, now_ns: i64) -> LpOutput {
    quiver_storage::parse_line_protocol(body, precision, now_ns, &WriteLimits::default())
        .expect("small bodies stay within the limits")
}

/// One value as the test sees it; floats by bit pattern so `-0.0` and `0.0` differ.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Tag(String),
    Float(u64),
    Integer(i64),
    UInteger(u64),
    Boolean(bool),
    String(String),
}

#[derive(Debug, Clone)]
struct Point {
    measurement: String,
    tags: BTreeMap<String, String>,
    /// Field value and, for booleans, the spelling to write.
    fields: BTreeMap<String, (Cell, &'static str)>,
    time: Option<i64>,
}

const TRUE_SPELLINGS: [&str; 5] = ["t", "T", "true", "True", "TRUE"];
const FALSE_SPELLINGS: [&str; 5] = ["f", "F", "false", "False", "FALSE"];

/// Name characters, heavy on the ones that need escaping.
fn name_suffix() -> impl Strategy<Value = String> {
    "[a-z0-9 ,=\\\\\"#é日\t._-]{0,6}"
}

fn measurement() -> impl Strategy<Value = String> {
    ("[a-zA-Z]", "[a-z0-9 ,=\"#é日._-]{0,6}").prop_map(|(a, b)| a + &b)
}

fn tag_value() -> impl Strategy<Value = String> {
    "[a-z0-9 ,=\\\\\"#é日\t]{1,6}"
}

fn string_value(newlines: bool) -> BoxedStrategy<String> {
    if newlines {
        "[a-z \",=\\\\\n\r\té日]{0,10}".boxed()
    } else {
        "[a-z \",=\\\\\té日]{0,10}".boxed()
    }
}

fn field(newlines: bool) -> impl Strategy<Value = (String, (Cell, &'static str))> {
    let value = prop_oneof![
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| (Cell::Float(v.to_bits()), "")),
        any::<i64>().prop_map(|v| (Cell::Integer(v), "")),
        any::<u64>().prop_map(|v| (Cell::UInteger(v), "")),
        (any::<bool>(), 0..5usize).prop_map(|(v, i)| {
            let spelling = if v {
                TRUE_SPELLINGS[i]
            } else {
                FALSE_SPELLINGS[i]
            };
            (Cell::Boolean(v), spelling)
        }),
        string_value(newlines).prop_map(|v| (Cell::String(v), "")),
    ];
    (value, name_suffix()).prop_map(|((cell, spelling), suffix)| {
        // The name carries the type, so one name never has two types in a body.
        let kind = match cell {
            Cell::Float(_) => "F",
            Cell::Integer(_) => "I",
            Cell::UInteger(_) => "U",
            Cell::Boolean(_) => "B",
            _ => "S",
        };
        (format!("f{kind}{suffix}"), (cell, spelling))
    })
}

fn points(newlines: bool) -> impl Strategy<Value = Vec<Point>> {
    let point = move |names: Vec<String>| {
        (
            0..names.len(),
            proptest::collection::btree_map(
                name_suffix().prop_map(|s| format!("t{s}")),
                tag_value(),
                0..4,
            ),
            proptest::collection::vec(field(newlines), 1..5),
            proptest::option::of(any::<i64>()),
        )
            .prop_map(move |(m, tags, fields, time)| Point {
                measurement: names[m].clone(),
                tags: tags.into_iter().filter(|(k, _)| k != "time").collect(),
                fields: fields.into_iter().collect(),
                time,
            })
    };
    proptest::collection::vec(measurement(), 1..4)
        .prop_flat_map(move |names| proptest::collection::vec(point(names), 1..25))
}

fn escape(s: &str, specials: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if specials.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

const MEASUREMENT_SPECIALS: &[char] = &[',', ' ', '\\'];
const KEY_SPECIALS: &[char] = &[',', '=', ' ', '\\'];
const STRING_SPECIALS: &[char] = &['"', '\\'];

fn serialize(p: &Point) -> String {
    let mut line = escape(&p.measurement, MEASUREMENT_SPECIALS);
    for (k, v) in &p.tags {
        line.push(',');
        line.push_str(&escape(k, KEY_SPECIALS));
        line.push('=');
        line.push_str(&escape(v, KEY_SPECIALS));
    }
    line.push(' ');
    for (i, (k, (cell, spelling))) in p.fields.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line.push_str(&escape(k, KEY_SPECIALS));
        line.push('=');
        match cell {
            Cell::Float(bits) => line.push_str(&format!("{:?}", f64::from_bits(*bits))),
            Cell::Integer(v) => line.push_str(&format!("{v}i")),
            Cell::UInteger(v) => line.push_str(&format!("{v}u")),
            Cell::Boolean(_) => line.push_str(spelling),
            Cell::String(s) => {
                line.push('"');
                line.push_str(&escape(s, STRING_SPECIALS));
                line.push('"');
            }
            Cell::Tag(_) => unreachable!("tags are not fields"),
        }
    }
    if let Some(t) = p.time {
        line.push_str(&format!(" {t}"));
    }
    line
}

fn cell(column: &ArrayRef, row: usize) -> Option<Cell> {
    if column.is_null(row) {
        return None;
    }
    Some(match column.data_type() {
        DataType::Dictionary(_, _) => {
            let dict = column.as_dictionary::<Int32Type>();
            let values = dict.values().as_string::<i32>();
            Cell::Tag(values.value(dict.keys().value(row) as usize).to_string())
        }
        DataType::Float64 => Cell::Float(column.as_primitive::<Float64Type>().value(row).to_bits()),
        DataType::Int64 => Cell::Integer(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt64 => Cell::UInteger(column.as_primitive::<UInt64Type>().value(row)),
        DataType::Boolean => Cell::Boolean(column.as_boolean().value(row)),
        DataType::Utf8 => Cell::String(column.as_string::<i32>().value(row).to_string()),
        other => panic!("unexpected column type {other}"),
    })
}

/// A batch back as (time, non-null cells by column name) per row.
fn rows_of(batch: &RecordBatch) -> Vec<(i64, BTreeMap<String, Cell>)> {
    let schema = batch.schema();
    let time = batch
        .column_by_name("time")
        .unwrap()
        .as_primitive::<TimestampNanosecondType>();
    (0..batch.num_rows())
        .map(|row| {
            let cells = schema
                .fields()
                .iter()
                .zip(batch.columns())
                .filter(|(f, _)| f.name() != "time")
                .filter_map(|(f, c)| cell(c, row).map(|v| (f.name().clone(), v)))
                .collect();
            (time.value(row), cells)
        })
        .collect()
}

fn expected_rows(p: &Point) -> (i64, BTreeMap<String, Cell>) {
    let mut cells: BTreeMap<String, Cell> = p
        .tags
        .iter()
        .map(|(k, v)| (k.clone(), Cell::Tag(v.clone())))
        .collect();
    cells.extend(p.fields.iter().map(|(k, (c, _))| (k.clone(), c.clone())));
    (p.time.unwrap_or(NOW), cells)
}

fn rows_total(out: &LpOutput) -> usize {
    out.tables.iter().map(|t| t.batch.num_rows()).sum()
}

/// Lines that are wrong whatever surrounds them (and hold no quote, which could pair
/// with a quote on a later line and make one record of both).
const GARBAGE: &[&str] = &[
    "m",
    "m ",
    "m v=1.2.3",
    "m,t=a,t=b v=1",
    "m v=1 12x",
    "m time=1",
    "m v=NaN",
    ",t=a v=1",
    "m v=1i9",
    "m v=99999999999999999999i",
    "m =1",
    "m v=1 1 1",
    "m/x v=1",
    "m v=tru",
    "m,t= v=1",
    "m v=-1u",
    "m v=1,v=2",
    "\\ v=1\\",
    "m v=1\t1",
    "m v=inf",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn points_round_trip_exactly(points in points(true)) {
        let body = points.iter().map(serialize).collect::<Vec<_>>().join("\n");
        let out = parse_line_protocol(body.as_bytes(), Precision::Nanoseconds, NOW);
        prop_assert!(out.rejected.is_empty(), "{:?}\n{}", out.rejected, body);
        prop_assert_eq!(out.lines_total, points.len());
        let mut order: Vec<&str> = Vec::new();
        for p in &points {
            if !order.contains(&p.measurement.as_str()) {
                order.push(&p.measurement);
            }
        }
        let got_order: Vec<&str> = out.tables.iter().map(|t| t.measurement.as_str()).collect();
        prop_assert_eq!(&got_order, &order);
        for table in &out.tables {
            let want: Vec<_> = points
                .iter()
                .filter(|p| p.measurement == table.measurement)
                .map(expected_rows)
                .collect();
            prop_assert_eq!(rows_of(&table.batch), want, "{}", body);
        }
    }

    #[test]
    fn crlf_endings_and_comments_change_nothing(points in points(false)) {
        let plain = points.iter().map(serialize).collect::<Vec<_>>().join("\n");
        let decorated = points
            .iter()
            .map(|p| format!("# before\r\n  {}  \r\n\r\n", serialize(p)))
            .collect::<String>();
        let a = parse_line_protocol(plain.as_bytes(), Precision::Nanoseconds, NOW);
        let b = parse_line_protocol(decorated.as_bytes(), Precision::Nanoseconds, NOW);
        prop_assert!(b.rejected.is_empty(), "{:?}", b.rejected);
        prop_assert_eq!(a.lines_total, b.lines_total);
        prop_assert_eq!(a.tables.len(), b.tables.len());
        for (ta, tb) in a.tables.iter().zip(&b.tables) {
            prop_assert_eq!(&ta.measurement, &tb.measurement);
            prop_assert_eq!(rows_of(&ta.batch), rows_of(&tb.batch));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            "[a-z0-9 ,=\\\\\"#\n\r\t.iuTFe+-]{0,300}".prop_map(String::into_bytes),
        ],
        precision in prop_oneof![
            Just(Precision::Nanoseconds),
            Just(Precision::Microseconds),
            Just(Precision::Milliseconds),
            Just(Precision::Seconds),
            Just(Precision::Auto),
        ],
    ) {
        let out = parse_line_protocol(&bytes, precision, NOW);
        prop_assert_eq!(rows_total(&out) + out.rejected.len(), out.lines_total);
        prop_assert!(out.tables.iter().all(|t| t.batch.num_rows() > 0));
        let physical_lines = bytes.iter().filter(|&&c| c == b'\n').count() + 1;
        let mut last = 0;
        for e in &out.rejected {
            prop_assert!(e.line > last && e.line <= physical_lines, "{:?}", out.rejected);
            prop_assert!(e.text.len() <= 64);
            last = e.line;
        }
    }

    #[test]
    fn one_garbage_line_rejects_exactly_that_line(
        points in points(false),
        garbage in 0..GARBAGE.len(),
        at in any::<prop::sample::Index>(),
    ) {
        let mut lines: Vec<String> = points.iter().map(serialize).collect();
        let at = at.index(lines.len() + 1);
        lines.insert(at, GARBAGE[garbage].to_string());
        let body = lines.join("\n");
        let out = parse_line_protocol(body.as_bytes(), Precision::Nanoseconds, NOW);
        prop_assert_eq!(out.rejected.len(), 1, "{:?}\n{}", out.rejected, body);
        prop_assert_eq!(out.rejected[0].line, at + 1);
        prop_assert_eq!(rows_total(&out), points.len());
        prop_assert_eq!(out.lines_total, points.len() + 1);
    }
}
