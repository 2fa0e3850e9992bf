//! [`SimFs`]: the simulated disk's handle, crash points, faults and journal.

use std::{
    collections::VecDeque,
    ffi::OsString,
    fmt, io,
    path::{Path, PathBuf},
    sync::Arc,
};

use parking_lot::Mutex;

use super::{disk::Disk, Rng};
use crate::fs::{WalFile, WalFs};

/// Mutating calls remembered for [`SimFs::journal`].
const JOURNAL_LEN_MAX: usize = 1024;

/// A kind of file-system call, for [`SimFs::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsCall {
    /// [`WalFs::create_dir`].
    CreateDir,
    /// [`WalFs::exists`].
    Exists,
    /// [`WalFs::open`].
    Open,
    /// [`WalFs::create_new`].
    CreateNew,
    /// [`WalFs::remove_file`].
    RemoveFile,
    /// [`WalFs::rename`].
    Rename,
    /// [`WalFs::list_dir`].
    ListDir,
    /// [`WalFs::sync_dir`].
    SyncDir,
    /// [`WalFile::read_at`].
    Read,
    /// [`WalFile::write_all_at`].
    Write,
    /// [`WalFile::sync_data`].
    SyncData,
    /// [`WalFile::set_len`].
    SetLen,
    /// [`WalFile::len_bytes`].
    Len,
}

impl FsCall {
    /// Whether the call changes the disk (or what of it is durable). Only these count
    /// towards crash points.
    pub fn is_mutating(self) -> bool {
        match self {
            FsCall::CreateDir
            | FsCall::CreateNew
            | FsCall::RemoveFile
            | FsCall::Rename
            | FsCall::SyncDir
            | FsCall::Write
            | FsCall::SyncData
            | FsCall::SetLen => true,
            FsCall::Exists | FsCall::Open | FsCall::ListDir | FsCall::Read | FsCall::Len => false,
        }
    }
}

/// What a power loss keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerLoss {
    /// Exactly what completed syncs covered: each file's bytes as of its last
    /// `fdatasync`, each directory's entries as of its last fsync. Nothing else.
    Strict,
    /// Also part of the rest, chosen by the seed: each file keeps a random prefix of its
    /// unsynced bytes and each directory a random prefix of its unsynced changes, as a
    /// disk that wrote back part of its cache. What completed syncs covered always
    /// survives.
    Torn,
}

/// An in-memory disk that models power loss exactly. Cheap to clone; clones share the
/// disk, so a test keeps one to crash, cut power and inspect, and hands another (as
/// `Arc<dyn WalFs>`) to the WAL.
///
/// Paths must be absolute; `/` always exists. Every open handle belongs to one "boot":
/// after [`SimFs::restart`] or [`SimFs::power_loss`] old handles fail, so drop the
/// `Wal` first.
#[derive(Clone)]
pub struct SimFs {
    sim: Arc<Mutex<Sim>>,
}

struct Sim {
    disk: Disk,
    rng: Rng,
    /// Bumped by restarts and power losses; handles of an older boot are stale.
    boot: u64,
    /// Mutating calls made so far (the crashed one and injected failures included).
    calls_mutating: u64,
    /// The mutating call with this number (counting from 1) crashes the process.
    crash_at: Option<u64>,
    crashed: bool,
    /// One-shot failures, first match wins.
    faults: Vec<(FsCall, io::Error)>,
    journal: VecDeque<String>,
}

fn crashed_error() -> io::Error {
    io::Error::other("SimFs: the process crashed here (crash point); restart or cut power")
}

impl Sim {
    /// Gatekeeper of every call: refuses after a crash, counts mutating calls, crashes at
    /// the crash point, and serves injected faults.
    fn begin(&mut self, call: FsCall, what: impl FnOnce() -> String) -> io::Result<()> {
        if self.crashed {
            return Err(crashed_error());
        }
        let fault = self.faults.iter().position(|(c, _)| *c == call);
        if !call.is_mutating() && fault.is_none() {
            return Ok(());
        }
        let what = what();
        if call.is_mutating() {
            self.calls_mutating += 1;
            if self.crash_at == Some(self.calls_mutating) {
                self.crashed = true;
                self.log(format!("#{} CRASH before {what}", self.calls_mutating));
                return Err(crashed_error());
            }
            self.log(format!("#{} {what}", self.calls_mutating));
        }
        if let Some(k) = fault {
            let (_, error) = self.faults.remove(k);
            self.log(format!("   ^ failed by injection: {error}"));
            return Err(error);
        }
        Ok(())
    }

