//! Settings as people write them: sizes with units (`64MiB`, `2GB`), durations with
//! units (`30s`, `5m`), and a variable that names no setting refused with the nearest
//! one, instead of being ignored (`QUIVER_DATA_DIR` once started a node in
//! `./quiver-data`).

use anyhow::{bail, Result};

/// `QUIVER_*` variables that are not settings: the command-line tools' own and the
/// test and benchmark harnesses'.
const NOT_SETTINGS: [&str; 4] = [
    "QUIVER_TOKEN",
    "QUIVER_CA",
    "QUIVER_BOOTSTRAP_TOKEN",
    "QUIVER_BIN",
];
/// Prefixes of `QUIVER_*` variables that are not settings.
const NOT_SETTINGS_PREFIXES: [&str; 3] = ["QUIVER_SIM_", "QUIVER_TESTS_", "QUIVER_BENCH_"];

/// Command-line flags and the settings they set: a variable spelled after a flag
/// (`QUIVER_DATA_DIR` for `--data-dir`) is pointed at its setting.
const FLAG_SETTINGS: [(&str, &str); 6] = [
    ("data_dir", "storage.dir"),
    ("wal_dir", "wal.dir"),
    ("http_addr", "http.addr"),
    ("node_id", "cluster.node_id"),
    ("peers", "cluster.peers"),
    ("tls_ca", "cluster.tls_ca"),
];

/// Whether `name` is a `QUIVER_*` variable that is not meant as a setting.
pub fn is_not_a_setting(name: &str) -> bool {
    NOT_SETTINGS.contains(&name) || NOT_SETTINGS_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The variable that sets `key` (`section.key`).
pub fn variable_of(key: &str) -> String {
    format!("QUIVER_{}", key.replace('.', "_").to_ascii_uppercase())
}

/// The refusal of variable `name`, which names no setting: with the setting it most
/// likely meant, among `keys` (`section.key`).
pub fn unknown_variable(name: &str, keys: &[String]) -> String {
    let rest = name
        .strip_prefix("QUIVER_")
        .unwrap_or(name)
        .to_ascii_lowercase();
    let meant = FLAG_SETTINGS
        .iter()
        .find(|(flag, _)| *flag == rest)
        .map(|(_, key)| key.to_string())
        .or_else(|| {
            keys.iter()
                .map(|k| (strsim::levenshtein(&variable_of(k), name), k))
                .min()
                .filter(|(distance, _)| *distance <= name.len() / 2)
                .map(|(_, k)| k.clone())
        });
    match meant {
        Some(key) => format!(
            "{name} is not a setting; did you mean {} ({key})?",
            variable_of(&key)
        ),
        None => format!(
            "{name} is not a setting (variables are QUIVER_<SECTION>_<KEY>; see \
             quiver.example.toml)"
        ),
    }
}

/// Whether `key` holds a size in bytes.
fn is_size_key(key: &str) -> bool {
    key.contains("bytes")
}

/// Whether `key` holds a duration in milliseconds.
fn is_duration_key(key: &str) -> bool {
    key.ends_with("_ms") || key.contains("_ms_")
}

/// Rewrites every size and duration given as text with a unit into the integer the
/// setting holds (bytes, milliseconds); `source_of(section.key)` names where a value
/// came from, for the error.
pub fn normalize_units(table: &mut toml::Table, source_of: impl Fn(&str) -> String) -> Result<()> {
    for (section, value) in table.iter_mut() {
        let toml::Value::Table(keys) = value else {
            continue;
        };
        for (key, value) in keys.iter_mut() {
            let toml::Value::String(text) = value else {
                continue;
            };
            let path = format!("{section}.{key}");
            let parsed = if is_size_key(key) {
                parse_size(text).map_err(|why| {
                    (
                        why,
                        "a size: bytes, or a number with a unit (64MiB, 2GB, 512KiB)",
                    )
                })
            } else if is_duration_key(key) {
                parse_duration_ms(text)
                    .map_err(|why| (why, "a duration: milliseconds, or a number with a unit (250ms, 30s, 5m, 2h, 1d)"))
            } else {
                continue;
            };
            match parsed {
                Ok(n) => *value = toml::Value::Integer(n),
                Err((why, wanted)) => bail!(
                    "{path} ({}): {text:?} is not {wanted}: {why}",
                    source_of(&path)
                ),
            }
        }
    }
    Ok(())
}

/// Splits `text` into its number and its unit.
fn number_and_unit(text: &str) -> Result<(f64, String), String> {
    let text: String = text.chars().filter(|c| *c != '_' && *c != ' ').collect();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a number"))?;
    Ok((number, unit.to_ascii_lowercase()))
}

/// `64MiB`, `2GB`, `512kib`, `4096` → bytes. Decimal units are powers of 1000, binary
/// ones (`KiB`, `MiB`, ...) of 1024.
pub fn parse_size(text: &str) -> Result<i64, String> {
    let (number, unit) = number_and_unit(text)?;
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("unknown unit {other:?}")),
    };
    whole(number * scale)
}

/// `250ms`, `30s`, `5m`, `2h`, `1d`, `100` → milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let (number, unit) = number_and_unit(text)?;
    let scale: f64 = match unit.as_str() {
        "" | "ms" => 1.0,
        "s" => 1e3,
        "m" | "min" => 60e3,
        "h" => 3_600e3,
        "d" => 86_400e3,
        other => return Err(format!("unknown unit {other:?}")),
    };
    whole(number * scale)
}

/// `value` as a whole number that fits a setting.
fn whole(value: f64) -> Result<i64, String> {
    if !value.is_finite() || value < 0.0 || value >= i64::MAX as f64 {
        return Err("out of range".into());
    }
    if value.fract() != 0.0 {
        return Err("not a whole number of the setting's unit".into());
    }
    Ok(value as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_and_durations_take_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("64 MiBs").is_err());
        assert!(parse_size("0.5B").is_err());
        assert!(parse_size("-1MB").is_err());
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert!(parse_duration_ms("soon").is_err());
    }

    #[test]
    fn a_variable_spelled_after_a_flag_points_at_its_setting() {
        let keys = vec!["storage.dir".to_string(), "wal.dir".to_string()];
        let said = unknown_variable("QUIVER_DATA_DIR", &keys);
        assert!(said.contains("QUIVER_STORAGE_DIR (storage.dir)"), "{said}");
        let keys = vec!["http.body_bytes_max".to_string(), "wal.sync".to_string()];
        let said = unknown_variable("QUIVER_HTTP_BODY_BYTE_MAX", &keys);
        assert!(said.contains("QUIVER_HTTP_BODY_BYTES_MAX"), "{said}");
        assert!(is_not_a_setting("QUIVER_SIM_SEEDS"));
        assert!(!is_not_a_setting("QUIVER_DATA_DIR"));
    }

    proptest! {
        /// Any whole number of any unit reads back as that many of the unit.
        #[test]
        fn units_scale_whole_numbers(n in 0i64..1_000_000, unit in 0usize..5) {
            let (suffix, scale) = [("", 1), ("KiB", 1024), ("MiB", 1 << 20), ("kB", 1000), ("GB", 1_000_000_000)][unit];
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * scale));
            let (suffix, scale) = [("", 1), ("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)][unit];
            prop_assert_eq!(parse_duration_ms(&format!("{n}{suffix}")), Ok(n * scale));
        }

        /// No text makes the parsers panic.
        #[test]
        fn any_text_is_a_value_or_an_error(text in ".{0,24}") {
            let _ = parse_size(&text);
            let _ = parse_duration_ms(&text);
        }
    }
}
