//! A file system that skips `fdatasync`: the control experiment for durability tests.

use std::{ffi::OsString, io, path::Path, sync::Arc};

use crate::fs::{WalFile, WalFs};

/// Wraps a file system and makes every file's `fdatasync` a no-op that reports success,
/// as a disk with a volatile write cache that ignores flushes would. Directory fsyncs
/// pass through, so only the data sync is missing.
///
/// A power-loss test that still passes on top of this does not check durability.
pub struct LyingFs {
    inner: Arc<dyn WalFs>,
}

impl LyingFs {
    /// Lies on top of `inner`.
    pub fn new(inner: Arc<dyn WalFs>) -> LyingFs {
        LyingFs { inner }
    }
}

impl WalFs for LyingFs {
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        Ok(Box::new(LyingFile(self.inner.open(path)?)))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        Ok(Box::new(LyingFile(self.inner.create_new(path)?)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.inner.list_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
}

struct LyingFile(Box<dyn WalFile>);

impl WalFile for LyingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.0.set_len(len_bytes)
    }

    fn len_bytes(&self) -> io::Result<u64> {
        self.0.len_bytes()
    }
}
