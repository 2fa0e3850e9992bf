//! Time-range pruning: which Parquet files can hold rows a query's filters accept.
//!
//! Every file covers one hour of data and the catalog knows its smallest and largest
//! `time`. From the filters DataFusion pushes into the scan we derive an inclusive
//! `[min, max]` bound on `time` that every accepted row satisfies, and skip the files
//! outside it. The bound only ever over-approximates: an expression we do not understand
//! bounds nothing, so a file is skipped only when no row in it can match. Row groups and
//! pages inside the surviving files are pruned later by the Parquet reader's statistics.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

/// Name of the time column in every measurement.
pub(crate) const TIME_COLUMN: &str = "time";

const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// An inclusive range of nanosecond timestamps; empty when `min_ns > max_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeRange {
    /// Smallest time that can match, inclusive.
    pub(crate) min_ns: i64,
    /// Largest time that can match, inclusive.
    pub(crate) max_ns: i64,
}

impl TimeRange {
    /// The range that excludes nothing.
    pub(crate) const ALL: TimeRange = TimeRange {
        min_ns: i64::MIN,
        max_ns: i64::MAX,
    };

    /// The bound implied by all `filters` together (they are ANDed by DataFusion).
    pub(crate) fn from_filters(filters: &[Expr]) -> TimeRange {
        filters
            .iter()
            .fold(TimeRange::ALL, |acc, f| acc.intersect(range_of(f)))
    }

    /// True when no timestamp satisfies the range.
    pub(crate) fn is_empty(self) -> bool {
        self.min_ns > self.max_ns
    }

    /// True when every timestamp in `[min_ns, max_ns]` (inclusive) is in this range.
    pub(crate) fn contains(self, min_ns: i64, max_ns: i64) -> bool {
        debug_assert!(min_ns <= max_ns, "a span from {min_ns} to {max_ns}");
        self.min_ns <= min_ns && max_ns <= self.max_ns
    }

    /// True when some timestamp in `[min_ns, max_ns]` (inclusive) is in this range.
    #[cfg(test)]
    pub(crate) fn overlaps(self, min_ns: i64, max_ns: i64) -> bool {
        !self.is_empty() && min_ns <= self.max_ns && max_ns >= self.min_ns
    }

    pub(crate) fn intersect(self, other: TimeRange) -> TimeRange {
        TimeRange {
            min_ns: self.min_ns.max(other.min_ns),
            max_ns: self.max_ns.min(other.max_ns),
        }
    }

    /// The smallest range holding both (for OR).
    fn hull(self, other: TimeRange) -> TimeRange {
        if self.is_empty() {
            return other;
        }
        if other.is_empty() {
            return self;
        }
        TimeRange {
            min_ns: self.min_ns.min(other.min_ns),
            max_ns: self.max_ns.max(other.max_ns),
        }
    }
}

/// The times for which `expr` is true, when that set is exactly one range: `time`
/// itself (no cast) compared with a timestamp literal (no cast), and ANDs and BETWEENs
/// of those. `None` for anything else, including expressions that only bound `time`
/// approximately (casts to coarser units, ORs), since a caller drops the expression for
/// files wholly inside the range. `time` is never null, so there is no third value.
pub(crate) fn exact_range(expr: &Expr) -> Option<TimeRange> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => Some(exact_range(left)?.intersect(exact_range(right)?)),
            _ => exact_comparison(left, *op, right),
        },
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => Some(
            exact_comparison(expr, Operator::GtEq, low)?.intersect(exact_comparison(
                expr,
                Operator::LtEq,
                high,
            )?),
        ),
        _ => None,
    }
}

/// `time <op> literal` (either side) with neither side cast, as the exact range of
/// times it accepts.
fn exact_comparison(left: &Expr, op: Operator, right: &Expr) -> Option<TimeRange> {
    let is_time = |e: &Expr| matches!(e, Expr::Column(c) if c.name == TIME_COLUMN);
    // Timestamps of any unit convert to nanoseconds without loss; dates do not compare
    // with `time` without a cast.
    let is_timestamp = |e: &Expr| matches!(e, Expr::Literal(value, _) if matches!(value.data_type(), DataType::Timestamp(..)));
    let exact = (is_time(left) && is_timestamp(right)) || (is_timestamp(left) && is_time(right));
    if !exact {
        return None;
    }
    comparison(left, op, right)
}

/// The bound one boolean expression puts on `time`.
fn range_of(expr: &Expr) -> TimeRange {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => range_of(left).intersect(range_of(right)),
            Operator::Or => range_of(left).hull(range_of(right)),
            _ => comparison(left, *op, right).unwrap_or(TimeRange::ALL),
        },
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let low = comparison(expr, Operator::GtEq, low).unwrap_or(TimeRange::ALL);
            let high = comparison(expr, Operator::LtEq, high).unwrap_or(TimeRange::ALL);
            low.intersect(high)
        }
        Expr::InList(list) if !list.negated => list
            .list
            .iter()
            .map(|value| comparison(&list.expr, Operator::Eq, value))
            .try_fold(
                TimeRange {
                    min_ns: 1,
                    max_ns: 0,
                },
                |acc, r| r.map(|r| acc.hull(r)),
            )
            .unwrap_or(TimeRange::ALL),
        _ => TimeRange::ALL,
    }
}

