//! The order a segment's rows are written in: file bucket (an hour, or a day for
//! history: see `file_span`), then tags (the table's sort lead first, then the others
//! by name; see `sort_lead`), then time.
//!
//! Sorting by comparing tag strings row against row was a third of a node's CPU during
//! ingest (`lexsort_to_indices` over dictionary columns compares the strings behind the
//! keys, through a dynamic comparator, at every step). Tags are dictionaries in memory,
//! so each dictionary is sorted once instead (a thousand hosts, not millions of rows),
//! every key is replaced by the rank of its value, and rows are sorted on plain
//! integers. The order is exactly the string order (nulls first, as Parquet's declared
//! sorting columns say), and rows equal on every key keep their input order, so the
//! same rows give the same order on every replica.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringBuilder, UInt32Array,
};
use arrow::compute::{concat_batches, interleave, lexsort_to_indices, SortColumn};
use arrow::datatypes::Int32Type;

use crate::error::Result;
use crate::file_span::FileSpans;
use crate::ids::TimestampNs;
use crate::int_width::gather_integers;
use crate::parquet_encode::time_values;
use crate::schema::{conform, tag_type, with_tags_as, TIME_COLUMN};
use crate::sort_lead::sort_tag_indices;
use crate::tag_keys::TagKeys;

/// A row of a segment: (batch, row within it), 8 bytes (a flush of 2 M rows holds one
/// per row).
pub(crate) type RowRef = (u32, u32);

/// One tag column across a segment: each distinct value once, in string order, and
/// where every batch's dictionary keys land in that list. Chunks taken in file order
/// share this one dictionary instead of merging the batches' dictionaries again for
/// every chunk (which was the largest cost of a flush of many small batches).
pub(crate) struct SegmentTag {
    /// Position of the column in the schema.
    column: usize,
    /// The segment's distinct values, sorted.
    values: ArrayRef,
    /// Per batch, per key of its dictionary: the key into `values` (`None` for a null
    /// value).
    keys: Vec<Vec<Option<i32>>>,
}

/// The file order of a segment's rows, and its tags as segment-wide dictionaries.
pub(crate) struct SegmentOrder {
    /// Every row, in bucket, tags, time order.
    pub(crate) rows: Vec<RowRef>,
    /// The file buckets the rows were sorted by (one file each).
    pub(crate) spans: FileSpans,
    /// Tag columns with a segment-wide dictionary (empty when the tags are not
    /// dictionaries of strings: then chunks are interleaved column by column).
    tags: Vec<SegmentTag>,
}

/// Where the rows of `batches` (all of one schema) go: `(batch, row)` pairs sorted by
/// file bucket of `time`, then every tag (`lead` first, the others in schema order), then `time`, rows equal on all of
/// them in input order, as if the batches were one. Nothing is copied but the sort
/// keys: the caller takes the rows in this order a chunk at a time
/// ([`SegmentOrder::take`]), so a flush never holds a second copy of its segment.
pub(crate) fn segment_order(batches: &[RecordBatch], lead: Option<&str>) -> Result<SegmentOrder> {
    let mut offsets = Vec::with_capacity(batches.len() + 1);
    offsets.push(0usize);
    for batch in batches {
        offsets.push(offsets[offsets.len() - 1] + batch.num_rows());
    }
    if u32::try_from(offsets[offsets.len() - 1]).is_err() || u32::try_from(batches.len()).is_err() {
        return Err(crate::error::Error::InvalidPayload(
            "a segment of more than 2^32 rows cannot be sorted".into(),
        ));
    }
    let mut newest: Option<i64> = None;
    for batch in batches {
        if let Some(max) = arrow::compute::max(time_values(batch)?) {
            newest = Some(newest.map_or(max, |n| n.max(max)));
        }
    }
    let spans = FileSpans::of(newest);
    let (global, tags) = match rank_order(batches, lead, &spans)? {
        Some(ranked) => ranked,
        None => (generic_order(batches, lead, &spans)?, Vec::new()),
    };
    debug_assert_eq!(global.len(), offsets[offsets.len() - 1]);
    let rows = global
        .into_iter()
        .map(|row| {
            let row = row as usize;
            // The batch whose range holds `row`: the last offset not past it.
            let batch = offsets.partition_point(|&o| o <= row) - 1;
            // Both fit: checked above.
            (batch as u32, (row - offsets[batch]) as u32)
        })
        .collect();
    Ok(SegmentOrder { rows, tags, spans })
}

