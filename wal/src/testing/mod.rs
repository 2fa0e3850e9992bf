//! Test doubles for the file-system seam (feature `testing`; always on in this crate's
//! own tests).
//!
//! - [`SimFs`]: an in-memory disk that models power loss exactly (per file, the bytes
//!   a completed `fdatasync` covered; per directory, the entries a completed directory
//!   fsync covered), with crash points ("the process dies before the Nth mutating
//!   call") and one-shot fault injection. Deterministic from its seed.
//! - [`LyingFs`]: a wrapper whose `fdatasync` does nothing and reports success, to prove
//!   a durability test notices a missing fsync.

mod disk;
mod lying;
mod sim_fs;
#[cfg(test)]
mod tests;

pub use self::lying::LyingFs;
pub use self::sim_fs::{FsCall, PowerLoss, SimFs};

/// splitmix64: small, seedable, and good enough to pick crash points and torn lengths.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}
