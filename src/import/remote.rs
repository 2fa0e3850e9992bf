//! Files named by a bucket URL (`quiver import s3://bucket/path/cpu.lp`): each object
//! is downloaded once into a local copy whose path depends only on its URL
//! (`$TMPDIR/quiver-import/{sha256 of the URL and the object's version}/{name}`), so an
//! import that stops and is run again finds the same copy, the same resume point and
//! the same write ids, and stores nothing twice. The copy is removed once its file is
//! imported.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};

/// Longest one request to the bucket may take, retries included.
const REQUEST_TIMEOUT_MS: u64 = 120_000;

/// Whether an import argument names an object in a bucket.
pub(super) fn is_remote(file: &Path) -> bool {
    file.to_str().is_some_and(|s| s.contains("://"))
}

/// The local copy of the object at `url`, downloaded unless a complete copy of the
/// same length is already there.
pub(super) async fn local_copy(url: &str) -> Result<PathBuf> {
    let Some(rest) = url.strip_prefix("s3://") else {
        bail!("{url}: only s3:// objects (or local files) can be imported");
    };
    let Some((bucket, key)) = rest
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
    else {
        bail!("{url}: expected s3://bucket/path/to/file");
    };
    let settings = quiver_storage::BucketSettings {
        url: format!("s3://{bucket}"),
        timeout_ms: REQUEST_TIMEOUT_MS,
        ..Default::default()
    };
    let store = quiver_storage::open_at_url(&settings, "import")
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    let location = ObjectPath::from(key);
    let meta = store
        .head(&location)
        .await
        .with_context(|| format!("{url}: cannot read the object"))?;
    let size = meta.size;
    let name = key.rsplit('/').next().unwrap_or(key);
    // The object's version is part of the name: a replaced object is a new file (new
    // copy, resume point and write ids), the same object the same one.
    let version = meta
        .e_tag
        .clone()
        .unwrap_or_else(|| meta.last_modified.to_rfc3339());
    let digest = Sha256::digest(format!("{url}\n{version}\n{size}").as_bytes());
    let dir = std::env::temp_dir()
        .join("quiver-import")
        .join(crate::backup::hex(&digest[..16]));
    let copy = dir.join(name);
    if std::fs::metadata(&copy).is_ok_and(|m| m.len() == size) {
        return Ok(copy);
    }
    tokio::fs::create_dir_all(&dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    let staged = dir.join(format!(".{name}.part"));
    crate::backup::bucket::fetch_object(store.as_ref(), &location, &staged, &copy, url).await?;
    eprintln!("{url}: downloaded {size} bytes to {}", copy.display());
    Ok(copy)
}

/// Removes the local copy of an imported object (and its directory).
pub(super) fn remove_copy(copy: &Path) {
    if let Some(dir) = copy.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
