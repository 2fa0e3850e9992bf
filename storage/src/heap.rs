//! Gives memory that flushes and merges free back to the operating system.
//!
//! glibc keeps freed memory in its arenas for reuse, and a node frees a lot of it: each
//! flush drops a segment of buffered rows (hundreds of MB under a burst), each merge its
//! read buffers. Measured on the TSBS shape (five back-to-back 3 M-row line-protocol
//! runs, then idle until every buffer was flushed): 1,175 MiB resident with nothing
//! buffered, 335 MiB after one `malloc_trim`. Until it is returned, resident size says
//! nothing about what the node holds, and `storage.memory_bytes_max` is no bound an
//! operator can size RAM by. So the node returns it after every flush and merge, at most
//! once per [`RELEASE_GAP`], and at a [`GROWTH_CHECK`] when resident size has grown
//! without a flush (queries, snapshots).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Shortest time between two releases: flushes that end close together (one per table)
/// share one, and queries still reading a flushed segment have let go of it.
pub const RELEASE_GAP: Duration = Duration::from_millis(500);

/// What one release did.
#[derive(Debug, Clone, Copy)]
pub struct Released {
    /// Bytes of resident size that went (0 off glibc, where there is nothing to do).
    pub bytes: u64,
    /// Resident size after it: the base the next [`GROWTH_CHECK`] compares with.
    pub resident_after: u64,
}

/// Returns freed heap memory to the operating system now.
pub fn release_freed_memory() -> Released {
    let before = resident_bytes();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
    let resident_after = resident_bytes();
    Released {
        bytes: before.saturating_sub(resident_after),
        resident_after,
    }
}

/// How often the node looks for growth no flush announced: queries, snapshots and
/// request bodies free memory too, and a node that only answers queries never flushes.
pub const GROWTH_CHECK: Duration = Duration::from_secs(60);

/// Growth of resident size since the last release that makes [`GROWTH_CHECK`] release.
pub const GROWTH_RELEASE_BYTES: u64 = 64 << 20;

/// Whether resident size has grown enough since the last release to try one.
pub fn grown_enough(resident_now: u64, resident_after_last_release: u64) -> bool {
    resident_now >= resident_after_last_release.saturating_add(GROWTH_RELEASE_BYTES)
}

/// Releases freed memory each time `freed` is notified, no more often than
/// [`RELEASE_GAP`], and every [`GROWTH_CHECK`] without one if resident size has grown
/// by [`GROWTH_RELEASE_BYTES`] since the last; runs until the task is dropped. Holds
/// only the signal, never the storage, so it keeps nothing alive.
pub async fn release_after_frees(freed: Arc<Notify>) {
    let mut resident_after_last = resident_bytes();
    loop {
        tokio::select! {
            _ = freed.notified() => {
                // Notifications during the wait or the release leave one permit: the
                // frees they announce get one more release, not one each.
                tokio::time::sleep(RELEASE_GAP).await;
            }
            _ = tokio::time::sleep(GROWTH_CHECK) => {
                if !grown_enough(resident_bytes(), resident_after_last) {
                    continue;
                }
            }
        }
        let started = Instant::now();
        let Ok(released) = tokio::task::spawn_blocking(release_freed_memory).await else {
            return;
        };
        resident_after_last = released.resident_after;
        metrics::counter!("quiver_heap_released_bytes_total").increment(released.bytes);
        tracing::debug!(
            released_mib = released.bytes >> 20,
            ms = started.elapsed().as_millis() as u64,
            "freed memory returned to the operating system"
        );
    }
}

/// This process's resident size in bytes (0 where `/proc` is not there).
pub fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf reads a constant of the running system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn growth_releases_only_past_the_threshold() {
        let base = 300 << 20;
        assert!(!grown_enough(base, base));
        assert!(!grown_enough(base + GROWTH_RELEASE_BYTES - 1, base));
        assert!(grown_enough(base + GROWTH_RELEASE_BYTES, base));
        // Shrinking (buffers flushed, memory returned elsewhere) never releases.
        assert!(!grown_enough(base - (100 << 20), base));
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Freed memory held in a thread's arena, between chunks still in use (the state a
    /// flush leaves), goes back: the release must not be a no-op.
    #[test]
    fn memory_freed_between_live_chunks_leaves_the_process() {
        const CHUNK: usize = 64 << 10;
        const CHUNKS: usize = 4096; // 256 MiB
        let kept = std::thread::spawn(|| {
            let mut chunks: Vec<Vec<u8>> = (0..CHUNKS).map(|i| vec![i as u8; CHUNK]).collect();
            // Keep one chunk in sixteen, so nothing at the top of the arena can shrink it.
            let kept: Vec<Vec<u8>> = chunks.iter_mut().step_by(16).map(std::mem::take).collect();
            drop(chunks);
            kept
        })
        .join()
        .expect("the allocating thread");
        let released = release_freed_memory().bytes;
        assert!(
            released > 120 << 20,
            "released only {} MiB of the 240 MiB freed",
            released >> 20
        );
        assert_eq!(kept.len(), CHUNKS / 16);
        assert!(kept.iter().all(|c| c.len() == CHUNK));
    }
}
