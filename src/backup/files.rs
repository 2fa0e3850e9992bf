//! Files of a backup: checksums, and durable writes (staged, fsynced, renamed) so an
//! interrupted backup or restore never leaves a half-written file under a final name.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// Read size while hashing.
const HASH_CHUNK_BYTES: usize = 1 << 20;

/// The SHA-256 (lower-case hex) and length of the file at `path`.
pub fn sha256_of_file(path: &Path) -> Result<(String, u64)> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; HASH_CHUNK_BYTES];
    let mut len = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex(&hasher.finalize()), len))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `path` durably (temporary file, fsync, rename, directory fsync),
/// creating its directory.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        quiver_storage::create_dir_all_durably(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    quiver_storage::replace_file_durably(path, |w| -> Result<(), quiver_storage::Error> {
        w.write_all(bytes)
            .map_err(|source| quiver_storage::Error::Io {
                path: path.to_path_buf(),
                source,
            })
    })
    .with_context(|| format!("writing {}", path.display()))
}

/// Moves the complete file `staged` to `target` durably (see
/// [`quiver_storage::install_file_durably`]).
pub fn install(staged: &Path, target: &Path) -> Result<()> {
    quiver_storage::install_file_durably(staged, target)
        .with_context(|| format!("installing {}", target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_durably(&path, b"abc").unwrap();
        let (sum, len) = sha256_of_file(&path).unwrap();
        assert_eq!(len, 3);
        assert_eq!(
            sum,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
