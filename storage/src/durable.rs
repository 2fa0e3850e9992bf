//! Replacing a file so that a crash or a power loss leaves the old content or the new,
//! never a mix, an empty file or a partial one.
//!
//! The one place Quiver does `temp file → write → fsync file → rename → fsync directory`
//! (Parquet files, adopted files, snapshots, the vote and other small Raft files):
//!
//! * the temporary file is `{name}.tmp` in the target's own directory, so the rename
//!   never crosses a filesystem;
//! * the file is fsynced *before* the rename: otherwise a power loss can leave the new
//!   name pointing at an empty or partial file (rename is ordered before the data on
//!   some filesystems);
//! * the directory is fsynced *after* the rename, so the new name itself survives;
//! * directories created on the way are made durable too (their parents are fsynced);
//! * on an error the temporary file is removed and the target is untouched.
//!
//! Writers of the same target path within the process take turns (the temporary name
//! is a function of the target, so two of them must not share it), and
//! [`remove_stale_temp_files`] skips targets being written, so it is safe at any time.
//! A temporary file left by a crash is overwritten by the next write of the same target
//! or removed by that sweep.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// What is appended to a target's file name to name its temporary file.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// Bytes buffered between the caller's writes and the file.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Files made durable by this process (path → length), when a simulation asked for the
/// record (see [`testing`]); `None` otherwise, and then nothing is recorded.
static DURABLE_RECORD: Mutex<Option<std::collections::HashMap<PathBuf, u64>>> = Mutex::new(None);

/// What a power-loss simulation needs: which files this process made durable, so that
/// it can take every other file away as a power loss would (a file written without the
/// fsyncs, or rewritten since without them, is lost or torn). Off unless enabled; a
/// node never enables it.
pub mod testing {
    use std::path::{Path, PathBuf};

    use super::DURABLE_RECORD;

    /// Starts recording durable writes (for the whole process).
    pub fn record_durable_writes() {
        DURABLE_RECORD
            .lock()
            .get_or_insert_with(std::collections::HashMap::new);
    }

    /// Whether `path` holds what a durable write left there (its length unchanged).
    pub fn is_durable(path: &Path) -> bool {
        let len = std::fs::metadata(path).map(|m| m.len()).ok();
        DURABLE_RECORD
            .lock()
            .as_ref()
            .is_some_and(|r| r.get(path).copied() == len && len.is_some())
    }

    /// Forgets the records under `dir` (its files were removed).
    pub fn forget_under(dir: &Path) {
        if let Some(record) = DURABLE_RECORD.lock().as_mut() {
            record.retain(|p: &PathBuf, _| !p.starts_with(dir));
        }
    }

    /// The records under `dir` (path and durable length): what a copy of the
    /// directory carries with it.
    pub fn records_under(dir: &Path) -> Vec<(PathBuf, u64)> {
        DURABLE_RECORD.lock().as_ref().map_or_else(Vec::new, |r| {
            r.iter()
                .filter(|(p, _)| p.starts_with(dir))
                .map(|(p, len)| (p.clone(), *len))
                .collect()
        })
    }

    /// Puts back records taken by [`records_under`] (a copy of the directory was
    /// restored in its place).
    pub fn restore_records(records: &[(PathBuf, u64)]) {
        if let Some(record) = DURABLE_RECORD.lock().as_mut() {
            record.extend(records.iter().cloned());
        }
    }

    pub(super) fn note(path: &Path) {
        let mut record = DURABLE_RECORD.lock();
        if let Some(record) = record.as_mut() {
            if let Ok(m) = std::fs::metadata(path) {
                record.insert(path.to_path_buf(), m.len());
            }
        }
    }
}

/// Targets being written by this process, and the condition writers wait on.
static IN_FLIGHT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
static IN_FLIGHT_DONE: Condvar = Condvar::new();

/// The steps of a replacement, in order; tests inject failures before each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    /// Creating missing directories (and fsyncing their parents).
    CreateDirs,
    /// Creating the temporary file.
    CreateTemp,
    /// Handing the file to the caller's writer and flushing the buffer.
    Write,
    /// fsync of the temporary file.
    SyncFile,
    /// Renaming the temporary file over the target.
    Rename,
    /// fsync of the target's directory.
    SyncDir,
}

/// Whether the steps that make a replacement survive a power loss run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// fsync the file before the rename and the directory after it.
    Durable,
    /// Rename only: atomic against a process crash, not against a power loss.
    Atomic,
}

/// Replaces `path` with what `write` writes, durably: when this returns `Ok`, the new
/// content survives a power loss; whatever happens before, `path` holds the old content
/// (or nothing, if it did not exist), never a partial one. Missing parent directories
/// are created durably. `write` gets a buffered writer; the buffer is flushed here.
pub fn replace_file_durably<T, E: From<Error>>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T, E>,
) -> Result<T, E> {
    replace(path, Durability::Durable, write, &mut |_| Ok(()))
}

/// Like [`replace_file_durably`] without any fsync: a reader sees the old or the new
/// content after a process crash, but a power loss may lose the new content (or, on
/// some filesystems, leave an empty file). For files that may lag, like a commit hint.
pub fn replace_file_atomically<T, E: From<Error>>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T, E>,
) -> Result<T, E> {
    replace(path, Durability::Atomic, write, &mut |_| Ok(()))
}

/// Moves a complete file written elsewhere on the same filesystem (`staged`) to
/// `target`, durably: fsyncs it, creates `target`'s directories durably, renames it and
/// fsyncs `target`'s directory. On an error `staged` may still exist; the caller owns
/// it.
pub fn install_file_durably(staged: &Path, target: &Path) -> Result<()> {
    install(staged, target, &mut |_| Ok(()))
}

