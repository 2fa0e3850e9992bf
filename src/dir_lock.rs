//! One process per data directory. Two nodes started on the same directories (a
//! second `quiver serve`, a supervisor restarting a node whose old process still runs)
//! would append to the same WAL and overwrite each other's catalog. At start the node
//! takes an exclusive lock on a file in each of its directories (the data directory
//! and, when it is elsewhere, the WAL directory) and holds it until the process ends;
//! the OS drops the lock when the process dies, even by `kill -9`, so a stale lock
//! file never blocks a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use fs2::FileExt;

/// The lock file's name inside each directory.
pub const LOCK_FILE: &str = "quiver.lock";

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "{setting} {dir} is in use by another quiver process{holder}; stop it first (two processes on one directory would corrupt its log)"
    )]
    InUse {
        /// The setting that names the directory.
        setting: &'static str,
        /// The directory.
        dir: String,
        /// ` (pid N)` when the holder wrote its pid.
        holder: String,
    },
    /// The lock file could not be created or locked.
    #[error("{setting} {}: cannot lock {LOCK_FILE}: {source}", dir.display())]
    Io {
        /// The setting that names the directory.
        setting: &'static str,
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// Held locks; dropping this releases them.
#[derive(Debug)]
pub struct DirLocks {
    _files: Vec<File>,
}

/// Locks `data_dir` and, if it is another directory, `wal_dir` (both created if
/// missing); fails at once, naming the directory, when another process holds either.
pub fn lock_dirs(data_dir: &Path, wal_dir: &Path) -> Result<DirLocks, LockError> {
    let mut files = vec![lock_one("storage.dir", data_dir)?];
    let same = match (data_dir.canonicalize(), wal_dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => data_dir == wal_dir,
    };
    if !same {
        files.push(lock_one("wal.dir", wal_dir)?);
    }
    Ok(DirLocks { _files: files })
}

fn lock_one(setting: &'static str, dir: &Path) -> Result<File, LockError> {
    let io = |source| LockError::Io {
        setting,
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(LOCK_FILE))
        .map_err(io)?;
    if let Err(e) = file.try_lock_exclusive() {
        if e.kind() != fs2::lock_contended_error().kind() {
            return Err(io(e));
        }
        let mut pid = String::new();
        let holder = match file.read_to_string(&mut pid) {
            Ok(_) if !pid.trim().is_empty() => format!(" (pid {})", pid.trim()),
            _ => String::new(),
        };
        return Err(LockError::InUse {
            setting,
            dir: dir.display().to_string(),
            holder,
        });
    }
    // The pid is for the operator reading the error above; the lock is what counts.
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_with_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        let held = lock_dirs(dir.path(), &wal).unwrap();
        let err = lock_dirs(dir.path(), &wal).unwrap_err().to_string();
        assert!(err.contains("in use by another quiver process"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        // The WAL directory is locked on its own: a node pointing only its WAL here
        // is refused too.
        let other = tempfile::tempdir().unwrap();
        let err = lock_dirs(other.path(), &wal).unwrap_err().to_string();
        assert!(err.contains("wal.dir"), "{err}");
        drop(held);
        lock_dirs(dir.path(), &wal).unwrap();
    }
}
