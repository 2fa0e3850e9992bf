//! Deletes as tombstones: a predicate over `time` and tags, recorded at the log index
//! of the delete. It hides every matching row written before that index, at query time
//! at once, and compaction rewrites the rows away. Rows written after the delete with
//! matching tags stay visible.
//!
//! Where a tombstone applies is decided by log indexes alone. Applying a delete at
//! index `D` freezes the table's live buffer, so every segment (and the files written
//! from it) holds rows either all before `D` or all after it; a compaction output
//! applies every tombstone older than its own entry. So each file and frozen segment
//! carries one number, `deletes_through` (its last log index, or its compaction's
//! index), and tombstone `D` applies to it exactly when `D > deletes_through`.
//!
//! A tag the row lacks (null, or a column the file does not have) compares as the
//! empty string, as in InfluxDB: `host != 'a'` deletes rows without a host.

use arrow::array::{Array, AsArray, BooleanArray, BooleanBuilder, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimestampNanosecondType};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{LogIndex, TimestampNs};
use crate::schema::TIME_COLUMN;
use crate::store::TableKey;

/// How a tag is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagOp {
    /// Equal to the one value.
    Eq,
    /// Different from the one value.
    NotEq,
    /// Equal to one of the values.
    In,
    /// Equal to none of the values.
    NotIn,
}

/// One condition on a tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagCondition {
    /// The tag's name.
    pub tag: String,
    /// The comparison.
    pub op: TagOp,
    /// One value for `Eq`/`NotEq`, any number for `In`/`NotIn`.
    pub values: Vec<String>,
}

impl TagCondition {
    fn holds(&self, value: &str) -> bool {
        let member = self.values.iter().any(|v| v == value);
        match self.op {
            TagOp::Eq | TagOp::In => member,
            TagOp::NotEq | TagOp::NotIn => !member,
        }
    }
}

/// Which rows a delete removes: all conditions hold (an empty predicate matches every
/// row of the measurement).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletePredicate {
    /// Rows at or after this time; none: no lower bound.
    #[serde(default)]
    pub time_from: Option<TimestampNs>,
    /// Rows strictly before this time; none: no upper bound.
    #[serde(default)]
    pub time_before: Option<TimestampNs>,
    /// Conditions on tags, all of which must hold.
    #[serde(default)]
    pub tags: Vec<TagCondition>,
}

impl DeletePredicate {
    /// Whether rows with times in `[time_min, time_max]` can match.
    pub fn overlaps(&self, time_min: TimestampNs, time_max: TimestampNs) -> bool {
        self.time_from.is_none_or(|from| time_max >= from)
            && self.time_before.is_none_or(|before| time_min < before)
            && self
                .time_from
                .zip(self.time_before)
                .is_none_or(|(f, b)| f < b)
    }

    /// Whether the time of `t` lies in the predicate's range.
    fn time_holds(&self, t: i64) -> bool {
        self.time_from.is_none_or(|f| t >= f.0) && self.time_before.is_none_or(|b| t < b.0)
    }

    /// For every row of `batch`, whether the predicate matches it. Tags the batch lacks
    /// read as the empty string.
    pub fn matches(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let rows = batch.num_rows();
        let time = batch
            .column_by_name(TIME_COLUMN)
            .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
            .ok_or_else(|| {
                Error::InvalidPayload("a batch without a nanosecond time column".into())
            })?;
        let mut keep: Vec<bool> = (0..rows).map(|i| self.time_holds(time.value(i))).collect();
        for condition in &self.tags {
            let strings: Option<StringArray> = match batch.column_by_name(&condition.tag) {
                Some(column) => Some(cast(column, &DataType::Utf8)?.as_string::<i32>().clone()),
                None => None,
            };
            for (i, keep) in keep.iter_mut().enumerate() {
                if !*keep {
                    continue;
                }
                let value = match &strings {
                    Some(s) if s.is_valid(i) => s.value(i),
                    _ => "",
                };
                *keep = condition.holds(value);
            }
        }
        let mut out = BooleanBuilder::with_capacity(rows);
        out.append_slice(&keep);
        Ok(out.finish())
    }
}

/// A committed delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// Index of the delete's log entry: it hides rows written before it.
    pub index: LogIndex,
    /// The measurement.
    pub table: TableKey,
    /// Which rows.
    pub predicate: DeletePredicate,
}

impl Tombstone {
    /// Whether it hides rows of a file or segment whose rows were all written at or
    /// below `deletes_through` (or had older tombstones applied through it) and whose
    /// times lie in `[time_min, time_max]`.
    pub fn applies_to(
        &self,
        deletes_through: LogIndex,
        time_min: TimestampNs,
        time_max: TimestampNs,
    ) -> bool {
        self.index > deletes_through && self.predicate.overlaps(time_min, time_max)
    }
}

