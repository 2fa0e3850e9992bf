//! The campaign's report: `report.json` (everything), `report.md` (tables) and
//! `report.html` (one self-contained page with the charts).

mod charts;
mod document;
mod measured;
pub mod model;
mod sections;
mod svg;

use std::path::Path;

use crate::error::{Error, Result};
use model::Report;

/// Writes `report.json`, `report.md` and `report.html` into `dir`.
pub fn write(dir: &Path, report: &Report) -> Result<()> {
    let json = serde_json::to_string_pretty(report).map_err(|e| Error::malformed("report", e))?;
    let blocks = sections::blocks(report);
    let files = [
        ("report.json", json),
        ("report.md", document::markdown(&blocks)),
        (
            "report.html",
            document::html("Quiver sizing report", &blocks),
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}
