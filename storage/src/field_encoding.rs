//! Which Parquet encoding each field column of a file gets, chosen from its values.
//!
//! Parquet's default for numbers is a dictionary with bit-packed indices: right for
//! few distinct values in any order (status codes, rounded gauges), wrong for a metric
//! that moves by small steps, such as a CPU percentage or a counter. Rows sorted by
//! series then time make such a column's neighbours close, and
//! `DELTA_BINARY_PACKED` stores their differences in a few bits: on the TSBS
//! `cpu-only` shape (ten random-walk percentages) the fields took 8.7 bytes a row as
//! dictionaries and 3.9 as deltas (docs/benchmarks.md, "Stored bytes"). For floats of
//! full precision, where a dictionary holds every value once, `BYTE_STREAM_SPLIT`
//! lets zstd find the exponent bytes' sameness (about 15 % smaller than plain).
//!
//! The choice estimates, for the first [`SAMPLE_ROWS`] rows of the file, the bits per
//! value of each encoding before compression, and takes the smaller. It reads only the
//! rows, so every replica encodes a file of the same rows into the same bytes (files
//! are read by byte range through any member).

use std::collections::HashSet;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int64Type, UInt64Type};
use parquet::basic::Encoding;

use crate::schema::{ColumnKind, FieldType};

/// Rows the choice is made from: the first this many of the file, in file order.
pub(crate) const SAMPLE_ROWS: usize = 64 * 1024;

/// Values per block of `DELTA_BINARY_PACKED` (Parquet's writers use 128, in four
/// miniblocks of 32 with a bit width each).
const DELTA_BLOCK: usize = 128;
const DELTA_MINIBLOCK: usize = 32;
/// A block's header: its least delta (a varint, a few bytes) and four bit widths.
const DELTA_BLOCK_HEADER_BITS: u64 = 8 * 8;
/// Fewest values a choice is made from: a smaller file keeps the default, its few
/// bytes not worth a guess from a handful of values.
const SAMPLE_MIN: usize = 1_024;
/// Distinct floats counted at most: past this a dictionary is hopeless anyway.
const DISTINCT_COUNT_MAX: usize = SAMPLE_ROWS;

/// The encodings chosen for the field columns that do not keep Parquet's default
/// (a dictionary), by column name.
pub(crate) fn choose(sample: &RecordBatch) -> Vec<(String, Encoding)> {
    let schema = sample.schema();
    let mut chosen = Vec::new();
    for (field, column) in schema.fields().iter().zip(sample.columns()) {
        let Some(ColumnKind::Field(kind)) = ColumnKind::from_arrow(field.name(), field.data_type())
        else {
            continue;
        };
        let encoding = match (kind, column.data_type()) {
            (FieldType::Integer, DataType::Int64) => {
                integer_encoding(column.as_primitive::<Int64Type>().iter().flatten())
            }
            (FieldType::UInteger, DataType::UInt64) => integer_encoding(
                column
                    .as_primitive::<UInt64Type>()
                    .iter()
                    .flatten()
                    .map(|v| v as i64),
            ),
            (FieldType::Float, DataType::Float64) => {
                float_encoding(column.as_primitive::<Float64Type>().iter().flatten())
            }
            _ => None,
        };
        if let Some(encoding) = encoding {
            chosen.push((field.name().clone(), encoding));
        }
    }
    chosen
}

/// `DELTA_BINARY_PACKED` when its differences take fewer bits than dictionary
/// indices (and the dictionary itself), else `None` (the dictionary).
fn integer_encoding(values: impl Iterator<Item = i64>) -> Option<Encoding> {
    let values: Vec<i64> = values.collect();
    if values.len() < SAMPLE_MIN {
        return None;
    }
    let delta = delta_bits(&values);
    let dictionary = dictionary_bits(values.iter().map(|&v| v as u64), values.len());
    (delta < dictionary).then_some(Encoding::DELTA_BINARY_PACKED)
}

/// `BYTE_STREAM_SPLIT` when most values are distinct (a dictionary would hold each
/// once and fall back to plain values), else `None`.
fn float_encoding(values: impl Iterator<Item = f64>) -> Option<Encoding> {
    let bits: Vec<u64> = values.map(f64::to_bits).collect();
    if bits.len() < SAMPLE_MIN {
        return None;
    }
    let distinct = distinct_count(bits.iter().copied());
    (distinct * 4 > bits.len() * 3).then_some(Encoding::BYTE_STREAM_SPLIT)
}

