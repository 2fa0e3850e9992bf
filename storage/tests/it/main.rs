//! quiver-storage through its public API: apply, flush, persist, reopen, snapshot
//! images, Parquet layout, property tests of the decoders, their limits, and the fuzz
//! corpora replayed.

mod compaction;
mod compaction_stream;
mod durability;
mod flush_policy;
mod fuzz_corpus;
mod heap;
mod int_width;
mod lifecycle;
mod limits;
mod line_protocol_props;
mod msgpack_props;
mod parquet_layout;
mod prom_props;
mod sort_lead;
mod storage_cycle;
mod support;
