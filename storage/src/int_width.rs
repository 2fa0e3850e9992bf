//! How wide integer fields are in memory.
//!
//! Every integer field is 64 bits in a table's schema, in log entries and in Parquet,
//! but most values a collector sends are small: a TSBS row's ten integer fields hold
//! values below 100 and took 80 of the 101 bytes a buffered row held. Buffered rows are
//! what a node's memory holds during ingest, so when a replica applies an entry it keeps
//! each integer column of the entry at the narrowest width its values allow
//! ([`narrow_integer_fields`]): 8, 16 or 32 bits, signed for `Int64` and unsigned for
//! `UInt64`. Nothing outside this node's memory sees them: the log entry is unchanged,
//! a memory image carries them widened again ([`widen_integer_fields`]), queries read
//! them widened, and the flush widens them a chunk at a time ([`gather_integers`]), so
//! every replica writes the same Parquet bytes as before.
//!
//! The schema never declares an integer narrower than 64 bits, so an `Int8`, `Int16` or
//! `Int32` column in a buffered batch is always a narrowed `Int64` (and the unsigned
//! ones a narrowed `UInt64`).

use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayRef, ArrowPrimitiveType, AsArray, Int64Array, PrimitiveArray,
    RecordBatch, UInt64Array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::compute::{max, min};
use arrow::datatypes::{
    DataType, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};

use crate::error::Result;
use crate::schema::map_columns;

/// `batch` with every `Int64` and `UInt64` column at the narrowest width that holds its
/// values; other columns unchanged. The values are exactly those of `batch`.
///
/// A decoded log entry's columns are slices of one allocation (the IPC message body), so
/// when any column is narrowed the others are copied out of it too: otherwise the wide
/// body would stay allocated behind the columns left in it, and the narrowing would cost
/// memory instead of saving it.
pub(crate) fn narrow_integer_fields(batch: &RecordBatch) -> Result<RecordBatch> {
    let narrowed: Vec<Option<ArrayRef>> = batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Int64 => narrow_signed(column.as_primitive::<Int64Type>()),
            DataType::UInt64 => narrow_unsigned(column.as_primitive::<UInt64Type>()),
            _ => None,
        })
        .collect();
    if narrowed.iter().all(Option::is_none) {
        return Ok(batch.clone());
    }
    let mut narrowed = narrowed.into_iter();
    map_columns(batch, |column| match narrowed.next().flatten() {
        Some(narrow) => Ok(Some(narrow)),
        None => own_buffers(column).map(Some),
    })
}

/// `column` with its own copy of its buffers and validity (children, such as a tag's
/// dictionary values, which IPC decodes into allocations of their own, stay shared).
fn own_buffers(column: &ArrayRef) -> Result<ArrayRef> {
    let data = column.to_data();
    let buffers = data
        .buffers()
        .iter()
        .map(|b| Buffer::from_slice_ref(b.as_slice()))
        .collect();
    let nulls = data.nulls().map(|n| {
        let bits = n.inner();
        NullBuffer::new(BooleanBuffer::new(
            Buffer::from_slice_ref(bits.inner().as_slice()),
            bits.offset(),
            bits.len(),
        ))
    });
    Ok(make_array(
        data.into_builder().buffers(buffers).nulls(nulls).build()?,
    ))
}

/// `batch` as a buffer keeps it: narrowed, or unchanged in the (unreachable) case that
/// narrowing fails, since applying a committed entry must not fail for a memory saving.
pub(crate) fn buffered_form(batch: &RecordBatch) -> RecordBatch {
    match narrow_integer_fields(batch) {
        Ok(narrow) => narrow,
        Err(e) => {
            debug_assert!(false, "narrowing failed: {e}");
            batch.clone()
        }
    }
}

