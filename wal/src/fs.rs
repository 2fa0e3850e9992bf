//! The file-system seam: every file and directory call the WAL makes goes through
//! [`WalFs`] and [`WalFile`], so a test can put a simulated disk underneath
//! (`testing::SimFs`, behind the `testing` feature) and cut power at any call.
//! [`OsFs`], the default, is the operating system.

use std::{
    ffi::OsString,
    fs::{File, OpenOptions},
    io,
    os::unix::fs::FileExt,
    path::Path,
};

use crate::error::{Error, Result};

/// The directory and file operations the WAL needs, and nothing more.
///
/// Semantics are POSIX's. In particular, durability is split the way a real disk splits
/// it: [`WalFile::sync_data`] makes a file's bytes durable, and only
/// [`WalFs::sync_dir`] on its directory makes a creation, rename or deletion in that
/// directory durable.
pub trait WalFs: Send + Sync + 'static {
    /// Creates one directory; its parent must exist. `AlreadyExists` if it does.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>>;
    /// Creates a new, empty file for reading and writing; `AlreadyExists` if there is one.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WalFile>>;
    /// Removes a file's directory entry.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to` within one directory, atomically replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Names of the entries of a directory, in no particular order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// `fsync`s a directory: creations, renames and deletions in it become durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file. Reads and writes are positional (`pread`/`pwrite`): there is no cursor,
/// so the writer thread and readers share one handle.
pub trait WalFile: Send + Sync + 'static {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `bytes` at `offset`, extending the file if needed.
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`: the file's bytes (and its length) become durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Sets the file's length, cutting or zero-extending it.
    fn set_len(&self, len_bytes: u64) -> io::Result<()>;
    /// The file's current length.
    fn len_bytes(&self) -> io::Result<u64>;

    /// Fills `buf` from `offset`; `UnexpectedEof` if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        // Each successful call makes progress or returns 0 (end of file), so this loop
        // ends after at most `buf.len()` iterations.
        while done < buf.len() {
            match self.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file ends before the bytes asked for",
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The operating system's file system: each call is the matching `std::fs` call.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsFs;

impl WalFs for OsFs {
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(OsFile(file)))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(OsFile(file)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// A file of [`OsFs`].
struct OsFile(File);

impl WalFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.0.set_len(len_bytes)
    }

    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
}

/// Deepest directory chain `create_dir_durably` creates: far beyond any real path, it
/// only bounds the walk up the ancestors.
const DIR_DEPTH_MAX: usize = 256;

/// `fsync`s `dir`, naming it in the error.
pub(crate) fn sync_dir(fs: &dyn WalFs, dir: &Path) -> Result<()> {
    fs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Creates `dir` and any missing ancestors. When `sync`, each new directory's parent is
/// fsynced afterwards: without it a power loss can take the new directory, and every
/// segment fsynced inside it, away.
pub(crate) fn create_dir_durably(fs: &dyn WalFs, dir: &Path, sync: bool) -> Result<()> {
    // Missing directories, deepest first. `Path::new("wal").parent()` is "": the current
    // directory, which exists.
    let mut missing = Vec::new();
    for ancestor in dir.ancestors().take(DIR_DEPTH_MAX) {
        if ancestor.as_os_str().is_empty()
            || fs.exists(ancestor).map_err(|e| Error::io(ancestor, e))?
        {
            break;
        }
        missing.push(ancestor);
    }
    for new_dir in missing.iter().rev() {
        match fs.create_dir(new_dir) {
            Ok(()) => {}
            // Someone else created it meanwhile: fine, it is there.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(*new_dir, e)),
        }
    }
    if sync {
        for new_dir in &missing {
            let parent = match new_dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            sync_dir(fs, parent)?;
        }
    }
    Ok(())
}
