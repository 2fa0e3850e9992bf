//! The order a segment's rows are written in: hour, then tags, then time.
//!
//! Sorting by comparing tag strings row against row was a third of a node's CPU during
//! ingest (`lexsort_to_indices` over dictionary columns compares the strings behind the
//! keys, through a dynamic comparator, at every step). Tags are dictionaries in memory,
//! so each dictionary is sorted once instead (a thousand hosts, not millions of rows),
//! every key is replaced by the rank of its value, and rows are sorted on plain
//! integers. The order is exactly the string order (nulls first, as Parquet's declared
//! sorting columns say), and rows equal on every key keep their input order, so the
//! same rows give the same order on every replica.

use arrow::array::{Array, AsArray, DictionaryArray, RecordBatch, UInt32Array};
use arrow::compute::{lexsort_to_indices, take_record_batch, SortColumn};
use arrow::datatypes::Int32Type;

use crate::error::Result;
use crate::ids::TimestampNs;
use crate::parquet_encode::{tag_column_indices, time_values};
use crate::schema::TIME_COLUMN;

/// `batch` sorted by hour of `time`, then every tag (in schema order), then `time`.
pub(crate) fn sort_by_hour_tags_time(batch: &RecordBatch) -> Result<RecordBatch> {
    let indices = match rank_order(batch)? {
        Some(indices) => indices,
        None => generic_order(batch)?,
    };
    debug_assert_eq!(indices.len(), batch.num_rows());
    Ok(take_record_batch(batch, &indices)?)
}

/// The order from ranks, or `None` when a tag column is not a dictionary of strings.
fn rank_order(batch: &RecordBatch) -> Result<Option<UInt32Array>> {
    let rows = batch.num_rows();
    let Ok(rows_u32) = u32::try_from(rows) else {
        return Ok(None);
    };
    let time = time_values(batch)?.values();
    let hours: Vec<i64> = time
        .iter()
        .map(|&t| TimestampNs(t).hour_floor().0)
        .collect();
    let mut ranks: Vec<Vec<u32>> = Vec::new();
    for column in tag_column_indices(&batch.schema()) {
        match batch.column(column).as_dictionary_opt::<Int32Type>() {
            Some(dictionary) => match row_ranks(dictionary) {
                Some(r) => ranks.push(r),
                None => return Ok(None),
            },
            None => return Ok(None),
        }
    }
    let order = match packed_order(&hours, &ranks, time) {
        Some(order) => order,
        None => compared_order(&hours, &ranks, time, rows_u32),
    };
    Ok(Some(UInt32Array::from(order)))
}

/// The same order by comparing each row's keys where they lie (any number of tags).
fn compared_order(hours: &[i64], ranks: &[Vec<u32>], time: &[i64], rows: u32) -> Vec<u32> {
    let mut order: Vec<u32> = (0..rows).collect();
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (a as usize, b as usize);
        hours[a]
            .cmp(&hours[b])
            .then_with(|| {
                for tag in ranks {
                    let ordering = tag[a].cmp(&tag[b]);
                    if ordering.is_ne() {
                        return ordering;
                    }
                }
                std::cmp::Ordering::Equal
            })
            .then_with(|| time[a].cmp(&time[b]))
            // Input order among equal rows: the sort is then total, so stable.
            .then_with(|| a.cmp(&b))
    });
    order
}

/// Bits of a time's offset into its hour (3.6e12 ns < 2^42).
const TIME_IN_HOUR_BITS: u32 = 42;

