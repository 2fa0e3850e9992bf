use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt64Type,
};

use super::{parse_line_protocol, LineError, LpOutput, Precision};
use crate::limits::WriteLimits;

const NOW: i64 = 1_700_000_000_000_000_000;

fn parse(body: &str) -> LpOutput {
    parse_line_protocol(
        body.as_bytes(),
        Precision::Nanoseconds,
        NOW,
        &WriteLimits::default(),
    )
    .unwrap()
}

/// Parses a body that must be entirely valid and holds one measurement.
fn one(body: &str) -> RecordBatch {
    let out = parse(body);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert_eq!(out.tables.len(), 1, "{:?}", out.tables);
    out.tables[0].batch.clone()
}

/// The single rejection of a body with one bad line.
fn rejected(body: &str) -> LineError {
    let out = parse(body);
    assert_eq!(out.rejected.len(), 1, "{body:?}: {:?}", out.rejected);
    out.rejected[0].clone()
}

fn tag(batch: &RecordBatch, name: &str, row: usize) -> String {
    let col = batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name:?} in {:?}", batch.schema()));
    let dict = col.as_dictionary::<Int32Type>();
    let values = dict.values().as_string::<i32>();
    values.value(dict.keys().value(row) as usize).to_string()
}

fn float(batch: &RecordBatch, name: &str, row: usize) -> f64 {
    batch
        .column_by_name(name)
        .unwrap()
        .as_primitive::<Float64Type>()
        .value(row)
}

fn string(batch: &RecordBatch, name: &str, row: usize) -> String {
    batch
        .column_by_name(name)
        .unwrap()
        .as_string::<i32>()
        .value(row)
        .to_string()
}

fn times(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column_by_name("time")
        .unwrap()
        .as_primitive::<TimestampNanosecondType>()
        .values()
        .to_vec()
}

fn names(batch: &RecordBatch) -> Vec<String> {
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

#[test]
fn a_full_line_becomes_one_row() {
    let b = one("cpu,host=a,region=eu usage=1.5,count=3i,big=7u,ok=t,msg=\"hi\" 1234");
    assert_eq!(
        names(&b),
        ["time", "host", "region", "big", "count", "msg", "ok", "usage"]
    );
    assert_eq!(times(&b), [1234]);
    assert_eq!(tag(&b, "host", 0), "a");
    assert_eq!(tag(&b, "region", 0), "eu");
    assert_eq!(float(&b, "usage", 0), 1.5);
    let count = b.column_by_name("count").unwrap();
    assert_eq!(count.as_primitive::<Int64Type>().value(0), 3);
    let big = b.column_by_name("big").unwrap();
    assert_eq!(big.as_primitive::<UInt64Type>().value(0), 7);
    assert!(b.column_by_name("ok").unwrap().as_boolean().value(0));
    assert_eq!(string(&b, "msg", 0), "hi");
}

#[test]
fn one_and_one_i_are_different_types() {
    let b = one("m a=1,b=1i,c=1u");
    assert_eq!(
        b.column_by_name("a").unwrap().data_type(),
        &DataType::Float64
    );
    assert_eq!(b.column_by_name("b").unwrap().data_type(), &DataType::Int64);
    assert_eq!(
        b.column_by_name("c").unwrap().data_type(),
        &DataType::UInt64
    );
}

#[test]
fn measurement_escapes() {
    let out = parse("we\\,ather\\ now f=1\nwe=ather f=1\nm\\=x f=1\n");
    let names: Vec<&str> = out.tables.iter().map(|t| t.measurement.as_str()).collect();
    // `=` needs no escape in a measurement, so `\=` keeps its backslash, which measurement
    // names may not contain.
    assert_eq!(names, ["we,ather now", "we=ather"]);
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].line, 3);
    assert!(
        out.rejected[0].error.contains("measurement name"),
        "{:?}",
        out.rejected
    );
}

#[test]
fn measurement_escaped_backslash_is_unescaped_then_refused_by_the_name_rules() {
    let e = rejected("a\\\\b f=1");
    assert!(e.error.contains("a\\\\b"), "{e:?}");
}

#[test]
fn tag_key_and_value_escapes() {
    let b = one("m,k\\,1\\=x\\ y=v\\,1\\=x\\ y\\\\z f=1");
    assert_eq!(names(&b)[1], "k,1=x y");
    assert_eq!(tag(&b, "k,1=x y", 0), "v,1=x y\\z");
}

