//! Parquet files for a snapshot being installed: a snapshot carries the manifest of the
//! leader's files, not their bytes; the files this node lacks are streamed from a peer
//! (`GET /internal/files/{path}`) to a staging file, checked and adopted by storage.
//! A file is never held whole in memory.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use quiver_storage::FileMeta;
use tokio::io::AsyncWriteExt;

use crate::peer_client::{PeerClient, PeerError, SECRET_HEADER};

/// URL path prefix that serves Parquet files to peers.
pub const FILES_PATH: &str = "/internal/files/";

/// Longest one file download may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(600);

/// Streams `meta`'s file from the peer at `addr` into `dest` (created or truncated).
pub async fn fetch_file(
    client: &PeerClient,
    addr: &str,
    meta: &FileMeta,
    dest: &Path,
) -> Result<(), PeerError> {
    let protocol = protocol_error(addr);
    let path = format!("{FILES_PATH}{}", meta.path);
    let Some(http) = client.http() else {
        return fetch_over_transport(client, addr, &path, meta, dest).await;
    };
    let response = http
        .get(client.url(addr, &path))
        .header(SECRET_HEADER, client.secret())
        .timeout(FILE_TIMEOUT)
        .send()
        .await
        .map_err(|e| PeerError::Unreachable {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
    if !response.status().is_success() {
        return Err(protocol(format!(
            "GET {}: HTTP {}",
            meta.path,
            response.status()
        )));
    }
    create_parent(dest, &protocol).await?;
    let mut file = tokio::fs::File::create(dest)
        .await
        .map_err(|e| protocol(format!("{}: {e}", dest.display())))?;
    let mut stream = response.bytes_stream();
    let mut received = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| PeerError::Unreachable {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
        received += chunk.len() as u64;
        if received > meta.size_bytes {
            return Err(protocol(format!(
                "{} is larger than the {} bytes announced",
                meta.path, meta.size_bytes
            )));
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| protocol(format!("{}: {e}", dest.display())))?;
    }
    file.flush()
        .await
        .map_err(|e| protocol(format!("{}: {e}", dest.display())))?;
    Ok(())
}

/// [`fetch_file`] over a [`crate::PeerTransport`] (the simulation): the file arrives
/// in one answer.
async fn fetch_over_transport(
    client: &PeerClient,
    addr: &str,
    path: &str,
    meta: &FileMeta,
    dest: &Path,
) -> Result<(), PeerError> {
    let protocol = protocol_error(addr);
    let Some(transport) = client.transport() else {
        return Err(protocol("no transport".into()));
    };
    let path = crate::group::group_path(client.group(), path);
    let bytes = transport.send(addr, &path, None, FILE_TIMEOUT).await?;
    if bytes.len() as u64 > meta.size_bytes {
        return Err(protocol(format!(
            "{} is larger than the {} bytes announced",
            meta.path, meta.size_bytes
        )));
    }
    create_parent(dest, &protocol).await?;
    tokio::fs::write(dest, &bytes)
        .await
        .map_err(|e| protocol(format!("{}: {e}", dest.display())))
}

/// A protocol error about the transfer from `addr`.
fn protocol_error(addr: &str) -> impl Fn(String) -> PeerError + '_ {
    move |message| PeerError::Protocol {
        addr: addr.to_string(),
        status: None,
        message,
    }
}

/// Creates the directory `dest` is staged in.
async fn create_parent(
    dest: &Path,
    protocol: &impl Fn(String) -> PeerError,
) -> Result<(), PeerError> {
    if let Some(parent) = dest.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| protocol(format!("{}: {e}", parent.display())))?;
    }
    Ok(())
}

/// Whether `path` is one Quiver serves: a relative path of plain components ending in
/// `.parquet` (no `..`, no absolute path, nothing outside the Parquet directory).
pub fn is_servable_path(path: &str) -> bool {
    !path.is_empty()
        && path.ends_with(".parquet")
        && path.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_parquet_paths_are_served() {
        assert!(is_servable_path(
            "data/db/cpu/2026-11-30/01/00000000000000000001-00000000000000000009.parquet"
        ));
        assert!(!is_servable_path("../etc/passwd.parquet"));
        assert!(!is_servable_path("/abs/x.parquet"));
        assert!(!is_servable_path("data/x.txt"));
        assert!(!is_servable_path("data//x.parquet"));
    }
}
