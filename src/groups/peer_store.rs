//! A read-only object store over the files of a group this node does not hold: every
//! read is a range asked of a member (which reads its disk or its bucket). The query
//! engine reads Parquet by footer and column-chunk ranges, so only what a query needs
//! crosses the network.

use std::fmt;
use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};

use super::remote::{RangeRequest, RemoteGroup};

/// Reads `path` of a remote group from one of its members.
pub struct PeerFileStore {
    group: Arc<RemoteGroup>,
}

impl PeerFileStore {
    /// The store over `group`'s files.
    pub fn new(group: Arc<RemoteGroup>) -> Self {
        PeerFileStore { group }
    }
}

impl fmt::Debug for PeerFileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerFileStore(group {})", self.group.id())
    }
}

impl fmt::Display for PeerFileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

fn read_only() -> object_store::Error {
    object_store::Error::NotSupported {
        source: "another group's files are read-only here".into(),
    }
}

fn failed(location: &Path, e: quiver_storage::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "peer",
        source: format!("{location}: {e}").into(),
    }
}

#[async_trait::async_trait]
impl ObjectStore for PeerFileStore {
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
        let (start, end, suffix) = match &options.range {
            None => (None, None, None),
            Some(GetRange::Bounded(r)) => (Some(r.start), Some(r.end), None),
            Some(GetRange::Offset(o)) => (Some(*o), None, None),
            Some(GetRange::Suffix(n)) => (None, None, Some(*n)),
        };
        let mut request = RangeRequest {
            path: location.to_string(),
            start,
            end,
            head: options.head,
        };
        if let Some(n) = suffix {
            // The size first, then the last `n` bytes.
            let head = RangeRequest {
                head: true,
                ..request.clone()
            };
            let size = self
                .group
                .range(&head)
                .await
                .map_err(|e| failed(location, e))?
                .size;
            request.start = Some(size.saturating_sub(n));
        }
        let answer = self
            .group
            .range(&request)
            .await
            .map_err(|e| failed(location, e))?;
        let range = answer.start..answer.start + answer.data.len() as u64;
        debug_assert!(options.head || range.end <= answer.size);
        let data = answer.data;
        Ok(GetResult {
            payload: GetResultPayload::Stream(Box::pin(futures::stream::once(
                async move { Ok(data) },
            ))),
            meta: ObjectMeta {
                location: location.clone(),
                last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
                size: answer.size,
                e_tag: None,
                version: None,
            },
            range,
            attributes: Attributes::default(),
        })
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
