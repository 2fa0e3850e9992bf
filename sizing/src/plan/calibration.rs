//! The coefficients a campaign measures and the planner multiplies: one struct, written
//! into `report.json` by `quiver sizing run` and read back by
//! `quiver sizing plan --calibration`. Without a calibration the planner uses
//! [`Calibration::reference`], measured on the reference machine (`docs/sizing.md`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What one machine measured; every field is a rate or a size per unit of load, so an
/// operator (or the planner) can multiply it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Where the numbers come from: tool version, machine and time of the campaign.
    pub source: String,
    /// Cores of the measured machine.
    pub cores: u32,
    /// Fields per row of the measured load (plus `time` and one tag).
    pub fields: u32,
    /// Node CPU per acknowledged row at the confirmed MessagePack `fsync` rate, in
    /// CPU-microseconds (all cores summed).
    pub node_cpu_us_per_row: f64,
    /// Parquet bytes per row once flushed.
    pub parquet_bytes_per_row: f64,
    /// WAL bytes written per row (the log entry holds the batch as Arrow IPC).
    pub wal_bytes_per_row: f64,
    /// Request body bytes per row (MessagePack), what the network carries in.
    pub wire_bytes_per_row: f64,
    /// Resident memory of an idle node, in MB.
    pub memory_base_mb: f64,
    /// Resident memory above idle per row/s of ingest, in bytes.
    pub memory_bytes_per_row_per_s: f64,
    /// Resident memory per distinct series (tag set), in bytes.
    pub memory_bytes_per_series: f64,
    /// Node CPU per query of the campaign's mix, per million rows of the dataset it
    /// reads, in CPU-milliseconds.
    pub query_cpu_ms_per_mrows: f64,
    /// Resident memory above the seeded node per concurrent query client, in MB.
    pub query_memory_mb_per_client: f64,
    /// Seconds of writes the WAL holds on disk before flushes and snapshots let it be
    /// purged (peak WAL bytes on disk ÷ WAL bytes written per second).
    pub wal_held_s: f64,
    /// `fdatasync` calls per second one writer gets from the WAL volume.
    pub wal_volume_fdatasync_per_s: f64,
    /// Sequential write MB/s of the WAL volume.
    pub wal_volume_write_mb_per_s: f64,
    /// Sequential write MB/s of the data volume.
    pub data_volume_write_mb_per_s: f64,
}

impl Calibration {
    /// The documented defaults: `--quick` campaigns on the reference machine (the
    /// shared 2-core sandbox this repository is developed on, MessagePack,
    /// `wal.sync = fsync`; one is committed under `docs/sizing/`), rounded, and
    /// conservative where 4 s runs on a shared machine cannot measure a coefficient
    /// (WAL held seconds, memory per query client): `docs/sizing.md` lists each value
    /// next to what was measured and why it was chosen.
    pub fn reference() -> Calibration {
        Calibration {
            source: "reference machine (docs/sizing.md): 2 cores, quiver sizing run --quick, rounded, conservative where unmeasured"
                .to_string(),
            cores: 2,
            fields: 3,
            node_cpu_us_per_row: 1.2,
            parquet_bytes_per_row: 5.3,
            wal_bytes_per_row: 38.6,
            wire_bytes_per_row: 44.0,
            memory_base_mb: 60.0,
            memory_bytes_per_row_per_s: 1_000.0,
            memory_bytes_per_series: 2_000.0,
            query_cpu_ms_per_mrows: 20.0,
            query_memory_mb_per_client: 40.0,
            wal_held_s: 60.0,
            wal_volume_fdatasync_per_s: 1_000.0,
            wal_volume_write_mb_per_s: 500.0,
            data_volume_write_mb_per_s: 500.0,
        }
    }

    /// Reads the `calibration` object of a campaign's `report.json` and checks it.
    pub fn from_report_file(path: &Path) -> Result<Calibration> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let report: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::malformed(path.display(), e))?;
        let object = report.get("calibration").ok_or_else(|| {
            Error::malformed(
                path.display(),
                "no \"calibration\" object: is this a report.json of `quiver sizing run`?",
            )
        })?;
        let calibration: Calibration = serde_json::from_value(object.clone())
            .map_err(|e| Error::malformed(format!("{}: calibration", path.display()), e))?;
        calibration.check().map_err(|detail| {
            Error::malformed(format!("{}: calibration", path.display()), detail)
        })?;
        Ok(calibration)
    }

    /// Every coefficient must be a finite number; those that divide must be positive.
    pub fn check(&self) -> std::result::Result<(), String> {
        let non_negative = [
            ("node_cpu_us_per_row", self.node_cpu_us_per_row),
            ("parquet_bytes_per_row", self.parquet_bytes_per_row),
            ("wal_bytes_per_row", self.wal_bytes_per_row),
            ("wire_bytes_per_row", self.wire_bytes_per_row),
            ("memory_base_mb", self.memory_base_mb),
            (
                "memory_bytes_per_row_per_s",
                self.memory_bytes_per_row_per_s,
            ),
            ("memory_bytes_per_series", self.memory_bytes_per_series),
            ("query_cpu_ms_per_mrows", self.query_cpu_ms_per_mrows),
            (
                "query_memory_mb_per_client",
                self.query_memory_mb_per_client,
            ),
            ("wal_held_s", self.wal_held_s),
        ];
        for (name, value) in non_negative {
            if !value.is_finite() || value < 0.0 {
                return Err(format!("{name} = {value}: must be a number ≥ 0"));
            }
        }
        let positive = [
            (
                "wal_volume_fdatasync_per_s",
                self.wal_volume_fdatasync_per_s,
            ),
            ("wal_volume_write_mb_per_s", self.wal_volume_write_mb_per_s),
            (
                "data_volume_write_mb_per_s",
                self.data_volume_write_mb_per_s,
            ),
        ];
        for (name, value) in positive {
            if !value.is_finite() || value <= 0.0 {
                return Err(format!("{name} = {value}: must be a number > 0"));
            }
        }
        if self.fields == 0 || self.cores == 0 {
            return Err("fields and cores must be at least 1".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_passes_its_own_check() {
        assert_eq!(Calibration::reference().check(), Ok(()));
    }

    #[test]
    fn a_report_without_calibration_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, r#"{"runs": []}"#).unwrap();
        let e = Calibration::from_report_file(&path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no \"calibration\""), "{e}");
    }

    #[test]
    fn a_calibration_round_trips_through_a_report() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let mut c = Calibration::reference();
        c.wal_volume_fdatasync_per_s = 12_345.0;
        let report = serde_json::json!({"schema_version": 1, "calibration": c});
        std::fs::write(&path, report.to_string()).unwrap();
        assert_eq!(Calibration::from_report_file(&path).unwrap(), c);
    }

    #[test]
    fn a_zero_disk_rate_is_refused() {
        let mut c = Calibration::reference();
        c.wal_volume_fdatasync_per_s = 0.0;
        assert!(c
            .check()
            .unwrap_err()
            .contains("wal_volume_fdatasync_per_s"));
    }
}
