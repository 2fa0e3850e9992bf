//! quiver-storage through its public API: apply, flush, persist, reopen, snapshot
//! images, Parquet layout, and property tests of the MessagePack decoder.

mod durability;
mod line_protocol_props;
mod msgpack_props;
mod parquet_layout;
mod storage_cycle;