/// The order from one 128-bit key per row (hour since the first, each rank, the time
/// into the hour, the row number), when the keys fit: one contiguous array of
/// integers sorts several times faster than indices compared through the columns.
fn packed_order(hours: &[i64], ranks: &[Vec<u32>], time: &[i64]) -> Option<Vec<u32>> {
    let bits = |most: u64| u64::BITS - most.leading_zeros();
    let first_hour = *hours.iter().min()?;
    let hour_span = hours.iter().max()?.checked_sub(first_hour)?;
    let hour_step = TimestampNs::HOUR_NS;
    let hour_bits = bits(u64::try_from(hour_span / hour_step).ok()?);
    let rank_bits: Vec<u32> = ranks
        .iter()
        .map(|r| bits(u64::from(r.iter().copied().max().unwrap_or(0))))
        .collect();
    let row_bits = bits(u64::try_from(time.len()).ok()?);
    let total = hour_bits + rank_bits.iter().sum::<u32>() + TIME_IN_HOUR_BITS + row_bits;
    if total > u128::BITS {
        return None;
    }
    let mut keys: Vec<u128> = Vec::with_capacity(time.len());
    for row in 0..time.len() {
        let hour = (i128::from(hours[row]) - i128::from(first_hour)) / i128::from(hour_step);
        let mut key = u128::try_from(hour).ok()?;
        for (tag, &width) in ranks.iter().zip(&rank_bits) {
            key = (key << width) | u128::from(tag[row]);
        }
        // Outside one hour only where `hour_floor` saturated (times near the ends of
        // the i64 range): the comparator handles those.
        let into_hour = i128::from(time[row]) - i128::from(hours[row]);
        if !(0..i128::from(hour_step)).contains(&into_hour) {
            return None;
        }
        key = (key << TIME_IN_HOUR_BITS) | into_hour as u128;
        keys.push((key << row_bits) | row as u128);
    }
    keys.sort_unstable();
    let mask = (1u128 << row_bits) - 1;
    Some(keys.into_iter().map(|k| (k & mask) as u32).collect())
}

/// Each row's rank of its value in string order: 0 for null, equal strings equal ranks
/// (a concatenated dictionary can hold a value twice). `None` if the values are not
/// strings.
fn row_ranks(dictionary: &DictionaryArray<Int32Type>) -> Option<Vec<u32>> {
    let values = dictionary.values().as_string_opt::<i32>()?;
    let mut by_value: Vec<usize> = (0..values.len()).filter(|&i| values.is_valid(i)).collect();
    by_value.sort_unstable_by(|&a, &b| values.value(a).cmp(values.value(b)));
    let mut value_rank = vec![0u32; values.len()];
    let mut rank = 0u32;
    for (position, &index) in by_value.iter().enumerate() {
        let is_new = position == 0 || values.value(by_value[position - 1]) != values.value(index);
        if is_new {
            rank += 1;
        }
        value_rank[index] = rank;
    }
    let keys = dictionary.keys();
    Some(
        (0..dictionary.len())
            .map(|row| {
                if keys.is_null(row) {
                    return 0;
                }
                usize::try_from(keys.value(row))
                    .ok()
                    .and_then(|k| value_rank.get(k).copied())
                    .unwrap_or(0)
            })
            .collect(),
    )
}

