// Live ingest and query rates from the node's own /metrics: the Prometheus text is
// parsed here, and a rate is the difference of two samples over the time between them.

import { call } from "./api.js";
import { num } from "./dom.js";

/** How often /metrics is sampled while the console is open and visible. */
const SAMPLE_INTERVAL_MS = 2000;

/**
 * The sum of every sample of each metric in `names`, from Prometheus text format:
 * `{name: total}` (labels are summed over). Metrics not present are left out.
 */
export function sumMetrics(text, names) {
  const out = {};
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const nameEnd = line.search(/[{ ]/);
    if (nameEnd < 0) continue;
    const name = line.slice(0, nameEnd);
    if (!names.includes(name)) continue;
    const afterLabels = line[nameEnd] === "{" ? line.slice(line.lastIndexOf("}") + 1) : line.slice(nameEnd);
    const value = Number(afterLabels.trim().split(/\s+/)[0]);
    if (Number.isFinite(value)) out[name] = (out[name] || 0) + value;
  }
  return out;
}

/** Per-second rate of each counter between two samples `{at, values}`; null for a restart or a missing counter. */
export function rates(before, after) {
  const seconds = (after.at - before.at) / 1000;
  const out = {};
  for (const [name, value] of Object.entries(after.values)) {
    const old = before.values[name];
    out[name] = seconds > 0 && old !== undefined && value >= old ? (value - old) / seconds : null;
  }
  return out;
}

const INGEST = "quiver_rows_applied_total";
const QUERIES = "quiver_query_seconds_count";

let timer = null;
let previous = null;
/** Bumped by every start and stop, so a sample still in flight at a stop starts no timer. */
let generation = 0;

/** Starts sampling; shows the rates in the header. */
export function startRates() {
  stopRates();
  const mine = generation;
  document.getElementById("rates").hidden = false;
  const tick = async () => {
    if (!document.hidden) await sample();
    if (mine === generation) timer = setTimeout(tick, SAMPLE_INTERVAL_MS);
  };
  tick();
}

/** Stops sampling (log out). */
export function stopRates() {
  generation += 1;
  clearTimeout(timer);
  timer = null;
  previous = null;
  document.getElementById("rates").hidden = true;
}

async function sample() {
  try {
    const text = await (await call("/metrics")).text();
    const current = { at: performance.now(), values: sumMetrics(text, [INGEST, QUERIES]) };
    if (previous) {
      const r = rates(previous, current);
      // Counters appear on first use: none yet means none happened.
      document.getElementById("rate-ingest").textContent = num(r[INGEST] ?? 0, 1);
      document.getElementById("rate-queries").textContent = num(r[QUERIES] ?? 0, 2);
    }
    previous = current;
  } catch {
    previous = null;
  }
}
