//! Whole files read by queries, kept on local disk (`storage.cache_bytes_max`).
//!
//! A read the cache cannot answer goes to the bucket at once, and the whole file is
//! fetched into the cache in the background; later reads of it are local. Files never
//! change under a name, so a cached copy is never stale. The least recently read files
//! are evicted to stay within the budget; files larger than a quarter of it are never
//! cached (one would evict too much). The cache starts empty at every start.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// See the module documentation.
pub(super) struct WholeFileCache {
    inner: Arc<dyn ObjectStore>,
    local: Arc<LocalFileSystem>,
    dir: PathBuf,
    bytes_max: u64,
    state: Arc<Mutex<CacheState>>,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<ObjectPath, Entry>,
    /// Files being fetched now.
    filling: HashSet<ObjectPath>,
    bytes: u64,
    clock: u64,
}

struct Entry {
    size: u64,
    last_read: u64,
}

impl WholeFileCache {
    /// A cache of `inner`'s files in `dir` (emptied first), of at most `bytes_max` bytes.
    pub(super) fn open(inner: Arc<dyn ObjectStore>, dir: &Path, bytes_max: u64) -> Result<Self> {
        let io = |source| Error::Io {
            path: dir.to_path_buf(),
            source,
        };
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        Ok(WholeFileCache {
            inner,
            local: Arc::new(LocalFileSystem::new_with_prefix(dir)?),
            dir: dir.to_path_buf(),
            bytes_max,
            state: Arc::new(Mutex::new(CacheState::default())),
        })
    }

    /// Whether `location` is cached (and marks it read).
    fn hit(&self, location: &ObjectPath) -> bool {
        let mut state = self.state.lock();
        state.clock += 1;
        let clock = state.clock;
        match state.entries.get_mut(location) {
            Some(entry) => {
                entry.last_read = clock;
                true
            }
            None => false,
        }
    }

    /// Starts fetching `location` into the cache unless it is there or on its way.
    fn fill_later(&self, location: &ObjectPath) {
        if !self.state.lock().filling.insert(location.clone()) {
            return;
        }
        let fill = Fill {
            inner: self.inner.clone(),
            local: self.local.clone(),
            dir: self.dir.clone(),
            bytes_max: self.bytes_max,
            state: self.state.clone(),
        };
        let location = location.clone();
        tokio::spawn(async move {
            if let Err(e) = fill.run(&location).await {
                tracing::debug!(path = %location, error = %e, "a file was not cached");
            }
            fill.state.lock().filling.remove(&location);
        });
    }

    fn forget(&self, location: &ObjectPath) {
        let mut state = self.state.lock();
        if let Some(entry) = state.entries.remove(location) {
            state.bytes -= entry.size;
        }
    }
}

/// One background fetch of a whole file.
struct Fill {
    inner: Arc<dyn ObjectStore>,
    local: Arc<LocalFileSystem>,
    dir: PathBuf,
    bytes_max: u64,
    state: Arc<Mutex<CacheState>>,
}

impl Fill {
    async fn run(&self, location: &ObjectPath) -> Result<()> {
        let size = self.inner.head(location).await?.size;
        if size > self.bytes_max / 4 {
            return Ok(());
        }
        let target = self.local.path_to_filesystem(location)?;
        let staged = self.dir.join(format!(
            ".filling-{}",
            crate::paths::staging_name(location.as_ref())
        ));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        super::transfer::download(self.inner.as_ref(), location, &staged, size).await?;
        let evicted = self.make_room(size);
        for path in evicted {
            if let Ok(on_disk) = self.local.path_to_filesystem(&path) {
                let _ = tokio::fs::remove_file(on_disk).await;
            }
        }
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(io(parent))?;
        }
        tokio::fs::rename(&staged, &target)
            .await
            .map_err(io(&target))?;
        let mut state = self.state.lock();
        state.clock += 1;
        let clock = state.clock;
        state.bytes += size;
        state.entries.insert(
            location.clone(),
            Entry {
                size,
                last_read: clock,
            },
        );
        metrics::gauge!("quiver_object_cache_bytes").set(state.bytes as f64);
        Ok(())
    }

    /// Evicts the least recently read files until `size` more bytes fit; returns them.
    fn make_room(&self, size: u64) -> Vec<ObjectPath> {
        let mut state = self.state.lock();
        let mut evicted = Vec::new();
        while state.bytes + size > self.bytes_max {
            let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_read)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            if let Some(entry) = state.entries.remove(&oldest) {
                state.bytes -= entry.size;
            }
            evicted.push(oldest);
        }
        evicted
    }
}

