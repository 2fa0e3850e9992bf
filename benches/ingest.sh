#!/usr/bin/env bash
# End-to-end ingest benchmark (issue 2): a release node and `quiver sizing load` on this
# machine, 5000-row MessagePack batches, once per wal.sync mode. Prints one JSON line
# per mode with rows/s, persisted == acked, and bytes per row in Parquet and in the WAL.
#
#   benches/ingest.sh [ROWS] [WORKERS]        (defaults: 20000000 rows, 8 workers)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-20000000}"
WORKERS="${2:-8}"
source benches/release_binary.sh
PORT=18555
for MODE in fsync batch none; do
  DIR=$(mktemp -d /tmp/quiver-bench.XXXXXX)
  QUIVER_WAL_SYNC=$MODE QUIVER_STORAGE_FLUSH_AGE_MS=3000 QUIVER_LOG_LEVEL=warn \
    "$BIN" serve --auth none --http-addr 127.0.0.1:$PORT --data-dir "$DIR/data" 2>"$DIR/node.log" &
  PID=$!
  for _ in $(seq 1 200); do curl -sf localhost:$PORT/ready >/dev/null && break; sleep 0.05; done
  REPORT=$("$BIN" sizing load --url http://127.0.0.1:$PORT --rows "$ROWS" --workers "$WORKERS" --batch-size 5000 --prepared)
  WAL_BYTES=$(curl -s localhost:$PORT/metrics | awk '/^quiver_wal_bytes_written_total /{print $2}')
  # Let the last buffer flush, then read the Parquet totals.
  for _ in $(seq 1 600); do
    M=$(curl -s localhost:$PORT/metrics)
    BUF=$(echo "$M" | awk '/^quiver_buffer_rows /{print $2}')
    FROZEN=$(echo "$M" | awk '/^quiver_frozen_segments /{print $2}')
    [ "${BUF:-1}" = "0" ] && [ "${FROZEN:-1}" = "0" ] && break
    sleep 0.2
  done
  PQ_BYTES=$(echo "$M" | awk '/^quiver_parquet_bytes /{print $2}')
  PQ_ROWS=$(echo "$M" | awk '/^quiver_parquet_rows /{print $2}')
  kill $PID; wait $PID || true
  python3 - "$MODE" "$WAL_BYTES" "$PQ_BYTES" "$PQ_ROWS" <<PY
import json, sys
r = json.loads('''$REPORT''')
mode, wal, pq, pq_rows = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3] or 0), float(sys.argv[4] or 0)
print(json.dumps({"wal_sync": mode, "rows_per_s": round(r["rows_per_s"]), "acked": r["acked_rows"],
  "failed": r["failed_rows"], "persisted_equals_acked": r["persisted_equals_acked"],
  "p50_ms": r["latency_ms"]["p50"], "p99_ms": r["latency_ms"]["p99"],
  "wal_bytes_per_row": round(wal / max(r["acked_rows"], 1), 2),
  "parquet_bytes_per_row": round(pq / max(pq_rows, 1), 2), "parquet_rows": int(pq_rows)}))
PY
  rm -rf "$DIR"
done
