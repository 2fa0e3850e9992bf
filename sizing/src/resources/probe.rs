//! The machine probe: cores, memory, and for each volume the two numbers that limit a
//! WAL: sequential write MB/s and `fdatasync` calls per second from one writer. Each
//! takes a few seconds, on a scratch file in the volume's directory, removed after.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::procfs::{self, DeviceId};
use crate::error::{Error, Result};

/// Size of each sequential write.
const SEQUENTIAL_BLOCK_BYTES: usize = 1024 * 1024;
/// Size of each write between two fdatasyncs (one WAL page-sized record).
const SYNC_BLOCK_BYTES: usize = 4096;

/// How long and how much each probe measures.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct ProbeBudget {
    /// Most bytes the sequential write probe writes.
    pub sequential_bytes_max: u64,
    /// Longest it writes before the final fdatasync, in seconds.
    pub sequential_s_max: f64,
    /// How long the fdatasync probe runs, in seconds.
    pub sync_s: f64,
}

/// What one volume can do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VolumeProbe {
    /// `data`, `wal`, or `data+wal` when both directories are on one device.
    pub role: String,
    /// The directory probed.
    pub path: PathBuf,
    /// The block device (`vda`), when `/proc/diskstats` lists it.
    pub device: Option<String>,
    /// `major:minor`.
    pub device_id: Option<String>,
    /// Sequential write MB/s, the final fdatasync included.
    pub sequential_write_mb_per_s: f64,
    /// 4 KiB write + fdatasync pairs per second, one writer.
    pub fdatasync_per_s: f64,
}

/// The machine the campaign ran on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// Cores this process may use.
    pub cores: u32,
    /// Total memory, MB.
    pub memory_total_mb: f64,
    /// CPU model.
    pub cpu_model: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// The data and WAL volumes.
    pub volumes: Vec<VolumeProbe>,
}

/// Cores, memory, host name (no disk probe).
pub fn machine_basics() -> Machine {
    Machine {
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        cores: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        memory_total_mb: procfs::memory_total_bytes().unwrap_or(0) as f64 / 1e6,
        cpu_model: procfs::cpu_model(),
        kernel: procfs::kernel_release(),
        volumes: Vec::new(),
    }
}

/// Probes the volume holding `dir` (blocking: run it on a blocking thread).
pub fn probe_volume(role: &str, dir: &Path, budget: ProbeBudget) -> Result<VolumeProbe> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let device: Option<DeviceId> = procfs::device_of(dir);
    let path = dir.join(format!(
        ".quiver-sizing-probe-{:016x}",
        rand::random::<u64>()
    ));
    let result = sequential(&path, budget).and_then(|mb| Ok((mb, syncs(&path, budget)?)));
    let _ = std::fs::remove_file(&path);
    let (sequential_write_mb_per_s, fdatasync_per_s) = result?;
    Ok(VolumeProbe {
        role: role.to_string(),
        path: dir.to_path_buf(),
        device: device.and_then(procfs::disk_name),
        device_id: device.map(|d| d.to_string()),
        sequential_write_mb_per_s,
        fdatasync_per_s,
    })
}

/// Bytes that do not compress, so a compressing or deduplicating device shows its
/// real rate.
fn incompressible(bytes: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn sequential(path: &Path, budget: ProbeBudget) -> Result<f64> {
    let block = incompressible(SEQUENTIAL_BLOCK_BYTES);
    let mut file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let started = Instant::now();
    let limit = Duration::from_secs_f64(budget.sequential_s_max);
    let mut written = 0u64;
    while written < budget.sequential_bytes_max && started.elapsed() < limit {
        file.write_all(&block).map_err(|e| Error::io(path, e))?;
        written += block.len() as u64;
    }
    file.sync_data().map_err(|e| Error::io(path, e))?;
    Ok(written as f64 / started.elapsed().as_secs_f64().max(1e-6) / 1e6)
}

fn syncs(path: &Path, budget: ProbeBudget) -> Result<f64> {
    let block = incompressible(SYNC_BLOCK_BYTES);
    let mut file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let started = Instant::now();
    let limit = Duration::from_secs_f64(budget.sync_s);
    let mut count = 0u64;
    while started.elapsed() < limit {
        file.write_all(&block).map_err(|e| Error::io(path, e))?;
        file.sync_data().map_err(|e| Error::io(path, e))?;
        count += 1;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64().max(1e-6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_measures_something_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let budget = ProbeBudget {
            sequential_bytes_max: 4 * 1024 * 1024,
            sequential_s_max: 1.0,
            sync_s: 0.2,
        };
        let p = probe_volume("data", dir.path(), budget).unwrap();
        assert!(p.sequential_write_mb_per_s > 0.0);
        assert!(p.fdatasync_per_s > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