/// `time <op> literal` (either side), or `None` when the expression is anything else.
fn comparison(left: &Expr, op: Operator, right: &Expr) -> Option<TimeRange> {
    let (column_slack_ns, value_ns, value_slack_ns, op) =
        match (time_column(left), literal_ns(right)) {
            (Some(slack), Some((value, value_slack))) => (slack, value, value_slack, op),
            _ => {
                let slack = time_column(right)?;
                let (value, value_slack) = literal_ns(left)?;
                (slack, value, value_slack, op.swap()?)
            }
        };
    // When either side was truncated to a coarser unit than nanoseconds, the comparison
    // is not exact on `time` itself: widen the bound by that unit so it stays safe.
    let slack = column_slack_ns.max(value_slack_ns);
    let range = match op {
        Operator::Eq => TimeRange {
            min_ns: value_ns.saturating_sub(slack),
            max_ns: value_ns.saturating_add(slack),
        },
        Operator::Lt if slack == 0 => TimeRange {
            min_ns: i64::MIN,
            max_ns: value_ns.checked_sub(1)?,
        },
        Operator::Lt | Operator::LtEq => TimeRange {
            min_ns: i64::MIN,
            max_ns: value_ns.saturating_add(slack),
        },
        Operator::Gt if slack == 0 => TimeRange {
            min_ns: value_ns.checked_add(1)?,
            max_ns: i64::MAX,
        },
        Operator::Gt | Operator::GtEq => TimeRange {
            min_ns: value_ns.saturating_sub(slack),
            max_ns: i64::MAX,
        },
        _ => return None,
    };
    Some(range)
}

/// If `expr` is the time column, possibly cast to another timestamp or date type, the
/// granularity that cast truncates to (0 when it keeps nanoseconds).
fn time_column(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Column(column) if column.name == TIME_COLUMN => Some(0),
        Expr::Cast(cast) => {
            let inner = time_column(&cast.expr)?;
            Some(inner.max(granularity_ns(cast.field.data_type())?))
        }
        Expr::TryCast(cast) => {
            let inner = time_column(&cast.expr)?;
            Some(inner.max(granularity_ns(cast.field.data_type())?))
        }
        _ => None,
    }
}

/// Nanoseconds per unit of a timestamp-like type (time zones do not move the instant).
fn granularity_ns(data_type: &DataType) -> Option<i64> {
    match data_type {
        DataType::Timestamp(unit, _) => Some(match unit {
            TimeUnit::Nanosecond => 0,
            TimeUnit::Microsecond => 1_000,
            TimeUnit::Millisecond => 1_000_000,
            TimeUnit::Second => 1_000_000_000,
        }),
        DataType::Date32 | DataType::Date64 => Some(NANOS_PER_DAY),
        _ => None,
    }
}

/// A timestamp or date literal as (nanoseconds since the epoch, unit slack in ns).
fn literal_ns(expr: &Expr) -> Option<(i64, i64)> {
    let value = match expr {
        Expr::Literal(value, _) => value,
        Expr::Cast(cast) => return literal_ns(&cast.expr),
        _ => return None,
    };
    match value {
        ScalarValue::TimestampNanosecond(Some(v), _) => Some((*v, 0)),
        ScalarValue::TimestampMicrosecond(Some(v), _) => Some((v.checked_mul(1_000)?, 0)),
        ScalarValue::TimestampMillisecond(Some(v), _) => Some((v.checked_mul(1_000_000)?, 0)),
        ScalarValue::TimestampSecond(Some(v), _) => Some((v.checked_mul(1_000_000_000)?, 0)),
        ScalarValue::Date32(Some(days)) => {
            Some((i64::from(*days).checked_mul(NANOS_PER_DAY)?, NANOS_PER_DAY))
        }
        ScalarValue::Date64(Some(ms)) => Some((ms.checked_mul(1_000_000)?, NANOS_PER_DAY)),
        _ => None,
    }
}