    fn log(&mut self, line: String) {
        if self.journal.len() == JOURNAL_LEN_MAX {
            self.journal.pop_front();
        }
        self.journal.push_back(line);
    }

    /// A new boot: old handles go stale, crash points and faults are forgotten.
    fn reboot(&mut self, what: &str) {
        self.boot += 1;
        self.crashed = false;
        self.crash_at = None;
        self.faults.clear();
        self.log(format!("-- {what} --"));
    }
}

impl SimFs {
    /// An empty disk (only `/`). `seed` drives every random choice ([`PowerLoss::Torn`]).
    pub fn new(seed: u64) -> SimFs {
        SimFs {
            sim: Arc::new(Mutex::new(Sim {
                disk: Disk::default(),
                rng: Rng(seed),
                boot: 0,
                calls_mutating: 0,
                crash_at: None,
                crashed: false,
                faults: Vec::new(),
                journal: VecDeque::new(),
            })),
        }
    }

    /// An independent copy of the disk as it is now (synced and unsynced state alike),
    /// with the same journal and random state, no crash point and no pending fault:
    /// prepare a disk once, then run many experiments on copies.
    pub fn fork(&self) -> SimFs {
        let sim = self.sim.lock();
        SimFs {
            sim: Arc::new(Mutex::new(Sim {
                disk: sim.disk.clone(),
                rng: sim.rng.clone(),
                boot: sim.boot + 1,
                calls_mutating: sim.calls_mutating,
                crash_at: None,
                crashed: false,
                faults: Vec::new(),
                journal: sim.journal.clone(),
            })),
        }
    }

    /// The process dies before its `calls`+1-th mutating call from now: the first
    /// `calls` mutating calls happen, then that call and every later call (of any kind)
    /// fails without effect until [`SimFs::restart`] or [`SimFs::power_loss`].
    pub fn crash_after(&self, calls: u64) {
        let mut sim = self.sim.lock();
        sim.crash_at = Some(sim.calls_mutating + calls + 1);
    }

    /// Whether the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.sim.lock().crashed
    }

    /// Mutating calls so far (see [`FsCall::is_mutating`]); differences of it count the
    /// calls an operation makes, for [`SimFs::crash_after`].
    pub fn mutating_calls(&self) -> u64 {
        self.sim.lock().calls_mutating
    }

    /// The next call of kind `call` fails with `error` and has no effect (it still
    /// counts as a mutating call if it is one). Faults queue; the first match wins.
    pub fn fail_next(&self, call: FsCall, error: io::Error) {
        self.sim.lock().faults.push((call, error));
    }

    /// The process restarts and the OS stays up: everything written survives, synced or
    /// not. Open handles go stale; crash point and pending faults are cleared.
    pub fn restart(&self) {
        let mut sim = self.sim.lock();
        sim.reboot("restart");
        sim.disk.forget_unreachable_files();
    }

    /// The power goes out and comes back: only what completed syncs covered survives
    /// (plus, with [`PowerLoss::Torn`], a seeded part of the rest). Open handles go
    /// stale; crash point and pending faults are cleared.
    pub fn power_loss(&self, mode: PowerLoss) {
        let mut sim = self.sim.lock();
        let sim = &mut *sim;
        sim.reboot(match mode {
            PowerLoss::Strict => "power loss",
            PowerLoss::Torn => "power loss (torn)",
        });
        let rng = match mode {
            PowerLoss::Strict => None,
            PowerLoss::Torn => Some(&mut sim.rng),
        };
        sim.disk.power_loss(rng);
    }

    /// The last mutating calls, numbered, with crashes, injected failures and reboots:
    /// print it when a crash-point test fails.
    pub fn journal(&self) -> Vec<String> {
        self.sim.lock().journal.iter().cloned().collect()
    }

    fn file(&self, inode: u64, path: &Path) -> Box<dyn WalFile> {
        let boot = self.sim.lock().boot;
        Box::new(SimFile {
            sim: Arc::clone(&self.sim),
            inode,
            boot,
            path: path.to_path_buf(),
        })
    }
}