#[test]
fn field_key_escapes() {
    let b = one("m f\\,1\\=x\\ y\\\\=1i");
    assert_eq!(names(&b)[1], "f,1=x y\\");
}

#[test]
fn unknown_escapes_keep_the_backslash() {
    let b = one("m,t\\a=v\\b f\\c=1");
    assert_eq!(names(&b), ["time", "t\\a", "f\\c"]);
    assert_eq!(tag(&b, "t\\a", 0), "v\\b");
}

#[test]
fn equals_sign_is_allowed_unescaped_in_tag_values() {
    let b = one("m,t=a=b f=1");
    assert_eq!(tag(&b, "t", 0), "a=b");
}

#[test]
fn string_escapes() {
    let b = one(r#"m a="say \"hi\"",b="back\\slash",c="lone\back",d="",e="spaces, commas=ok""#);
    assert_eq!(string(&b, "a", 0), "say \"hi\"");
    assert_eq!(string(&b, "b", 0), "back\\slash");
    assert_eq!(string(&b, "c", 0), "lone\\back");
    assert_eq!(string(&b, "d", 0), "");
    assert_eq!(string(&b, "e", 0), "spaces, commas=ok");
}

#[test]
fn string_ending_in_an_escaped_backslash_closes() {
    let b = one(r#"m a="x\\",b=1"#);
    assert_eq!(string(&b, "a", 0), "x\\");
    assert_eq!(float(&b, "b", 0), 1.0);
}

#[test]
fn newlines_inside_strings_continue_the_record() {
    let out = parse("m s=\"one\ntwo\" 5\nm s=\"three\" 6\nbad\n");
    assert_eq!(out.lines_total, 3);
    let b = &out.tables[0].batch;
    assert_eq!(string(b, "s", 0), "one\ntwo");
    assert_eq!(string(b, "s", 1), "three");
    assert_eq!(times(b), [5, 6]);
    // The line numbers after a multi-line record are physical line numbers.
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].line, 4);
}

#[test]
fn unterminated_string_costs_only_its_own_line() {
    let out = parse("m f=1\nm s=\"open\nm f=2\nm f=3\n");
    assert_eq!(out.lines_total, 4);
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].line, 2);
    assert!(
        out.rejected[0]
            .error
            .contains("field \"s\": unterminated string"),
        "{:?}",
        out.rejected
    );
    assert_eq!(out.rejected[0].text, "m s=\"open");
    assert_eq!(out.tables[0].batch.num_rows(), 3);
}

#[test]
fn a_stray_quote_that_pairs_with_a_later_line_names_the_span() {
    let out = parse("m s=\"open\nm s=\"x\" 1\nm f=3\n");
    assert_eq!(out.rejected.len(), 1, "{:?}", out.rejected);
    assert_eq!(out.rejected[0].line, 1);
    assert!(
        out.rejected[0].error.contains("lines 1-2"),
        "{:?}",
        out.rejected
    );
    assert_eq!(out.tables[0].batch.num_rows(), 1);
    assert_eq!(out.lines_total, 2);
}

#[test]
fn every_boolean_spelling() {
    for (spelling, want) in [
        ("t", true),
        ("T", true),
        ("true", true),
        ("True", true),
        ("TRUE", true),
        ("f", false),
        ("F", false),
        ("false", false),
        ("False", false),
        ("FALSE", false),
    ] {
        let b = one(&format!("m v={spelling}"));
        let v = b.column_by_name("v").unwrap().as_boolean();
        assert_eq!(v.value(0), want, "{spelling}");
    }
    for bad in ["tRUE", "tru", "fals", "FaLsE", "t1"] {
        let e = rejected(&format!("m v={bad}"));
        assert!(e.error.contains("invalid boolean"), "{bad}: {e:?}");
    }
}

