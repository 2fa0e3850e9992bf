//! Which tag a table's files are sorted by first: its *sort lead*.
//!
//! Files sort rows by tags, then time. With the tags in name order, a TSBS `cpu` file
//! starts with `arch` and `datacenter`, so one host's rows sit inside groups of
//! sixteen hosts and a 20,000-row page spans several such groups: the page index kept
//! 61 of 215 pages of a day file to find one host's 4,320 rows. A table's files
//! therefore sort by one tag first, the one with the most distinct values (the tag
//! that tells series apart, `host` or `hostname` in most data), then the other tags in
//! name order, then time: one host's rows are contiguous and a page holds a few hosts.
//!
//! The choice is replicated state, made once per table: when the first segment whose
//! rows hold more than one value of some tag is frozen (applying a `Flush` entry, the
//! same on every replica), from that segment's rows; ties go to the first name. Until
//! then the table is undecided and its files (each holding one series) are written in
//! name order, which sorts one series as well as any order does. Snapshots carry the
//! decision (image frame `O`), every file declares its lead (`FileMeta::sort_lead` and
//! Parquet `sorting_columns`), and a merge takes the order its inputs declare.
//! Tables written before this existed keep name order (`None`): their files say so.

use std::collections::HashSet;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;

use crate::error::{Error, Result};
use crate::meta::FileMeta;
use crate::parquet_encode::tag_column_indices;
use crate::tag_keys::TagKeys;

/// Distinct values counted per tag when choosing a lead; past it a tag counts as this
/// many (ties among such tags go to the first name).
const DISTINCT_COUNTED_MAX: usize = 1 << 16;

/// A table's sort order decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SortDecision {
    /// No segment with more than one series has been frozen yet.
    #[default]
    Undecided,
    /// Files sort by this tag first (`None`: tags in name order, as before leads existed).
    Decided(Option<String>),
}

impl SortDecision {
    /// The lead files get now (name order while undecided).
    pub fn lead(&self) -> Option<&str> {
        match self {
            SortDecision::Decided(Some(lead)) => Some(lead),
            _ => None,
        }
    }
}

/// The tag with the most distinct values among `batches` (tags of `schema`, looked up
/// by name in each batch), ties to the first in name order; `None` when no tag has
/// more than one value (one series: nothing to decide from yet).
pub fn choose_lead(schema: &Schema, batches: &[RecordBatch]) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for index in tag_column_indices(schema) {
        let name = schema.field(index).name().as_str();
        let count = distinct_values(name, batches);
        // Strictly more: ties keep the earlier name (schema order is name order).
        if count > 1 && best.is_none_or(|(most, _)| count > most) {
            best = Some((count, name));
        }
    }
    best.map(|(_, name)| name.to_string())
}

/// Distinct non-null values of tag `name` across `batches`, counted up to
/// [`DISTINCT_COUNTED_MAX`] (dictionary values, referenced or not: deterministic, and
/// what a write's dictionary holds is what it used).
fn distinct_values(name: &str, batches: &[RecordBatch]) -> usize {
    let mut seen: HashSet<&str> = HashSet::new();
    for batch in batches {
        let Some(column) = batch.column_by_name(name) else {
            continue;
        };
        let Some(tag) = TagKeys::of(column) else {
            continue;
        };
        for value in tag.values.iter().flatten() {
            seen.insert(value);
            if seen.len() >= DISTINCT_COUNTED_MAX {
                return seen.len();
            }
        }
    }
    seen.len()
}

/// Positions of the tag columns of `schema` in sort order: `lead` first (when it is a
/// tag of `schema`), then the others in schema (name) order.
pub(crate) fn sort_tag_indices(schema: &Schema, lead: Option<&str>) -> Vec<usize> {
    let mut tags = tag_column_indices(schema);
    if let Some(position) =
        lead.and_then(|lead| tags.iter().position(|&i| schema.field(i).name() == lead))
    {
        let lead = tags.remove(position);
        tags.insert(0, lead);
    }
    tags
}

