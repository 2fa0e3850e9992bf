//! What the machine and the node processes use while a run goes on: the machine probe,
//! `/proc` readers, the per-second sampler, `/metrics`, and the bottleneck rule.

pub mod bottleneck;
pub mod probe;
pub mod procfs;
pub mod prometheus;
pub mod sampler;