/// The same order through Arrow's comparators, for columns the ranks do not cover.
fn generic_order(batch: &RecordBatch) -> Result<UInt32Array> {
    let time = time_values(batch)?;
    let hours = arrow::array::Int64Array::from_iter_values(
        time.values().iter().map(|&t| TimestampNs(t).hour_floor().0),
    );
    let mut keys = vec![SortColumn {
        values: std::sync::Arc::new(hours),
        options: None,
    }];
    for i in tag_column_indices(&batch.schema()) {
        keys.push(SortColumn {
            values: batch.column(i).clone(),
            options: None,
        });
    }
    keys.push(SortColumn {
        values: batch.column(batch.schema().index_of(TIME_COLUMN)?).clone(),
        options: None,
    });
    // Row numbers last: equal rows keep their input order, as in `rank_order`.
    let rows = u32::try_from(batch.num_rows()).unwrap_or(u32::MAX);
    keys.push(SortColumn {
        values: std::sync::Arc::new(UInt32Array::from_iter_values(0..rows)),
        options: None,
    });
    Ok(lexsort_to_indices(&keys, None)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int32Array, StringArray, TimestampNanosecondArray};
    use arrow::compute::cast;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use proptest::prelude::*;

    use super::*;
    use crate::schema::tag_type;

    const HOUR: i64 = 3_600_000_000_000;

    /// One test row: time, host key, dc key (`None`: a null key).
    type Row = (i64, Option<u8>, Option<u8>);

    /// A batch of (time, host, dc) with `host` and `dc` as dictionaries whose values
    /// may repeat (as after concatenation) and may be null.
    fn batch(rows: &[Row]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new(
                TIME_COLUMN,
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ),
            Field::new("dc", tag_type(), true),
            Field::new("host", tag_type(), true),
        ]);
        // Values "h0".."h5" twice over, in a shuffled order, one null value.
        let names = [
            "h3", "h1", "h0", "h5", "h2", "h4", "h1", "h3", "h0", "h2", "h5", "h4",
        ];
        let mut values: Vec<Option<&str>> = names.iter().map(|n| Some(*n)).collect();
        values.push(None);
        let values: ArrayRef = Arc::new(StringArray::from(values));
        let tag = |pick: fn(&Row) -> Option<u8>| -> ArrayRef {
            let keys: Int32Array = rows.iter().map(|r| pick(r).map(i32::from)).collect();
            Arc::new(DictionaryArray::<Int32Type>::new(keys, Arc::clone(&values)))
        };
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(TimestampNanosecondArray::from_iter_values(
                    rows.iter().map(|r| r.0),
                )),
                tag(|r| r.2),
                tag(|r| r.1),
            ],
        )
        .unwrap()
    }

    fn as_strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
        let plain = cast(batch.column_by_name(column).unwrap(), &DataType::Utf8).unwrap();
        plain
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    proptest! {
        #[test]
        fn ranks_give_the_comparator_order_with_ties_in_input_order(
            rows in prop::collection::vec(
                (0i64..4 * HOUR, prop::option::of(0u8..13), prop::option::of(0u8..13)),
                0..200,
            )
        ) {
            // Key 12 is the null value; times collide often so ties are common.
            let rows: Vec<_> = rows.into_iter().map(|(t, h, d)| (t / (HOUR / 2) * 7, h, d)).collect();
            let input = batch(&rows);
            let ranked = rank_order(&input).unwrap().expect("dictionary tags");
            let generic = generic_order(&input).unwrap();
            prop_assert_eq!(ranked.values(), generic.values());
            // The comparator path (tags too many to pack) agrees with the packed one.
            let time = time_values(&input).unwrap().values();
            let hours: Vec<i64> = time.iter().map(|&t| TimestampNs(t).hour_floor().0).collect();
            let ranks: Vec<Vec<u32>> = ["dc", "host"]
                .iter()
                .map(|c| row_ranks(input.column_by_name(c).unwrap().as_dictionary::<Int32Type>()).unwrap())
                .collect();
            let compared = compared_order(&hours, &ranks, time, rows.len() as u32);
            prop_assert_eq!(&compared[..], generic.values().as_ref());
            let sorted = sort_by_hour_tags_time(&input).unwrap();
            prop_assert_eq!(sorted.num_rows(), rows.len());
        }
    }

    #[test]
    fn rows_sort_by_hour_then_tags_with_nulls_first_then_time() {
        // (time, host key, dc key): host key 2 is "h0", 1 is "h1", 12 the null value.
        let rows = [
            (HOUR + 5, Some(2), Some(0)),
            (3, Some(1), Some(0)),
            (2, Some(8), Some(0)),
            (1, None, Some(0)),
            (0, Some(12), Some(0)),
            (4, Some(2), Some(12)),
        ];
        let sorted = sort_by_hour_tags_time(&batch(&rows)).unwrap();
        let time = time_values(&sorted).unwrap().values().to_vec();
        // Hour 0: dc null first (time 4), then dc "h3": host null (a null value at 0, a
        // null key at 1, equal, so by time), "h0" (2, key 8 is "h0" too), "h1" (3);
        // hour 1 last.
        assert_eq!(time, vec![4, 0, 1, 2, 3, HOUR + 5]);
        assert_eq!(
            as_strings(&sorted, "host"),
            vec![
                Some("h0".into()),
                None,
                None,
                Some("h0".into()),
                Some("h1".into()),
                Some("h0".into())
            ]
        );
    }
}
