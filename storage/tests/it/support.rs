//! What several test files share.

use std::path::Path;

use quiver_storage::{Storage, StorageConfig};

/// A store in `dir` with every other setting at its default.
pub async fn open(dir: &Path) -> Storage {
    Storage::open(StorageConfig {
        dir: dir.to_path_buf(),
        ..StorageConfig::default()
    })
    .await
    .unwrap()
}
