//! quiver-sizing: the tools an operator uses to choose hardware for Quiver, and the
//! failover drill that proves an acknowledged write survives a killed leader.
//!
//! - `quiver sizing load`: a load generator, closed loop (how fast can it go?) or open
//!   loop at a fixed `--rate` (what happens at this rate?);
//! - `quiver sizing drill`: kill -9 the leader of a 3-node cluster under load;
//! - `quiver sizing run`: the whole campaign on the operator's own machine (probe,
//!   ingest sweeps, query profile, mixed run, cluster), with a report and charts;
//! - `quiver sizing plan`: a machine size for a workload, from a campaign's numbers.
//!
//! It talks to nodes over HTTP only, exactly like a real client (it starts its own
//! nodes as separate processes of the same binary), and never trusts its own counters
//! for what was stored: persisted == acknowledged is counted by the server, per batch.
//! It is not a benchmark harness for Quiver's internals (that is `benches/`).
#![deny(missing_docs)]

mod audit;
mod batch;
mod batch_counts;
mod campaign;
mod drill;
mod error;
mod load;
mod load_report;
mod nodes;
mod open_loop;
mod plan;
mod qualify;
mod rate_load;
mod report;
mod resources;
mod stats;
mod target;
mod tsbs_rows;
mod units;

pub use audit::{audit, Audit, BatchOutcome};
pub use batch::host_names;
pub use batch::{encode_columnar_batch, encode_lp_batch, BatchShape, RowKind};
pub use campaign::{run_campaign, RunArgs};
pub use drill::{drill, run_drill, DrillArgs, DrillRecord, DrillReport};
pub use error::{Error, Result};
pub use load::{load, run_load, LoadArgs, WireFormat};
pub use load_report::LoadReport;
pub use plan::{plan_output, run_plan, Calibration, PlanArgs, PlanOutput};
pub use qualify::{qualify, Evidence, FailureCounters, Gate, Limits};
