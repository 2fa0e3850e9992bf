//! Where an interrupted import of a file goes on from: a small JSON file beside it
//! (`<file>.quiver-import`), written after every acknowledged request and removed when
//! the file is done. It names the database and the file's size and modification time,
//! so a changed file or another database starts over instead of skipping rows.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// What has been acknowledged of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Point {
    database: String,
    size: u64,
    modified_ns: u128,
    /// Bytes (line protocol) or record batches (CSV, Parquet) acknowledged.
    done: u64,
}

/// A file's resume point.
pub(super) struct Resume {
    path: PathBuf,
    point: Point,
}

impl Resume {
    /// The file's point: where an earlier import of the same file into the same
    /// database stopped, or its beginning (always with `restart`).
    pub(super) fn open(file: &Path, database: &str, restart: bool) -> Result<Resume> {
        let meta = std::fs::metadata(file).with_context(|| file.display().to_string())?;
        let modified_ns = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let mut name = file.as_os_str().to_owned();
        name.push(".quiver-import");
        let path = PathBuf::from(name);
        let fresh = Point {
            database: database.to_string(),
            size: meta.len(),
            modified_ns,
            done: 0,
        };
        let earlier = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Point>(&b).ok())
            .filter(|p| {
                !restart
                    && p.database == fresh.database
                    && p.size == fresh.size
                    && p.modified_ns == fresh.modified_ns
            });
        Ok(Resume {
            path,
            point: earlier.unwrap_or(fresh),
        })
    }

    /// Bytes or batches already acknowledged.
    pub(super) fn done(&self) -> u64 {
        self.point.done
    }

    /// Records that everything up to `done` is acknowledged.
    pub(super) fn advance(&mut self, done: u64) -> Result<()> {
        debug_assert!(done >= self.point.done);
        self.point.done = done;
        let tmp = self.path.with_extension("quiver-import.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&self.point)?)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .with_context(|| format!("writing the resume point {}", self.path.display()))
    }

    /// The file is done: its point goes.
    pub(super) fn finish(self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| self.path.display().to_string())
            }
            _ => Ok(()),
        }
    }
}
