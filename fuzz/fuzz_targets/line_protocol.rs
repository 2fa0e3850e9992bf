//! Arbitrary bytes through the line-protocol parser with every precision and two sets of
//! limits: it must not panic, and every line must be accounted for exactly once. The
//! body lives in `quiver_storage::fuzzing`, shared with the test that replays the corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quiver_storage::fuzzing::line_protocol(data);
});
