//! Arbitrary bytes through the MessagePack decoder: an error is fine, a panic is not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_storage::WriteLimits;

fuzz_target!(|data: &[u8]| {
    let limits = WriteLimits::default();
    let _ = quiver_storage::decode_msgpack(data, 1_700_000_000_000_000_000, &limits, &|_| None);
});