/// Creates `dir` and its missing ancestors, and fsyncs the parent of each directory it
/// created, so the new directories survive a power loss.
pub fn create_dir_all_durably(dir: &Path) -> Result<()> {
    let dir = non_empty(dir);
    let mut missing: Vec<&Path> = Vec::new();
    let mut at = Some(dir);
    // Bounded by the number of components of `dir`.
    while let Some(d) = at {
        match fs::metadata(d) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(io_error(
                    d,
                    io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(d);
                at = d.parent().map(non_empty);
            }
            Err(e) => return Err(io_error(d, e)),
        }
    }
    for d in missing.iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            // Another writer created it meanwhile; its parent is fsynced below anyway.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error(d, e)),
        }
    }
    for d in &missing {
        if let Some(parent) = d.parent() {
            sync_dir(non_empty(parent))?;
        }
    }
    Ok(())
}

/// Removes the temporary files a crash left in `dir` (not recursively), except those of
/// targets being written right now. Returns what it removed.
pub fn remove_stale_temp_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io_error(dir, e))?.path();
        if remove_if_stale_temp(&path)? {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Removes `path` if it is a temporary file whose target is not being written.
/// Returns whether it did.
pub(crate) fn remove_if_stale_temp(path: &Path) -> Result<bool> {
    let Some(target) = target_of_temp(path) else {
        return Ok(false);
    };
    // Held while removing, so no writer of `target` can start in between.
    let in_flight = IN_FLIGHT.lock();
    if in_flight.contains(&target) {
        return Ok(false);
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(path, e)),
    }
}

/// The target a temporary file was written for, if `path` names one.
fn target_of_temp(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let target = name.strip_suffix(TEMP_SUFFIX)?;
    if target.is_empty() {
        return None;
    }
    Some(path.with_file_name(target))
}

/// The temporary file of `target`.
pub(crate) fn temp_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(TEMP_SUFFIX);
    target.with_file_name(name)
}

pub(crate) fn replace<T, E: From<Error>>(
    path: &Path,
    durability: Durability,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T, E>,
    fault: &mut dyn FnMut(Step) -> io::Result<()>,
) -> Result<T, E> {
    let _turn = Turn::take(path);
    let dir = non_empty(path.parent().unwrap_or(Path::new(".")));
    let tmp = temp_path(path);
    fault(Step::CreateDirs).map_err(|e| io_error(dir, e))?;
    match durability {
        Durability::Durable => create_dir_all_durably(dir)?,
        Durability::Atomic => fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?,
    }
    fault(Step::CreateTemp).map_err(|e| io_error(&tmp, e))?;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| io_error(&tmp, e))?;
    let mut temp = TempFile {
        path: &tmp,
        armed: true,
    };
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, file);
    let value = write(&mut writer)?;
    fault(Step::Write).map_err(|e| io_error(&tmp, e))?;
    let file = writer
        .into_inner()
        .map_err(|e| io_error(&tmp, e.into_error()))?;
    if durability == Durability::Durable {
        fault(Step::SyncFile).map_err(|e| io_error(&tmp, e))?;
        file.sync_all().map_err(|e| io_error(&tmp, e))?;
    }
    drop(file);
    fault(Step::Rename).map_err(|e| io_error(path, e))?;
    fs::rename(&tmp, path).map_err(|e| io_error(path, e))?;
    temp.armed = false;
    if durability == Durability::Durable {
        fault(Step::SyncDir).map_err(|e| io_error(dir, e))?;
        sync_dir(dir)?;
        testing::note(path);
    }
    Ok(value)
}

pub(crate) fn install(
    staged: &Path,
    target: &Path,
    fault: &mut dyn FnMut(Step) -> io::Result<()>,
) -> Result<()> {
    let _turn = Turn::take(target);
    let dir = non_empty(target.parent().unwrap_or(Path::new(".")));
    fault(Step::SyncFile).map_err(|e| io_error(staged, e))?;
    File::open(staged)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_error(staged, e))?;
    fault(Step::CreateDirs).map_err(|e| io_error(dir, e))?;
    create_dir_all_durably(dir)?;
    fault(Step::Rename).map_err(|e| io_error(target, e))?;
    fs::rename(staged, target).map_err(|e| io_error(target, e))?;
    fault(Step::SyncDir).map_err(|e| io_error(dir, e))?;
    sync_dir(dir)?;
    testing::note(target);
    Ok(())
}

/// This writer's turn at a target: other writers of the same path wait until it ends.
struct Turn {
    path: PathBuf,
}

impl Turn {
    fn take(path: &Path) -> Turn {
        let mut in_flight = IN_FLIGHT.lock();
        // Each wake-up either finds the path free or waits for the current writer, which
        // finishes in bounded time (its own IO); no spinning.
        while in_flight.contains(path) {
            IN_FLIGHT_DONE.wait(&mut in_flight);
        }
        in_flight.insert(path.to_path_buf());
        Turn {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        IN_FLIGHT.lock().remove(&self.path);
        IN_FLIGHT_DONE.notify_all();
    }
}

/// A temporary file, removed when dropped unless the rename consumed it.
struct TempFile<'a> {
    path: &'a Path,
    armed: bool,
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Err(e) = fs::remove_file(self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove a temporary file");
            }
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// `Path::parent` of a bare file name is the empty path; it means the current directory.
fn non_empty(dir: &Path) -> &Path {
    if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }
}

fn io_error(path: &Path, source: io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
