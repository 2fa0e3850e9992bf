//! End-to-end tests: real `quiver` processes on loopback ports, written to over HTTP,
//! killed with SIGKILL, restarted, and read back.

mod catalog_rebuild;
mod cluster;
mod cluster_hardening;
mod cluster_support;
mod common;
mod compaction;
mod config_errors;
mod crash;
mod decode_memory;
mod disk_full;
mod flight;
mod flood;
mod hardening;
mod ingest;
mod lifecycle;
mod lifecycle_cluster;
mod line_protocol;
mod lost_disk;
mod many_files;
mod names;
mod pg_wire;
mod prom_write;
mod query_functions;
mod query_http;
mod query_safety;
mod query_values;
mod restart;
mod sizing;
mod sizing_run;
mod start_sweep;
mod telegraf;
mod telegraf_wire;
mod tls;
mod tokens;
mod writers;