/// Whether a file holds a single series (every tag has at most one value), so it is
/// sorted under any lead. Files without counts (written before they were kept) are not.
pub(crate) fn single_series(meta: &FileMeta) -> bool {
    !meta.tag_distinct.is_empty() && meta.tag_distinct.iter().all(|&n| n <= 1)
}

/// What a file requires of a merge it joins: `None` when any order suits it (one
/// series), else its lead.
pub(crate) fn required_lead(meta: &FileMeta) -> Option<Option<&str>> {
    (!single_series(meta)).then_some(meta.sort_lead.as_deref())
}

/// The lead a merge of `inputs` writes: the one every input holding more than one
/// series declares (all of them must agree), else the first input's.
pub(crate) fn merge_lead(inputs: &[&FileMeta]) -> Result<Option<String>> {
    let mut agreed: Option<(Option<&str>, &str)> = None;
    for meta in inputs {
        let Some(lead) = required_lead(meta) else {
            continue;
        };
        match agreed {
            None => agreed = Some((lead, meta.path.as_str())),
            Some((other, other_path)) if other != lead => {
                return Err(Error::Corrupt {
                    path: meta.path.clone(),
                    reason: format!(
                        "sorted by {} first, but {other_path} by {} first: they cannot be merged",
                        lead.unwrap_or("tags in name order"),
                        other.unwrap_or("tags in name order"),
                    ),
                })
            }
            Some(_) => {}
        }
    }
    Ok(match agreed {
        Some((lead, _)) => lead.map(str::to_string),
        None => inputs.first().and_then(|m| m.sort_lead.clone()),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, DictionaryArray, RecordBatch};
    use arrow::datatypes::Int32Type;

    use super::*;
    use crate::schema::{canonical_schema, ColumnKind, FieldType};

    fn schema() -> Arc<Schema> {
        canonical_schema([
            ("arch", ColumnKind::Tag),
            ("host", ColumnKind::Tag),
            ("zone", ColumnKind::Tag),
            ("v", ColumnKind::Field(FieldType::Float)),
        ])
    }

    fn tag(values: &[&str]) -> ArrayRef {
        Arc::new(
            values
                .iter()
                .copied()
                .collect::<DictionaryArray<Int32Type>>(),
        )
    }

    fn batch(arch: &[&str], host: &[&str], zone: &[&str]) -> RecordBatch {
        let schema = schema();
        let n = arch.len();
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| match f.name().as_str() {
                "arch" => tag(arch),
                "host" => tag(host),
                "zone" => tag(zone),
                "v" => Arc::new(arrow::array::Float64Array::from(vec![1.0; n])) as ArrayRef,
                _ => Arc::new(arrow::array::TimestampNanosecondArray::from(vec![0i64; n]))
                    as ArrayRef,
            })
            .collect();
        RecordBatch::try_new(schema, columns).unwrap()
    }

    #[test]
    fn the_tag_with_most_values_across_batches_leads() {
        let a = batch(&["x", "y", "x"], &["h1", "h2", "h3"], &["z", "z", "z"]);
        let b = batch(&["x"], &["h4"], &["z"]);
        assert_eq!(choose_lead(&schema(), &[a, b]).as_deref(), Some("host"));
    }

    #[test]
    fn ties_go_to_the_first_name_and_one_series_decides_nothing() {
        let tie = batch(&["x", "y"], &["h1", "h2"], &["z", "z"]);
        assert_eq!(choose_lead(&schema(), &[tie]).as_deref(), Some("arch"));
        let one = batch(&["x", "x"], &["h1", "h1"], &["z", "z"]);
        assert_eq!(choose_lead(&schema(), &[one]), None);
    }

    #[test]
    fn the_lead_sorts_first_then_the_other_tags_by_name() {
        let schema = schema();
        let names = |lead| {
            sort_tag_indices(&schema, lead)
                .into_iter()
                .map(|i| schema.field(i).name().clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Some("zone")), ["zone", "arch", "host"]);
        assert_eq!(names(None), ["arch", "host", "zone"]);
        assert_eq!(
            names(Some("gone")),
            ["arch", "host", "zone"],
            "a lead the schema lacks"
        );
    }
}
