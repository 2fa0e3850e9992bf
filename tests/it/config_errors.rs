//! Misconfiguration fails fast: exit code 1 and one line naming the setting.

use std::process::Command;

fn serve(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("d"))
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run quiver");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_address_names_http_addr() {
    let (code, err) = serve(&["--http-addr", "not-an-address"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("http.addr"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn unknown_environment_key_is_named() {
    let (code, err) = serve(&[], &[("QUIVER_WAL_SYNK", "fsync")]);
    assert_eq!(code, 1);
    assert!(err.contains("synk"), "{err}");
}

#[test]
fn bad_sync_mode_is_named() {
    let (code, err) = serve(&[], &[("QUIVER_WAL_SYNC", "sometimes")]);
    assert_eq!(code, 1);
    assert!(err.contains("wal.sync"), "{err}");
}

#[test]
fn unknown_config_file_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quiver.toml");
    std::fs::write(&file, "[storage]\nflush_rowz_max = 5\n").unwrap();
    let (code, err) = serve(&["--config", file.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("flush_rowz_max"), "{err}");
}

#[test]
fn unwritable_wal_dir_is_named() {
    let (code, err) = serve(&["--wal-dir", "/proc/quiver-cannot-write-here"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("wal.dir"), "{err}");
}

/// `QUIVER_DATA_DIR` (spelled after `--data-dir`) was ignored, and the node started in
/// `./quiver-data`; now it is refused, naming the setting meant.
#[test]
fn a_variable_that_names_no_setting_is_refused_with_the_nearest() {
    let (code, err) = serve(&[], &[("QUIVER_DATA_DIR", "/tmp/elsewhere")]);
    assert_eq!(code, 1);
    assert!(err.contains("QUIVER_STORAGE_DIR (storage.dir)"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// `QUIVER_HTTP_BODY_BYTES_MAX=64MiB` said only "invalid type: string"; sizes take units
/// now, and a bad one names the key and the variable.
#[test]
fn a_size_with_a_bad_unit_names_the_key_and_the_variable() {
    let (code, err) = serve(&[], &[("QUIVER_HTTP_BODY_BYTES_MAX", "64 megs")]);
    assert_eq!(code, 1);
    assert!(
        err.contains("http.body_bytes_max (QUIVER_HTTP_BODY_BYTES_MAX)"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn join_and_peers_together_are_refused() {
    let secret = ("QUIVER_CLUSTER_SECRET", "0123456789abcdef0123");
    let (code, err) = serve(
        &[
            "--join",
            "http://127.0.0.1:1",
            "--peers",
            "1=127.0.0.1:1,2=127.0.0.1:2",
        ],
        &[secret],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("cluster.join") && err.contains("cluster.peers"),
        "{err}"
    );
    let (code, err) = serve(
        &["--join", "http://127.0.0.1:1", "--http-addr", "0.0.0.0:0"],
        &[secret],
    );
    assert_eq!(code, 1);
    assert!(err.contains("cluster.advertise_addr"), "{err}");
    let (code, err) = serve(&["--join", "https://127.0.0.1:1"], &[secret]);
    assert_eq!(code, 1);
    assert!(err.contains("cluster.tls_ca"), "{err}");
}
