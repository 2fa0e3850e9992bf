//! `QUIVER_<SECTION>_<KEY>` environment variables applied to the configuration's TOML
//! table: which sections they may name, what every setting is called (for the nearest
//! one to an unknown variable), and how a value is read.

use anyhow::{bail, Result};

use crate::config::Config;

/// Sections a `QUIVER_<SECTION>_<KEY>` variable may name.
pub const SECTIONS: [&str; 13] = [
    "http",
    "pg",
    "flight",
    "storage",
    "wal",
    "cluster",
    "raft",
    "query",
    "auth",
    "log",
    "limits",
    "compaction",
    "retention",
];

/// Every setting, as `section.key`.
fn setting_keys() -> Vec<String> {
    let Ok(toml::Value::Table(sections)) = toml::Value::try_from(Config::default()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (section, keys) in sections {
        if let toml::Value::Table(keys) = keys {
            out.extend(keys.keys().map(|k| format!("{section}.{k}")));
        }
    }
    // Options unset by default (`pg.addr`, `http.tls_cert`, ...) are not serialized; the
    // example file lists them, commented out.
    let mut section = "";
    for line in include_str!("../deploy/quiver.toml").lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name;
            continue;
        }
        let entry = line.trim_start_matches('#').trim_start();
        if let Some((key, _)) = entry.split_once('=') {
            let key = key.trim();
            if !section.is_empty()
                && !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                out.push(format!("{section}.{key}"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Applies `QUIVER_<SECTION>_<KEY>=value` variables to the TOML table, noting each one
/// in `sources`. A `QUIVER_*` variable that names no setting is refused.
pub fn apply_env(
    table: &mut toml::Table,
    env: impl Iterator<Item = (String, String)>,
    sources: &mut std::collections::HashMap<String, String>,
) -> Result<()> {
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("QUIVER_") else {
            continue;
        };
        if crate::config_units::is_not_a_setting(&name) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        let section = SECTIONS
            .iter()
            .find(|s| lower.starts_with(&format!("{s}_")));
        let key = section.map_or("", |s| &lower[s.len() + 1..]);
        let Some(section) = section.filter(|_| !key.is_empty()) else {
            bail!(
                "{}",
                crate::config_units::unknown_variable(&name, &setting_keys())
            );
        };
        sources.insert(format!("{section}.{key}"), name.clone());
        let parsed = parse_env_value(&value);
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(section_table) = entry else {
            bail!("config: [{section}] is not a table");
        };
        section_table.insert(key.to_string(), parsed);
    }
    Ok(())
}

fn parse_env_value(value: &str) -> toml::Value {
    if let Ok(i) = value.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    match value {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(value.to_string()),
    }
}