impl SegmentOrder {
    /// The rows `chunk` (taken from [`SegmentOrder::rows`]) of `batches` as one batch
    /// of `schema`, tags on the segment-wide dictionaries.
    pub(crate) fn take(
        &self,
        batches: &[RecordBatch],
        schema: &arrow::datatypes::SchemaRef,
        chunk: &[RowRef],
    ) -> Result<RecordBatch> {
        let indices: Vec<(usize, usize)> = chunk
            .iter()
            .map(|&(b, r)| (b as usize, r as usize))
            .collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for column in 0..schema.fields().len() {
            match self.tags.iter().find(|t| t.column == column) {
                Some(tag) => columns.push(tag.take(batches, &indices)?),
                None => {
                    let wanted = schema.field(column).data_type();
                    let inputs: Vec<&dyn Array> =
                        batches.iter().map(|b| b.column(column).as_ref()).collect();
                    if inputs.iter().all(|c| c.data_type() == wanted) {
                        columns.push(interleave(&inputs, &indices)?);
                        continue;
                    }
                    // Integers buffered narrower than the schema's (`int_width`), read
                    // where they lie.
                    if let Some(gathered) = gather_integers(&inputs, &indices, wanted)? {
                        columns.push(gathered);
                        continue;
                    }
                    // Without a segment-wide dictionary, tag keys of several widths are
                    // widened to the schema's first.
                    let alike: Vec<ArrayRef> = batches
                        .iter()
                        .map(|b| match b.column(column) {
                            c if c.data_type() == wanted => Ok(Arc::clone(c)),
                            c => arrow::compute::cast(c, wanted),
                        })
                        .collect::<std::result::Result<_, _>>()?;
                    let inputs: Vec<&dyn Array> = alike.iter().map(|c| c.as_ref()).collect();
                    columns.push(interleave(&inputs, &indices)?);
                }
            }
        }
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

impl SegmentTag {
    fn take(&self, batches: &[RecordBatch], indices: &[(usize, usize)]) -> Result<ArrayRef> {
        let keys: Vec<TagKeys<'_>> = batches
            .iter()
            .map(|b| {
                TagKeys::of(b.column(self.column)).ok_or_else(|| {
                    crate::error::Error::InvalidPayload(
                        "a tag column changed type inside a segment".into(),
                    )
                })
            })
            .collect::<Result<_>>()?;
        let taken: Int32Array = indices
            .iter()
            .map(|&(b, r)| {
                keys[b]
                    .key(r)
                    .and_then(|k| self.keys[b].get(k).copied().flatten())
            })
            .collect();
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
            taken,
            Arc::clone(&self.values),
        )?))
    }
}

/// The order (global row numbers) from ranks with each tag's segment-wide dictionary,
/// or `None` when a tag column is not a dictionary of strings or the rows do not fit
/// 32 bits.
///
/// The tags are folded, one at a time, into one series rank per row (the rank of the
/// row's tag values in string order, tag by tag), so the sort needs one 128-bit key per
/// row whatever the number of tags; a flush of 2 M TSBS rows (ten tags) held 180 MB of
/// sort keys when each tag kept its own rank per row, and holds about 60 MB now.
fn rank_order(
    batches: &[RecordBatch],
    lead: Option<&str>,
    spans: &FileSpans,
) -> Result<Option<(Vec<u32>, Vec<SegmentTag>)>> {
    let Some(first) = batches.first() else {
        return Ok(Some((Vec::new(), Vec::new())));
    };
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if u32::try_from(rows).is_err() {
        return Ok(None);
    }
    let mut series = vec![0u32; rows];
    let mut series_count = 1u32;
    let mut tags = Vec::new();
    for column in sort_tag_indices(&first.schema(), lead) {
        let dictionaries: Option<Vec<TagKeys<'_>>> = batches
            .iter()
            .map(|b| TagKeys::of(b.column(column)))
            .collect();
        let Some((ranks, values, keys)) = dictionaries.and_then(|d| row_ranks(&d, rows)) else {
            return Ok(None);
        };
        // Ranks run from 0 (null) to the number of distinct values.
        let Ok(width) = u32::try_from(values.len() + 1) else {
            return Ok(None);
        };
        series_count = fold_series(&mut series, series_count, &ranks, width);
        tags.push(SegmentTag {
            column,
            values,
            keys,
        });
    }
    let order = match packed_order(batches, &series, series_count, spans)? {
        Some(order) => order,
        None => compared_order(batches, &series, spans)?,
    };
    Ok(Some((order, tags)))
}

