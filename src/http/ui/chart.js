// A line chart in SVG, drawn by hand: one path per series, time on x, a legend, and
// zoom by dragging across the plot (double-click or "Reset zoom" to go back).

import { el, fill } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 320;
const MARGIN = { top: 12, right: 16, bottom: 28, left: 64 };
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2",
  "#db2777", "#65a30d", "#475569", "#ea580c"];
/** Drags narrower than this are clicks, not zooms. */
const ZOOM_DRAG_PX_MIN = 5;

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}

/** Draws `data` (from series.js) into `node`, zoomed to the full time range. */
export function renderChart(node, data) {
  const full = extent(data.series.flatMap((s) => s.points.map((p) => p[0])));
  draw(node, data, full, full);
}

function draw(node, data, full, domain) {
  // The container's content box (it has 0.5rem of padding on each side).
  const width = Math.max(320, (node.clientWidth || 916) - 16);
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const [x0, x1] = domain[0] === domain[1] ? [domain[0] - 1, domain[1] + 1] : domain;
  const visible = data.series.flatMap((s) => s.points.filter((p) => p[0] >= x0 && p[0] <= x1 && p[1] !== null));
  let [y0, y1] = extent(visible.map((p) => p[1]));
  if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
  const pad = (y1 - y0) * 0.05;
  [y0, y1] = [y0 - pad, y1 + pad];
  const x = (t) => MARGIN.left + ((t - x0) / (x1 - x0)) * plotW;
  const y = (v) => MARGIN.top + (1 - (v - y0) / (y1 - y0)) * plotH;

  const chart = svg("svg", {
    width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`, class: "chart-svg",
    "data-x-min": x0, "data-x-max": x1, "data-series": data.series.length,
  });
  chart.append(svg("defs", {}, svg("clipPath", { id: "plot-clip" },
    svg("rect", { x: MARGIN.left, y: MARGIN.top, width: plotW, height: plotH }))));
  for (const v of ticks(y0, y1, 5)) {
    chart.append(svg("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: y(v), y2: y(v), class: "grid" }));
    chart.append(svg("text", { x: MARGIN.left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, fmtValue(v)));
  }
  for (const t of timeTicks(x0, x1, Math.max(2, Math.floor(plotW / 140)))) {
    chart.append(svg("line", { x1: x(t), x2: x(t), y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom, class: "grid" }));
    chart.append(svg("text", { x: x(t), y: HEIGHT - 8, "text-anchor": "middle", class: "tick" }, fmtTime(t, x1 - x0)));
  }
  data.series.forEach((s, i) => {
    let d = "";
    let pen = "M";
    for (const [t, v] of s.points) {
      if (v === null) {
        pen = "M";
        continue;
      }
      d += `${pen}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = "L";
    }
    chart.append(svg("path", {
      d, class: "series", stroke: COLORS[i % COLORS.length], "clip-path": "url(#plot-clip)",
      "data-name": s.name,
    }, svg("title", {}, s.name)));
  });
  const selection = svg("rect", { y: MARGIN.top, height: plotH, width: 0, class: "selection", visibility: "hidden" });
  chart.append(selection);
  const overlay = svg("rect", { x: MARGIN.left, y: MARGIN.top, width: plotW, height: plotH, class: "overlay" });
  chart.append(overlay);

  const zoomed = domain[0] !== full[0] || domain[1] !== full[1];
  const reset = el("button", { type: "button", id: "zoom-reset", hidden: !zoomed }, "Reset zoom");
  reset.addEventListener("click", () => draw(node, data, full, full));
  chart.addEventListener("dblclick", () => draw(node, data, full, full));
  dragToZoom(overlay, selection, (px0, px1) => {
    const t = (px) => x0 + ((px - MARGIN.left) / plotW) * (x1 - x0);
    draw(node, data, full, [t(px0), t(px1)]);
  });

  const legend = el("ul", { class: "legend" }, data.series.map((s, i) =>
    el("li", {}, svg("svg", { width: 14, height: 4 },
      svg("line", { x1: 0, x2: 14, y1: 2, y2: 2, stroke: COLORS[i % COLORS.length], "stroke-width": 3 })), ` ${s.name}`)));
  const note = data.dropped ? el("p", { class: "muted" }, `${data.dropped} more series not drawn`) : null;
  fill(node, el("div", { class: "chart-bar" }, reset, el("span", { class: "muted" }, "drag across the chart to zoom")), chart, legend, note);
}

/** Calls `done(px0, px1)` (plot x coordinates, ordered) when a drag across `overlay` ends. */
function dragToZoom(overlay, selection, done) {
  let start = null;
  // Screen pixels to the SVG's own units (the SVG may be scaled to fit its box).
  const px = (e) => {
    const box = overlay.getBoundingClientRect();
    const left = Number(overlay.getAttribute("x"));
    const scale = Number(overlay.getAttribute("width")) / (box.width || 1);
    return left + Math.min(Math.max(e.clientX - box.left, 0), box.width) * scale;
  };
  overlay.addEventListener("mousedown", (e) => {
    start = px(e);
    selection.setAttribute("x", start);
    selection.setAttribute("width", 0);
    selection.setAttribute("visibility", "visible");
  });
  overlay.addEventListener("mousemove", (e) => {
    if (start === null) return;
    const now = px(e);
    selection.setAttribute("x", Math.min(start, now));
    selection.setAttribute("width", Math.abs(now - start));
  });
  const end = (e) => {
    if (start === null) return;
    const now = px(e);
    const from = start;
    start = null;
    selection.setAttribute("visibility", "hidden");
    if (Math.abs(now - from) >= ZOOM_DRAG_PX_MIN) done(Math.min(from, now), Math.max(from, now));
  };
  overlay.addEventListener("mouseup", end);
  overlay.addEventListener("mouseleave", end);
}

function extent(values) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo === Infinity ? [0, 1] : [lo, hi];
}

/** About `count` round values between `lo` and `hi` (multiples of `step` when given). */
function ticks(lo, hi, count, fixedStep) {
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = fixedStep || [1, 2, 5, 10].map((m) => m * mag).find((s) => raw <= s) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi && out.length <= count * 2; v += step) out.push(v);
  return out;
}

/** Steps of a time axis, in ms: seconds, minutes, hours, days, weeks. */
const TIME_STEPS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 10e3, 15e3, 30e3,
  60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 3 * 3600e3, 6 * 3600e3,
  12 * 3600e3, 86400e3, 2 * 86400e3, 7 * 86400e3, 28 * 86400e3];

/** About `count` time ticks on whole seconds, minutes, hours or days (UTC). */
function timeTicks(lo, hi, count) {
  const raw = (hi - lo) / count;
  const step = TIME_STEPS_MS.find((s) => raw <= s);
  return step ? ticks(lo, hi, count, step) : ticks(lo, hi, count);
}

function fmtValue(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toPrecision(3)}G`;
  if (a >= 1e6) return `${(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e4) return `${(v / 1e3).toPrecision(3)}k`;
  return Number(v.toPrecision(4)).toString();
}

function fmtTime(ms, spanMs) {
  const iso = new Date(ms).toISOString();
  if (spanMs > 2 * 86400e3) return iso.slice(0, 10);
  if (spanMs > 120e3) return iso.slice(11, 16);
  if (spanMs > 2e3) return iso.slice(11, 19);
  return iso.slice(11, 23);
}
