//! How wide a tag's dictionary keys are in memory.
//!
//! A tag column is a dictionary of strings with 32-bit keys in every schema, but a log
//! entry's batch holds one write's rows, whose dictionaries are small: a TSBS write of
//! 5,000 rows has at most a thousand hosts and a few dozen of every other tag. Buffered
//! rows are what a node's memory holds during ingest (a TSBS row took 128 bytes, 40 of
//! them keys), so log entries carry each tag's keys at the narrowest width its
//! dictionary allows ([`narrow_tag_keys`]): one byte for up to 256 values, two for up to
//! 65,536. Whoever hands buffered rows on widens them back (`schema::conform`), except
//! the flush, which reads keys of any width ([`TagKeys`]) and writes the segment's own
//! dictionary.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Int32Array, RecordBatch, StringArray, UInt16Array,
    UInt8Array,
};
use arrow::datatypes::{DataType, Int32Type, UInt16Type, UInt8Type};

use crate::error::Result;
use crate::schema::map_columns;

/// A batch's tag columns with keys as narrow as their dictionaries allow; other columns
/// and tags with more than 65,536 values are unchanged.
pub(crate) fn narrow_tag_keys(batch: &RecordBatch) -> Result<RecordBatch> {
    map_columns(batch, |column| {
        match column.as_dictionary_opt::<Int32Type>() {
            Some(dictionary) if dictionary.values().data_type() == &DataType::Utf8 => {
                narrowed(dictionary)
            }
            _ => Ok(None),
        }
    })
}

/// `dictionary` with one- or two-byte keys, if its values fit.
fn narrowed(dictionary: &DictionaryArray<Int32Type>) -> Result<Option<ArrayRef>> {
    let values = Arc::clone(dictionary.values());
    let keys = dictionary.keys();
    // Every key is below the number of values (a dictionary array is validated so), so
    // a narrowing that fits the values fits every key.
    let narrow: ArrayRef = if values.len() <= usize::from(u8::MAX) + 1 {
        let keys: UInt8Array = keys.unary_opt(|k| u8::try_from(k).ok());
        debug_assert_eq!(keys.null_count(), dictionary.keys().null_count());
        Arc::new(DictionaryArray::<UInt8Type>::try_new(keys, values)?)
    } else if values.len() <= usize::from(u16::MAX) + 1 {
        let keys: UInt16Array = keys.unary_opt(|k| u16::try_from(k).ok());
        debug_assert_eq!(keys.null_count(), dictionary.keys().null_count());
        Arc::new(DictionaryArray::<UInt16Type>::try_new(keys, values)?)
    } else {
        return Ok(None);
    };
    Ok(Some(narrow))
}

/// One batch's tag column as the flush reads it: the dictionary's values and each
/// row's key, whatever the keys' width.
pub(crate) struct TagKeys<'a> {
    /// The dictionary's values.
    pub(crate) values: &'a StringArray,
    keys: KeyWidth<'a>,
}