impl fmt::Display for WholeFileCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WholeFileCache({}, {})", self.dir.display(), self.inner)
    }
}

impl fmt::Debug for WholeFileCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait]
impl ObjectStore for WholeFileCache {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if self.hit(location) {
            match self.local.get_opts(location, options.clone()).await {
                Ok(found) => {
                    metrics::counter!("quiver_object_cache_hits_total").increment(1);
                    return Ok(found);
                }
                // Evicted between the check and the read: read the bucket.
                Err(_) => self.forget(location),
            }
        }
        metrics::counter!("quiver_object_cache_misses_total").increment(1);
        let found = self.inner.get_opts(location, options).await?;
        self.fill_later(location);
        Ok(found)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    async fn wait_cached(cache: &WholeFileCache, path: &ObjectPath) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cache.state.lock().entries.contains_key(path) {
            assert!(std::time::Instant::now() < deadline, "{path} never cached");
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn reads_are_served_locally_once_cached_and_the_budget_holds() {
        let dir = tempfile::tempdir().unwrap();
        let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for name in ["a", "b", "c"] {
            bucket
                .put(
                    &ObjectPath::from(name),
                    vec![name.as_bytes()[0]; 100].into(),
                )
                .await
                .unwrap();
        }
        // 400 bytes: four 100-byte files fit (each is a quarter of the budget).
        let cache = WholeFileCache::open(bucket.clone(), &dir.path().join("c"), 400).unwrap();
        let a = ObjectPath::from("a");
        assert_eq!(cache.get_range(&a, 10..20).await.unwrap(), vec![b'a'; 10]);
        wait_cached(&cache, &a).await;
        // Gone from the bucket: the cache still answers, with the right bytes.
        bucket.delete(&a).await.unwrap();
        assert_eq!(cache.get_range(&a, 0..5).await.unwrap(), vec![b'a'; 5]);
        for name in ["b", "c"] {
            let p = ObjectPath::from(name);
            cache.get_range(&p, 0..1).await.unwrap();
            wait_cached(&cache, &p).await;
        }
        // 300 of 400 bytes: all three fit.
        assert_eq!(cache.state.lock().bytes, 300);
        bucket
            .put(&ObjectPath::from("d"), vec![b'd'; 100].into())
            .await
            .unwrap();
        bucket
            .put(&ObjectPath::from("e"), vec![b'e'; 100].into())
            .await
            .unwrap();
        for name in ["d", "e"] {
            let p = ObjectPath::from(name);
            cache.get_range(&p, 0..1).await.unwrap();
            wait_cached(&cache, &p).await;
        }
        let state = cache.state.lock();
        assert!(state.bytes <= 400, "{} bytes cached", state.bytes);
        // `a` was read least recently: evicted first.
        assert!(!state.entries.contains_key(&a));
    }

    #[tokio::test]
    async fn files_over_a_quarter_of_the_budget_are_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let big = ObjectPath::from("big");
        bucket.put(&big, vec![1u8; 200].into()).await.unwrap();
        let cache = WholeFileCache::open(bucket.clone(), &dir.path().join("c"), 400).unwrap();
        cache.get_range(&big, 0..10).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cache.state.lock().filling.contains(&big) {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(cache.state.lock().entries.is_empty());
    }
}
