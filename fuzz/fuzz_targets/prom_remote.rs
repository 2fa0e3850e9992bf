//! Arbitrary bytes through the Prometheus remote-write decoder with two sets of limits:
//! an error is fine, a panic is not, and what decodes respects the limits. The body
//! lives in `quiver_storage::fuzzing`, shared with the test that replays the corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quiver_storage::fuzzing::prom_remote(data);
});
