//! Line-protocol files, read in chunks that end at a line's end and posted as they are
//! to `/api/v2/write` with `precision` from the flags.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};

use super::check::Acked;
use super::resume::Resume;
use super::send::Sender;
use super::{ImportArgs, Outcome};

/// Reads `file` from its resume point and sends it chunk by chunk.
pub(super) async fn load(
    args: &ImportArgs,
    sender: &Sender,
    file: &Path,
    acked: &mut Acked,
) -> Result<Outcome> {
    let mut resume = Resume::open(file, &sender.database, args.restart)?;
    let mut reader = std::fs::File::open(file).with_context(|| file.display().to_string())?;
    let size = reader.metadata()?.len();
    let mut offset = resume.done();
    reader.seek(SeekFrom::Start(offset))?;
    let progress = super::check::bar(file, size, offset);
    let key = file_key(file, size);
    let mut outcome = Outcome::default();
    let mut carry: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; args.chunk_bytes.max(64 * 1024)];
    loop {
        let n = reader.read(&mut buf)?;
        carry.extend_from_slice(&buf[..n]);
        let end = if n == 0 {
            carry.len()
        } else {
            match carry.iter().rposition(|&b| b == b'\n') {
                Some(i) if carry.len() >= args.chunk_bytes => i + 1,
                _ => continue,
            }
        };
        if end > 0 {
            let chunk: Vec<u8> = carry.drain(..end).collect();
            outcome.rejected +=
                send_chunk(sender, &args.precision, &key, offset, chunk, acked).await?;
            offset += end as u64;
            resume.advance(offset)?;
            progress.set_position(offset);
        }
        if n == 0 {
            break;
        }
    }
    progress.finish();
    resume.finish()?;
    Ok(outcome)
}

/// Names one file's version in write ids: a chunk of it is the same request only if
/// the path, size and place are.
pub(super) fn file_key(file: &Path, size: u64) -> String {
    use sha2::{Digest, Sha256};
    let path = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let digest = Sha256::digest(format!("{}\0{size}", path.display()).as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends one chunk of whole lines; returns how many the node refused as bad input
/// (each printed with its line in the chunk).
pub(super) async fn send_chunk(
    sender: &Sender,
    precision: &str,
    key: &str,
    place: u64,
    chunk: Vec<u8>,
    acked: &mut Acked,
) -> Result<u64> {
    let lines = super::check::scan(&chunk, super::unit_ns(precision));
    let path = format!(
        "/api/v2/write?bucket={}&precision={precision}",
        sender.database
    );
    let id = format!("import-{key}-{place}-{}", chunk.len());
    let answer = sender
        .post(&path, "text/plain; charset=utf-8", chunk, &id)
        .await?;
    let mut refused: Vec<usize> = Vec::new();
    let mut refused_total = 0u64;
    if answer.status == 400 {
        let listed = answer.body["rejected"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if listed.is_empty() {
            // The whole request refused (a body-wide limit): nothing of it is stored.
            eprintln!(
                "chunk at {place}: refused whole: {}",
                answer.body["error"].as_str().unwrap_or("bad request")
            );
            return Ok(lines.iter().flatten().count() as u64);
        }
        for r in &listed {
            let line = r["line"].as_u64().unwrap_or(0) as usize;
            eprintln!(
                "chunk at byte {place}, line {line}: {} ({})",
                r["error"].as_str().unwrap_or("refused"),
                r["text"].as_str().unwrap_or("")
            );
            refused.push(line);
        }
        refused_total = answer.body["error"]
            .as_str()
            .and_then(|e| e.strip_prefix("partial write: "))
            .and_then(|e| e.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(listed.len() as u64);
    }
    let unlisted = refused_total.saturating_sub(refused.len() as u64);
    acked.add_chunk(&lines, &refused, unlisted);
    Ok(refused_total)
}
