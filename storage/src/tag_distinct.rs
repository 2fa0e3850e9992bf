//! How many distinct values each tag column of a file holds, counted while the file is
//! written and kept in its [`FileMeta`](crate::FileMeta).
//!
//! The query planner has no other way to know how many groups a `GROUP BY host` makes:
//! without it, DataFusion assumes as many groups as rows, and a join to such an
//! aggregate (the newest row of every host) is planned as if both sides were the whole
//! table. Counting costs one pass over each tag column's dictionary keys and one hash
//! per distinct value, far less than the Parquet writer's own dictionary encoding of the
//! same column.
//!
//! A count stops at [`TAG_DISTINCT_COUNTED_MAX`]: past that a tag is "many", the
//! planner needs no more precision, and a merge never holds millions of strings for it.

use std::collections::HashSet;

use arrow::array::{Array, AsArray, DictionaryArray};
use arrow::datatypes::{Int32Type, Schema};
use arrow::record_batch::RecordBatch;

use crate::parquet_encode::tag_column_indices;

/// The largest count recorded; a tag recorded with it has at least that many values.
/// Above DataFusion's threshold for building a join's table in one piece (128 Ki rows),
/// so "many" never makes the planner choose differently than an exact count would.
pub const TAG_DISTINCT_COUNTED_MAX: u32 = 1 << 18;

/// Distinct values seen so far in each tag column of one file.
pub(crate) struct TagDistinct {
    /// Positions of the tag columns in the file's schema.
    columns: Vec<usize>,
    /// Values seen, per tag column; `None` once the column reached the cap.
    seen: Vec<Option<HashSet<Box<str>>>>,
}

impl TagDistinct {
    /// A counter for the tags of `schema` (the file's schema, in its column order).
    pub(crate) fn new(schema: &Schema) -> Self {
        let columns = tag_column_indices(schema);
        let seen = columns.iter().map(|_| Some(HashSet::new())).collect();
        TagDistinct { columns, seen }
    }

    /// Counts the tags of `batch`, which has the schema the counter was made for.
    pub(crate) fn add(&mut self, batch: &RecordBatch) {
        for (position, &column) in self.columns.iter().enumerate() {
            let Some(seen) = &mut self.seen[position] else {
                continue;
            };
            // Tags are dictionaries of strings (that is how `tag_column_indices` knows
            // them); anything else leaves the count unknown, never wrong.
            let full = batch
                .column(column)
                .as_dictionary_opt::<Int32Type>()
                .is_none_or(|array| add_dictionary(seen, array));
            if full {
                self.seen[position] = None;
            }
        }
    }

    /// One count per tag column, in schema order.
    pub(crate) fn finish(self) -> Vec<u32> {
        self.seen
            .into_iter()
            .map(|seen| match seen {
                Some(values) => u32::try_from(values.len())
                    .unwrap_or(TAG_DISTINCT_COUNTED_MAX)
                    .min(TAG_DISTINCT_COUNTED_MAX),
                None => TAG_DISTINCT_COUNTED_MAX,
            })
            .collect()
    }
}

/// Inserts `value`; true once the set holds the most values counted.
fn insert(seen: &mut HashSet<Box<str>>, value: &str) -> bool {
    if !seen.contains(value) {
        seen.insert(value.into());
    }
    seen.len() >= TAG_DISTINCT_COUNTED_MAX as usize
}

/// Only the dictionary values some row refers to count (a sliced or concatenated
/// dictionary can hold others).
fn add_dictionary(seen: &mut HashSet<Box<str>>, array: &DictionaryArray<Int32Type>) -> bool {
    let Some(values) = array.values().as_string_opt::<i32>() else {
        return true;
    };
    let mut used = vec![false; values.len()];
    for (row, key) in array.keys().values().iter().enumerate() {
        if array.is_valid(row) {
            if let Some(slot) = usize::try_from(*key).ok().and_then(|k| used.get_mut(k)) {
                *slot = true;
            }
        }
    }
    for (index, used) in used.into_iter().enumerate() {
        if used && values.is_valid(index) && insert(seen, values.value(index)) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int32Array, StringArray, TimestampNanosecondArray};
    use arrow::datatypes::{DataType, Field, TimeUnit};

    use super::*;
    use crate::schema::tag_type;

    fn batch(hosts: &[Option<&str>], regions: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ),
            Field::new("host", tag_type(), true),
            Field::new("region", tag_type(), true),
        ]);
        let time = TimestampNanosecondArray::from_iter_values(0..hosts.len() as i64);
        let host: DictionaryArray<Int32Type> = hosts.iter().copied().collect();
        RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(time), Arc::new(host), regions],
        )
        .unwrap()
    }

    #[test]
    fn counts_each_tag_across_batches_ignoring_nulls_and_unused_dictionary_values() {
        let first = batch(
            &[Some("a"), Some("b"), None, Some("a")],
            Arc::new(DictionaryArray::<Int32Type>::from_iter([
                "eu", "eu", "us", "eu",
            ])),
        );
        let second = batch(
            &[Some("c"), Some("a")],
            Arc::new(DictionaryArray::<Int32Type>::from_iter([Some("ap"), None])),
        );
        let mut counter = TagDistinct::new(first.schema_ref());
        counter.add(&first);
        // A slice keeps the whole dictionary; only "a" is referred to by its row.
        counter.add(&second.slice(1, 1));
        counter.add(&second);
        assert_eq!(counter.finish(), vec![3, 3]);
    }

    #[test]
    fn a_tag_with_more_values_than_the_cap_is_recorded_as_many() {
        let n = TAG_DISTINCT_COUNTED_MAX as usize + 5;
        let names: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
        let hosts: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
        let regions: ArrayRef = Arc::new(DictionaryArray::<Int32Type>::new(
            Int32Array::from(vec![0; n]),
            Arc::new(StringArray::from(vec!["eu"])),
        ));
        let one = batch(&hosts, regions);
        let mut counter = TagDistinct::new(one.schema_ref());
        counter.add(&one);
        assert_eq!(counter.finish(), vec![TAG_DISTINCT_COUNTED_MAX, 1]);
    }
}