/// Most (series, rank) slots [`fold_series`] ranks through a table (16 MiB of `u32`);
/// beyond, the distinct pairs are sorted instead.
const FOLD_TABLE_SLOTS_MAX: u64 = 1 << 22;

/// Replaces each row's series rank (of its tags so far, `count` distinct) by the rank
/// of (series rank, `ranks` of the next tag, which run below `width`) among the
/// segment's distinct pairs, in that order; returns how many there are.
fn fold_series(series: &mut [u32], count: u32, ranks: &[u32], width: u32) -> u32 {
    fold_series_within(series, count, ranks, width, FOLD_TABLE_SLOTS_MAX)
}

fn fold_series_within(
    series: &mut [u32],
    count: u32,
    ranks: &[u32],
    width: u32,
    table_slots_max: u64,
) -> u32 {
    debug_assert_eq!(series.len(), ranks.len());
    let slots = u64::from(count) * u64::from(width);
    if slots <= table_slots_max {
        // Slot order is pair order: mark the pairs present, number them in order.
        let slot = |s: u32, r: u32| s as usize * width as usize + r as usize;
        let mut table = vec![u32::MAX; slots as usize];
        for (&s, &r) in series.iter().zip(ranks) {
            table[slot(s, r)] = 0;
        }
        let mut next = 0u32;
        for entry in table.iter_mut().filter(|e| **e != u32::MAX) {
            *entry = next;
            next += 1;
        }
        for (s, &r) in series.iter_mut().zip(ranks) {
            *s = table[slot(*s, r)];
        }
        return next;
    }
    let pair = |s: u32, r: u32| (u64::from(s) << 32) | u64::from(r);
    let mut pairs: Vec<u64> = series
        .iter()
        .zip(ranks)
        .map(|(&s, &r)| pair(s, r))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    for (s, &r) in series.iter_mut().zip(ranks) {
        // Present by construction; the rank of a pair is its position.
        *s = pairs.partition_point(|&p| p < pair(*s, r)) as u32;
    }
    pairs.len() as u32
}

/// Bits of a time's offset into its hour (3.6e12 ns < 2^42).
const TIME_IN_HOUR_BITS: u32 = 42;
/// Bits of a time's offset into its day (8.64e13 ns < 2^47).
const TIME_IN_DAY_BITS: u32 = 47;

/// The order from one 128-bit key per row (bucket start in hours since the first, series
/// rank, the time into the bucket, the row number), when the keys fit: one contiguous
/// array of integers sorts several times faster than indices compared through the
/// columns.
fn packed_order(
    batches: &[RecordBatch],
    series: &[u32],
    series_count: u32,
    spans: &FileSpans,
) -> Result<Option<Vec<u32>>> {
    let bits = |most: u64| u64::BITS - most.leading_zeros();
    let mut bucket_range: Option<(i64, i64)> = None;
    for batch in batches {
        for &t in time_values(batch)?.values().iter() {
            let bucket = spans.bucket(t);
            bucket_range = Some(bucket_range.map_or((bucket, bucket), |(lo, hi)| {
                (lo.min(bucket), hi.max(bucket))
            }));
        }
    }
    let Some((first_bucket, last_bucket)) = bucket_range else {
        return Ok(Some(Vec::new()));
    };
    // Bucket starts are whole hours (days are 24 of them), so hours number them in order.
    let hour_step = TimestampNs::HOUR_NS;
    let Some(bucket_bits) = last_bucket
        .checked_sub(first_bucket)
        .and_then(|span| u64::try_from(span / hour_step).ok())
        .map(bits)
    else {
        return Ok(None);
    };
    // Every bucket starts on a whole hour but a saturated floor (`i64::MIN`, so the
    // first): numbering by hours needs the first on the hour too.
    if first_bucket.rem_euclid(hour_step) != 0 {
        return Ok(None);
    }
    let time_bits = if spans.has_days_from(first_bucket) {
        TIME_IN_DAY_BITS
    } else {
        TIME_IN_HOUR_BITS
    };
    let series_bits = bits(u64::from(series_count.saturating_sub(1)));
    let row_bits = bits(series.len() as u64);
    if bucket_bits + series_bits + time_bits + row_bits > u128::BITS {
        return Ok(None);
    }
    let mut keys: Vec<u128> = Vec::with_capacity(series.len());
    for batch in batches {
        for &t in time_values(batch)?.values().iter() {
            let row = keys.len();
            let bucket = spans.bucket(t);
            let into_bucket = i128::from(t) - i128::from(bucket);
            // Outside its bucket only where the floor saturated (times near the ends
            // of the i64 range): the comparator handles those.
            if !(0..i128::from(spans.width(bucket)).min(1 << time_bits)).contains(&into_bucket) {
                return Ok(None);
            }
            debug_assert_eq!(bucket.rem_euclid(hour_step), 0, "checked on the first");
            let bucket_index =
                ((i128::from(bucket) - i128::from(first_bucket)) / i128::from(hour_step)) as u128;
            let key = (((bucket_index << series_bits) | u128::from(series[row])) << time_bits
                | into_bucket as u128)
                << row_bits
                | row as u128;
            keys.push(key);
        }
    }
    keys.sort_unstable();
    let mask = (1u128 << row_bits) - 1;
    Ok(Some(keys.into_iter().map(|k| (k & mask) as u32).collect()))
}

