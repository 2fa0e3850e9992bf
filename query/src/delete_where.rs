//! The `where` of `POST /api/v1/delete`, parsed into a [`DeletePredicate`]: `AND` of
//! conditions on `time` (`<`, `<=`, `>`, `>=`, `=`, `BETWEEN`, with RFC 3339 strings or
//! integer nanoseconds) and on tags (`=`, `!=`, `<>`, `IN`, `NOT IN`, with string
//! literals). Anything else is refused naming the part, so a delete never removes more
//! (or less) than its text says.

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, UnaryOperator, Value};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;
use quiver_storage::lifecycle::{DeletePredicate, TagCondition, TagOp};
use quiver_storage::{TimestampNs, TIME_COLUMN};

/// Longest `where` accepted, in bytes.
pub const DELETE_WHERE_BYTES_MAX: usize = 64 * 1024;
/// Most values one `IN` list may hold.
const IN_VALUES_MAX: usize = 10_000;

/// Parses `text` for a measurement whose tags are `tags` and fields `fields`.
/// The error names the part that is not allowed.
pub fn parse_delete_where(
    text: &str,
    tags: &[String],
    fields: &[String],
) -> Result<DeletePredicate, String> {
    if text.len() > DELETE_WHERE_BYTES_MAX {
        return Err(format!(
            "the predicate is longer than {DELETE_WHERE_BYTES_MAX} bytes"
        ));
    }
    let mut predicate = DeletePredicate::default();
    if text.trim().is_empty() {
        return Ok(predicate);
    }
    let mut parser = Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .map_err(|e| format!("the predicate does not parse: {e}"))?;
    let expr = parser
        .parse_expr()
        .map_err(|e| format!("the predicate does not parse: {e}"))?;
    // The expression must be the whole text: `a = 'x' b = 'y'` (a missing AND) parses
    // as `a = 'x'` followed by leftovers, and deleting by the first part alone would
    // delete more than the text says.
    let rest = parser.peek_token();
    if rest.token != Token::EOF {
        let at = rest.span.start;
        return Err(format!(
            "unexpected `{}` at line {}, column {}: the predicate must be one condition or \
             conditions joined by AND",
            rest.token, at.line, at.column
        ));
    }
    let context = Context { tags, fields };
    context.add(&expr, &mut predicate)?;
    Ok(predicate)
}

struct Context<'a> {
    tags: &'a [String],
    fields: &'a [String],
}

enum Column {
    Time,
    Tag(String),
}

impl Context<'_> {
    fn add(&self, expr: &Expr, out: &mut DeletePredicate) -> Result<(), String> {
        match expr {
            Expr::Nested(inner) => self.add(inner, out),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                self.add(left, out)?;
                self.add(right, out)
            }
            Expr::BinaryOp { left, op, right } => self.comparison(expr, left, op, right, out),
            Expr::InList {
                expr: column,
                list,
                negated,
            } => {
                let Column::Tag(tag) = self.column(column)? else {
                    return Err(format!(
                        "`{expr}`: time takes comparisons and BETWEEN, not IN"
                    ));
                };
                if list.len() > IN_VALUES_MAX {
                    return Err(format!("`IN` lists at most {IN_VALUES_MAX} values"));
                }
                let values = list
                    .iter()
                    .map(|v| string_value(v).ok_or_else(|| not_a_string(expr, v)))
                    .collect::<Result<Vec<_>, _>>()?;
                out.tags.push(TagCondition {
                    tag,
                    op: if *negated { TagOp::NotIn } else { TagOp::In },
                    values,
                });
                Ok(())
            }
            Expr::Between {
                expr: column,
                negated: false,
                low,
                high,
            } => match self.column(column)? {
                Column::Time => {
                    let low = timestamp_value(low).ok_or_else(|| not_a_time(expr, low))?;
                    let high = timestamp_value(high).ok_or_else(|| not_a_time(expr, high))?;
                    narrow_from(out, low);
                    narrow_before(out, high.saturating_add(1));
                    Ok(())
                }
                Column::Tag(_) => Err(format!("`{expr}`: BETWEEN is for time only")),
            },
            other => Err(format!(
                "`{other}` is not allowed in a delete predicate: use AND of time ranges and tag =, !=, IN"
            )),
        }
    }

    fn comparison(
        &self,
        whole: &Expr,
        left: &Expr,
        op: &BinaryOperator,
        right: &Expr,
        out: &mut DeletePredicate,
    ) -> Result<(), String> {
        if !matches!(
            op,
            BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq
        ) {
            return Err(format!(
                "`{whole}`: {op} is not allowed in a delete predicate: use AND of time ranges and tag =, !=, IN"
            ));
        }
        // `'a' = host` reads as `host = 'a'`.
        let (column, op, value) = if is_column(left) {
            (left, op.clone(), right)
        } else if is_column(right) {
            let flipped = match op {
                BinaryOperator::Lt => BinaryOperator::Gt,
                BinaryOperator::LtEq => BinaryOperator::GtEq,
                BinaryOperator::Gt => BinaryOperator::Lt,
                BinaryOperator::GtEq => BinaryOperator::LtEq,
                other => other.clone(),
            };
            (right, flipped, left)
        } else {
            return Err(format!("`{whole}` compares no column"));
        };
        match self.column(column)? {
            Column::Time => {
                let t = timestamp_value(value).ok_or_else(|| not_a_time(whole, value))?;
                match op {
                    BinaryOperator::Lt => narrow_before(out, t),
                    BinaryOperator::LtEq => narrow_before(out, t.saturating_add(1)),
                    BinaryOperator::Gt => narrow_from(out, t.saturating_add(1)),
                    BinaryOperator::GtEq => narrow_from(out, t),
                    BinaryOperator::Eq => {
                        narrow_from(out, t);
                        narrow_before(out, t.saturating_add(1));
                    }
                    other => {
                        return Err(format!(
                            "`{whole}`: time takes <, <=, >, >=, = or BETWEEN, not {other}"
                        ))
                    }
                }
                Ok(())
            }
            Column::Tag(tag) => {
                let op = match op {
                    BinaryOperator::Eq => TagOp::Eq,
                    BinaryOperator::NotEq => TagOp::NotEq,
                    other => {
                        return Err(format!("`{whole}`: a tag takes =, != or IN, not {other}"))
                    }
                };
                let v = string_value(value).ok_or_else(|| not_a_string(whole, value))?;
                out.tags.push(TagCondition {
                    tag,
                    op,
                    values: vec![v],
                });
                Ok(())
            }
        }
    }

    fn column(&self, expr: &Expr) -> Result<Column, String> {
        let name = match expr {
            Expr::Identifier(ident) => ident.value.clone(),
            Expr::Nested(inner) => return self.column(inner),
            other => return Err(format!("`{other}` is not a column")),
        };
        if name == TIME_COLUMN {
            return Ok(Column::Time);
        }
        if self.tags.contains(&name) {
            return Ok(Column::Tag(name));
        }
        if self.fields.contains(&name) {
            return Err(format!(
                "`{name}` is a field: a delete predicate may name only time and tags"
            ));
        }
        Err(format!("the measurement has no tag `{name}`"))
    }
}

