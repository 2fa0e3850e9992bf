// The result table. Large results are cut for the page (the browser would crawl), and
// say so; the query's own row count is shown beside the Run button.

import { el, fill } from "./dom.js";

/** Rows drawn in the table at most. */
const TABLE_ROWS_MAX = 1000;

/** Draws `columns` and `data` (Arc's JSON envelope) into `node`. */
export function renderTable(node, columns, data) {
  const shown = data.slice(0, TABLE_ROWS_MAX);
  const numeric = columns.map((_, i) => shown.length > 0 && shown.every((r) => r[i] === null || typeof r[i] === "number"));
  const head = el("thead", {}, el("tr", {}, columns.map((c) => el("th", {}, c))));
  const body = el(
    "tbody",
    {},
    shown.map((row) =>
      el("tr", {}, row.map((v, i) => el("td", { class: numeric[i] ? "num" : null }, cell(v)))),
    ),
  );
  const note = data.length > shown.length
    ? el("p", { class: "muted" }, `showing the first ${TABLE_ROWS_MAX} of ${data.length} rows`)
    : null;
  fill(node, note, el("table", { id: "result-table" }, head, body));
}

function cell(v) {
  if (v === null) return "NULL";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}