/// The same order by comparing each row's (bucket, series rank, time, row) where they
/// lie, for keys that do not fit 128 bits.
fn compared_order(batches: &[RecordBatch], series: &[u32], spans: &FileSpans) -> Result<Vec<u32>> {
    let mut time: Vec<i64> = Vec::with_capacity(series.len());
    for batch in batches {
        time.extend_from_slice(time_values(batch)?.values());
    }
    let mut order: Vec<u32> = (0..series.len() as u32).collect();
    let key = |row: u32| {
        let row = row as usize;
        (spans.bucket(time[row]), series[row], time[row], row)
    };
    // The row number makes the key unique: the sort is then stable.
    order.sort_unstable_by_key(|&row| key(row));
    Ok(order)
}

/// Ranks of one tag, with the tag's distinct values and each batch's keys into them.
type Ranked = (Vec<u32>, ArrayRef, Vec<Vec<Option<i32>>>);

/// Each row's rank of its value in string order, over the rows of every dictionary in
/// turn: 0 for null, equal strings equal ranks (in one dictionary or in two); with the
/// distinct values in that order (rank `n` is value `n - 1`) and where each
/// dictionary's keys land among them. `None` if the values are not strings.
fn row_ranks(dictionaries: &[TagKeys<'_>], rows: usize) -> Option<Ranked> {
    let values: Vec<_> = dictionaries.iter().map(|d| d.values).collect();
    // Every value of every dictionary, sorted once: a thousand hosts a batch, not a row.
    let mut by_value: Vec<(u32, u32)> = Vec::new();
    for (d, v) in values.iter().enumerate() {
        by_value.extend(
            (0..v.len())
                .filter(|&i| v.is_valid(i))
                .map(|i| (d as u32, i as u32)),
        );
    }
    let text = |&(d, i): &(u32, u32)| values[d as usize].value(i as usize);
    by_value.sort_unstable_by(|a, b| text(a).cmp(text(b)));
    let mut value_rank: Vec<Vec<u32>> = values.iter().map(|v| vec![0u32; v.len()]).collect();
    let mut distinct = StringBuilder::new();
    let mut rank = 0u32;
    for (position, entry) in by_value.iter().enumerate() {
        if position == 0 || text(&by_value[position - 1]) != text(entry) {
            rank += 1;
            distinct.append_value(text(entry));
        }
        value_rank[entry.0 as usize][entry.1 as usize] = rank;
    }
    let keys: Vec<Vec<Option<i32>>> = value_rank
        .iter()
        .map(|ranks| {
            ranks
                .iter()
                .map(|&r| r.checked_sub(1).and_then(|k| i32::try_from(k).ok()))
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(rows);
    for (dictionary, ranks) in dictionaries.iter().zip(&value_rank) {
        out.extend((0..dictionary.len()).map(|row| {
            dictionary
                .key(row)
                .and_then(|k| ranks.get(k).copied())
                .unwrap_or(0)
        }));
    }
    Some((out, Arc::new(distinct.finish()), keys))
}

/// The same order through Arrow's comparators, for columns the ranks do not cover
/// (this path concatenates the segment: it is not taken for tags in memory, which are
/// always dictionaries).
fn generic_order(
    batches: &[RecordBatch],
    lead: Option<&str>,
    spans: &FileSpans,
) -> Result<Vec<u32>> {
    let Some(first) = batches.first() else {
        return Ok(Vec::new());
    };
    // Tag keys may differ in width from batch to batch: one width to concatenate.
    let schema = Arc::new(with_tags_as(first.schema_ref(), &tag_type()));
    let batches: Vec<RecordBatch> = batches
        .iter()
        .map(|b| conform(b, &schema))
        .collect::<Result<_>>()?;
    let batch = concat_batches(&schema, &batches)?;
    let time = time_values(&batch)?;
    let buckets =
        arrow::array::Int64Array::from_iter_values(time.values().iter().map(|&t| spans.bucket(t)));
    let mut keys = vec![SortColumn {
        values: std::sync::Arc::new(buckets),
        options: None,
    }];
    for i in sort_tag_indices(&batch.schema(), lead) {
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
    Ok(lexsort_to_indices(&keys, None)?.values().to_vec())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::AsArray;
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
    /// may repeat (as after concatenation) and may be null. `rotate` turns the
    /// dictionary's values, so batches of one segment can have different dictionaries.
    fn batch(rows: &[Row], rotate: usize) -> RecordBatch {
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
        let mut names: Vec<Option<&str>> = [
            "h3", "h1", "h0", "h5", "h2", "h4", "h1", "h3", "h0", "h2", "h5", "h4",
        ]
        .iter()
        .map(|n| Some(*n))
        .collect();
        names.push(None);
        let turn = rotate % names.len();
        names.rotate_left(turn);
        let values: ArrayRef = Arc::new(StringArray::from(names));
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

    /// `rows` as batches cut at `cuts`, each with its own dictionary.
    fn parts(rows: &[Row], cuts: &[usize]) -> Vec<RecordBatch> {
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (rows.len() + 1)).collect();
        bounds.push(0);
        bounds.push(rows.len());
        bounds.sort_unstable();
        // Every other batch (the first too) with narrow keys, as log entries carry them.
        bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let b = batch(&rows[w[0]..w[1]], i * 5);
                if i % 2 == 0 {
                    crate::tag_keys::narrow_tag_keys(&b).unwrap()
                } else {
                    b
                }
            })
            .collect()
    }

    fn sorted(batches: &[RecordBatch]) -> RecordBatch {
        sorted_with(batches, None)
    }

    fn sorted_with(batches: &[RecordBatch], lead: Option<&str>) -> RecordBatch {
        let order = segment_order(batches, lead).unwrap();
        order
            .take(batches, batches[0].schema_ref(), &order.rows)
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
        fn ranks_across_batches_give_the_comparator_order_with_ties_in_input_order(
            rows in prop::collection::vec(
                (0i64..5 * 24 * HOUR, prop::option::of(0u8..13), prop::option::of(0u8..13)),
                0..200,
            ),
            cuts in prop::collection::vec(0usize..200, 0..4),
            lead in prop::option::of(prop::sample::select(vec!["dc", "host"])),
        ) {
            // Key 12 is the null value (before rotation); times collide often so ties
            // are common. Five days: the oldest rows fall in day buckets, the newest in
            // hour buckets.
            let rows: Vec<_> = rows.into_iter().map(|(t, h, d)| (t / (HOUR / 2) * (HOUR / 2), h, d)).collect();
            let input = parts(&rows, &cuts);
            let spans = FileSpans::of(rows.iter().map(|r| r.0));
            let (ranked, _) = rank_order(&input, lead, &spans).unwrap().expect("dictionary tags");
            let generic = generic_order(&input, lead, &spans).unwrap();
            prop_assert_eq!(&ranked, &generic);
            // The comparator path (keys too wide to pack) agrees with the packed one, and
            // folding through sorted pairs with folding through a table.
            let mut series = vec![0u32; rows.len()];
            let mut sorted_series = vec![0u32; rows.len()];
            let (mut count, mut sorted_count) = (1, 1);
            let tag_order = if lead == Some("host") { ["host", "dc"] } else { ["dc", "host"] };
            for c in tag_order {
                let d: Vec<TagKeys<'_>> = input
                    .iter()
                    .map(|b| TagKeys::of(b.column_by_name(c).unwrap()).unwrap())
                    .collect();
                let (ranks, values, _) = row_ranks(&d, rows.len()).unwrap();
                let width = values.len() as u32 + 1;
                count = fold_series(&mut series, count, &ranks, width);
                sorted_count = fold_series_within(&mut sorted_series, sorted_count, &ranks, width, 0);
            }
            prop_assert_eq!(&series, &sorted_series);
            prop_assert_eq!(count, sorted_count);
            let compared = compared_order(&input, &series, &spans).unwrap();
            prop_assert_eq!(&compared, &generic);
            // Row references name the same rows as the global order.
            let order = segment_order(&input, lead).unwrap();
            // Taken in that order, the rows are the comparator's sort of the input.
            if !rows.is_empty() {
                let schema = Arc::new(with_tags_as(input[0].schema_ref(), &tag_type()));
                let taken = order.take(&input, &schema, &order.rows).unwrap();
                let wide: Vec<RecordBatch> =
                    input.iter().map(|b| conform(b, &schema).unwrap()).collect();
                let all = concat_batches(&schema, &wide).unwrap();
                let expected = arrow::compute::take_record_batch(
                    &all,
                    &UInt32Array::from(generic.clone()),
                )
                .unwrap();
                for column in ["dc", "host"] {
                    prop_assert_eq!(as_strings(&taken, column), as_strings(&expected, column));
                }
                prop_assert_eq!(
                    time_values(&taken).unwrap().values(),
                    time_values(&expected).unwrap().values()
                );
            }
            let order = order.rows;
            let mut offsets = vec![0];
            for b in &input {
                offsets.push(offsets[offsets.len() - 1] + b.num_rows());
            }
            let global: Vec<u32> = order
                .iter()
                .map(|&(b, r)| (offsets[b as usize] + r as usize) as u32)
                .collect();
            prop_assert_eq!(&global, &generic);
        }
    }

    #[test]
    fn history_sorts_by_day_then_tags_and_recent_rows_by_hour() {
        // (time, host key): host key 2 is "h0", 1 is "h1". Newest on day 3: days 2 and 3
        // go by the hour, day 0 is one bucket.
        let day = 24 * HOUR;
        let rows = [
            (3 * day + HOUR, Some(1), Some(0)),
            (3 * day, Some(2), Some(0)),
            (5 * HOUR, Some(2), Some(0)),
            (HOUR, Some(1), Some(0)),
            (2 * day + 2 * HOUR, Some(1), Some(0)),
            (2 * day + HOUR, Some(2), Some(0)),
        ];
        let order = segment_order(&[batch(&rows, 0)], None).unwrap();
        assert_eq!(order.spans, FileSpans::below(3 * day + HOUR));
        let sorted = order
            .take(
                &[batch(&rows, 0)],
                batch(&rows, 0).schema_ref(),
                &order.rows,
            )
            .unwrap();
        // Day 0 as one bucket: "h0" (5 h) before "h1" (1 h); then hour by hour.
        assert_eq!(
            time_values(&sorted).unwrap().values().to_vec(),
            vec![
                5 * HOUR,
                HOUR,
                2 * day + HOUR,
                2 * day + 2 * HOUR,
                3 * day,
                3 * day + HOUR
            ]
        );
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
        let sorted = sorted(&[batch(&rows, 0)]);
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

    #[test]
    fn batches_with_different_dictionaries_merge_by_their_strings() {
        // Host "h0" in two batches whose dictionaries hold it at different keys (2 in
        // the first, 1 in the second, rotated by one; dc "h3" is key 0, then key 12):
        // equal strings, so ordered by time across the batches, before "h1".
        let first = batch(&[(3, Some(2), Some(0)), (1, Some(1), Some(0))], 0);
        let second = batch(&[(2, Some(1), Some(12))], 1);
        let sorted = sorted(&[first, second]);
        assert_eq!(
            time_values(&sorted).unwrap().values().to_vec(),
            vec![2, 3, 1]
        );
        assert_eq!(
            as_strings(&sorted, "host"),
            vec![Some("h0".into()), Some("h0".into()), Some("h1".into())]
        );
    }

    #[test]
    fn a_sort_lead_sorts_by_that_tag_before_the_others() {
        // (time, host key, dc key): host "h0" (key 2) in dc "h3" (key 0) and in dc "h1"
        // (key 1); host "h3" (key 0) in dc "h0" (key 2).
        let rows = [
            (1, Some(2), Some(0)),
            (2, Some(0), Some(2)),
            (3, Some(2), Some(1)),
        ];
        let by_dc = sorted(&[batch(&rows, 0)]);
        assert_eq!(
            time_values(&by_dc).unwrap().values().to_vec(),
            vec![2, 3, 1]
        );
        let by_host = sorted_with(&[batch(&rows, 0)], Some("host"));
        assert_eq!(
            time_values(&by_host).unwrap().values().to_vec(),
            vec![3, 1, 2]
        );
        assert_eq!(
            as_strings(&by_host, "host"),
            vec![Some("h0".into()), Some("h0".into()), Some("h3".into())]
        );
    }
}
