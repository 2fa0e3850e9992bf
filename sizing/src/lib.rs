//! quiver-sizing: tools operators use to size hardware for Quiver, and the failover
//! drill that proves an acknowledged write survives a killed leader.
//!
//! It talks to nodes over HTTP only, exactly like a real client: the load generator
//! posts Arc-shaped MessagePack batches, measures what was acknowledged and how fast,
//! and then checks that every acknowledged row is persisted. It never retries silently:
//! a failed request is counted as failed.
#![deny(missing_docs)]

mod batch;
mod drill;
mod load;
mod report;

pub use batch::host_names;
pub use batch::{encode_columnar_batch, encode_lp_batch, BatchShape};
pub use drill::{drill, run_drill, DrillArgs, DrillRecord, DrillReport};
pub use load::{load, run_load, LoadArgs, WireFormat};
pub use report::LoadReport;
