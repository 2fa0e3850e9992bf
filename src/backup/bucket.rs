//! Backups kept in a bucket (`quiver backup --to s3://bucket/prefix`, `quiver restore
//! --from s3://bucket/prefix`): the layout of a backup directory, as objects under the
//! prefix. Files pass through a local spool directory: a backup downloads each file
//! from the node there (hashing it), uploads it and removes it; a restore downloads the
//! manifest's files there and checks every checksum before the node's directories are
//! written.
//!
//! Credentials, region and endpoint come from the usual `AWS_*` environment variables
//! (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP=true` for a local S3 service).
//!
//! An object is uploaded whole or not at all (a multipart upload is completed last, and
//! aborted on error), and the manifest is written after every file it names: a backup
//! is complete once its manifest exists, as in a directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{local_path, FileEntry, Manifest, MANIFESTS_DIR};

/// Longest one request to the bucket may take, retries included.
const REQUEST_TIMEOUT_MS: u64 = 120_000;
/// Bytes read from a spooled file per upload part.
const UPLOAD_CHUNK_BYTES: usize = 8 << 20;

/// Whether `location` (a `--to` or `--from` value) names a bucket rather than a
/// directory.
pub fn is_bucket_url(location: &str) -> bool {
    location.contains("://")
}

/// A backup location in a bucket.
pub struct BucketBackup {
    store: Arc<dyn ObjectStore>,
    url: String,
}

impl BucketBackup {
    /// Opens `url` (`s3://bucket` or `s3://bucket/prefix`); `flag` names where it came
    /// from in errors.
    pub fn open(url: &str, flag: &str) -> Result<BucketBackup> {
        if !url.starts_with("s3://") {
            bail!("{flag} {url}: only s3:// buckets (or a directory) are supported");
        }
        let settings = quiver_storage::BucketSettings {
            url: url.to_string(),
            timeout_ms: REQUEST_TIMEOUT_MS,
            ..Default::default()
        };
        let store = quiver_storage::open_at_url(&settings, flag)
            .map_err(|e| anyhow::anyhow!("{flag} {url}: {e}"))?;
        Ok(BucketBackup {
            store,
            url: url.trim_end_matches('/').to_string(),
        })
    }

    /// The bucket's URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The manifests' names (`manifests/*.json`), oldest first.
    pub async fn manifest_names(&self) -> Result<Vec<String>> {
        let prefix = ObjectPath::from(MANIFESTS_DIR);
        let listed: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .with_context(|| format!("listing {}/{MANIFESTS_DIR}", self.url))?;
        let mut names: Vec<String> = listed
            .into_iter()
            .filter_map(|o| o.location.filename().map(str::to_string))
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Reads and checks one manifest by name.
    pub async fn read_manifest(&self, name: &str) -> Result<Manifest> {
        let rel = format!("{MANIFESTS_DIR}/{name}");
        let bytes = self
            .store
            .get(&ObjectPath::from(rel.as_str()))
            .await
            .with_context(|| format!("reading {}/{rel}", self.url))?
            .bytes()
            .await
            .with_context(|| format!("reading {}/{rel}", self.url))?;
        super::parse_manifest(&bytes, &format!("{}/{rel}", self.url))
    }

    /// The checksums earlier manifests recorded, by path (see
    /// [`super::known_checksums`]); an unreadable manifest is skipped with a warning.
    pub async fn known_checksums(&self) -> Result<BTreeMap<String, FileEntry>> {
        let mut known = BTreeMap::new();
        for name in self.manifest_names().await? {
            match self.read_manifest(&name).await {
                Ok(manifest) => {
                    for entry in manifest.entries() {
                        known.insert(entry.path.clone(), entry.clone());
                    }
                }
                Err(e) => eprintln!("backup: ignoring {e:#}"),
            }
        }
        Ok(known)
    }

    /// Whether the bucket holds `entry` (an object of its path and length). Objects are
    /// written whole under names that are never reused for other bytes, so a known
    /// checksum and the right length are trusted without reading the object back.
    pub async fn holds(&self, entry: &FileEntry) -> Result<bool> {
        match self
            .store
            .head(&ObjectPath::from(entry.path.as_str()))
            .await
        {
            Ok(meta) => Ok(meta.size == entry.size_bytes),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e).with_context(|| format!("checking {}/{}", self.url, entry.path)),
        }
    }

