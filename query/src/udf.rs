//! `time_bucket(interval, timestamp [, origin])`, with DuckDB's argument order and origins.
//!
//! It is DataFusion's `date_bin` with a different default origin: DuckDB aligns buckets
//! of days, hours and smaller to Monday 2000-01-03 00:00:00 UTC (so week buckets start on
//! Mondays) and buckets of months or years to 2000-01-01. `date_bin` would use the Unix
//! epoch, a Thursday. An explicit third argument is the origin timestamp, as in both.
//! DuckDB's other three-argument form (an offset interval) is not supported.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions::datetime::date_bin::DateBinFunc;
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// 2000-01-03T00:00:00Z, DuckDB's origin for buckets without months.
const ORIGIN_DAYS_NS: i64 = 946_857_600_000_000_000;
/// 2000-01-01T00:00:00Z, DuckDB's origin for month and year buckets.
const ORIGIN_MONTHS_NS: i64 = 946_684_800_000_000_000;

/// The `time_bucket` scalar function, ready to register.
pub(crate) fn time_bucket() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(TimeBucket {
        date_bin: DateBinFunc::new(),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TimeBucket {
    date_bin: DateBinFunc,
}

impl ScalarUDFImpl for TimeBucket {
    fn name(&self) -> &str {
        "time_bucket"
    }

    fn signature(&self) -> &Signature {
        self.date_bin.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.date_bin.return_type(arg_types)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.len() == 2 {
            // Time-of-day inputs keep date_bin's midnight origin; timestamps get DuckDB's.
            if let DataType::Timestamp(_, tz) = args.args[1].data_type() {
                let origin_ns = default_origin_ns(&args.args[0]);
                let origin_type = DataType::Timestamp(TimeUnit::Nanosecond, tz.clone());
                args.args
                    .push(ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(
                        Some(origin_ns),
                        tz,
                    )));
                args.arg_fields
                    .push(Arc::new(Field::new("origin", origin_type, false)));
            }
        }
        self.date_bin.invoke_with_args(args)
    }

    fn output_ordering(&self, input: &[ExprProperties]) -> Result<SortProperties> {
        self.date_bin.output_ordering(input)
    }
}

/// DuckDB's origin for a bucket width: month-based widths align to 2000-01-01.
fn default_origin_ns(width: &ColumnarValue) -> i64 {
    let has_months = match width {
        ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(v))) => v.months != 0,
        ColumnarValue::Scalar(ScalarValue::IntervalYearMonth(Some(months))) => *months != 0,
        _ => false,
    };
    if has_months {
        ORIGIN_MONTHS_NS
    } else {
        ORIGIN_DAYS_NS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_duckdbs() {
        let monday = chrono::DateTime::parse_from_rfc3339("2000-01-03T00:00:00Z")
            .map(|t| t.timestamp_nanos_opt());
        assert_eq!(monday, Ok(Some(ORIGIN_DAYS_NS)));
        let new_year = chrono::DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z")
            .map(|t| t.timestamp_nanos_opt());
        assert_eq!(new_year, Ok(Some(ORIGIN_MONTHS_NS)));
    }
}
