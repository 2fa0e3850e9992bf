// Which results are time series, and their series: a column named `time` plus at
// least one numeric column. Every other column (tags, strings) names series: one series
// per combination of their values and numeric column, e.g. `host=a usage`.

/** Series drawn at most; the rest are left out (and the chart says so). */
export const SERIES_MAX = 20;

/** Time (ms since the epoch) of an RFC 3339 string; null if it is not one. */
export function parseTime(v) {
  if (typeof v !== "string") return null;
  // Date.parse takes milliseconds; the node writes up to nanoseconds.
  const trimmed = v.replace(/(\.\d{3})\d+/, "$1");
  const ms = Date.parse(trimmed);
  return Number.isNaN(ms) ? null : ms;
}

/**
 * `{series: [{name, points: [[ms, value], ...]}], dropped}` for a time-series result
 * (Arc's `columns` and `data`), or null when the result is not one.
 */
export function timeSeries(columns, data) {
  const t = columns.findIndex((c) => c.toLowerCase() === "time");
  if (t < 0 || data.length === 0) return null;
  if (!data.every((r) => parseTime(r[t]) !== null)) return null;
  const values = [];
  const labels = [];
  columns.forEach((c, i) => {
    if (i === t) return;
    const numeric = data.every((r) => r[i] === null || typeof r[i] === "number")
      && data.some((r) => typeof r[i] === "number");
    (numeric ? values : labels).push(i);
  });
  if (values.length === 0) return null;
  const byName = new Map();
  for (const row of data) {
    const ms = parseTime(row[t]);
    const key = labels.map((i) => `${columns[i]}=${row[i]}`).join(" ");
    for (const i of values) {
      const name = [key, labels.length === 0 || values.length > 1 ? columns[i] : ""]
        .filter(Boolean)
        .join(" ");
      if (!byName.has(name)) byName.set(name, []);
      byName.get(name).push([ms, row[i]]);
    }
  }
  const all = [...byName.entries()].map(([name, points]) => ({
    name,
    points: points.sort((a, b) => a[0] - b[0]),
  }));
  return { series: all.slice(0, SERIES_MAX), dropped: Math.max(0, all.length - SERIES_MAX) };
}
