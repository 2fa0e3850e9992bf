// The cluster page: this node's Raft state and the members, with each follower's lag
// as the leader sees it (GET /api/v1/cluster/status).

import { json } from "./api.js";
import { bytes, el, fill, num, showError, table } from "./dom.js";

const $ = (id) => document.getElementById(id);

/** Fetches the status and draws the page. */
export async function loadCluster() {
  try {
    const s = await json("/api/v1/cluster/status");
    showError($("cluster-error"), "");
    drawNode(s);
    drawMembers(s);
  } catch (e) {
    showError($("cluster-error"), e.message);
  }
}

function drawNode(s) {
  const rows = [
    ["node", s.node_id],
    ["role", el("span", { id: "cluster-role", class: `role role-${s.role}` }, s.role)],
    ["term", s.term],
    ["leader", s.leader === null ? "none known" : `${s.leader}${s.leader_addr ? ` (${s.leader_addr})` : ""}`],
    ["last log index", num(s.last_log_index)],
    ["commit index", num(s.commit_index)],
    ["applied index", num(s.applied_index)],
    ["snapshot index", num(s.snapshot_index)],
    ["WAL", `${bytes(s.wal.bytes_on_disk)} in ${s.wal.segments} segments`],
  ];
  if (s.millis_since_quorum_ack !== null && s.millis_since_quorum_ack !== undefined) {
    rows.push(["since quorum ack", `${s.millis_since_quorum_ack} ms`]);
  }
  fill($("cluster-node"), el("table", { class: "kv" }, el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))))));
}

function drawMembers(s) {
  const followers = new Map(s.followers.map((f) => [f.node_id, f]));
  const rows = s.members.map((m) => {
    const f = followers.get(m.node_id);
    const role = m.node_id === s.leader ? "leader" : m.voter ? "voter" : "learner";
    const here = m.node_id === s.node_id ? " (this node)" : "";
    return [
      `${m.node_id}${here}`,
      m.addr,
      role,
      f ? num(f.matched_index) : "–",
      f ? num(f.lag_entries) : "–",
      f ? bytes(f.lag_bytes_estimate) : "–",
      f ? (f.attached ? "yes" : "no") : "–",
    ];
  });
  fill($("cluster-members"), table(["node", "address", "role", "matched index", "lag (entries)", "lag (bytes, est.)", "attached"], rows, [3, 4, 5]));
  const note = $("cluster-note");
  if (s.role === "leader") {
    fill(note, "Lag is each follower's distance from this leader's last log index.");
  } else if (s.leader_addr) {
    fill(note, "Followers' lag is known on the leader: ", el("a", { href: `${origin(s.leader_addr)}/ui#cluster` }, `node ${s.leader}'s console`), ".");
  } else {
    fill(note, "No leader is known to this node.");
  }
}

/** A member's address as an origin: addresses may be written without a scheme (`10.0.0.1:8000`), then this page's is used. */
export function origin(addr) {
  return /^https?:\/\//.test(addr) ? addr.replace(/\/+$/, "") : `${location.protocol}//${addr}`;
}