/// How a table answers DataFusion's filter pushdown: `Exact` for a plain bound on
/// `time` (the scan filters by it only where a file or buffered row reaches outside),
/// `Inexact` for everything else (DataFusion keeps its filter and hands it to the
/// Parquet reader). Local and remote tables answer alike, so the same scan is planned
/// wherever it runs.
pub(crate) fn pushdown(
    filters: &[&datafusion::logical_expr::Expr],
) -> Vec<datafusion::logical_expr::TableProviderFilterPushDown> {
    use datafusion::logical_expr::TableProviderFilterPushDown;
    filters
        .iter()
        .map(|f| match exact_range(f) {
            Some(_) => TableProviderFilterPushDown::Exact,
            None => TableProviderFilterPushDown::Inexact,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    fn ts(v: i64) -> Expr {
        lit(ScalarValue::TimestampNanosecond(Some(v), None))
    }

    #[test]
    fn comparisons_bound_time_exactly() {
        let r = TimeRange::from_filters(&[col("time").gt_eq(ts(10)), col("time").lt(ts(20))]);
        assert_eq!(
            r,
            TimeRange {
                min_ns: 10,
                max_ns: 19
            }
        );
        let r = TimeRange::from_filters(&[ts(10).lt(col("time"))]);
        assert_eq!(
            r,
            TimeRange {
                min_ns: 11,
                max_ns: i64::MAX
            }
        );
        let r = TimeRange::from_filters(&[col("time").eq(ts(7))]);
        assert_eq!(
            r,
            TimeRange {
                min_ns: 7,
                max_ns: 7
            }
        );
    }

    #[test]
    fn between_and_or_combine() {
        let between = col("time").between(ts(5), ts(9));
        assert_eq!(
            TimeRange::from_filters(&[between]),
            TimeRange {
                min_ns: 5,
                max_ns: 9
            }
        );
        let either = col("time").lt(ts(3)).or(col("time").gt(ts(100)));
        assert_eq!(TimeRange::from_filters(&[either]), TimeRange::ALL);
        let both = col("time").eq(ts(3)).or(col("time").eq(ts(8)));
        assert_eq!(
            TimeRange::from_filters(&[both]),
            TimeRange {
                min_ns: 3,
                max_ns: 8
            }
        );
    }

    #[test]
    fn unknown_expressions_bound_nothing() {
        let on_other_column = col("usage").gt(lit(1.0));
        assert_eq!(TimeRange::from_filters(&[on_other_column]), TimeRange::ALL);
        let or_with_unknown = col("time").eq(ts(3)).or(col("host").eq(lit("a")));
        assert_eq!(TimeRange::from_filters(&[or_with_unknown]), TimeRange::ALL);
        let not_between = col("time").not_between(ts(5), ts(9));
        assert_eq!(TimeRange::from_filters(&[not_between]), TimeRange::ALL);
    }

    #[test]
    fn exact_ranges_only_for_plain_comparisons() {
        let both = col("time").gt_eq(ts(10)).and(col("time").lt(ts(20)));
        assert_eq!(
            exact_range(&both),
            Some(TimeRange {
                min_ns: 10,
                max_ns: 19
            })
        );
        assert_eq!(
            exact_range(&col("time").between(ts(5), ts(9))),
            Some(TimeRange {
                min_ns: 5,
                max_ns: 9
            })
        );
        assert_eq!(
            exact_range(&ts(10).lt(col("time"))),
            Some(TimeRange {
                min_ns: 11,
                max_ns: i64::MAX
            })
        );
        // Over-approximations and other columns are not exact.
        let either = col("time").lt(ts(3)).or(col("time").gt(ts(100)));
        assert_eq!(exact_range(&either), None);
        assert_eq!(exact_range(&col("time").not_eq(ts(3))), None);
        assert_eq!(exact_range(&col("time").not_between(ts(5), ts(9))), None);
        assert_eq!(exact_range(&col("usage").gt(lit(1.0))), None);
        let mixed = col("time").gt(ts(1)).and(col("host").eq(lit("a")));
        assert_eq!(exact_range(&mixed), None);
        let to_date = Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(col("time")),
            DataType::Date32,
        ));
        assert_eq!(
            exact_range(&to_date.eq(lit(ScalarValue::Date32(Some(1))))),
            None
        );
        let cast_literal = Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(lit("2024-01-01T00:00:00Z")),
            DataType::Timestamp(TimeUnit::Nanosecond, None),
        ));
        assert_eq!(exact_range(&col("time").gt(cast_literal)), None);
    }

    #[test]
    fn a_range_contains_spans_inside_it_edges_included() {
        let r = TimeRange {
            min_ns: 10,
            max_ns: 19,
        };
        assert!(r.contains(10, 19));
        assert!(r.contains(12, 12));
        assert!(!r.contains(9, 12));
        assert!(!r.contains(12, 20));
        assert!(TimeRange::ALL.contains(i64::MIN, i64::MAX));
    }

    #[test]
    fn contradictions_are_empty() {
        let r = TimeRange::from_filters(&[col("time").gt(ts(10)), col("time").lt(ts(5))]);
        assert!(r.is_empty());
        assert!(!r.overlaps(i64::MIN, i64::MAX));
    }

    #[test]
    fn casts_to_coarser_units_widen_the_bound() {
        let to_date = Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(col("time")),
            DataType::Date32,
        ));
        let r = TimeRange::from_filters(&[to_date.eq(lit(ScalarValue::Date32(Some(1))))]);
        assert_eq!(
            r,
            TimeRange {
                min_ns: 0,
                max_ns: 2 * NANOS_PER_DAY
            }
        );
    }
}