    /// Uploads the local file `local` as `rel`, whole or not at all.
    pub async fn upload(&self, local: &Path, rel: &str) -> Result<()> {
        let target = ObjectPath::from(rel);
        let upload = self
            .store
            .put_multipart(&target)
            .await
            .with_context(|| format!("uploading {}/{rel}", self.url))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, UPLOAD_CHUNK_BYTES);
        let mut file = tokio::fs::File::open(local)
            .await
            .with_context(|| format!("opening {}", local.display()))?;
        let mut buf = vec![0u8; UPLOAD_CHUNK_BYTES];
        loop {
            let n = match file.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(e).with_context(|| format!("reading {}", local.display()));
                }
            };
            if n == 0 {
                break;
            }
            writer.write(&buf[..n]);
            if let Err(e) = writer.wait_for_capacity(2).await {
                let _ = writer.abort().await;
                return Err(e).with_context(|| format!("uploading {}/{rel}", self.url));
            }
        }
        writer
            .finish()
            .await
            .with_context(|| format!("uploading {}/{rel}", self.url))?;
        Ok(())
    }

    /// Writes `bytes` as `rel` in one request.
    pub async fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(&ObjectPath::from(rel), bytes.into())
            .await
            .with_context(|| format!("writing {}/{rel}", self.url))?;
        Ok(())
    }

    /// Downloads `rel` to `local_path(dir, rel)` (staged and renamed).
    pub async fn download(&self, rel: &str, dir: &Path) -> Result<PathBuf> {
        let target = local_path(dir, rel);
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let staged = target.with_extension("part");
        let what = format!("{}/{rel}", self.url);
        fetch_object(
            self.store.as_ref(),
            &ObjectPath::from(rel),
            &staged,
            &target,
            &what,
        )
        .await?;
        Ok(target)
    }

    /// Downloads one backup (the manifest `name`, or the newest) with every file it
    /// names into `dir`, `parallel` files at a time, laid out as a backup directory.
    /// Returns the manifest's name. Checksums are checked afterwards by the restore.
    pub async fn download_backup(
        &self,
        name: Option<String>,
        dir: &Path,
        parallel: usize,
    ) -> Result<String> {
        let name = match name {
            Some(name) => name,
            None => self.manifest_names().await?.pop().with_context(|| {
                format!(
                    "{}: no backup manifest (manifests/*.json); is it a `quiver backup --to` \
                     location, and did that backup finish?",
                    self.url
                )
            })?,
        };
        let manifest_rel = format!("{MANIFESTS_DIR}/{name}");
        self.download(&manifest_rel, dir).await?;
        let manifest = self.read_manifest(&name).await?;
        let entries: Vec<FileEntry> = manifest.entries().cloned().collect();
        println!(
            "restore: downloading {} files ({} bytes) from {}",
            entries.len(),
            entries.iter().map(|e| e.size_bytes).sum::<u64>(),
            self.url
        );
        futures::stream::iter(entries.iter().map(Ok::<_, anyhow::Error>))
            .try_for_each_concurrent(parallel.max(1), |entry| async move {
                self.download(&entry.path, dir).await.map(|_| ())
            })
            .await?;
        Ok(name)
    }
}

/// Streams the object at `location` into `staged`, then renames it to `target`: a
/// complete copy or none under the final name. `what` names the object in errors.
pub async fn fetch_object(
    store: &dyn ObjectStore,
    location: &ObjectPath,
    staged: &Path,
    target: &Path,
    what: &str,
) -> Result<()> {
    let mut file = tokio::fs::File::create(staged)
        .await
        .with_context(|| format!("creating {}", staged.display()))?;
    let mut stream = store
        .get(location)
        .await
        .with_context(|| format!("reading {what}"))?
        .into_stream();
    while let Some(chunk) = stream
        .try_next()
        .await
        .with_context(|| format!("reading {what}"))?
    {
        file.write_all(&chunk)
            .await
            .with_context(|| format!("writing {}", staged.display()))?;
    }
    file.flush().await?;
    drop(file);
    tokio::fs::rename(staged, target)
        .await
        .with_context(|| format!("renaming {}", staged.display()))
}