/// `batch` with every narrowed integer column back at 64 bits: what leaves this node's
/// memory (a memory image) or is read by code that expects the schema's types.
pub(crate) fn widen_integer_fields(batch: &RecordBatch) -> Result<RecordBatch> {
    map_columns(batch, |column| {
        Ok(match wide_type(column.data_type()) {
            Some(wide) if &wide != column.data_type() => Some(arrow::compute::cast(column, &wide)?),
            _ => None,
        })
    })
}

/// The rows `indices` (batch, row) of `inputs`, which hold one integer column of a
/// segment at any mix of widths, as one column of `wanted` (`Int64` or `UInt64`); `None`
/// when `wanted` is another type. Reads each value where it lies: the flush never holds
/// a widened copy of a whole batch.
pub(crate) fn gather_integers(
    inputs: &[&dyn Array],
    indices: &[(usize, usize)],
    wanted: &DataType,
) -> Result<Option<ArrayRef>> {
    Ok(match wanted {
        DataType::Int64 => {
            let views: Vec<Signed<'_>> = inputs
                .iter()
                .map(|c| Signed::of(*c))
                .collect::<Result<_>>()?;
            let out: Int64Array = indices.iter().map(|&(b, r)| views[b].get(r)).collect();
            Some(Arc::new(out))
        }
        DataType::UInt64 => {
            let views: Vec<Unsigned<'_>> = inputs
                .iter()
                .map(|c| Unsigned::of(*c))
                .collect::<Result<_>>()?;
            let out: UInt64Array = indices.iter().map(|&(b, r)| views[b].get(r)).collect();
            Some(Arc::new(out))
        }
        _ => None,
    })
}

/// The 64-bit type a narrowed integer column stands for (itself for the 64-bit ones),
/// `None` for every other type.
fn wide_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            Some(DataType::Int64)
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            Some(DataType::UInt64)
        }
        _ => None,
    }
}

/// `column` as 8, 16 or 32 bits if its values fit, else `None`. A column of nulls only
/// takes 8 bits.
fn narrow_signed(column: &Int64Array) -> Option<ArrayRef> {
    let (lo, hi) = (min(column).unwrap_or(0), max(column).unwrap_or(0));
    let fits = |lo_bound: i64, hi_bound: i64| lo >= lo_bound && hi <= hi_bound;
    // Every conversion below is exact: the range check bounds every non-null value.
    if fits(i8::MIN.into(), i8::MAX.into()) {
        Some(Arc::new(column.unary::<_, Int8Type>(|v| v as i8)))
    } else if fits(i16::MIN.into(), i16::MAX.into()) {
        Some(Arc::new(column.unary::<_, Int16Type>(|v| v as i16)))
    } else if fits(i32::MIN.into(), i32::MAX.into()) {
        Some(Arc::new(column.unary::<_, Int32Type>(|v| v as i32)))
    } else {
        None
    }
}

/// As [`narrow_signed`], for unsigned values.
fn narrow_unsigned(column: &UInt64Array) -> Option<ArrayRef> {
    let hi = max(column).unwrap_or(0);
    if hi <= u8::MAX.into() {
        Some(Arc::new(column.unary::<_, UInt8Type>(|v| v as u8)))
    } else if hi <= u16::MAX.into() {
        Some(Arc::new(column.unary::<_, UInt16Type>(|v| v as u16)))
    } else if hi <= u32::MAX.into() {
        Some(Arc::new(column.unary::<_, UInt32Type>(|v| v as u32)))
    } else {
        None
    }
}

/// One batch's signed integer column, whatever its width.
enum Signed<'a> {
    I8(&'a PrimitiveArray<Int8Type>),
    I16(&'a PrimitiveArray<Int16Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I64(&'a PrimitiveArray<Int64Type>),
}

impl<'a> Signed<'a> {
    fn of(column: &'a dyn Array) -> Result<Self> {
        Ok(match column.data_type() {
            DataType::Int8 => Signed::I8(column.as_primitive()),
            DataType::Int16 => Signed::I16(column.as_primitive()),
            DataType::Int32 => Signed::I32(column.as_primitive()),
            DataType::Int64 => Signed::I64(column.as_primitive()),
            other => return Err(changed_type(other)),
        })
    }

