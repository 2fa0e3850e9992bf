//! Lists the Parquet files of a local data directory at start, fast enough for a
//! million of them.
//!
//! `object_store`'s local listing turns every entry into an `ObjectMeta` through a URL
//! (percent-encoding, an e-tag string, several allocations) on one thread: 48 s for
//! 1,000,000 files here. A start needs only each file's name and size, so this walks the
//! tree with `read_dir` (whose entries carry the file type without a `stat`) and one
//! `stat` per file for its size, spreading the measurement directories over a few
//! threads so a cold page cache keeps the disk busy.
//!
//! Only names made of the characters Quiver's escaping produces are listed; anything
//! else under `data/` was not written by Quiver, cannot be addressed as an object path
//! unchanged, and is left alone with a warning.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::durable::{remove_if_stale_temp, TEMP_SUFFIX};
use crate::error::{Error, Result};

/// Threads walking measurement directories. More than the cores: with a cold page cache
/// each thread mostly waits for the disk.
const WALK_THREADS: usize = 8;

/// Depth below `data/` at which directories are handed to the walking threads
/// (`data/{database}/{measurement}`).
const PARALLEL_DEPTH: usize = 2;

/// What a walk found.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Object path (`data/...`) to size in bytes, for every `.parquet` file.
    pub files: BTreeMap<String, u64>,
    /// Object paths of temporary files of interrupted writes, removed.
    pub temps_removed: Vec<String>,
}

/// One directory still to walk: where it is, and its object path.
struct Dir {
    on_disk: PathBuf,
    object: String,
}

/// Lists `data_dir` (the directory of object path `prefix`). A missing directory is an
/// empty listing.
pub(super) fn list(data_dir: &Path, prefix: &str) -> Result<Listing> {
    let mut listing = Listing::default();
    let root = Dir {
        on_disk: data_dir.to_path_buf(),
        object: prefix.to_string(),
    };
    // The first levels on this thread; what lies below them goes to the workers.
    let mut level = vec![root];
    for _ in 0..PARALLEL_DEPTH {
        let mut next = Vec::new();
        for dir in &level {
            walk_one(dir, &mut listing, &mut |sub| next.push(sub))?;
        }
        level = next;
    }
    let parts = walk_in_parallel(&level)?;
    for part in parts {
        listing.files.extend(part.files);
        listing.temps_removed.extend(part.temps_removed);
    }
    Ok(listing)
}

/// Walks every directory of `dirs` and all below it, on up to [`WALK_THREADS`] threads.
fn walk_in_parallel(dirs: &[Dir]) -> Result<Vec<Listing>> {
    let next = AtomicUsize::new(0);
    let threads = WALK_THREADS.min(dirs.len()).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<Listing> {
                    let mut listing = Listing::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(dir) = dirs.get(i) else {
                            return Ok(listing);
                        };
                        walk_tree(dir, &mut listing)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .map_err(|_| Error::Catalog("a directory listing thread panicked".into()))?
            })
            .collect()
    })
}

/// Walks `dir` and everything below it on this thread.
fn walk_tree(dir: &Dir, listing: &mut Listing) -> Result<()> {
    let mut stack = Vec::new();
    walk_one(dir, listing, &mut |sub| stack.push(sub))?;
    while let Some(sub) = stack.pop() {
        walk_one(&sub, listing, &mut |deeper| stack.push(deeper))?;
    }
    Ok(())
}

/// Lists the entries of `dir` itself: files into `listing`, subdirectories to `below`.
fn walk_one(dir: &Dir, listing: &mut Listing, below: &mut dyn FnMut(Dir)) -> Result<()> {
    let io_error = |source: io::Error| Error::Io {
        path: dir.on_disk.clone(),
        source,
    };
    let entries = match fs::read_dir(&dir.on_disk) {
        Ok(entries) => entries,
        // Removed since its parent was read (a compaction deleting an emptied hour), or
        // no data at all yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_error)?;
        let on_disk = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            tracing::warn!(path = %on_disk.display(), "ignoring a file whose name is not UTF-8: Quiver did not write it");
            continue;
        };
        if !is_quiver_name(&name) {
            tracing::warn!(path = %on_disk.display(), "ignoring a name Quiver does not write");
            continue;
        }
        let object = format!("{}/{name}", dir.object);
        let file_type = entry.file_type().map_err(io_error)?;
        if file_type.is_dir() {
            below(Dir { on_disk, object });
        } else if name.ends_with(".parquet") {
            match entry.metadata() {
                Ok(meta) => {
                    listing.files.insert(object, meta.len());
                }
                // Deleted between the directory read and the stat.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(e)),
            }
        } else if name.ends_with(&format!(".parquet{TEMP_SUFFIX}"))
            && remove_if_stale_temp(&on_disk)?
        {
            listing.temps_removed.push(object);
        }
    }
    Ok(())
}

/// Whether every character of `name` is one Quiver's path escaping produces (see
/// `paths::escape_component`), so the object path equals the path on disk.
fn is_quiver_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path, bytes: usize) {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(path, vec![0u8; bytes]).unwrap();
    }

    #[test]
    fn lists_every_parquet_file_with_its_size_at_any_depth() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut expected = BTreeMap::new();
        for db in 0..3 {
            for m in 0..20 {
                for h in 0..3 {
                    let rel = format!("db{db}/m~20{m}/2026-01-01/0{h}/{h:020}-{h:020}.parquet");
                    touch(&data.join(&rel), db + m + h);
                    expected.insert(format!("data/{rel}"), (db + m + h) as u64);
                }
            }
        }
        // A file at a shallow depth is listed too (and then judged by the catalog).
        touch(&data.join("db0/stray.parquet"), 7);
        expected.insert("data/db0/stray.parquet".into(), 7);
        // Not Parquet, and not a name Quiver writes: neither is listed.
        touch(&data.join("db0/m~201/notes.txt"), 1);
        touch(&data.join("db0/m~201/2026-01-01/00/a b.parquet"), 1);
        let listing = list(&data, "data").unwrap();
        assert_eq!(listing.files, expected);
        assert!(listing.temps_removed.is_empty());
    }

    #[test]
    fn removes_temporary_files_of_interrupted_writes() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let temp = data.join(format!("db/m/2026-01-01/00/x.parquet{TEMP_SUFFIX}"));
        touch(&temp, 3);
        let listing = list(&data, "data").unwrap();
        assert!(listing.files.is_empty());
        assert_eq!(
            listing.temps_removed,
            vec![format!("data/db/m/2026-01-01/00/x.parquet{TEMP_SUFFIX}")]
        );
        assert!(!temp.exists());
    }

    #[test]
    fn a_missing_directory_lists_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let listing = list(&dir.path().join("data"), "data").unwrap();
        assert!(listing.files.is_empty());
    }
}
