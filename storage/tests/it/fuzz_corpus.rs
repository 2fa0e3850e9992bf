//! The fuzz corpora (`fuzz/corpus/{line_protocol,msgpack,prom_remote}`) replayed as an ordinary test,
//! through exactly what the fuzz targets run (`quiver_storage::fuzzing`): every input
//! the fuzzer ever kept, and every crash it found once committed there, is checked on
//! every `cargo test`, without a nightly compiler or libFuzzer.

use std::path::PathBuf;

/// Corpus files above this size are a mistake (libFuzzer's default `-max_len` is 4 KiB);
/// refuse them rather than spend minutes on one.
const CORPUS_FILE_BYTES_MAX: u64 = 1024 * 1024;

fn corpus(target: &str) -> Vec<PathBuf> {
    // `cargo test` names the package directory at run time; the compiled-in path is
    // wrong when the same target directory served a checkout elsewhere (cargo then
    // reuses this binary, built there, as fresh).
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let dir = manifest_dir.join("../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    files
}

/// Runs `run` on every file of `target`'s corpus, naming the file that fails.
fn replay(target: &str, run: fn(&[u8])) -> usize {
    let files = corpus(target);
    for path in &files {
        let bytes_len = std::fs::metadata(path).expect("corpus metadata").len();
        assert!(
            bytes_len <= CORPUS_FILE_BYTES_MAX,
            "{} is {bytes_len} bytes",
            path.display()
        );
        let data = std::fs::read(path).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target} fails on {}", path.display());
    }
    files.len()
}

#[test]
fn line_protocol_corpus_replays_clean() {
    let replayed = replay("line_protocol", quiver_storage::fuzzing::line_protocol);
    assert!(replayed > 0);
}

#[test]
fn msgpack_corpus_replays_clean() {
    let replayed = replay("msgpack", quiver_storage::fuzzing::msgpack);
    assert!(replayed > 0);
}

#[test]
fn prom_remote_corpus_replays_clean() {
    let replayed = replay("prom_remote", quiver_storage::fuzzing::prom_remote);
    assert!(replayed > 0);
}
