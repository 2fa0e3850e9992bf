//! `quiver backup --url URL --to DIR|s3://...`: copies a running node's groups into a
//! backup directory or bucket (layout in the module above), without stopping it.
//!
//! For each group: a snapshot holding every entry committed when it was asked for
//! (`POST /api/v1/backup/groups/{g}/snapshot`), then every Parquet file it lists
//! (`GET /api/v1/backup/groups/{g}/files/...`) that the directory does not already hold
//! with the checksum an earlier manifest recorded. A file a compaction removed before it
//! was copied (after `compaction.input_grace_ms`) answers 404: the group starts over
//! with a new snapshot, keeping what it copied. The manifest is written last.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use quiver_raft::GroupId;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::bucket::{is_bucket_url, BucketBackup};
use super::{
    hex, install, known_checksums, local_path, sha256_of_file, write_durably, FileEntry,
    GroupBackup, Manifest, RunStats, MANIFESTS_DIR, MANIFEST_FORMAT,
};
use crate::cli::ClusterTarget;

/// Most snapshots asked for one group when files it lists vanish before they are copied.
const SNAPSHOT_ATTEMPTS_MAX: usize = 3;
/// Longest one request (a snapshot build plus its transfer, or one file) may take.
const REQUEST_TIMEOUT_S: u64 = 3_600;

/// Flags of `quiver backup`.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The node to back up, its admin token and CA.
    #[command(flatten)]
    pub target: ClusterTarget,
    /// Backup directory (created if missing), or a bucket (`s3://bucket/prefix`,
    /// credentials from the `AWS_*` variables). A later backup into the same place
    /// copies only the files it does not hold yet.
    #[arg(long)]
    pub to: String,
    /// Files copied at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
}

/// The node's backup routes, with the operator's token.
struct Source {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Source {
    fn new(target: &ClusterTarget) -> Result<Source> {
        let http = crate::tls::client_builder("--ca", target.ca.as_deref())?
            .timeout(std::time::Duration::from_secs(REQUEST_TIMEOUT_S))
            .build()?;
        Ok(Source {
            http,
            base: crate::tls::node_base_url(&target.url, target.ca.is_some()),
            token: target.token.clone(),
        })
    }

    async fn send(&self, method: reqwest::Method, path: &str) -> Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request.send().await.with_context(|| url.clone())
    }
}

/// Where a backup goes: a directory, or a bucket through a local spool directory
/// (each file is downloaded there, hashed, uploaded and removed).
enum Destination {
    Dir(PathBuf),
    Bucket { bucket: BucketBackup, spool: Spool },
}

/// A scratch directory removed when dropped (also when the backup fails).
struct Spool(PathBuf);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Destination {
    fn open(to: &str) -> Result<Destination> {
        if !is_bucket_url(to) {
            return Ok(Destination::Dir(PathBuf::from(to)));
        }
        let bucket = BucketBackup::open(to, "--to")?;
        let spool = std::env::temp_dir().join(format!(
            "quiver-backup-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_millis()
        ));
        std::fs::create_dir_all(&spool)
            .with_context(|| format!("creating the spool directory {}", spool.display()))?;
        Ok(Destination::Bucket {
            bucket,
            spool: Spool(spool),
        })
    }

    /// Where files are written first: the backup directory itself, or the spool.
    fn local(&self) -> &Path {
        match self {
            Destination::Dir(dir) => dir,
            Destination::Bucket { spool, .. } => &spool.0,
        }
    }

    fn describe(&self) -> String {
        match self {
            Destination::Dir(dir) => dir.display().to_string(),
            Destination::Bucket { bucket, .. } => bucket.url().to_string(),
        }
    }

    async fn known_checksums(&self) -> Result<BTreeMap<String, FileEntry>> {
        match self {
            Destination::Dir(dir) => known_checksums(dir),
            Destination::Bucket { bucket, .. } => bucket.known_checksums().await,
        }
    }

