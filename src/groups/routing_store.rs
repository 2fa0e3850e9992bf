//! One read-only object store over every group's files: a path `g{N}/rest` is `rest`
//! in group N's store. The query engine has one store per query runtime; a node with
//! several groups hands it this one (see `SnapshotFiles::with_path_prefix`).

use std::fmt;
use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use quiver_raft::GroupId;

/// The path component a group's files are read under.
pub fn group_component(group: GroupId) -> String {
    format!("g{group}")
}

/// Which store holds a group's files now (a group's replica may move here or away
/// while the node runs, so the store is looked up per read).
pub type StoreOf = Arc<dyn Fn(GroupId) -> Option<Arc<dyn ObjectStore>> + Send + Sync>;

/// Routes reads by the first path component to the group's own store.
pub struct RoutingStore {
    store_of: StoreOf,
}

impl fmt::Debug for RoutingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RoutingStore")
    }
}

impl RoutingStore {
    /// A store over the stores `store_of` names.
    pub fn new(store_of: StoreOf) -> Self {
        RoutingStore { store_of }
    }

    /// A store over a fixed set of groups' stores.
    #[cfg(test)]
    pub fn fixed(groups: impl IntoIterator<Item = (GroupId, Arc<dyn ObjectStore>)>) -> Self {
        let stores: std::collections::BTreeMap<GroupId, Arc<dyn ObjectStore>> =
            groups.into_iter().collect();
        RoutingStore::new(Arc::new(move |id| stores.get(&id).cloned()))
    }

    /// The group's store and the path inside it.
    fn route(&self, location: &Path) -> object_store::Result<(Arc<dyn ObjectStore>, Path)> {
        let mut parts = location.parts();
        let first = parts.next().ok_or_else(|| not_found(location))?;
        let group: GroupId = first
            .as_ref()
            .strip_prefix('g')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| not_found(location))?;
        let store = (self.store_of)(group).ok_or_else(|| not_found(location))?;
        Ok((store, Path::from_iter(parts)))
    }
}

fn not_found(location: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: location.to_string(),
        source: "no group holds this path".into(),
    }
}

fn read_only() -> object_store::Error {
    object_store::Error::NotSupported {
        source: "the query engine's view of the groups' files is read-only".into(),
    }
}

impl fmt::Display for RoutingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RoutingStore(every group's files)")
    }
}

#[async_trait::async_trait]
impl ObjectStore for RoutingStore {
    async fn put_opts(
        &self,
        _location: &Path,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(read_only())
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(read_only())
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let (store, inner) = self.route(location)?;
        let mut result = store.get_opts(&inner, options).await?;
        result.meta.location = location.clone();
        Ok(result)
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        let (store, inner) = self.route(location)?;
        store.get_ranges(&inner, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        use futures::StreamExt;
        locations.map(|_| Err(read_only())).boxed()
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        Box::pin(futures::stream::once(async { Err(read_only()) }))
    }

    async fn list_with_delimiter(
        &self,
        _prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        Err(read_only())
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(read_only())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn reads_go_to_the_group_named_by_the_first_component() {
        let one: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let two: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let same = Path::from("data/db/cpu/a.parquet");
        one.put(&same, PutPayload::from_static(b"one"))
            .await
            .expect("put");
        two.put(&same, PutPayload::from_static(b"two"))
            .await
            .expect("put");
        let store = RoutingStore::fixed([(1, one), (2, two)]);
        let read = |p: &'static str| {
            let store = &store;
            async move { store.get(&Path::from(p)).await?.bytes().await }
        };
        assert_eq!(
            &read("g1/data/db/cpu/a.parquet").await.expect("g1")[..],
            b"one"
        );
        assert_eq!(
            &read("g2/data/db/cpu/a.parquet").await.expect("g2")[..],
            b"two"
        );
        assert!(read("g3/data/db/cpu/a.parquet").await.is_err());
        let range = store
            .get_range(&Path::from("g2/data/db/cpu/a.parquet"), 1..3)
            .await
            .expect("range");
        assert_eq!(&range[..], b"wo");
    }
}
