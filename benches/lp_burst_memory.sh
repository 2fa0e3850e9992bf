#!/usr/bin/env bash
# One burst of TSBS-shaped line protocol into a fresh release node (issue 13, goal 3):
# prints rows/s, whether persisted == acked, the node's peak resident size (VmHWM) and
# the largest `quiver_buffer_bytes` sampled every 0.25 s. Extra KEY=VALUE arguments go
# to the node's environment (levers, e.g. QUIVER_STORAGE_FLUSH_IDLE_MS=0).
#
#   benches/lp_burst_memory.sh [ROWS] [KEY=VALUE ...]     (default: 3000000 rows)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-3000000}"
shift || true
source benches/release_binary.sh
PORT=18556
DIR=$(mktemp -d /tmp/quiver-burst.XXXXXX)
trap 'kill "$PID" 2>/dev/null || true; kill "$SAMPLER" 2>/dev/null || true; rm -rf "$DIR"' EXIT
env "$@" QUIVER_WAL_SYNC=fsync QUIVER_LOG_LEVEL=warn \
  "$BIN" serve --auth none --http-addr 127.0.0.1:$PORT --data-dir "$DIR/data" 2>"$DIR/node.log" &
PID=$!
for _ in $(seq 1 200); do curl -sf localhost:$PORT/ready >/dev/null && break; sleep 0.05; done
(
  while kill -0 "$PID" 2>/dev/null; do
    curl -s localhost:$PORT/metrics | awk '/^quiver_buffer_bytes /{print int($2 / 1048576)}'
    sleep 0.25
  done
) >"$DIR/buffer_mib" &
SAMPLER=$!
REPORT=$("$BIN" sizing load --format lp --url http://127.0.0.1:$PORT --rows "$ROWS" \
  --workers 8 --batch-size 5000 --shape tsbs --prepared)
HWM=$(awk '/^VmHWM/{print int($2 / 1024)}' /proc/$PID/status)
BUFFER=$(sort -n "$DIR/buffer_mib" | tail -1)
echo "$REPORT" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print(json.dumps({'rows_per_s': round(d['rows_per_s']),
                  'persisted_equals_acked': d['persisted_equals_acked'],
                  'peak_rss_mib': $HWM, 'peak_buffer_mib': ${BUFFER:-0}}))"