#[test]
fn float_spellings() {
    for (spelling, want) in [
        ("1", 1.0f64),
        ("-1.5", -1.5),
        ("1.5e10", 1.5e10),
        ("-1.5E-3", -1.5e-3),
        ("1e+2", 100.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("-0", -0.0),
        ("0.1", 0.1),
    ] {
        let b = one(&format!("m v={spelling}"));
        assert_eq!(float(&b, "v", 0).to_bits(), want.to_bits(), "{spelling}");
    }
    for bad in [
        "1.2.3", "NaN", "nan", "inf", "-inf", "Infinity", "+1", "1e", "1e+", ".", "-", "1x",
        "0x10", "1_000", "e5", "1 .5",
    ] {
        let e = rejected(&format!("m v={bad} 1"));
        assert!(
            e.error.starts_with("field \"v\": invalid float")
                || e.error.contains("unexpected")
                || e.error.contains("timestamp"),
            "{bad}: {e:?}"
        );
    }
    let e = rejected("m usage=1.2.3");
    assert_eq!(e.error, "field \"usage\": invalid float \"1.2.3\"");
    assert_eq!(
        e.to_string(),
        "line 1: field \"usage\": invalid float \"1.2.3\""
    );
}

#[test]
fn float_overflow_is_refused_not_infinity() {
    let e = rejected("m v=1e400");
    assert_eq!(e.error, "field \"v\": float \"1e400\" out of range");
    let b = one("m v=1e-400");
    assert_eq!(float(&b, "v", 0), 0.0);
}

#[test]
fn integer_range() {
    let b = one("m a=9223372036854775807i,b=-9223372036854775808i,c=18446744073709551615u,d=0u");
    let a = b.column_by_name("a").unwrap().as_primitive::<Int64Type>();
    assert_eq!(a.value(0), i64::MAX);
    let bb = b.column_by_name("b").unwrap().as_primitive::<Int64Type>();
    assert_eq!(bb.value(0), i64::MIN);
    let c = b.column_by_name("c").unwrap().as_primitive::<UInt64Type>();
    assert_eq!(c.value(0), u64::MAX);

    let e = rejected("m big=9223372036854775808i");
    assert_eq!(
        e.error,
        "field \"big\": integer \"9223372036854775808i\" out of range"
    );
    let e = rejected("m small=-9223372036854775809i");
    assert!(
        e.error.contains("\"small\"") && e.error.contains("out of range"),
        "{e:?}"
    );
    let e = rejected("m u=18446744073709551616u");
    assert!(
        e.error.contains("\"u\"") && e.error.contains("out of range"),
        "{e:?}"
    );
    let e = rejected("m u=-1u");
    assert!(e.error.contains("negative"), "{e:?}");
    for bad in ["1.5i", "i", "-i", "+1i", "1ii", "u", "1.0u", "0x1u"] {
        let e = rejected(&format!("m v={bad}"));
        assert!(e.error.contains("invalid"), "{bad}: {e:?}");
    }
}

#[test]
fn timestamps_scale_by_precision() {
    let body = b"m v=1 1700000000\n";
    let cases = [
        (Precision::Seconds, 1_700_000_000_000_000_000),
        (Precision::Milliseconds, 1_700_000_000_000_000),
        (Precision::Microseconds, 1_700_000_000_000),
        (Precision::Nanoseconds, 1_700_000_000),
        (Precision::Auto, 1_700_000_000_000_000_000),
    ];
    for (precision, want) in cases {
        let out = parse_line_protocol(body, precision, NOW, &WriteLimits::default()).unwrap();
        assert_eq!(times(&out.tables[0].batch), [want], "{precision:?}");
    }
}

#[test]
fn auto_precision_decides_per_line() {
    let body = b"m v=1 1700000000\nm v=2 1700000000123\nm v=3 1700000000123456\nm v=4 1700000000123456789\n";
    let out = parse_line_protocol(body, Precision::Auto, NOW, &WriteLimits::default()).unwrap();
    assert_eq!(
        times(&out.tables[0].batch),
        [
            1_700_000_000_000_000_000,
            1_700_000_000_123_000_000,
            1_700_000_000_123_456_000,
            1_700_000_000_123_456_789
        ]
    );
}

#[test]
fn timestamp_overflow_is_rejected_not_wrapped() {
    let out = parse_line_protocol(
        b"m v=1 9300000000\nm v=2 1\n",
        Precision::Seconds,
        NOW,
        &WriteLimits::default(),
    )
    .unwrap();
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].line, 1);
    assert_eq!(
        out.rejected[0].error,
        "timestamp 9300000000 out of range for precision s"
    );
    assert_eq!(times(&out.tables[0].batch), [1_000_000_000]);
}

#[test]
fn missing_timestamp_is_server_time_and_negative_timestamps_are_fine() {
    let b = one("m v=1\nm v=2 -5\nm v=3 \n");
    assert_eq!(times(&b), [NOW, -5, NOW]);
}