fn is_column(expr: &Expr) -> bool {
    match expr {
        Expr::Identifier(_) => true,
        Expr::Nested(inner) => is_column(inner),
        _ => false,
    }
}

fn narrow_from(out: &mut DeletePredicate, t: i64) {
    out.time_from = Some(TimestampNs(out.time_from.map_or(t, |f| f.0.max(t))));
}

fn narrow_before(out: &mut DeletePredicate, t: i64) {
    out.time_before = Some(TimestampNs(out.time_before.map_or(t, |b| b.0.min(t))));
}

fn not_a_time(whole: &Expr, value: &Expr) -> String {
    format!(
        "`{whole}`: `{value}` is not a time (use an RFC 3339 string like '2026-01-02T00:00:00Z', a date, or integer nanoseconds)"
    )
}

fn not_a_string(whole: &Expr, value: &Expr) -> String {
    format!("`{whole}`: `{value}` is not a string literal")
}

fn string_value(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        Expr::Nested(inner) => string_value(inner),
        _ => None,
    }
}

/// Nanoseconds since the epoch from an RFC 3339 string, `YYYY-MM-DD[ HH:MM:SS[.f]]`
/// (UTC), or an integer of nanoseconds.
fn timestamp_value(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => parse_time(s),
            Value::Number(n, _) => n.to_string().parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => timestamp_value(expr).and_then(i64::checked_neg),
        Expr::Nested(inner) => timestamp_value(inner),
        _ => None,
    }
}

