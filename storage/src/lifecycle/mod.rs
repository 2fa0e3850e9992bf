//! The data lifecycle's rules, as every replica holds them: how long rows live
//! (retention), which rows were deleted (tombstones), and which rollups run
//! (continuous queries). The rules change only through log entries
//! ([`crate::PolicyChange`], [`crate::Storage::apply_delete`]); this module holds
//! their types and the pure functions that apply them to rows and files.

mod cq;
mod delete;
mod duration;
mod query_rows;
mod retention;

pub use cq::{cq_key, ContinuousQuery, CqWindowOutcome};
pub(crate) use delete::without_deleted;
pub use delete::{DeletePredicate, TagCondition, TagOp, Tombstone};
pub use duration::{format_duration_ns, parse_duration_ns};
pub use query_rows::query_rows_for_write;
pub use retention::{retention_cutoff, RetentionRule};
