#!/usr/bin/env python3
"""Bytes a query's receiving node gets from the stage it sent to a member, against the
bytes of rows that stage decoded.

Starts N local nodes with G data groups of R replicas and `cluster.query_workers`,
loads line protocol, waits for the rows to reach Parquet, then for each measurement
runs aggregation queries with EXPLAIN ANALYZE twice: on a node that does not hold the
measurement (its plan must ship a stage: checked) and on a member, whose local plan
holds the same operators as that stage: its root's `output_bytes` is what the stage
sends (as Arrow), its Parquet scans' `output_bytes` the rows decoded. Prints both,
their ratio, and whether the two nodes' answers are identical.

    python3 benches/distributed.py --nodes 4 --groups 4 --replication 2
"""

import argparse
import os
import re
import socket
import subprocess
import tempfile
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "bench-cluster-secret-0123456789"
QUERIES = [
    "SELECT host, avg(usage), max(usage), count(*) FROM {m} GROUP BY host",
    "SELECT date_bin(INTERVAL '1 minute', time) AS t, dc, avg(usage) FROM {m} "
    "GROUP BY t, dc ORDER BY t, dc",
    "SELECT max(usage), min(n) FROM {m} WHERE usage > 50",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(batch, measurements, hosts, points):
    lines = []
    for m in range(measurements):
        for h in range(hosts):
            for p in range(points):
                t = 1_700_000_000_000_000_000 + (batch * points + p) * 1_000_000_000
                lines.append(f"m{m},host=h{h},dc=d{h % 3} usage={(batch * 7 + p + h) % 100}.5,n={p}i {t}")
    return "\n".join(lines) + "\n"


def query(url, sql):
    r = requests.post(f"{url}/api/v1/query", json={"sql": sql},
                      headers={"x-arc-database": "db"}, timeout=120)
    if r.status_code != 200:
        raise SystemExit(f"{sql}: {r.status_code} {r.text[:500]}")
    return r.json()["data"]


UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def size(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def stage_and_scan_bytes(plan):
    """(the plan's root output bytes, the Parquet scans' output bytes) of an EXPLAIN
    ANALYZE: what a stage of the same operators ships, and the rows it decoded."""
    lines = [l for l in plan.split("\n") if "metrics=[" in l]
    root = re.search(r"output_bytes=([\d.]+ [KMG]?B)", lines[0]) if lines else None
    scans = [re.search(r"output_bytes=([\d.]+ [KMG]?B)", l) for l in lines if "DataSourceExec" in l]
    return (size(root.group(1)) if root else float("nan"),
            sum(size(m.group(1)) for m in scans if m))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--replication", type=int, default=2)
    ap.add_argument("--measurements", type=int, default=4)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--show", action="store_true", help="print the first pair of plans")
    ap.add_argument("--bin", default=os.path.join(REPO, "target/debug/quiver"))
    args = ap.parse_args()
    hosts, points = 200, 50
    work = tempfile.mkdtemp(prefix="quiver-distributed-")
    ports = [free_port() for _ in range(args.nodes)]
    wports = [free_port() for _ in range(args.nodes)]
    peers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(ports))
    workers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(wports))
    procs = []
    for i, port in enumerate(ports):
        data = os.path.join(work, f"n{i + 1}")
        os.makedirs(data)
        env = dict(os.environ, QUIVER_CLUSTER_NODE_ID=str(i + 1), QUIVER_CLUSTER_PEERS=peers,
                   QUIVER_CLUSTER_SECRET=SECRET, QUIVER_CLUSTER_DATA_GROUPS=str(args.groups),
                   QUIVER_CLUSTER_REPLICATION=str(args.replication),
                   QUIVER_CLUSTER_QUERY_WORKERS=workers,
                   QUIVER_CLUSTER_QUERY_WORKER_ADDR=f"127.0.0.1:{wports[i]}",
                   QUIVER_STORAGE_FLUSH_AGE_MS="1000", QUIVER_LOG_LEVEL="warn")
        procs.append(subprocess.Popen(
            [args.bin, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{port}",
             "--data-dir", os.path.join(data, "data")], env=env,
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(data, "node.log"), "ab")))
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        deadline = time.monotonic() + 120
        for url in urls:
            while True:
                try:
                    if requests.get(f"{url}/ready", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"{url} not ready; see {work}")
                time.sleep(0.1)
        for b in range(args.batches):
            text = body(b, args.measurements, hosts, points)
            while requests.post(f"{urls[b % len(urls)]}/write?db=db", data=text,
                                timeout=60).status_code != 204:
                time.sleep(0.2)
        rows = args.batches * hosts * points
        # Rows in Parquet: the memory buffer flushed after its age.
        time.sleep(5)
        print(f"{rows} rows per measurement, {args.measurements} measurements")
        print("| measurement | query | stage output (bytes) | rows decoded by the scan (bytes) | ratio | answers |")
        print("|---|---|---|---|---|---|")
        for m in range(args.measurements):
            name = f"m{m}"
            plans = [query(u, f"EXPLAIN SELECT count(*) FROM {name}") for u in urls]
            texts = [" ".join(str(c) for r in p for c in r) for p in plans]
            away = [i for i, t in enumerate(texts) if "GroupScanExec" in t]
            held = [i for i, t in enumerate(texts) if "GroupScanExec" not in t]
            if not away or not held:
                continue
            for qi, q in enumerate(QUERIES):
                sql = q.format(m=name)
                far = "\n".join(str(c) for r in query(urls[away[0]], "EXPLAIN ANALYZE " + sql) for c in r)
                near = "\n".join(str(c) for r in query(urls[held[0]], "EXPLAIN ANALYZE " + sql) for c in r)
                if args.show:
                    print(far, "\n----\n", near)
                    args.show = False
                received, scanned = stage_and_scan_bytes(near)
                assert "GroupScanExec" in far and "NetworkCoalesceExec" in far, far
                same = sorted(map(str, query(urls[away[0]], sql))) == sorted(map(str, query(urls[held[0]], sql)))
                ratio = received / scanned if scanned else float("nan")
                print(f"| {name} | q{qi + 1} | {received:.0f} | {scanned:.0f} | {ratio:.4f} | {'identical' if same else 'DIFFER'} |")
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":
    main()
