// The query page: SQL editor, database picker, history, and the result as a table and,
// when it is a time series, a chart.

import { json } from "./api.js";
import { el, fill, showError } from "./dom.js";
import { renderTable } from "./table.js";
import { timeSeries } from "./series.js";
import { renderChart } from "./chart.js";

const HISTORY_KEY = "quiver.history";
const DATABASE_KEY = "quiver.database";
/** Queries remembered in history (oldest dropped first). */
const HISTORY_MAX = 50;

/** Quiet time after a window resize before the chart is drawn again. */
const RESIZE_REDRAW_MS = 150;

const $ = (id) => document.getElementById(id);
/** The series of the chart shown, for redrawing it. */
let shown = null;

/** Wires the page's controls; call once. */
export function initQuery() {
  $("run").addEventListener("click", run);
  $("sql").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      run();
    }
  });
  $("database").value = localStorage.getItem(DATABASE_KEY) || "";
  renderHistory();
  // The chart is drawn to the width it has; draw it again when that changes.
  let resizing = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      if (shown && !$("chart").hidden) renderChart($("chart"), shown);
    }, RESIZE_REDRAW_MS);
  });
}

/** Fills the database picker from the storage listing (databases this token may read). */
export async function loadDatabases() {
  try {
    const doc = await json("/api/v1/storage");
    const names = doc.databases.map((d) => d.database);
    fill($("databases"), names.map((n) => el("option", { value: n })));
    if (!$("database").value && names.length) $("database").value = names[0];
  } catch {
    // the picker stays free text: a write-only token cannot list databases
  }
}

async function run() {
  const sql = $("sql").value.trim();
  const database = $("database").value.trim();
  if (!sql) return;
  localStorage.setItem(DATABASE_KEY, database);
  remember(sql);
  showError($("query-error"), "");
  $("query-status").textContent = "running…";
  $("run").disabled = true;
  const started = performance.now();
  try {
    const doc = await json("/api/v1/query", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sql, database: database || undefined }),
    });
    const ms = Math.round(performance.now() - started);
    $("query-status").textContent = `${doc.row_count} rows in ${ms} ms`;
    renderTable($("result"), doc.columns, doc.data);
    const series = timeSeries(doc.columns, doc.data);
    shown = series;
    $("chart").hidden = !series;
    if (series) renderChart($("chart"), series);
    else fill($("chart"));
  } catch (e) {
    $("query-status").textContent = "";
    showError($("query-error"), e.message);
    shown = null;
    fill($("result"));
    fill($("chart"));
    $("chart").hidden = true;
  } finally {
    $("run").disabled = false;
  }
}

function history() {
  try {
    const list = JSON.parse(localStorage.getItem(HISTORY_KEY) || "[]");
    return Array.isArray(list) ? list.filter((q) => typeof q === "string") : [];
  } catch {
    return [];
  }
}

function remember(sql) {
  const list = [sql, ...history().filter((q) => q !== sql)].slice(0, HISTORY_MAX);
  localStorage.setItem(HISTORY_KEY, JSON.stringify(list));
  renderHistory();
}

function renderHistory() {
  const items = history().map((q) => {
    const button = el("button", { type: "button", class: "link" }, q);
    button.addEventListener("click", () => {
      $("sql").value = q;
      $("sql").focus();
    });
    return el("li", {}, button);
  });
  fill($("history"), items);
}
