#!/usr/bin/env python3
"""Does ingest keep its throughput while heavy queries run? (issue 5, "queries cannot
starve the apply path")

Starts a release `quiver` node (`wal.sync=fsync`, the default), loads a day of data
(`--preload` rows, 10,000 hosts) for the queries to chew on, then alternates two kinds of
ingest run of `--rows` rows each into fresh measurements through the MessagePack API:
alone, and while `--clients` clients run full-scan aggregations (GROUP BY host, hourly
buckets, a percentile) over the preloaded day back to back. Prints a markdown table:
rows/s and p99 of each run, queries completed during the loaded runs, and the ratio
loaded / alone of the mean rates. Both kinds run on the same machine in the same run.

    python3 benches/ingest_under_queries.py --rows 10000000 --clients 4
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from query_vs_duckdb import DB, TABLE, Node, binary, ingest, log  # noqa: E402

QUERIES = [
    f"SELECT host, avg(usage_user) AS a FROM {TABLE} GROUP BY host ORDER BY a DESC LIMIT 10",
    f"SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(usage_user) FROM {TABLE} "
    "GROUP BY h ORDER BY h",
    f"SELECT approx_percentile_cont(usage_user, 0.95) FROM {TABLE}",
]


def load(exe, node, measurement, rows, workers):
    """One ingest run into `measurement`; returns (rows/s, p99 ms)."""
    out = subprocess.run(
        [exe, "sizing", "load", "--url", node.url, "--database", DB,
         "--measurement", measurement, "--rows", str(rows), "--hosts", "1000",
         "--workers", str(workers), "--batch-size", "5000"],
        check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    report = json.loads(out[out.index("{"):])
    if report["acked_rows"] != rows or report.get("persisted_equals_acked") is False:
        raise SystemExit(f"run into {measurement} lost or refused rows: {out.strip()}")
    return report["rows_per_s"], report["latency_ms"]["p99"]


def query_clients(node, clients, stop):
    """Starts `clients` threads querying until `stop` is set; returns (threads, counts)."""
    counts = [0] * clients
    errors = []

    def client(i):
        session = requests.Session()
        while not stop.is_set():
            sql = QUERIES[counts[i] % len(QUERIES)]
            r = session.post(f"{node.url}/api/v1/query", headers={"x-arc-database": DB},
                             json={"sql": sql}, timeout=600)
            if r.status_code != 200:
                errors.append(f"{r.status_code}: {r.text[:200]}")
                return
            counts[i] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    return threads, counts, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows per ingest run")
    parser.add_argument("--preload", type=int, default=5_000_000, help="rows for the queries")
    parser.add_argument("--clients", type=int, default=4, help="concurrent query clients")
    parser.add_argument("--pairs", type=int, default=2, help="alone/loaded run pairs")
    parser.add_argument("--workers", type=int, default=8, help="concurrent ingest requests")
    parser.add_argument("--binary", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target")),
        "release", "quiver"))
    args = parser.parse_args()

    exe = binary(args.binary)
    work = tempfile.mkdtemp(prefix="quiver-ingest-under-queries-")
    threads = os.cpu_count() or 1
    node = Node(exe, work, threads, extra_env={"QUIVER_WAL_SYNC": "fsync"})
    runs = []
    try:
        ingest(exe, node, args.preload, 10_000, 4)
        for pair in range(args.pairs):
            for loaded in (False, True):
                measurement = f"live_{pair}_{'loaded' if loaded else 'alone'}"
                stop = threading.Event()
                clients = query_clients(node, args.clients, stop) if loaded else None
                if clients:
                    # Ingest starts once every client has a query running.
                    deadline = time.monotonic() + 30
                    while node.metric("quiver_queries_running") < min(args.clients, 1):
                        if time.monotonic() > deadline:
                            raise SystemExit("query clients did not start")
                        time.sleep(0.05)
                rate, p99 = load(exe, node, measurement, args.rows, args.workers)
                done = 0
                if clients:
                    stop.set()
                    for t in clients[0]:
                        t.join()
                    if clients[2]:
                        raise SystemExit(f"a query failed: {clients[2][0]}")
                    done = sum(clients[1])
                runs.append((loaded, rate, p99, done))
                log(f"{measurement}: {rate:,.0f} rows/s, p99 {p99:.1f} ms, queries {done}")
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)

    alone = statistics.mean(r for loaded, r, _, _ in runs if not loaded)
    under = statistics.mean(r for loaded, r, _, _ in runs if loaded)
    print(f"### Ingest alone and under {args.clients} query clients: {args.rows:,} rows per run, "
          f"{args.workers} writers, `wal.sync=fsync`, {threads} cores\n")
    print("| run | rows/s | p99 ms | queries completed during the run |")
    print("|---|---:|---:|---:|")
    for loaded, rate, p99, done in runs:
        print(f"| {'with queries' if loaded else 'alone'} | {rate:,.0f} | {p99:.1f} | "
              f"{done if loaded else '—'} |")
    print(f"\nMean rows/s with queries / alone: **{under / alone:.2f}**")


if __name__ == "__main__":
    main()
