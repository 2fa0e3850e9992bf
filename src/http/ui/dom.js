// Small DOM and formatting helpers. Text from the node is always set as text, never
// as HTML, so a measurement or tag value cannot inject markup.

/** `el("td", {class: "num"}, "12")`: an element with attributes and children (strings become text). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

/** Replaces the children of `node`. */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null));
}

/** Shows `message` in `node`, or hides it when `message` is empty. */
export function showError(node, message) {
  node.textContent = message || "";
  node.hidden = !message;
}

/** A table from a header row and rows of cells (strings or elements). */
export function table(head, rows, numeric = []) {
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el(
      "tbody",
      {},
      rows.map((r) => el("tr", {}, r.map((c, i) => el("td", { class: numeric.includes(i) ? "num" : null }, c)))),
    ),
  );
}

/** 1234567 → "1,234,567"; null → "–". */
export function num(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits });
}

/** Bytes as B, KiB, MiB, GiB, TiB. */
export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toLocaleString("en-US", { maximumFractionDigits: i ? 1 : 0 })} ${units[i]}`;
}