/// Rows of `batch` none of `tombstones` matches (all of them apply to the batch).
pub(crate) fn without_deleted(
    batch: &RecordBatch,
    tombstones: &[&Tombstone],
) -> Result<RecordBatch> {
    if tombstones.is_empty() || batch.num_rows() == 0 {
        return Ok(batch.clone());
    }
    let mut hidden = vec![false; batch.num_rows()];
    for t in tombstones {
        let matched = t.predicate.matches(batch)?;
        for (i, h) in hidden.iter_mut().enumerate() {
            *h |= matched.value(i);
        }
    }
    if !hidden.iter().any(|h| *h) {
        return Ok(batch.clone());
    }
    let keep: BooleanArray = hidden.iter().map(|h| Some(!h)).collect();
    Ok(arrow::compute::filter_record_batch(batch, &keep)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{StringDictionaryBuilder, TimestampNanosecondArray};
    use arrow::datatypes::Int32Type;

    use super::*;
    use crate::schema::canonical_schema;
    use crate::ColumnKind;

    fn batch(hosts: &[Option<&str>], times: &[i64]) -> RecordBatch {
        let schema = canonical_schema([("host", ColumnKind::Tag)]);
        let mut host = StringDictionaryBuilder::<Int32Type>::new();
        for h in hosts {
            host.append_option(*h);
        }
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(TimestampNanosecondArray::from(times.to_vec())),
                Arc::new(host.finish()),
            ],
        )
        .unwrap()
    }

    fn cond(tag: &str, op: TagOp, values: &[&str]) -> TagCondition {
        TagCondition {
            tag: tag.into(),
            op,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn matched(p: &DeletePredicate, b: &RecordBatch) -> Vec<bool> {
        let m = p.matches(b).unwrap();
        (0..m.len()).map(|i| m.value(i)).collect()
    }

    #[test]
    fn time_range_and_tags_all_must_hold() {
        let b = batch(&[Some("a"), Some("b"), None, Some("a")], &[1, 2, 3, 10]);
        let p = DeletePredicate {
            time_from: Some(TimestampNs(2)),
            time_before: Some(TimestampNs(10)),
            tags: vec![],
        };
        assert_eq!(matched(&p, &b), [false, true, true, false]);
        let p = DeletePredicate {
            tags: vec![cond("host", TagOp::Eq, &["a"])],
            ..DeletePredicate::default()
        };
        assert_eq!(matched(&p, &b), [true, false, false, true]);
        let p = DeletePredicate {
            tags: vec![cond("host", TagOp::NotEq, &["a"])],
            ..DeletePredicate::default()
        };
        assert_eq!(
            matched(&p, &b),
            [false, true, true, false],
            "no host != 'a'"
        );
        let p = DeletePredicate {
            tags: vec![cond("host", TagOp::In, &["b", ""])],
            ..DeletePredicate::default()
        };
        assert_eq!(matched(&p, &b), [false, true, true, false]);
        let p = DeletePredicate {
            tags: vec![cond("host", TagOp::NotIn, &["a", "b"])],
            ..DeletePredicate::default()
        };
        assert_eq!(matched(&p, &b), [false, false, true, false]);
        let p = DeletePredicate {
            tags: vec![cond("region", TagOp::Eq, &[""])],
            ..DeletePredicate::default()
        };
        assert_eq!(
            matched(&p, &b),
            [true; 4],
            "an absent tag is the empty string"
        );
    }

    #[test]
    fn a_tombstone_applies_to_what_was_written_before_it() {
        let t = Tombstone {
            index: LogIndex(10),
            table: TableKey::new("db", "cpu"),
            predicate: DeletePredicate {
                time_from: Some(TimestampNs(100)),
                time_before: Some(TimestampNs(200)),
                tags: vec![],
            },
        };
        assert!(t.applies_to(LogIndex(9), TimestampNs(150), TimestampNs(300)));
        assert!(!t.applies_to(LogIndex(10), TimestampNs(150), TimestampNs(300)));
        assert!(!t.applies_to(LogIndex(9), TimestampNs(200), TimestampNs(300)));
        assert!(!t.applies_to(LogIndex(9), TimestampNs(0), TimestampNs(99)));
        let b = batch(&[Some("a"), Some("b")], &[150, 250]);
        let kept = without_deleted(&b, &[&t]).unwrap();
        assert_eq!(kept.num_rows(), 1);
    }
}
