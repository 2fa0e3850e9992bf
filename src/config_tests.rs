use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn flags_beat_env_and_env_beats_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q.toml");
    std::fs::write(
        &file,
        format!(
            "[storage]\ndir = {:?}\n[wal]\nsync = \"none\"\n[http]\naddr = \"127.0.0.1:1\"\n",
            dir.path().join("d")
        ),
    )
    .unwrap();
    let e = env(&[
        ("QUIVER_WAL_SYNC", "batch"),
        ("QUIVER_HTTP_ADDR", "127.0.0.1:2"),
    ]);
    let flags = Overrides {
        http_addr: Some("127.0.0.1:3".into()),
        ..Default::default()
    };
    let c = Config::load(Some(&file), e.into_iter(), &flags).unwrap();
    assert_eq!(c.wal.sync, "batch");
    assert_eq!(c.http.addr, "127.0.0.1:3");
    assert_eq!(c.wal_dir(), dir.path().join("d").join("wal"));
}

#[test]
fn the_example_config_lists_every_key_with_its_default() {
    let example: toml::Table = include_str!("../deploy/quiver.toml")
        .parse()
        .expect("deploy/quiver.toml parses");
    let defaults = toml::Table::try_from(Config::default()).expect("defaults serialise");
    for (section, keys) in &defaults {
        let toml::Value::Table(keys) = keys else {
            continue;
        };
        for (key, value) in keys {
            let listed = example.get(section).and_then(|s| s.get(key));
            match (section.as_str(), key.as_str()) {
                // Paths and secrets are examples, not defaults.
                ("storage", "dir") | ("cluster", "secret") | ("cluster", "peers") => {}
                _ => assert_eq!(
                    listed,
                    Some(value),
                    "deploy/quiver.toml: {section}.{key} must be listed with its default"
                ),
            }
        }
    }
}

#[test]
fn tls_needs_both_files_and_a_ca_for_peers() {
    let dir = tempfile::tempdir().unwrap();
    let flags = Overrides {
        data_dir: Some(dir.path().to_path_buf()),
        tls_cert: Some(dir.path().join("node.crt")),
        ..Default::default()
    };
    let err = Config::load(None, std::iter::empty(), &flags).unwrap_err();
    assert!(err.to_string().contains("http.tls_key"), "{err}");
    let flags = Overrides {
        tls_key: Some(dir.path().join("node.key")),
        peers: Some("1=127.0.0.1:1,2=127.0.0.1:2".into()),
        ..flags
    };
    let secret = env(&[("QUIVER_CLUSTER_SECRET", "0123456789abcdef0123")]);
    let err = Config::load(None, secret.clone().into_iter(), &flags).unwrap_err();
    assert!(err.to_string().contains("cluster.tls_ca"), "{err}");
    let flags = Overrides {
        tls_ca: Some(dir.path().join("ca.crt")),
        ..flags
    };
    let c = Config::load(None, secret.into_iter(), &flags).unwrap();
    assert!(c.tls_files().unwrap().is_some());
}

#[test]
fn unknown_keys_and_bad_values_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let flags = Overrides {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let err = Config::load(None, env(&[("QUIVER_WAL_SYNK", "x")]).into_iter(), &flags).unwrap_err();
    assert!(err.to_string().contains("synk"), "{err}");
    let err = Config::load(
        None,
        env(&[("QUIVER_WAL_SYNC", "sometimes")]).into_iter(),
        &flags,
    )
    .unwrap_err();
    assert!(err.to_string().contains("wal.sync"), "{err}");
    let err = Config::load(
        None,
        env(&[("QUIVER_HTTP_ADDR", "nowhere")]).into_iter(),
        &flags,
    )
    .unwrap_err();
    assert!(err.to_string().contains("http.addr"), "{err}");
}

#[test]
fn sizes_and_durations_take_units_and_errors_name_key_and_source() {
    let dir = tempfile::tempdir().unwrap();
    let flags = Overrides {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let config = Config::load(
        None,
        env(&[
            ("QUIVER_HTTP_BODY_BYTES_MAX", "64MiB"),
            ("QUIVER_HTTP_WRITE_TIMEOUT_MS", "30s"),
        ])
        .into_iter(),
        &flags,
    )
    .unwrap();
    assert_eq!(config.http.body_bytes_max, 64 << 20);
    assert_eq!(config.http.write_timeout_ms, 30_000);
    let err = Config::load(
        None,
        env(&[("QUIVER_HTTP_BODY_BYTES_MAX", "64 megs")]).into_iter(),
        &flags,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("http.body_bytes_max (QUIVER_HTTP_BODY_BYTES_MAX)"),
        "{err}"
    );
    let file = dir.path().join("quiver.toml");
    std::fs::write(
        &file,
        "[http]\nwrite_timeout_ms = \"soon\"\n[wal]\nsync = 3\n",
    )
    .unwrap();
    let err = Config::load(Some(&file), std::iter::empty(), &flags)
        .unwrap_err()
        .to_string();
    assert!(err.contains("http.write_timeout_ms (config file"), "{err}");
    std::fs::write(&file, "[wal]\nsync = 3\n").unwrap();
    let err = Config::load(Some(&file), std::iter::empty(), &flags)
        .unwrap_err()
        .to_string();
    assert!(err.contains("wal.sync (config file"), "{err}");
}

#[test]
fn a_variable_that_names_no_setting_is_refused_with_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let flags = Overrides {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let err = Config::load(None, env(&[("QUIVER_DATA_DIR", "/x")]).into_iter(), &flags)
        .unwrap_err()
        .to_string();
    assert!(err.contains("QUIVER_STORAGE_DIR (storage.dir)"), "{err}");
    let err = Config::load(None, env(&[("QUIVER_PGADDR", "x")]).into_iter(), &flags)
        .unwrap_err()
        .to_string();
    assert!(err.contains("QUIVER_PG_ADDR (pg.addr)"), "{err}");
    // The tools' and harnesses' own variables are not settings, and pass.
    Config::load(
        None,
        env(&[("QUIVER_TOKEN", "t"), ("QUIVER_SIM_SEEDS", "2")]).into_iter(),
        &flags,
    )
    .unwrap();
}
