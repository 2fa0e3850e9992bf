//! Integration tests of quiver-query against real Parquet files and memory batches.

mod aggregates;
mod catalog;
mod encode;
mod joins;
mod limits;
mod pruning;
mod sandbox;
mod support;
