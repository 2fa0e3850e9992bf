//! Readers of Linux's `/proc`: CPU time and resident memory of a process, its I/O, the
//! machine's CPU time, a block device's counters, total memory. Each returns `None`
//! when the file is missing or unreadable (another OS, another user's process), so a
//! missing number is reported as missing, never as zero.

use std::path::Path;

/// CPU time and resident memory of one process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStat {
    /// User + system CPU time since it started, in seconds.
    pub cpu_s: f64,
    /// Resident set size, in bytes.
    pub rss_bytes: u64,
}

/// Bytes a process caused to be read from and written to storage (`/proc/PID/io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIo {
    /// `write_bytes`: bytes sent to the block layer on its behalf.
    pub write_bytes: u64,
}

/// The machine's CPU time (first line of `/proc/stat`), in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// Ticks not idle and not waiting for I/O.
    pub busy: u64,
    /// All ticks.
    pub total: u64,
}

/// Counters of one block device (`/proc/diskstats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskCounters {
    /// Sectors (512 bytes) written.
    pub sectors_written: u64,
    /// Write requests completed.
    pub writes: u64,
    /// Flush requests completed (what `fdatasync` sends to the device); `None` on
    /// kernels before 5.5, which do not count them.
    pub flushes: Option<u64>,
}

/// A block device as the kernel numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct DeviceId {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

fn page_bytes() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if bytes > 0 {
        bytes as u64
    } else {
        4096
    }
}

/// CPU time and RSS of process `pid` (`/proc/PID/stat`).
pub fn process_stat(pid: u32) -> Option<ProcessStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_process_stat(&text, clock_ticks_per_s(), page_bytes())
}

/// Parses `/proc/PID/stat`: the fields after the command name's closing parenthesis
/// (which may itself contain spaces and parentheses).
fn parse_process_stat(text: &str, ticks_per_s: f64, page_bytes: u64) -> Option<ProcessStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; utime is field 14, stime 15, rss 24.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let rss_pages: u64 = fields.get(21)?.parse().ok()?;
    Some(ProcessStat {
        cpu_s: (utime + stime) as f64 / ticks_per_s,
        rss_bytes: rss_pages * page_bytes,
    })
}

/// Storage I/O of process `pid` (`/proc/PID/io`; readable for our own children).
pub fn process_io(pid: u32) -> Option<ProcessIo> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let write_bytes = text
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))?
        .trim()
        .parse()
        .ok()?;
    Some(ProcessIo { write_bytes })
}

/// The machine's CPU time.
pub fn cpu_times() -> Option<CpuTimes> {
    parse_cpu_times(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_cpu_times(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    Some(CpuTimes {
        busy: total.saturating_sub(idle),
        total,
    })
}

/// Counters of `device` in `/proc/diskstats`.
pub fn disk_counters(device: DeviceId) -> Option<DiskCounters> {
    parse_disk_counters(&std::fs::read_to_string("/proc/diskstats").ok()?, device)
}

fn parse_disk_counters(text: &str, device: DeviceId) -> Option<DiskCounters> {
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first()?.parse::<u32>().ok()? != device.major
            || f.get(1)?.parse::<u32>().ok()? != device.minor
        {
            return None;
        }
        // f[3..] follow major, minor and name: f[7] is writes completed, f[9]
        // sectors written, f[18] flushes completed (kernel 5.5+).
        Some(DiskCounters {
            writes: f.get(7)?.parse().ok()?,
            sectors_written: f.get(9)?.parse().ok()?,
            flushes: f.get(18).and_then(|v| v.parse().ok()),
        })
    })
}

/// The name of a block device (`vda`, `nvme0n1p2`), if `/proc/diskstats` lists it.
pub fn disk_name(device: DeviceId) -> Option<String> {
    let text = std::fs::read_to_string("/proc/diskstats").ok()?;
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.first()?.parse::<u32>().ok()? == device.major
            && f.get(1)?.parse::<u32>().ok()? == device.minor)
            .then(|| f.get(2).map(|s| s.to_string()))
            .flatten()
    })
}

/// The device holding `path` (`st_dev`, decoded as glibc's `major()`/`minor()` do).
pub fn device_of(path: &Path) -> Option<DeviceId> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    Some(DeviceId {
        major: (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32,
        minor: ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32,
    })
}

/// Total memory of the machine, in bytes (`MemTotal` of `/proc/meminfo`).
pub fn memory_total_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The CPU model name, for the report.
pub fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_string())
}

/// The kernel release, for the report.
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_stat_survives_a_name_with_spaces_and_parentheses() {
        let text = "4242 (quiver (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 150 0 0 20 0 12 0 100 123456789 3000 18446744073709551615";
        let s = parse_process_stat(text, 100.0, 4096).unwrap();
        assert!((s.cpu_s - 4.0).abs() < 1e-9);
        assert_eq!(s.rss_bytes, 3000 * 4096);
    }

    #[test]
    fn machine_cpu_counts_iowait_as_idle() {
        let t = parse_cpu_times("cpu  100 10 40 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(
            t,
            CpuTimes {
                busy: 150,
                total: 1000
            }
        );
    }

    #[test]
    fn diskstats_finds_the_device_and_its_flushes() {
        let text = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n \
             254       0 vda 630052 23347 35056290 12606644 2534933 416906 72022184 719749 0 570268 13464512 881150 60 23428168 100866 724282 37251\n";
        let c = parse_disk_counters(
            text,
            DeviceId {
                major: 254,
                minor: 0,
            },
        )
        .unwrap();
        assert_eq!(c.writes, 2_534_933);
        assert_eq!(c.sectors_written, 72_022_184);
        assert_eq!(c.flushes, Some(724_282));
        let old_kernel = "254 0 vda 1 2 3 4 5 6 7 8 9 10 11\n";
        let c = parse_disk_counters(
            old_kernel,
            DeviceId {
                major: 254,
                minor: 0,
            },
        )
        .unwrap();
        assert_eq!(c.flushes, None);
        assert!(parse_disk_counters(text, DeviceId { major: 8, minor: 0 }).is_none());
    }

    #[test]
    fn our_own_process_is_readable() {
        let s = process_stat(std::process::id()).unwrap();
        assert!(s.rss_bytes > 0);
        assert!(memory_total_bytes().unwrap() > 0);
        assert!(cpu_times().unwrap().total > 0);
    }
}