enum KeyWidth<'a> {
    U8(&'a UInt8Array),
    U16(&'a UInt16Array),
    I32(&'a Int32Array),
}

impl<'a> TagKeys<'a> {
    /// `column` read as a tag: `None` unless it is a dictionary of strings with keys of
    /// a width [`narrow_tag_keys`] writes or the schema's own.
    pub(crate) fn of(column: &'a ArrayRef) -> Option<TagKeys<'a>> {
        fn parts<K: arrow::datatypes::ArrowDictionaryKeyType>(
            column: &ArrayRef,
        ) -> Option<(&StringArray, &arrow::array::PrimitiveArray<K>)> {
            let dictionary = column.as_dictionary_opt::<K>()?;
            Some((
                dictionary.values().as_string_opt::<i32>()?,
                dictionary.keys(),
            ))
        }
        if let Some((values, keys)) = parts::<UInt8Type>(column) {
            return Some(TagKeys {
                values,
                keys: KeyWidth::U8(keys),
            });
        }
        if let Some((values, keys)) = parts::<UInt16Type>(column) {
            return Some(TagKeys {
                values,
                keys: KeyWidth::U16(keys),
            });
        }
        let (values, keys) = parts::<Int32Type>(column)?;
        Some(TagKeys {
            values,
            keys: KeyWidth::I32(keys),
        })
    }

    /// Rows in the column.
    pub(crate) fn len(&self) -> usize {
        match self.keys {
            KeyWidth::U8(k) => k.len(),
            KeyWidth::U16(k) => k.len(),
            KeyWidth::I32(k) => k.len(),
        }
    }

    /// Row `row`'s key into [`TagKeys::values`], `None` for a null row.
    #[inline]
    pub(crate) fn key(&self, row: usize) -> Option<usize> {
        match self.keys {
            KeyWidth::U8(k) => k.is_valid(row).then(|| usize::from(k.value(row))),
            KeyWidth::U16(k) => k.is_valid(row).then(|| usize::from(k.value(row))),
            KeyWidth::I32(k) => {
                if k.is_valid(row) {
                    usize::try_from(k.value(row)).ok()
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{StringDictionaryBuilder, TimestampNanosecondArray};
    use arrow::compute::cast;

    use super::*;
    use crate::schema::{canonical_schema, conform, ColumnKind};

    fn tags(values: usize, rows: usize) -> ArrayRef {
        let mut builder = StringDictionaryBuilder::<Int32Type>::new();
        for row in 0..rows {
            if row % 7 == 3 {
                builder.append_null();
            } else {
                builder.append_value(format!("host-{}", row % values));
            }
        }
        Arc::new(builder.finish())
    }

    fn strings(column: &ArrayRef) -> Vec<Option<String>> {
        cast(column, &DataType::Utf8)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    #[test]
    fn keys_narrow_to_the_dictionary_and_read_back_the_same_strings() {
        let schema = canonical_schema([("host", ColumnKind::Tag)]);
        for (values, width) in [
            (1, DataType::UInt8),
            (256, DataType::UInt8),
            (257, DataType::UInt16),
            (65_536, DataType::UInt16),
            (65_537, DataType::Int32),
        ] {
            let rows = 2 * values + 10;
            let host = tags(values, rows);
            let time = Arc::new(TimestampNanosecondArray::from_iter_values(0..rows as i64));
            let batch = RecordBatch::try_new(schema.clone(), vec![time, host.clone()]).unwrap();
            let narrow = narrow_tag_keys(&batch).unwrap();
            let column = narrow.column(1);
            assert_eq!(
                column.data_type(),
                &DataType::Dictionary(Box::new(width), Box::new(DataType::Utf8)),
                "{values} values"
            );
            assert_eq!(strings(column), strings(&host), "{values} values");
            let read = TagKeys::of(column).unwrap();
            assert_eq!(read.len(), rows);
            let through_keys: Vec<Option<String>> = (0..rows)
                .map(|r| read.key(r).map(|k| read.values.value(k).to_string()))
                .collect();
            assert_eq!(through_keys, strings(&host));
            // Handed on, the rows have the schema's own type again.
            let widened = conform(&narrow, &schema).unwrap();
            assert_eq!(widened.schema(), schema);
            assert_eq!(strings(widened.column(1)), strings(&host));
        }
    }

    #[test]
    fn a_narrowed_batch_holds_fewer_bytes() {
        let schema = canonical_schema([("host", ColumnKind::Tag)]);
        let rows = 5000;
        let time = Arc::new(TimestampNanosecondArray::from_iter_values(0..rows as i64));
        let batch = RecordBatch::try_new(schema, vec![time, tags(1000, rows)]).unwrap();
        let narrow = narrow_tag_keys(&batch).unwrap();
        let keys_before = batch.column(1).to_data().buffers()[0].len();
        let keys_after = narrow.column(1).to_data().buffers()[0].len();
        assert_eq!((keys_before, keys_after), (4 * rows, 2 * rows));
    }
}
