#!/usr/bin/env bash
# Replicated ingest against single-node ingest, in the same run on this machine (issue
# 4): a one-node cluster and a three-node cluster (all on loopback, wal.sync=fsync), the
# same `quiver sizing load` against each (posting to the leader), persisted == acked
# checked on both. Prints one JSON object with both rates and their ratio.
#
#   benches/replicated_ingest.sh [ROWS] [WORKERS]       (defaults: 5000000 rows, 8)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-5000000}"
WORKERS="${2:-8}"
source benches/release_binary.sh
WORK=$(mktemp -d /tmp/quiver-repl.XXXXXX)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
export QUIVER_LOG_LEVEL=warn QUIVER_WAL_SYNC=fsync QUIVER_BOOTSTRAP_TOKEN=bench-token-0123456789
export QUIVER_TOKEN=bench-token-0123456789

wait_ready() {
  for _ in $(seq 1 600); do curl -sf "$1/ready" >/dev/null && return 0; sleep 0.05; done
  echo "not ready: $1" >&2; return 1
}

# One node.
"$BIN" serve --http-addr 127.0.0.1:18601 --data-dir "$WORK/single" 2>"$WORK/single.log" &
PIDS+=($!)
wait_ready http://127.0.0.1:18601
SINGLE=$("$BIN" sizing load --url http://127.0.0.1:18601 --rows "$ROWS" --workers "$WORKERS")
kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true; PIDS=()

# Three nodes.
PEERS="1=http://127.0.0.1:18611,2=http://127.0.0.1:18612,3=http://127.0.0.1:18613"
for i in 1 2 3; do
  QUIVER_CLUSTER_PEERS=$PEERS QUIVER_CLUSTER_SECRET=bench-secret-0123456789 \
    "$BIN" serve --node-id $i --http-addr 127.0.0.1:1861$i --data-dir "$WORK/n$i" 2>"$WORK/n$i.log" &
  PIDS+=($!)
done
for i in 1 2 3; do wait_ready http://127.0.0.1:1861$i; done
LEADER=$(curl -sf -H "Authorization: Bearer $QUIVER_TOKEN" http://127.0.0.1:18611/api/v1/cluster/status \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader_addr"])')
REPL=$("$BIN" sizing load --url "$LEADER" --rows "$ROWS" --workers "$WORKERS")
VERIFY_OK=true
"$BIN" verify --nodes http://127.0.0.1:18611,http://127.0.0.1:18612,http://127.0.0.1:18613 >"$WORK/verify.json" || VERIFY_OK=false

python3 - "$SINGLE" "$REPL" "$VERIFY_OK" <<'PY'
import json, sys
s, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({
    "rows": s["offered_rows"],
    "single_node_rows_per_s": round(s["rows_per_s"]),
    "three_node_rows_per_s": round(r["rows_per_s"]),
    "ratio_three_over_single": round(r["rows_per_s"] / s["rows_per_s"], 3),
    "single_persisted_equals_acked": s["persisted_equals_acked"],
    "three_persisted_equals_acked": r["persisted_equals_acked"],
    "three_p99_ms": r["latency_ms"]["p99"], "single_p99_ms": s["latency_ms"]["p99"],
    "verify_ok": sys.argv[3] == "true",
}, indent=1))
PY
