#!/usr/bin/env python3
"""What a small query costs Quiver whatever the data (issue 41): `SELECT 1`, and a
one-row aggregate over one hour of one series, against DuckDB in-process on the same
Parquet files.

A release node gets 1,000 hosts x 1 hour of a float field (360,000 rows, flushed and
merged), then each query runs `--repeats` times through one kept-alive HTTP connection
(`/api/v1/query`, JSON; and `/api/v1/query/arrow`), alternating with DuckDB
(`parquet_metadata_cache` on, the same threads) running the same SQL over the node's
files. Medians in milliseconds and the ratio go to stdout as a markdown table.

    pip install duckdb requests
    python3 benches/query_fixed_cost.py [--bin PATH] [--repeats 300]
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import duckdb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tsbs  # noqa: E402
from query_vs_duckdb import Node, binary, log  # noqa: E402

DB = tsbs.DB


def one_hour_lines(hosts):
    start_ns = int(tsbs.START.replace(tzinfo=tsbs.dt.timezone.utc).timestamp()) * 10**9
    lines = []
    for step in range(360):
        t = start_ns + step * 10 * 10**9
        for h in range(hosts):
            lines.append(f"small,host=host_{h} v={(step * 7 + h) % 100}.5 {t}")
    for i in range(0, len(lines), 5000):
        yield "\n".join(lines[i:i + 5000]).encode()


def http_timer(node, path):
    conn = http.client.HTTPConnection("127.0.0.1", node.port)

    def run(sql):
        conn.request("POST", path, body=json.dumps({"sql": sql}),
                     headers={"content-type": "application/json", "x-arc-database": DB})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {body[:300]!r}")
        return body
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(tsbs.REPO, "target")), "release", "quiver"))
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--hosts", type=int, default=1000)
    args = parser.parse_args()
    exe = binary(args.bin)
    work = tempfile.mkdtemp(prefix="quiver-fixed-")
    node = None
    try:
        node = Node(exe, work, 2, {"QUIVER_COMPACTION_CHECK_INTERVAL_MS": "1000"})
        tsbs.post_batches([node.url], one_hour_lines(args.hosts), 2)
        rows = 360 * args.hosts
        deadline = time.monotonic() + 300
        while node.metric("quiver_parquet_rows") < rows or node.metric("quiver_buffer_rows") > 0:
            if time.monotonic() > deadline:
                raise SystemExit("rows did not reach Parquet")
            time.sleep(0.2)
        pattern = os.path.join(work, "data", "parquet", "data", DB, "small", "**", "*.parquet")
        con = duckdb.connect()
        con.execute("SET threads = 2")
        con.execute("SET parquet_metadata_cache = true")
        con.execute(f"CREATE VIEW small AS SELECT * FROM read_parquet('{pattern}')")
        queries = [
            ("SELECT 1", "SELECT 1"),
            ("one-row aggregate", "SELECT max(v), avg(v), count(*) FROM small "
             "WHERE host = 'host_42' AND time >= TIMESTAMP '2016-01-01 00:10:00' "
             "AND time < TIMESTAMP '2016-01-01 00:40:00'"),
        ]
        json_run = http_timer(node, "/api/v1/query")
        arrow_run = http_timer(node, "/api/v1/query/arrow")
        print("| query | Quiver JSON ms | Quiver Arrow ms | DuckDB ms | JSON / DuckDB | Arrow / DuckDB |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, sql in queries:
            for _ in range(20):  # warm both
                json_run(sql)
                arrow_run(sql)
                con.sql(sql).to_arrow_table()
            q_json, q_arrow, d = [], [], []
            for _ in range(args.repeats):
                started = time.perf_counter()
                json_run(sql)
                q_json.append(time.perf_counter() - started)
                started = time.perf_counter()
                arrow_run(sql)
                q_arrow.append(time.perf_counter() - started)
                started = time.perf_counter()
                con.sql(sql).to_arrow_table()
                d.append(time.perf_counter() - started)
            mj, ma, md = (statistics.median(x) * 1e3 for x in (q_json, q_arrow, d))
            print(f"| {name} | {mj:.2f} | {ma:.2f} | {md:.2f} | {mj / md:.1f}× | {ma / md:.1f}× |",
                  flush=True)
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
