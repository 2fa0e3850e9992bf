//! `quiver sizing run --quick`, the whole campaign against the built binary, and what
//! it leaves behind: the three report files, a JSON report an operator (and the
//! planner) can rely on, the server-side count in every run, a named bottleneck per
//! run, and the charts. Then `quiver sizing plan` reading that report back.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The campaign is about two minutes on a 2-core machine; more than this is a
/// regression in `--quick` (CI has to stay under an hour).
const QUICK_CAMPAIGN_MAX: Duration = Duration::from_secs(300);

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_campaign_writes_a_report_whose_every_run_is_counted_by_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_quiver"));
    command
        // At most 1.08 M rows/s (the fourth step): the suite runs this beside other
        // tests on two cores, and a campaign that saturates them made both this test's
        // confirmations and its neighbours' deadlines fail. The climb to a failed gate
        // is measured on a quiet machine (docs/benchmarks.md).
        .args(["sizing", "run", "--quick", "--rate-max", "1080000", "--out"])
        .arg(&out)
        .arg("--data-dir")
        .arg(dir.path().join("volume"));
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("quiver sizing run starts");
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("campaign took {elapsed:?}\n{stdout}");
    assert!(
        output.status.success(),
        "the campaign failed:\n{stdout}\n{stderr}"
    );
    assert!(
        elapsed < QUICK_CAMPAIGN_MAX,
        "--quick took {elapsed:?}, over {QUICK_CAMPAIGN_MAX:?}"
    );
    // Progress is plain lines when stdout is not a terminal, estimate first.
    assert!(
        stdout.lines().next().unwrap_or("").contains("estimated"),
        "{stdout}"
    );
    assert!(stdout.contains("every gate held"), "{stdout}");

    for name in ["report.json", "report.md", "report.html"] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    // The nodes' directories are removed afterwards.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("volume"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "node directories left: {leftovers:?}");

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(report["settings"]["quick"], true);
    let machine = &report["machine"];
    assert!(machine["cores"].as_u64().unwrap_or(0) >= 1, "{machine}");
    assert!(num(&machine["memory_total_mb"]) > 0.0, "{machine}");
    let volumes = machine["volumes"].as_array().expect("volumes");
    assert!(!volumes.is_empty());
    for v in volumes {
        assert!(num(&v["sequential_write_mb_per_s"]) > 0.0, "{v}");
        assert!(num(&v["fdatasync_per_s"]) > 0.0, "{v}");
    }

    // Every run: acknowledged == persisted, counted per batch by the server; a
    // bottleneck named; samples taken once a second.
    let runs = report["runs"].as_array().expect("runs");
    let kinds: Vec<&str> = runs.iter().filter_map(|r| r["kind"].as_str()).collect();
    for kind in ["sweep", "confirm", "mixed"] {
        assert!(kinds.contains(&kind), "no {kind} run: {kinds:?}");
    }
    for run in runs {
        let id = run["id"].as_str().unwrap_or("?");
        let audit = &run["audit"];
        let acked = run["outcome"]["acked_rows"].as_u64().expect("acked_rows");
        assert!(acked > 0, "{id}: nothing acknowledged");
        assert_eq!(audit["acked_rows"].as_u64(), Some(acked), "{id}: {audit}");
        assert_eq!(
            audit["persisted_rows"].as_u64(),
            Some(acked),
            "{id}: {audit}"
        );
        assert_eq!(
            audit["batches_whole"], audit["batches_acked"],
            "{id}: {audit}"
        );
        for field in [
            "batches_missing",
            "batches_partial",
            "batches_duplicated",
            "refused_batches_stored",
            "stray_rows",
        ] {
            assert_eq!(audit[field], 0, "{id}: {field}: {audit}");
        }
        assert_eq!(run["persisted_equals_acked"], true, "{id}");
        let b = &run["bottleneck"];
        assert!(
            !b["resource"].as_str().unwrap_or("").is_empty(),
            "{id}: {b}"
        );
        assert!(b["sentence"].as_str().unwrap_or("").len() > 20, "{id}: {b}");
        let samples = run["samples"].as_array().expect("samples");
        assert!(!samples.is_empty(), "{id}: no samples");
        let node = &samples[0]["nodes"][0];
        assert!(num(&node["rss_mb"]) > 0.0, "{id}: node not sampled: {node}");
        assert!(samples[0]["generator_cpu_cores"].is_number(), "{id}");
        assert!(run["outcome"]["latency_ms"]["p99"].is_number(), "{id}");
        assert!(
            run["outcome"]["generator"]["encode_cpu_s"].is_number(),
            "{id}"
        );
    }

    let sweeps = report["sweeps"].as_array().expect("sweeps");
    let labels: Vec<&str> = sweeps.iter().filter_map(|s| s["label"].as_str()).collect();
    for wanted in [
        "msgpack · fsync",
        "lp · fsync",
        "msgpack · batch",
        "msgpack · none",
    ] {
        assert!(
            labels.iter().any(|l| l.starts_with(wanted)),
            "no {wanted} sweep: {labels:?}"
        );
    }
    for s in sweeps {
        assert!(num(&s["confirmed_rows_per_s"]) > 0.0, "not confirmed: {s}");
        let run = runs
            .iter()
            .find(|r| r["id"] == s["confirmed_run"])
            .expect("the confirmed run is in runs");
        assert_eq!(run["kind"], "confirm");
        assert_eq!(run["qualified"], true);
    }
    let profile = &report["query_profile"];
    let datasets = profile["datasets"].as_array().expect("datasets");
    assert_eq!(datasets.len(), 2, "{profile}");
    for d in datasets {
        assert_eq!(d["rows"], 1_000_000);
        let levels: Vec<u64> = d["levels"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l["concurrency"].as_u64())
            .collect();
        assert_eq!(levels, vec![1, 5, 10, 20]);
        assert!(d["qualified_concurrency"].as_u64().unwrap_or(0) >= 1, "{d}");
    }
    assert_eq!(report["mixed"]["levels"].as_array().map(Vec::len), Some(4));
    let calibration = &report["calibration"];
    for field in [
        "node_cpu_us_per_row",
        "parquet_bytes_per_row",
        "wal_bytes_per_row",
        "wal_volume_fdatasync_per_s",
    ] {
        assert!(num(&calibration[field]) > 0.0, "{field}: {calibration}");
    }
    let recommendation = &report["recommendation"];
    assert!(!recommendation["sizes"].as_array().unwrap().is_empty());
    assert!(!recommendation["retention"].as_array().unwrap().is_empty());
    assert!(report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["passed"] == true));

    // One page, no network: inline SVG charts, no scripts, nothing fetched.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for title in [
        "Offered vs acknowledged rate",
        "Write latency vs offered rate",
        "CPU over time",
        "Disk over time",
        "Query p95 vs concurrency",
        "Bytes per row",
        "Mixed:",
    ] {
        assert!(html.contains(title), "no chart {title:?} in the HTML");
    }
    assert!(html.matches("<svg").count() >= 10, "too few charts");
    assert!(html.contains("<polyline"));
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("## Recommendation") && md.contains("| retention |"),
        "{md}"
    );

    // The planner reads the campaign's coefficients and says so.
    let plan = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args([
            "sizing",
            "plan",
            "--rows-per-s",
            "100000",
            "--json",
            "--calibration",
        ])
        .arg(out.join("report.json"))
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let cpu = plan["assumptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "node_cpu_us_per_row")
        .expect("cpu assumption")
        .clone();
    assert_eq!(num(&cpu["value"]), num(&calibration["node_cpu_us_per_row"]));
    assert!(
        cpu["source"].as_str().unwrap().contains("report.json"),
        "{cpu}"
    );
}