    /// Whether the destination already holds `entry` (a file an earlier backup
    /// recorded): re-hashed in a directory, its length checked in a bucket.
    async fn holds(&self, entry: &FileEntry) -> Result<bool> {
        match self {
            Destination::Dir(dir) => {
                let at = local_path(dir, &entry.path);
                let found = tokio::task::spawn_blocking(move || sha256_of_file(&at).ok()).await?;
                Ok(found.is_some_and(|(sum, len)| sum == entry.sha256 && len == entry.size_bytes))
            }
            Destination::Bucket { bucket, .. } => bucket.holds(entry).await,
        }
    }

    /// Makes the file written at `local_path(self.local(), rel)` part of the backup.
    async fn keep(&self, rel: &str) -> Result<()> {
        match self {
            Destination::Dir(_) => Ok(()),
            Destination::Bucket { bucket, spool } => {
                let local = local_path(&spool.0, rel);
                bucket.upload(&local, rel).await?;
                tokio::fs::remove_file(&local)
                    .await
                    .with_context(|| format!("removing {}", local.display()))
            }
        }
    }

    /// Writes the checksums and then the manifest (the commit point); returns where.
    async fn commit(&self, name: &str, sums: &str, manifest: &Manifest) -> Result<String> {
        let manifest_bytes = serde_json::to_vec_pretty(manifest)?;
        let sums_name = Path::new(name).with_extension("sha256");
        let sums_name = sums_name.to_string_lossy();
        match self {
            Destination::Dir(dir) => {
                let manifest_path = dir.join(MANIFESTS_DIR).join(name);
                write_durably(&manifest_path.with_extension("sha256"), sums.as_bytes())?;
                write_durably(&manifest_path, &manifest_bytes)?;
                Ok(manifest_path.display().to_string())
            }
            Destination::Bucket { bucket, .. } => {
                bucket
                    .put(
                        &format!("{MANIFESTS_DIR}/{sums_name}"),
                        sums.as_bytes().to_vec(),
                    )
                    .await?;
                let rel = format!("{MANIFESTS_DIR}/{name}");
                bucket.put(&rel, manifest_bytes).await?;
                Ok(format!("{}/{rel}", bucket.url()))
            }
        }
    }
}

/// Runs one backup and prints what it did.
pub async fn run(args: BackupArgs) -> Result<()> {
    let destination = Destination::open(&args.to)?;
    let started = Instant::now();
    let source = Source::new(&args.target)?;
    let about = describe(&source).await?;
    let known = destination.known_checksums().await?;
    let mut stats = RunStats::default();
    let mut groups = Vec::new();
    for &id in &about.groups {
        let group = backup_group(
            &source,
            &destination,
            id,
            &known,
            args.parallel.into(),
            &mut stats,
        )
        .await
        .with_context(|| format!("group {id}"))?;
        println!(
            "backup: group {id}: snapshot at log index {}, {} Parquet files",
            group.snapshot_index,
            group.files.len()
        );
        groups.push(group);
    }
    // Groups placed on other nodes: each from the first of its members that answers.
    for (id, members) in &about.remote_groups {
        let mut failures = Vec::new();
        let mut taken = None;
        for addr in members {
            let member = Source::new(&member_target(&args.target, addr))?;
            match backup_group(
                &member,
                &destination,
                *id,
                &known,
                args.parallel.into(),
                &mut stats,
            )
            .await
            {
                Ok(group) => {
                    println!(
                        "backup: group {id} (from {addr}): snapshot at log index {}, {} Parquet \
                         files",
                        group.snapshot_index,
                        group.files.len()
                    );
                    taken = Some(group);
                    break;
                }
                Err(e) => {
                    eprintln!("backup: group {id}: member {addr}: {e:#}; trying another");
                    failures.push(format!("{addr}: {e:#}"));
                }
            }
        }
        let Some(group) = taken else {
            bail!(
                "group {id}: no member could be backed up from ({})",
                failures.join("; ")
            );
        };
        groups.push(group);
    }
    groups.sort_by_key(|g| g.id);
    stats.elapsed_ms = started.elapsed().as_millis() as u64;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        source_url: args.target.url.clone(),
        node_id: about.node_id,
        data_groups: about.data_groups,
        quiver_version: about.version,
        groups,
        run: stats.clone(),
    };
    let name = Manifest::file_name(now_ms);
    let sums: String = manifest
        .entries()
        .map(|e| format!("{}  {}\n", e.sha256, e.path))
        .collect();
    // The manifest last: a backup is complete once it exists.
    let written = destination.commit(&name, &sums, &manifest).await?;
    println!(
        "backup: {} files copied ({} bytes), {} already in {} ; {} ms; manifest {}",
        stats.files_copied,
        stats.bytes_copied,
        stats.files_reused,
        destination.describe(),
        stats.elapsed_ms,
        written
    );
    Ok(())
}