impl fmt::Debug for SimFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sim = self.sim.lock();
        f.debug_struct("SimFs")
            .field("boot", &sim.boot)
            .field("calls_mutating", &sim.calls_mutating)
            .field("crashed", &sim.crashed)
            .finish_non_exhaustive()
    }
}

impl WalFs for SimFs {
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut sim = self.sim.lock();
        sim.begin(FsCall::CreateDir, || format!("mkdir {}", dir.display()))?;
        sim.disk.create_dir(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let mut sim = self.sim.lock();
        sim.begin(FsCall::Exists, || format!("exists {}", path.display()))?;
        Ok(sim.disk.exists(path))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let inode = {
            let mut sim = self.sim.lock();
            sim.begin(FsCall::Open, || format!("open {}", path.display()))?;
            sim.disk.lookup_file(path)?
        };
        Ok(self.file(inode, path))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let inode = {
            let mut sim = self.sim.lock();
            sim.begin(FsCall::CreateNew, || format!("create {}", path.display()))?;
            sim.disk.create_new(path)?
        };
        Ok(self.file(inode, path))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut sim = self.sim.lock();
        sim.begin(FsCall::RemoveFile, || format!("remove {}", path.display()))?;
        sim.disk.remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut sim = self.sim.lock();
        let what = || format!("rename {} -> {}", from.display(), to.display());
        sim.begin(FsCall::Rename, what)?;
        sim.disk.rename(from, to)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let mut sim = self.sim.lock();
        sim.begin(FsCall::ListDir, || format!("list {}", dir.display()))?;
        sim.disk.list_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut sim = self.sim.lock();
        sim.begin(FsCall::SyncDir, || format!("fsync dir {}", dir.display()))?;
        sim.disk.sync_dir(dir)
    }
}

/// A handle on one inode, valid for one boot.
struct SimFile {
    sim: Arc<Mutex<Sim>>,
    inode: u64,
    boot: u64,
    path: PathBuf,
}

impl SimFile {
    /// Runs `body` on the file's contents after the gatekeeper let the call through.
    fn call<T>(
        &self,
        call: FsCall,
        what: impl FnOnce() -> String,
        body: impl FnOnce(&mut super::disk::Contents) -> T,
    ) -> io::Result<T> {
        let mut sim = self.sim.lock();
        if sim.boot != self.boot {
            let path = self.path.display();
            return Err(io::Error::other(format!(
                "SimFs: {path}: handle from before a restart or power loss"
            )));
        }
        sim.begin(call, what)?;
        Ok(body(sim.disk.contents(self.inode)?))
    }
}

impl WalFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let what = || format!("read {}", self.path.display());
        self.call(FsCall::Read, what, |contents| {
            let data = &contents.volatile;
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            n
        })
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let what = || {
            let (path, len) = (self.path.display(), bytes.len());
            format!("write {path} @{offset} +{len}")
        };
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        self.call(FsCall::Write, what, |contents| {
            let data = &mut contents.volatile;
            let end = start + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[start..end].copy_from_slice(bytes);
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let what = || format!("fdatasync {}", self.path.display());
        self.call(FsCall::SyncData, what, |contents| {
            contents.durable.clone_from(&contents.volatile);
        })
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        let what = || format!("set_len {} {len_bytes}", self.path.display());
        let len = usize::try_from(len_bytes).map_err(io::Error::other)?;
        self.call(FsCall::SetLen, what, |contents| {
            contents.volatile.resize(len, 0);
        })
    }

    fn len_bytes(&self) -> io::Result<u64> {
        let what = || format!("len {}", self.path.display());
        self.call(FsCall::Len, what, |contents| contents.volatile.len() as u64)
    }
}