#[test]
fn crlf_comments_blank_lines_and_whitespace() {
    let body = "# header\r\n\r\n  \t\n  # indented comment\ncpu v=1 1\r\n  cpu  v=2  2  \r\ncpu v=3\t\r\n\n";
    let out = parse(body);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert_eq!(out.lines_total, 3);
    assert_eq!(times(&out.tables[0].batch), [1, 2, NOW]);
}

#[test]
fn line_numbers_count_comments_and_blank_lines() {
    let out = parse("# c\n\nm v=1\nm v=\n\n# c\nm v=x\r\nm v=2");
    let lines: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
    assert_eq!(lines, [4, 7]);
    assert_eq!(out.lines_total, 4);
    assert_eq!(out.rejected[0].error, "field \"v\": missing value");
    assert_eq!(out.rejected[1].text, "m v=x");
}

#[test]
fn structural_errors_name_the_problem() {
    let cases: &[(&str, &str)] = &[
        ("m", "missing fields after measurement \"m\""),
        ("m 123", "field \"123\": missing '=' and value"),
        ("m,t=a", "missing fields after measurement \"m\""),
        ("m,t=a  ", "missing fields after measurement \"m\""),
        (",t=a f=1", "missing measurement"),
        ("m, f=1", "empty tag key"),
        ("m,=a f=1", "empty tag key"),
        ("m,t f=1", "tag \"t\": missing '=' and value"),
        ("m,t= f=1", "tag \"t\": empty value"),
        ("m,t=a,t=b f=1", "duplicate tag key \"t\""),
        ("m f=1,f=2", "duplicate field key \"f\""),
        ("m,x=a x=1", "tag and field both named \"x\""),
        (
            "m time=1",
            "field \"time\": \"time\" is the timestamp column",
        ),
        (
            "m,time=a f=1",
            "tag \"time\": \"time\" is the timestamp column",
        ),
        ("m =1", "empty field key"),
        ("m f=1,", "empty field key"),
        ("m f=1,,g=2", "empty field key"),
        ("m f", "field \"f\": missing '=' and value"),
        ("m f=", "field \"f\": missing value"),
        ("m f=1 123 456", "unexpected \"456\" after the timestamp"),
        ("m f=1 123x", "invalid timestamp \"123x\""),
        ("m f=1 12.5", "invalid timestamp \"12.5\""),
        (
            "m f=1 99999999999999999999",
            "timestamp \"99999999999999999999\" out of range",
        ),
        ("m f=\"a\"x", "unexpected \"x\" after field \"f\""),
        ("m f=1\t2", "unexpected \"\\t2\" after field \"f\""),
        ("m f=\"abc", "field \"f\": unterminated string"),
        ("m/x f=1", "measurement name \"m/x\""),
        ("m\\ f=1", "missing fields after measurement \"m f=1\""),
    ];
    for (body, want) in cases {
        let e = rejected(body);
        assert_eq!(e.line, 1);
        assert!(
            e.error.contains(want),
            "{body:?}: got {:?}, want {want:?}",
            e.error
        );
    }
}

#[test]
fn type_conflict_with_an_earlier_line_names_the_column() {
    let out = parse("cpu usage=1.5\ncpu usage=2i\ncpu usage=2.5\nmem usage=2i\n");
    assert_eq!(out.rejected.len(), 1);
    let e = &out.rejected[0];
    assert_eq!(e.line, 2);
    assert!(
        e.error.contains("\"usage\"") && e.error.contains("float"),
        "{e:?}"
    );
    assert_eq!(out.tables.len(), 2);
    assert_eq!(out.tables[0].batch.num_rows(), 2);
    // Types are per measurement: `mem` may have an integer `usage`.
    assert_eq!(out.tables[1].measurement, "mem");
}

#[test]
fn tag_then_field_of_the_same_name_across_lines_is_a_conflict() {
    let out = parse("m,x=a f=1\nm x=1\n");
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].line, 2);
    assert!(
        out.rejected[0].error.contains("\"x\""),
        "{:?}",
        out.rejected
    );
}

