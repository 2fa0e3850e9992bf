//! Queries that run where the data is: the scan of a measurement held by other nodes,
//! and the operators above it, run on a member of its group; this node merges.
//!
//! Built on datafusion-distributed (its `DistributedExec`, network boundaries, Arrow
//! Flight transport and `Worker`): `stages` places the boundaries, `routing` picks the
//! node, `codec` ships Quiver's scan, `worker` runs what other nodes send.

mod codec;
mod group_scan;
mod routing;
mod server;
mod stages;
mod table;
mod unreachable;
mod worker;

pub use routing::{WorkerDirectory, WORKER_SECRET_HEADER};
pub(crate) use server::serve;
pub(crate) use stages::ScanWhereTheDataIs;
pub(crate) use table::GroupTable;
pub(crate) use unreachable::Reruns;
pub use unreachable::UnreachableWorkers;
pub use worker::Distribution;
pub(crate) use worker::{coordinator, worker};
