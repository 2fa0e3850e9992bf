//! Integration tests of quiver-wal, one binary.

mod api;
mod common;
mod corruption;
mod crash_points;
mod faults;
mod group_commit;
mod ordering;
mod poison;
mod power_loss;
mod read;
mod rotation;
mod sim;
mod torn_tail;