fn parse_time(s: &str) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return t.timestamp_nanos_opt();
    }
    for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            return t.and_utc().timestamp_nanos_opt();
        }
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|t| t.and_utc().timestamp_nanos_opt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags() -> Vec<String> {
        vec!["host".into(), "region".into()]
    }

    fn parse(text: &str) -> Result<DeletePredicate, String> {
        parse_delete_where(text, &tags(), &["usage".to_string()])
    }

    const DAY2: i64 = 1_767_312_000_000_000_000; // 2026-01-02T00:00:00Z

    #[test]
    fn the_documented_example_parses() {
        let p = parse("host = 'a' AND time < '2026-01-02T00:00:00Z'").unwrap();
        assert_eq!(p.time_before, Some(TimestampNs(DAY2)));
        assert_eq!(p.time_from, None);
        assert_eq!(
            p.tags,
            vec![TagCondition {
                tag: "host".into(),
                op: TagOp::Eq,
                values: vec!["a".into()]
            }]
        );
    }

    #[test]
    fn time_bounds_intersect_and_sides_flip() {
        let p = parse(
            "time >= '2026-01-01' AND '2026-01-02T00:00:00Z' > time AND time <= 2000000000000000000",
        )
        .unwrap();
        assert_eq!(p.time_from, Some(TimestampNs(DAY2 - 86_400_000_000_000)));
        assert_eq!(p.time_before, Some(TimestampNs(DAY2)));
        let p =
            parse("time BETWEEN 10 AND 20 AND (region IN ('eu', 'us')) AND host != 'x'").unwrap();
        assert_eq!(
            (p.time_from, p.time_before),
            (Some(TimestampNs(10)), Some(TimestampNs(21)))
        );
        assert_eq!(p.tags[0].op, TagOp::In);
        assert_eq!(p.tags[1].op, TagOp::NotEq);
        let p = parse("host NOT IN ('a') AND time = 5").unwrap();
        assert_eq!(p.tags[0].op, TagOp::NotIn);
        assert_eq!(
            (p.time_from, p.time_before),
            (Some(TimestampNs(5)), Some(TimestampNs(6)))
        );
        assert_eq!(parse("").unwrap(), DeletePredicate::default());
    }

    #[test]
    fn everything_else_is_refused_naming_the_part() {
        for (text, named) in [
            ("host = 'a' OR host = 'b'", "OR"),
            ("usage > 3", "is a field"),
            ("colour = 'red'", "no tag `colour`"),
            ("host > 'a'", "a tag takes"),
            ("host = 3", "not a string"),
            ("time < 'yesterday'", "not a time"),
            ("time IN (1, 2)", "not IN"),
            ("NOT host = 'a'", "not allowed"),
            ("host LIKE 'a%'", "not allowed"),
            ("1 = 1", "compares no column"),
            ("host = ", "does not parse"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(named), "{text}: {e}");
        }
    }

    /// Regressions: text the grammar does not wholly consume was deleted by its first
    /// part (all 30 `eu` rows for the first, every `host = 'a'` row for the second).
    #[test]
    fn leftovers_after_the_predicate_are_refused_naming_where() {
        for (text, at) in [
            ("region = 'eu' host = 'a'", "`host` at line 1, column 15"),
            ("host = 'a', region = 'us'", "`,` at line 1, column 11"),
            (
                "region = 'eu' AND host = 'a' garbage",
                "`garbage` at line 1, column 30",
            ),
            ("time < 5)", "`)` at line 1, column 9"),
            ("host = 'a'; DROP TABLE x", "`;`"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(at), "{text}: {e}");
        }
    }

    use proptest::prelude::*;

    /// One condition of a valid predicate.
    fn condition() -> impl Strategy<Value = String> {
        prop_oneof![
            ("(host|region)", "[a-z]{1,4}").prop_map(|(t, v)| format!("{t} = '{v}'")),
            ("(host|region)", "[a-z]{1,4}").prop_map(|(t, v)| format!("{t} != '{v}'")),
            (
                "(host|region)",
                proptest::collection::vec("[a-z]{1,3}", 1..3)
            )
                .prop_map(|(t, vs)| {
                    let list: Vec<String> = vs.iter().map(|v| format!("'{v}'")).collect();
                    format!("{t} IN ({})", list.join(", "))
                }),
            (0i64..1_000_000).prop_map(|t| format!("time < {t}")),
            (0i64..1_000_000).prop_map(|t| format!("time >= {t}")),
        ]
    }

    /// Text that cannot continue a predicate: words, another condition without AND,
    /// punctuation.
    fn junk() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}".prop_filter("AND joins conditions", |w| w != "and"),
            condition(),
            condition().prop_map(|c| format!(", {c}")),
            Just(";".to_string()),
            Just(")".to_string()),
            Just("'x'".to_string()),
            Just("42".to_string()),
        ]
    }

    proptest! {
        /// A valid predicate with junk appended, or with junk in place of one of its
        /// ANDs, is refused: never read as a shorter (broader) predicate.
        #[test]
        fn junk_appended_or_inserted_is_refused(
            conditions in proptest::collection::vec(condition(), 1..4),
            junk in junk(),
            at in any::<proptest::sample::Index>(),
        ) {
            let valid = conditions.join(" AND ");
            prop_assert!(parse(&valid).is_ok(), "{}", valid);
            let appended = format!("{valid} {junk}");
            prop_assert!(parse(&appended).is_err(), "{}", appended);
            if conditions.len() > 1 {
                let gap = at.index(conditions.len() - 1);
                let mut text = String::new();
                for (i, c) in conditions.iter().enumerate() {
                    text.push_str(c);
                    if i == gap {
                        text.push_str(&format!(" {junk} "));
                    } else if i + 1 < conditions.len() {
                        text.push_str(" AND ");
                    }
                }
                prop_assert!(parse(&text).is_err(), "{}", text);
            }
        }
    }
}
