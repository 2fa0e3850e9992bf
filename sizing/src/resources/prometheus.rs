//! The few numbers the campaign reads from a node's `/metrics` (Prometheus text).

use std::collections::BTreeMap;

/// Metric name → value, summed over label sets (so `quiver_table_rows{...}` becomes one
/// number per node).
pub type MetricValues = BTreeMap<String, f64>;

/// Parses Prometheus text exposition format, summing every series of a name.
pub fn parse(text: &str) -> MetricValues {
    let mut values = MetricValues::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if value.is_finite() {
            *values.entry(line[..name_end].to_string()).or_insert(0.0) += value;
        }
    }
    values
}

/// Fetches and parses `{url}/metrics`; `None` if the node does not answer in time.
pub async fn fetch(client: &reqwest::Client, url: &str) -> Option<MetricValues> {
    let response = client
        .get(format!("{}/metrics", url.trim_end_matches('/')))
        .timeout(std::time::Duration::from_millis(900))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    Some(parse(&response.text().await.ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_summed_and_comments_skipped() {
        let text = "# HELP x y\n# TYPE quiver_table_rows gauge\n\
                    quiver_table_rows{database=\"a\",measurement=\"m\"} 10\n\
                    quiver_table_rows{database=\"b\",measurement=\"m\"} 5\n\
                    quiver_wal_fsyncs_total 42\n\
                    quiver_wal_fsync_seconds_bucket{le=\"+Inf\"} 3\n\
                    bad_line\n";
        let v = parse(text);
        assert_eq!(v["quiver_table_rows"], 15.0);
        assert_eq!(v["quiver_wal_fsyncs_total"], 42.0);
        assert_eq!(v["quiver_wal_fsync_seconds_bucket"], 3.0);
        assert!(!v.contains_key("bad_line"));
    }
}
