//! Moving a file's bytes between local disk and a bucket: one PUT for small files, a
//! multipart upload (aborted on failure, so no parts linger) for large ones, and
//! downloads streamed to disk, never held whole in memory.

use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, Result};

/// Files up to this size go up in one PUT.
const SINGLE_PUT_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Part size of a multipart upload (S3 wants at least 5 MiB per part but the last).
const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one upload in flight at once.
const PARTS_IN_FLIGHT_MAX: usize = 2;
/// Bytes read from a local file per step of an upload.
const READ_CHUNK_BYTES: usize = 1024 * 1024;

/// Uploads `bytes` as the whole object `path`.
pub(super) async fn upload_bytes(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    bytes: Bytes,
) -> Result<()> {
    if bytes.len() <= SINGLE_PUT_BYTES_MAX {
        store.put(path, bytes.into()).await?;
        return Ok(());
    }
    let mut upload =
        WriteMultipart::new_with_chunk_size(store.put_multipart(path).await?, PART_BYTES);
    let mut offset = 0;
    while offset < bytes.len() {
        let end = (offset + PART_BYTES).min(bytes.len());
        if let Err(e) = upload.wait_for_capacity(PARTS_IN_FLIGHT_MAX).await {
            abort(upload, path).await;
            return Err(e.into());
        }
        upload.put(bytes.slice(offset..end));
        offset = end;
    }
    upload.finish().await?;
    Ok(())
}

/// Uploads the local file `from` as the whole object `path`.
pub(super) async fn upload_file(
    store: &dyn ObjectStore,
    from: &Path,
    path: &ObjectPath,
) -> Result<()> {
    let io = |source| Error::Io {
        path: from.to_path_buf(),
        source,
    };
    let mut file = tokio::fs::File::open(from).await.map_err(io)?;
    let size = file.metadata().await.map_err(io)?.len();
    if size <= SINGLE_PUT_BYTES_MAX as u64 {
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes).await.map_err(io)?;
        return upload_bytes(store, path, Bytes::from(bytes)).await;
    }
    let mut upload =
        WriteMultipart::new_with_chunk_size(store.put_multipart(path).await?, PART_BYTES);
    let mut buffer = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let read = match file.read(&mut buffer).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                abort(upload, path).await;
                return Err(io(e));
            }
        };
        if let Err(e) = upload.wait_for_capacity(PARTS_IN_FLIGHT_MAX).await {
            abort(upload, path).await;
            return Err(e.into());
        }
        upload.write(&buffer[..read]);
    }
    upload.finish().await?;
    Ok(())
}

async fn abort(upload: WriteMultipart, path: &ObjectPath) {
    if let Err(e) = upload.abort().await {
        tracing::warn!(%path, error = %e, "cannot abort a failed multipart upload; the bucket's lifecycle rules remove its parts");
    }
}

/// Downloads the object `path` to the local file `to`, checking it is `size` bytes.
pub(super) async fn download(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    to: &Path,
    size: u64,
) -> Result<()> {
    let io = |source| Error::Io {
        path: to.to_path_buf(),
        source,
    };
    if let Some(parent) = to.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io)?;
    }
    let mut stream = store.get(path).await?.into_stream();
    let mut file = tokio::fs::File::create(to).await.map_err(io)?;
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                drop(file);
                let _ = tokio::fs::remove_file(to).await;
                return Err(e.into());
            }
        };
        written += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.flush().await.map_err(io)?;
    if written != size {
        drop(file);
        let _ = tokio::fs::remove_file(to).await;
        return Err(Error::Corrupt {
            path: path.to_string(),
            reason: format!("downloaded {written} bytes, expected {size}"),
        });
    }
    Ok(())
}