#[test]
fn invalid_utf8_rejects_only_its_line() {
    let mut body =
        b"m v=1\nm,t=\xff\xfe v=2\n# comment \xff\nm v=3\nm s=\"caf\xc3\xa9\" 4\nm v=\xe2\x82 5"
            .to_vec();
    body.extend_from_slice(b"\nm v=6");
    let out =
        parse_line_protocol(&body, Precision::Nanoseconds, NOW, &WriteLimits::default()).unwrap();
    let lines: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 6], "{:?}", out.rejected);
    assert_eq!(out.rejected[0].error, "invalid UTF-8 at byte 4 of the line");
    assert_eq!(out.rejected[0].text, "m,t=\u{fffd}\u{fffd} v=2");
    assert_eq!(out.lines_total, 6);
    let b = &out.tables[0].batch;
    assert_eq!(b.num_rows(), 4);
    assert_eq!(string(b, "s", 2), "café");
}

#[test]
fn a_string_cut_by_an_invalid_utf8_line_is_unterminated() {
    let body = b"m s=\"a\nb\xff\nc\" 1\nm v=1\n";
    let out =
        parse_line_protocol(body, Precision::Nanoseconds, NOW, &WriteLimits::default()).unwrap();
    let lines: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 2, 3], "{:?}", out.rejected);
    assert_eq!(out.tables[0].batch.num_rows(), 1);
}

#[test]
fn excerpt_is_cut_on_a_char_boundary() {
    let line = format!("m v={}", "é".repeat(40));
    let e = rejected(&line);
    assert!(e.text.len() <= 64 && e.text.len() >= 63, "{}", e.text.len());
    assert!(line.starts_with(&e.text));
}

#[test]
fn measurements_keep_first_seen_order_and_skip_fully_rejected_ones() {
    let out = parse("b v=1\nbad v=x\na v=1\nb v=2\n");
    let names: Vec<&str> = out.tables.iter().map(|t| t.measurement.as_str()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(out.tables[0].batch.num_rows(), 2);
}

#[test]
fn sparse_columns_are_null_not_zero() {
    let b = one("m,h=a x=1\nm y=2i\n");
    assert!(b.column_by_name("x").unwrap().is_null(1));
    assert!(b.column_by_name("y").unwrap().is_null(0));
    assert!(b.column_by_name("h").unwrap().is_null(1));
}

#[test]
fn wide_lines_check_duplicates_too() {
    let mut line = String::from("m");
    for i in 0..40 {
        line.push_str(&format!(",t{i}=v"));
    }
    line.push_str(" f0=1");
    for i in 1..40 {
        line.push_str(&format!(",f{i}=1"));
    }
    assert_eq!(one(&line).num_columns(), 81);
    let e = rejected(&format!("{line},f7=2"));
    assert_eq!(e.error, "duplicate field key \"f7\"");
    let e = rejected(&line.replace("f3=1", "t3=1"));
    assert_eq!(e.error, "tag and field both named \"t3\"");
    let e = rejected(&line.replace(",t5=v", ",t4=v"));
    assert_eq!(e.error, "duplicate tag key \"t4\"");
}

#[test]
fn too_many_columns_in_one_line_is_refused() {
    let mut line = String::from("m f0=1");
    for i in 1..=super::LINE_COLUMNS_MAX {
        line.push_str(&format!(",f{i}=1"));
    }
    let e = rejected(&line);
    assert!(e.error.contains("more than 1024"), "{e:?}");
}

#[test]
fn empty_and_blank_bodies_have_no_lines() {
    for body in ["", "\n", "\r\n", "# only\n", "   \n\t\n"] {
        let out = parse(body);
        assert_eq!(out.lines_total, 0, "{body:?}");
        assert!(out.tables.is_empty() && out.rejected.is_empty());
    }
}

#[test]
fn backslash_at_the_end_of_a_line_does_not_join_lines() {
    let out = parse("m,t=a\\\nm v=1\n");
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].line, 1);
    assert_eq!(out.tables[0].batch.num_rows(), 1);
}