/// Bits `DELTA_BINARY_PACKED` spends on `values`: per miniblock, the width of its
/// largest difference above the block's least one, and each block's header.
fn delta_bits(values: &[i64]) -> u64 {
    let deltas: Vec<i64> = values.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let mut bits = 64; // the first value, stored whole
    for block in deltas.chunks(DELTA_BLOCK) {
        let least = block.iter().copied().min().unwrap_or(0);
        bits += DELTA_BLOCK_HEADER_BITS;
        for mini in block.chunks(DELTA_MINIBLOCK) {
            let widest = mini
                .iter()
                .map(|&d| d.wrapping_sub(least) as u64)
                .max()
                .unwrap_or(0);
            // A miniblock is stored whole, even the last one's padding.
            bits += u64::from(64 - widest.leading_zeros()) * DELTA_MINIBLOCK as u64;
        }
    }
    bits
}

/// Bits a dictionary spends on `count` values: each index at the width the
/// distinct values need, and the dictionary page of 64-bit values.
fn dictionary_bits(values: impl Iterator<Item = u64>, count: usize) -> u64 {
    let distinct = distinct_count(values) as u64;
    let width = u64::from(64 - distinct.saturating_sub(1).leading_zeros());
    width * count as u64 + distinct * 64
}

/// Distinct values among `values`, counted up to [`DISTINCT_COUNT_MAX`].
fn distinct_count(values: impl Iterator<Item = u64>) -> usize {
    let mut seen = HashSet::new();
    for value in values {
        seen.insert(value);
        if seen.len() >= DISTINCT_COUNT_MAX {
            break;
        }
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int64Array, UInt64Array};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(columns: Vec<(&str, Arc<dyn Array>)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, c)| c).collect(),
        )
        .unwrap()
    }

    /// A deterministic generator (no seeded crate needed for a test's noise).
    fn noise(i: u64) -> u64 {
        i.wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407)
            >> 33
    }

    #[test]
    fn a_random_walk_and_a_counter_get_deltas() {
        let mut level = 50i64;
        let walk: Vec<i64> = (0..10_000)
            .map(|i| {
                level = (level + (noise(i) % 7) as i64 - 3).clamp(0, 100);
                level
            })
            .collect();
        let counter: Vec<u64> = (0..10_000).map(|i| i * 1_000 + noise(i) % 10).collect();
        let chosen = choose(&batch(vec![
            ("walk", Arc::new(Int64Array::from(walk))),
            ("counter", Arc::new(UInt64Array::from(counter))),
        ]));
        assert_eq!(
            chosen,
            vec![
                ("walk".to_string(), Encoding::DELTA_BINARY_PACKED),
                ("counter".to_string(), Encoding::DELTA_BINARY_PACKED),
            ]
        );
    }

    #[test]
    fn few_values_in_any_order_keep_the_dictionary() {
        let codes = [200i64, 404, 500, 301];
        let status: Vec<i64> = (0..10_000)
            .map(|i| codes[(noise(i) % 4) as usize])
            .collect();
        let uniform: Vec<i64> = (0..10_000).map(|i| (noise(i) % 101) as i64).collect();
        let rounded: Vec<f64> = (0..10_000)
            .map(|i| (noise(i) % 10_000) as f64 / 100.0)
            .collect();
        let chosen = choose(&batch(vec![
            ("status", Arc::new(Int64Array::from(status))),
            ("uniform", Arc::new(Int64Array::from(uniform))),
            ("rounded", Arc::new(Float64Array::from(rounded))),
        ]));
        assert!(chosen.is_empty(), "{chosen:?}");
    }

    #[test]
    fn floats_of_full_precision_are_split_by_byte() {
        let noisy: Vec<f64> = (0..10_000)
            .map(|i| 50.0 + (noise(i) as f64 / u32::MAX as f64))
            .collect();
        let chosen = choose(&batch(vec![(
            "noisy",
            Arc::new(Float64Array::from(noisy)) as Arc<dyn Array>,
        )]));
        assert_eq!(
            chosen,
            vec![("noisy".to_string(), Encoding::BYTE_STREAM_SPLIT)]
        );
    }

    #[test]
    fn nulls_and_tiny_columns_never_fail_and_extremes_do_not_overflow() {
        let sparse = Int64Array::from(vec![None, Some(i64::MIN), None, Some(i64::MAX), None]);
        let nothing = Int64Array::from(vec![None::<i64>; 5]);
        let chosen = choose(&batch(vec![
            ("sparse", Arc::new(sparse)),
            ("nothing", Arc::new(nothing)),
        ]));
        assert!(chosen.is_empty(), "{chosen:?}");
        let swings: Vec<i64> = (0..1_000)
            .map(|i| if i % 2 == 0 { i64::MIN } else { i64::MAX })
            .collect();
        assert!(delta_bits(&swings) > 0);
    }
}
