//! quiver-sizing: the tools an operator uses to choose hardware for Quiver, and the
//! failover drill that proves an acknowledged write survives a killed leader.
//!
//! - `quiver sizing load`: a load generator;
//! - `quiver sizing drill`: kill -9 the leader of a 3-node cluster under load;
//! - `quiver sizing plan`: a machine size for a workload, from measured coefficients;
//! - the qualification rule that decides which sizing runs count.
//!
//! It talks to nodes over HTTP only, exactly like a real client, and never trusts its
//! own counters for what was stored: persisted == acknowledged is counted by the
//! server, per batch. It is not a benchmark harness for Quiver's internals (that is
//! `benches/`).
#![deny(missing_docs)]

mod audit;
mod batch;
mod drill;
mod error;
mod load;
mod plan;
mod qualify;
mod report;
mod units;

pub use audit::{audit, Audit, BatchOutcome};
pub use batch::host_names;
pub use batch::{encode_columnar_batch, encode_lp_batch, BatchShape};
pub use drill::{drill, run_drill, DrillArgs, DrillRecord, DrillReport};
pub use error::{Error, Result};
pub use load::{load, run_load, LoadArgs, WireFormat};
pub use plan::{plan_output, run_plan, Calibration, PlanArgs, PlanOutput};
pub use qualify::{qualify, Evidence, FailureCounters, Gate, Limits};
pub use report::LoadReport;
