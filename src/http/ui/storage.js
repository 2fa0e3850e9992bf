// The storage page: per database and measurement, the files, rows and bytes this node
// holds, rows still in memory, merges pending, time range and retention
// (GET /api/v1/storage).

import { json } from "./api.js";
import { bytes, el, fill, num, showError, table } from "./dom.js";

const $ = (id) => document.getElementById(id);

/** Fetches the listing and draws the page. */
export async function loadStorage() {
  try {
    const s = await json("/api/v1/storage");
    showError($("storage-error"), "");
    const totals = [
      ["location", s.location],
      ["files", num(s.files)],
      ["rows", num(s.rows)],
      ["bytes", bytes(s.bytes)],
      ["merges pending", num(s.compactions_pending)],
    ];
    if (s.unaccounted && s.unaccounted.files) {
      totals.push(["files kept unaccounted", `${num(s.unaccounted.files)} (${bytes(s.unaccounted.bytes)})`]);
    }
    fill($("storage-totals"), el("table", { class: "kv" }, el("tbody", {}, totals.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))))));
    fill($("storage-databases"), s.databases.length === 0
      ? el("p", { class: "muted" }, "No databases yet.")
      : s.databases.map(drawDatabase));
  } catch (e) {
    showError($("storage-error"), e.message);
  }
}

function drawDatabase(db) {
  const rows = db.measurements.map((m) => [
    m.measurement,
    num(m.files),
    num(m.rows),
    bytes(m.bytes),
    num(m.rows_in_memory),
    num(m.compactions_pending),
    m.oldest || "–",
    m.newest || "–",
    m.retention || "forever",
  ]);
  return el(
    "section",
    { class: "database", "data-database": db.database },
    el("h2", {}, db.database, el("span", { class: "muted" }, ` retention ${db.retention || "forever"}`)),
    table(["measurement", "files", "rows", "bytes", "rows in memory", "merges pending", "oldest", "newest", "retention"], rows, [1, 2, 3, 4, 5]),
  );
}