/// The target of a member `addr` of a group (an address as peers know it): the
/// operator's token and CA, and https when the node asked first was reached so.
fn member_target(target: &ClusterTarget, addr: &str) -> ClusterTarget {
    let url = if !addr.contains("://") && target.url.starts_with("https://") {
        format!("https://{addr}")
    } else {
        addr.to_string()
    };
    ClusterTarget {
        url,
        ..target.clone()
    }
}

/// What the node says of itself.
struct About {
    node_id: u64,
    data_groups: usize,
    /// The groups it runs.
    groups: Vec<GroupId>,
    /// The groups only other nodes run, with their members' addresses.
    remote_groups: Vec<(GroupId, Vec<String>)>,
    version: String,
}

async fn describe(source: &Source) -> Result<About> {
    let response = source.send(reqwest::Method::GET, "/api/v1/backup").await?;
    let status = response.status();
    let body: Value = response.json().await.context("/api/v1/backup: not JSON")?;
    if !status.is_success() {
        bail!("/api/v1/backup: HTTP {status}: {body}");
    }
    let groups = body["groups"]
        .as_array()
        .context("/api/v1/backup: no groups")?
        .iter()
        .filter_map(Value::as_u64)
        .map(|g| g as GroupId)
        .collect();
    let remote_groups = body["remote_groups"]
        .as_array()
        .map(|groups| {
            groups
                .iter()
                .filter_map(|g| {
                    let id = g["id"].as_u64()? as GroupId;
                    let members = g["members"]
                        .as_array()?
                        .iter()
                        .filter_map(|m| m.as_str().map(str::to_string))
                        .collect();
                    Some((id, members))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(About {
        node_id: body["node_id"].as_u64().unwrap_or(0),
        data_groups: body["data_groups"].as_u64().unwrap_or(1) as usize,
        groups,
        remote_groups,
        version: body["version"].as_str().unwrap_or("").to_string(),
    })
}

/// One file's outcome.
enum Copy {
    /// Copied now: its entry and bytes.
    Copied(FileEntry),
    /// Already in the directory with the right checksum.
    Reused(FileEntry),
    /// The node no longer has it (a compaction replaced it).
    Gone(String),
}

async fn backup_group(
    source: &Source,
    destination: &Destination,
    id: GroupId,
    known: &BTreeMap<String, FileEntry>,
    parallel: usize,
    stats: &mut RunStats,
) -> Result<GroupBackup> {
    let mut gone = Vec::new();
    for _ in 0..SNAPSHOT_ATTEMPTS_MAX {
        let (snapshot, index, term) = fetch_snapshot(source, destination.local(), id).await?;
        stats.files_copied += 1;
        stats.bytes_copied += snapshot.size_bytes;
        let snapshot_path = local_path(destination.local(), &snapshot.path);
        let (_, image) =
            tokio::task::spawn_blocking(move || quiver_raft::read_snapshot(&snapshot_path))
                .await??;
        destination.keep(&snapshot.path).await?;
        let copies: Vec<Result<Copy>> = futures::stream::iter(image.files.iter())
            .map(|file| copy_file(source, destination, id, &file.path, file.size_bytes, known))
            .buffer_unordered(parallel)
            .collect()
            .await;
        let mut files = Vec::with_capacity(copies.len());
        gone.clear();
        for copy in copies {
            match copy? {
                Copy::Copied(entry) => {
                    stats.files_copied += 1;
                    stats.bytes_copied += entry.size_bytes;
                    files.push(entry);
                }
                Copy::Reused(entry) => {
                    stats.files_reused += 1;
                    files.push(entry);
                }
                Copy::Gone(path) => gone.push(path),
            }
        }
        if gone.is_empty() {
            files.sort_by(|a, b| a.path.cmp(&b.path));
            return Ok(GroupBackup {
                id,
                snapshot_index: index,
                snapshot_term: term,
                snapshot,
                files,
            });
        }
        eprintln!(
            "backup: group {id}: {} files were replaced before they were copied (first: {}); \
             taking a new snapshot",
            gone.len(),
            gone[0]
        );
    }
    bail!(
        "files kept vanishing before they were copied ({} after {SNAPSHOT_ATTEMPTS_MAX} \
         snapshots, first: {}); raise compaction.input_grace_ms or back up when compactions \
         are quieter",
        gone.len(),
        gone.first().map(String::as_str).unwrap_or("")
    )
}

/// Downloads a fresh snapshot of group `id`; returns its entry, index and term.
async fn fetch_snapshot(source: &Source, dir: &Path, id: GroupId) -> Result<(FileEntry, u64, u64)> {
    let path = format!("/api/v1/backup/groups/{id}/snapshot");
    let response = source.send(reqwest::Method::POST, &path).await?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        bail!("{path}: HTTP {status}: {body}");
    }
    let header_u64 = |name: &str| -> Result<u64> {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{path}: no {name} header"))
    };
    let index = header_u64(crate::http::SNAPSHOT_INDEX_HEADER)?;
    let term = header_u64(crate::http::SNAPSHOT_TERM_HEADER)?;
    let snapshots = format!("groups/{id}/snapshots");
    let staged = local_path(dir, &snapshots).join(format!(
        ".incoming-{index}-{term}-{}.part",
        std::process::id()
    ));
    let (sha256, size_bytes) = download(response, &staged, None).await?;
    let rel = format!("{snapshots}/{index:020}-{term:020}-{}.snap", &sha256[..16]);
    install(&staged, &local_path(dir, &rel))?;
    Ok((
        FileEntry {
            path: rel,
            size_bytes,
            sha256,
        },
        index,
        term,
    ))
}

/// Copies one Parquet file unless the directory holds it with a known checksum.
async fn copy_file(
    source: &Source,
    destination: &Destination,
    id: GroupId,
    path: &str,
    size_bytes: u64,
    known: &BTreeMap<String, FileEntry>,
) -> Result<Copy> {
    let rel = format!("groups/{id}/parquet/{path}");
    let local = local_path(destination.local(), &rel);
    if let Some(entry) = known.get(&rel).filter(|e| e.size_bytes == size_bytes) {
        if destination.holds(entry).await? {
            return Ok(Copy::Reused(entry.clone()));
        }
    }
    let url_path = format!("/api/v1/backup/groups/{id}/files/{path}");
    let response = source.send(reqwest::Method::GET, &url_path).await?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(Copy::Gone(path.to_string()));
    }
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        bail!("{url_path}: HTTP {status}: {body}");
    }
    // Named for this process: two backups into one directory never share a staged file.
    let staged = local.with_extension(format!("parquet.part-{}", std::process::id()));
    let (sha256, len) = download(response, &staged, Some(size_bytes))
        .await
        .with_context(|| path.to_string())?;
    install(&staged, &local)?;
    destination.keep(&rel).await?;
    Ok(Copy::Copied(FileEntry {
        path: rel,
        size_bytes: len,
        sha256,
    }))
}

/// Streams `response` into `staged`, hashing it; with `expected`, the length must match.
async fn download(
    response: reqwest::Response,
    staged: &Path,
    expected: Option<u64>,
) -> Result<(String, u64)> {
    if let Some(parent) = staged.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let mut file = tokio::fs::File::create(staged)
        .await
        .with_context(|| format!("creating {}", staged.display()))?;
    let mut hasher = Sha256::new();
    let mut len = 0u64;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.context("receiving")?;
        len += chunk.len() as u64;
        if expected.is_some_and(|e| len > e) {
            bail!(
                "longer than the {} bytes the snapshot lists",
                expected.unwrap_or(0)
            );
        }
        hasher.update(&chunk);
        file.write_all(&chunk)
            .await
            .with_context(|| format!("writing {}", staged.display()))?;
    }
    file.flush().await?;
    if let Some(e) = expected.filter(|&e| e != len) {
        bail!("{len} bytes received, the snapshot lists {e}");
    }
    Ok((hex(&hasher.finalize()), len))
}