#[test]
fn stored_types_decide_which_lines_conflict() {
    let stored = crate::schema::MeasurementSchema::default()
        .merge(
            "m",
            &crate::schema::canonical_schema([
                ("host", crate::schema::ColumnKind::Tag),
                (
                    "v",
                    crate::schema::ColumnKind::Field(crate::schema::FieldType::Float),
                ),
            ]),
        )
        .unwrap()
        .unwrap();
    let lookup = |m: &str| (m == "m").then(|| stored.clone());
    // The first line has the wrong type: it alone is refused, the float lines are kept.
    let body = "m,host=a v=1i 1\nm,host=a v=2.5 2\nm host=\"x\" 3\nother v=1i 4";
    let out = super::parse_line_protocol_for(
        body.as_bytes(),
        Precision::Nanoseconds,
        NOW,
        &WriteLimits::default(),
        &lookup,
    )
    .unwrap();
    let lines: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 3], "{:?}", out.rejected);
    assert!(out.rejected[0].error.contains("\"v\"") && out.rejected[0].error.contains("float"));
    assert!(out.rejected[1].error.contains("\"host\""));
    assert_eq!(out.tables.len(), 2);
    assert_eq!(out.tables[0].lines, [2]);
    assert_eq!(out.tables[1].lines, [4]);
}

fn parse_with(body: &str, limits: &WriteLimits) -> crate::error::Result<LpOutput> {
    parse_line_protocol(body.as_bytes(), Precision::Nanoseconds, NOW, limits)
}

fn limit_of(result: crate::error::Result<LpOutput>) -> &'static str {
    match result {
        Err(crate::error::Error::LimitExceeded { limit, .. }) => limit,
        Err(e) => panic!("not a limit: {e}"),
        Ok(out) => panic!("accepted: {:?}", out.rejected),
    }
}

#[test]
fn lines_past_the_column_cap_are_rejected_one_by_one() {
    let limits = WriteLimits {
        columns_per_table_max: 4,
        ..WriteLimits::default()
    };
    // time + a, b, c is 4 columns; d would be the fifth. Other measurements are apart.
    let body = "m a=1,b=2,c=3 1\nm d=4 2\nm a=5 3\nn,t=x d=1 4\nm,c=x a=1 5\nm c=7 6\n";
    let out = parse_with(body, &limits).unwrap();
    let lines: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 5], "{:?}", out.rejected);
    let e = &out.rejected[0];
    assert!(
        e.error.contains("\"d\"") && e.error.contains("columns_per_table_max"),
        "{e:?}"
    );
    // `c` as a tag conflicts (it is a field) before it could widen anything.
    assert!(
        out.rejected[1].error.contains("\"c\""),
        "{:?}",
        out.rejected
    );
    assert_eq!(out.tables[0].lines, [1, 3, 6]);
    assert_eq!(out.tables[0].batch.num_columns(), 4);
    assert_eq!(out.tables[1].measurement, "n");
}

#[test]
fn stored_columns_count_towards_the_cap() {
    let stored = crate::schema::MeasurementSchema::default()
        .merge(
            "m",
            &crate::schema::canonical_schema([
                (
                    "a",
                    crate::schema::ColumnKind::Field(crate::schema::FieldType::Float),
                ),
                (
                    "b",
                    crate::schema::ColumnKind::Field(crate::schema::FieldType::Float),
                ),
            ]),
        )
        .unwrap()
        .unwrap();
    let lookup = |m: &str| (m == "m").then(|| stored.clone());
    let limits = WriteLimits {
        columns_per_table_max: 4,
        ..WriteLimits::default()
    };
    let body = "m c=1 1\nm d=1 2\nm a=1,b=2,c=3 3\n";
    let out = super::parse_line_protocol_for(
        body.as_bytes(),
        Precision::Nanoseconds,
        NOW,
        &limits,
        &lookup,
    )
    .unwrap();
    let lines: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2], "{:?}", out.rejected);
    assert!(
        out.rejected[0].error.contains("5 columns"),
        "{:?}",
        out.rejected
    );
}

#[test]
fn too_many_measurements_refuse_the_body() {
    let limits = WriteLimits {
        measurements_per_write_max: 3,
        ..WriteLimits::default()
    };
    let ok = parse_with("a v=1\nb v=1\nc v=1\na v=2\n", &limits).unwrap();
    assert_eq!(ok.tables.len(), 3);
    let err = parse_with("a v=1\nb v=1\nc v=1\nd v=1\n", &limits).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("measurements_per_write_max = 3") && message.contains("\"d\""),
        "{message}"
    );
    // A line whose name is invalid opens no table and does not count.
    let ok = parse_with("a v=1\nb v=1\nc v=1\n.. v=1\n", &limits).unwrap();
    assert_eq!(ok.rejected.len(), 1);
}

