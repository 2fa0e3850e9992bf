#!/usr/bin/env bash
# Log-entry packing, end to end (issue 13): the MessagePack fsync ingest of benches/ingest.sh
# with raft.entry_compression = zstd and = none, alternating in one run so both see the
# same machine. Prints one JSON line per run: rows/s, p99, WAL bytes per row.
#
#   benches/entry_compression.sh [ROWS] [WORKERS] [ROUNDS]   (defaults: 5000000, 8, 2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-5000000}"
WORKERS="${2:-8}"
ROUNDS="${3:-2}"
source benches/release_binary.sh
PORT=18557
for ROUND in $(seq 1 "$ROUNDS"); do
  for MODE in zstd none; do
    DIR=$(mktemp -d /tmp/quiver-pack.XXXXXX)
    QUIVER_RAFT_ENTRY_COMPRESSION=$MODE QUIVER_WAL_SYNC=fsync QUIVER_LOG_LEVEL=warn \
      "$BIN" serve --auth none --http-addr 127.0.0.1:$PORT --data-dir "$DIR/data" 2>"$DIR/node.log" &
    PID=$!
    for _ in $(seq 1 200); do curl -sf localhost:$PORT/ready >/dev/null && break; sleep 0.05; done
    REPORT=$("$BIN" sizing load --url http://127.0.0.1:$PORT --rows "$ROWS" --workers "$WORKERS" --batch-size 5000)
    WAL_BYTES=$(curl -s localhost:$PORT/metrics | awk '/^quiver_wal_bytes_written_total /{print $2}')
    kill $PID; wait $PID || true
    python3 - "$ROUND" "$MODE" "$WAL_BYTES" "$REPORT" <<'PY'
import json, sys
rnd, mode, wal, r = sys.argv[1], sys.argv[2], float(sys.argv[3] or 0), json.loads(sys.argv[4])
print(json.dumps({"round": int(rnd), "entry_compression": mode, "rows_per_s": round(r["rows_per_s"]),
  "acked": r["acked_rows"], "failed": r["failed_rows"],
  "persisted_equals_acked": r["persisted_equals_acked"], "p99_ms": r["latency_ms"]["p99"],
  "wal_bytes_per_row": round(wal / max(r["acked_rows"], 1), 2)}))
PY
    rm -rf "$DIR"
  done
done