    fn get(&self, row: usize) -> Option<i64> {
        match self {
            Signed::I8(c) => value(c, row).map(i64::from),
            Signed::I16(c) => value(c, row).map(i64::from),
            Signed::I32(c) => value(c, row).map(i64::from),
            Signed::I64(c) => value(c, row),
        }
    }
}

/// One batch's unsigned integer column, whatever its width.
enum Unsigned<'a> {
    U8(&'a PrimitiveArray<UInt8Type>),
    U16(&'a PrimitiveArray<UInt16Type>),
    U32(&'a PrimitiveArray<UInt32Type>),
    U64(&'a PrimitiveArray<UInt64Type>),
}

impl<'a> Unsigned<'a> {
    fn of(column: &'a dyn Array) -> Result<Self> {
        Ok(match column.data_type() {
            DataType::UInt8 => Unsigned::U8(column.as_primitive()),
            DataType::UInt16 => Unsigned::U16(column.as_primitive()),
            DataType::UInt32 => Unsigned::U32(column.as_primitive()),
            DataType::UInt64 => Unsigned::U64(column.as_primitive()),
            other => return Err(changed_type(other)),
        })
    }

    fn get(&self, row: usize) -> Option<u64> {
        match self {
            Unsigned::U8(c) => value(c, row).map(u64::from),
            Unsigned::U16(c) => value(c, row).map(u64::from),
            Unsigned::U32(c) => value(c, row).map(u64::from),
            Unsigned::U64(c) => value(c, row),
        }
    }
}

fn value<T: ArrowPrimitiveType>(column: &PrimitiveArray<T>, row: usize) -> Option<T::Native> {
    column.is_valid(row).then(|| column.value(row))
}

fn changed_type(found: &DataType) -> crate::error::Error {
    crate::error::Error::InvalidPayload(format!(
        "an integer column changed type inside a segment (found {found})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int8Array, UInt16Array};
    use proptest::prelude::*;

    fn batch_of(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn each_column_takes_the_narrowest_width_of_its_values() {
        let batch = batch_of(vec![
            (
                "small",
                Arc::new(Int64Array::from(vec![Some(0), None, Some(-100)])) as ArrayRef,
            ),
            ("medium", Arc::new(Int64Array::from(vec![1_000, -1, 2]))),
            ("large", Arc::new(Int64Array::from(vec![1_i64 << 40, 0, 1]))),
            ("nulls", Arc::new(Int64Array::from(vec![None, None, None]))),
            (
                "unsigned",
                Arc::new(UInt64Array::from(vec![65_535_u64, 0, 7])),
            ),
            ("float", Arc::new(Float64Array::from(vec![1.5, 2.0, 3.0]))),
        ]);
        let narrow = narrow_integer_fields(&batch).unwrap();
        let types: Vec<DataType> = narrow
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(
            types,
            [
                DataType::Int8,
                DataType::Int16,
                DataType::Int64,
                DataType::Int8,
                DataType::UInt16,
                DataType::Float64
            ]
        );
        assert_eq!(
            narrow.column(0).as_ref(),
            &Int8Array::from(vec![Some(0), None, Some(-100)]) as &dyn Array
        );
        assert_eq!(
            narrow.column(4).as_ref(),
            &UInt16Array::from(vec![65_535, 0, 7]) as &dyn Array
        );
        assert_eq!(widen_integer_fields(&narrow).unwrap(), batch);
    }

    #[test]
    fn gathering_reads_every_width_and_refuses_another_type() {
        let a: ArrayRef = Arc::new(Int8Array::from(vec![Some(1), None]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![i64::MIN, 5]));
        let inputs: Vec<&dyn Array> = vec![a.as_ref(), b.as_ref()];
        let out = gather_integers(&inputs, &[(1, 0), (0, 1), (0, 0), (1, 1)], &DataType::Int64)
            .unwrap()
            .unwrap();
        assert_eq!(
            out.as_ref(),
            &Int64Array::from(vec![Some(i64::MIN), None, Some(1), Some(5)]) as &dyn Array
        );
        assert!(gather_integers(&inputs, &[], &DataType::Float64)
            .unwrap()
            .is_none());
        let f: ArrayRef = Arc::new(Float64Array::from(vec![1.0]));
        assert!(gather_integers(&[f.as_ref()], &[(0, 0)], &DataType::Int64).is_err());
    }

    /// Whether every buffer of `batch`'s columns is an allocation of its own (not a slice
    /// of a larger one).
    fn owns_its_buffers(batch: &RecordBatch) -> bool {
        batch.columns().iter().all(|c| {
            let data = c.to_data();
            data.buffers()
                .iter()
                .all(|b| b.capacity() <= b.len().next_multiple_of(64) + 64)
        })
    }

    #[test]
    fn a_narrowed_entry_lets_go_of_the_decoded_body() {
        let rows = 10_000;
        let batch = batch_of(vec![
            (
                "time",
                Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
            ),
            (
                "small",
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i % 100))),
            ),
            (
                "float",
                Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64))),
            ),
        ]);
        let decoded = crate::ipc::decode_batch(&crate::ipc::encode_batch(&batch).unwrap()).unwrap();
        assert!(
            !owns_its_buffers(&decoded),
            "IPC decodes columns into one body"
        );
        let narrow = narrow_integer_fields(&decoded).unwrap();
        assert!(owns_its_buffers(&narrow));
        assert_eq!(widen_integer_fields(&narrow).unwrap(), batch);
        // Nothing to narrow: the batch is kept as it is, shared body and all.
        let floats = decoded.project(&[2]).unwrap();
        assert_eq!(narrow_integer_fields(&floats).unwrap(), floats);
    }

    proptest! {
        /// Narrowing then widening gives back the same batch, and gathering the
        /// narrowed columns gives back the same values, for any values and nulls.
        #[test]
        fn narrowing_loses_nothing(
            signed in proptest::collection::vec(proptest::option::of(any::<i64>()), 1..64),
            shift in 0u32..64,
            unsigned in proptest::collection::vec(proptest::option::of(any::<u64>()), 1..64),
        ) {
            let signed: Int64Array = signed.iter().map(|v| v.map(|v| v >> shift)).collect();
            let unsigned: UInt64Array = unsigned.iter().map(|v| v.map(|v| v >> shift)).collect();
            let batch = batch_of(vec![
                ("s", Arc::new(signed.clone()) as ArrayRef),
            ]);
            let narrow = narrow_integer_fields(&batch).unwrap();
            prop_assert_eq!(&widen_integer_fields(&narrow).unwrap(), &batch);
            let rows: Vec<(usize, usize)> = (0..signed.len()).rev().map(|r| (0, r)).collect();
            let gathered = gather_integers(&[narrow.column(0).as_ref()], &rows, &DataType::Int64)
                .unwrap()
                .unwrap();
            let expected: Int64Array = (0..signed.len()).rev().map(|r| signed.is_valid(r).then(|| signed.value(r))).collect();
            prop_assert_eq!(gathered.as_ref(), &expected as &dyn Array);

            let batch = batch_of(vec![("u", Arc::new(unsigned.clone()) as ArrayRef)]);
            let narrow = narrow_integer_fields(&batch).unwrap();
            prop_assert_eq!(&widen_integer_fields(&narrow).unwrap(), &batch);
            let rows: Vec<(usize, usize)> = (0..unsigned.len()).map(|r| (0, r)).collect();
            let gathered = gather_integers(&[narrow.column(0).as_ref()], &rows, &DataType::UInt64)
                .unwrap()
                .unwrap();
            prop_assert_eq!(gathered.as_ref(), &unsigned as &dyn Array);
        }
    }
}