#[test]
fn too_many_files_refuse_the_body_and_say_to_split_by_time() {
    const HOUR: i64 = 3_600_000_000_000;
    let limits = WriteLimits {
        write_files_max: 3,
        ..WriteLimits::default()
    };
    let body: String = (0..30)
        .map(|i| format!("m v={i} {}\n", (i % 3) * HOUR + i))
        .collect();
    assert_eq!(parse_with(&body, &limits).unwrap().rejected.len(), 0);
    // A rejected line's hour does not count.
    let with_bad = format!("{body}m v=oops {}\n", 7 * HOUR);
    assert_eq!(parse_with(&with_bad, &limits).unwrap().rejected.len(), 1);
    let over = format!("{body}other v=1 {}\n", -HOUR);
    let err = parse_with(&over, &limits).unwrap_err().to_string();
    assert!(
        err.contains("write_files_max = 3") && err.contains("split them by time"),
        "{err}"
    );
    // Lines without a timestamp share the server's hour.
    assert!(parse_with("m v=1\nm v=2\nm v=3\n", &limits).is_ok());
}

#[test]
fn a_backfill_of_history_counts_a_file_per_day_not_per_hour() {
    const HOUR: i64 = 3_600_000_000_000;
    // 200 days of hourly rows: 4,800 hours, 246 files (198 days, and 2 x 24 hours of
    // the newest two days), within the default limit of 400; a body the old hour limit
    // (168) refused.
    let body: String = (0..200 * 24)
        .map(|i| format!("m v={i} {}\n", i64::from(i) * HOUR))
        .collect();
    let out = parse_with(&body, &WriteLimits::default()).unwrap();
    assert_eq!(out.tables[0].batch.num_rows(), 4_800);
    let tight = WriteLimits {
        write_files_max: 245,
        ..WriteLimits::default()
    };
    let err = parse_with(&body, &tight).unwrap_err().to_string();
    assert!(err.contains("would make 246 Parquet files"), "{err}");
}

#[test]
fn a_body_decoding_past_the_byte_limit_is_refused() {
    let limits = WriteLimits {
        write_decoded_bytes_max: 64 * 1024,
        ..WriteLimits::default()
    };
    let dense: String = (0..1_000).map(|i| format!("m v={i} {i}\n")).collect();
    assert!(parse_with(&dense, &limits).is_ok());
    let heavy: String = (0..10_000).map(|i| format!("m v={i} {i}\n")).collect();
    assert_eq!(
        limit_of(parse_with(&heavy, &limits)),
        "write_decoded_bytes_max"
    );
}

#[test]
fn hundred_thousand_lines_each_adding_a_field_are_refused_without_padding() {
    // The body of the bug: every line brings a new field. With the default cap, the
    // first 499 lines fill the table (time + 499 fields) and the rest are refused one
    // by one, naming the limit.
    let body: String = (0..100_000).map(|i| format!("m f{i}=1 {i}\n")).collect();
    let out = parse_with(&body, &WriteLimits::default()).unwrap();
    assert_eq!(out.tables[0].batch.num_rows(), 499);
    assert_eq!(out.tables[0].batch.num_columns(), 500);
    assert_eq!(out.rejected.len(), 100_000 - 499);
    assert!(out
        .rejected
        .iter()
        .all(|e| e.error.contains("columns_per_table_max")));
    // With the cap lifted, the padded size is what refuses it, long before the end.
    let wide = WriteLimits {
        columns_per_table_max: usize::MAX,
        ..WriteLimits::default()
    };
    assert_eq!(
        limit_of(parse_with(&body, &wide)),
        "write_decoded_bytes_max"
    );
}

#[test]
fn the_report_of_rejected_lines_counts_towards_the_byte_limit() {
    // Two bytes of garbage a line cost about a hundred bytes of report each: a body of
    // nothing but bad lines is bounded by the same byte limit as decoded rows.
    let limits = WriteLimits {
        write_decoded_bytes_max: 64 * 1024,
        ..WriteLimits::default()
    };
    let few = "x\n".repeat(100);
    assert_eq!(parse_with(&few, &limits).unwrap().rejected.len(), 100);
    let many = "x\n".repeat(10_000);
    assert_eq!(
        limit_of(parse_with(&many, &limits)),
        "write_decoded_bytes_max"
    );
    let invalid_utf8 = b"\xff\n".repeat(10_000);
    let result = parse_line_protocol(&invalid_utf8, Precision::Nanoseconds, NOW, &limits);
    assert_eq!(limit_of(result), "write_decoded_bytes_max");
}
