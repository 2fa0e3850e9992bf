#!/usr/bin/env bash
# Line-protocol ingest, Quiver against VictoriaMetrics on the same machine in the same
# run (issues 3, 13). Both get identical batches from `quiver sizing load --format lp`
# posted to `/write`: 5000-row batches of Arc's shape (a `host` tag, three float fields)
# or TSBS's cpu-only shape (ten tags, ten integer fields). Bodies are encoded before the
# clock starts (`--prepared`), for both servers. Quiver runs with
# wal.sync=fsync (its default). VictoriaMetrics runs with its defaults (it does not fsync
# per request: an acknowledged write can sit in memory for about a second).
#
#   benches/lp_vs_victoriametrics.sh [ROWS] [WORKERS] [SHAPE]   (defaults: 5000000, 8, arc)
#
# SHAPE is arc or tsbs. Also reported: each server's peak resident memory (VmHWM) over
# its two runs. QUIVER_BIN=<path> measures that binary instead of building one.
#
# Needs /usr/bin/victoria-metrics (`apt-get install victoria-metrics`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-5000000}"
WORKERS="${2:-8}"
SHAPE="${3:-arc}"
source benches/release_binary.sh
VM=/usr/bin/victoria-metrics
[ -x "$VM" ] || { echo "install victoria-metrics first: apt-get install victoria-metrics" >&2; exit 1; }
QPORT=18556
VPORT=18428
WORK=$(mktemp -d /tmp/quiver-vs-vm.XXXXXX)
trap 'kill $QPID $VPID 2>/dev/null || true; wait $QPID $VPID 2>/dev/null || true; rm -rf "$WORK"' EXIT

wait_ready() {
  for _ in $(seq 1 400); do curl -sf "$1" >/dev/null && return 0; sleep 0.05; done
  echo "not ready: $1" >&2; return 1
}

QUIVER_WAL_SYNC=fsync QUIVER_LOG_LEVEL=warn \
  "$BIN" serve --auth none --http-addr 127.0.0.1:$QPORT --data-dir "$WORK/quiver" 2>"$WORK/quiver.log" &
QPID=$!
"$VM" -storageDataPath "$WORK/vm" -httpListenAddr 127.0.0.1:$VPORT -retentionPeriod 100y \
  -loggerLevel ERROR >"$WORK/vm.log" 2>&1 &
VPID=$!
wait_ready http://127.0.0.1:$QPORT/ready
wait_ready http://127.0.0.1:$VPORT/health

# Alternate the targets so neither always runs on a warmer machine.
Q1=$("$BIN" sizing load --format lp --url http://127.0.0.1:$QPORT --rows "$ROWS" --workers "$WORKERS" --batch-size 5000 --shape "$SHAPE" --prepared)
V1=$("$BIN" sizing load --format lp --url http://127.0.0.1:$VPORT --rows "$ROWS" --workers "$WORKERS" --batch-size 5000 --shape "$SHAPE" --prepared --no-verify --measurement cpu1)
V2=$("$BIN" sizing load --format lp --url http://127.0.0.1:$VPORT --rows "$ROWS" --workers "$WORKERS" --batch-size 5000 --shape "$SHAPE" --prepared --no-verify --measurement cpu2)
Q2=$("$BIN" sizing load --format lp --url http://127.0.0.1:$QPORT --rows "$ROWS" --workers "$WORKERS" --batch-size 5000 --shape "$SHAPE" --prepared --measurement cpu2)

# VictoriaMetrics stores one series per field: count what it kept of the first field.
curl -sf http://127.0.0.1:$VPORT/internal/force_flush >/dev/null
# Evaluated an hour ahead: the generated rows run slightly into the future, and
# VictoriaMetrics hides the most recent 30 s of samples from queries at "now".
VM_ROWS=$(curl -sf "http://127.0.0.1:$VPORT/api/v1/query" \
  --data-urlencode 'query=sum(count_over_time({__name__=~"cpu[12]_usage_user"}[1d]))' \
  --data-urlencode "time=$(( $(date +%s) + 3600 ))" \
  | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)')

# Peak resident memory of each server over both of its runs, in MiB.
hwm() { awk '/^VmHWM/{print int($2/1024)}' "/proc/$1/status"; }
Q_HWM=$(hwm $QPID)
V_HWM=$(hwm $VPID)

python3 - "$Q1" "$Q2" "$V1" "$V2" "$VM_ROWS" "$SHAPE" "$Q_HWM" "$V_HWM" <<'PY'
import json, sys
q1, q2, v1, v2 = (json.loads(a) for a in sys.argv[1:5])
vm_rows = int(sys.argv[5])
shape, q_hwm, v_hwm = sys.argv[6], int(sys.argv[7]), int(sys.argv[8])
q = (q1["rows_per_s"] + q2["rows_per_s"]) / 2
v = (v1["rows_per_s"] + v2["rows_per_s"]) / 2
print(json.dumps({
    "shape": shape, "rows_per_run": q1["offered_rows"],
    "quiver_rows_per_s": round(q), "victoriametrics_rows_per_s": round(v),
    "ratio_quiver_over_vm": round(q / v, 3),
    "quiver_runs": [round(q1["rows_per_s"]), round(q2["rows_per_s"])],
    "vm_runs": [round(v1["rows_per_s"]), round(v2["rows_per_s"])],
    "quiver_persisted_equals_acked": bool(q1["persisted_equals_acked"] and q2["persisted_equals_acked"]),
    "quiver_failed_rows": q1["failed_rows"] + q2["failed_rows"],
    "vm_acked_rows": v1["acked_rows"] + v2["acked_rows"], "vm_rows_found": vm_rows,
    "quiver_p99_ms": [q1["latency_ms"]["p99"], q2["latency_ms"]["p99"]],
    "vm_p99_ms": [v1["latency_ms"]["p99"], v2["latency_ms"]["p99"]],
    "quiver_peak_rss_mib": q_hwm, "vm_peak_rss_mib": v_hwm,
    "peak_rss_ratio_quiver_over_vm": round(q_hwm / max(v_hwm, 1), 2),
}, indent=1))
PY
