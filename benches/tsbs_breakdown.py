#!/usr/bin/env python3
"""Where TSBS `high-cpu-all` spends its time, on Quiver and on DuckDB.

Runs on a data directory that `benches/tsbs.py --keep` left. For the query and for parts
of it (the integer columns alone, the tags alone, one tag, the bare count), prints each
engine's median wall time and the CPU behind it: the node's own (from /proc), the client's
user and system time and its minor page faults (Quiver, read through a kept-alive
`http.client` connection and decoded by pyarrow, as `tsbs.py` does), and DuckDB's
process CPU (it runs in this process, on the same files, with the same threads).

With `--framing`, also serves Quiver's answer to the same client from a bare socket,
once with a `Content-Length` and once chunked like Quiver's streamed responses, to show
what the response framing alone costs the client.

    python3 benches/tsbs.py --keep ...          # prints "data kept in DIR"
    python3 benches/tsbs_breakdown.py --data DIR [--framing]
"""

import argparse
import http.client
import json
import os
import resource
import socket
import statistics
import sys
import threading
import time

import duckdb
import pyarrow.ipc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from query_vs_duckdb import Node, binary, log  # noqa: E402
from tsbs import DB, FIELDS, REPO, TABLE, parquet_files  # noqa: E402

TAGS = ["arch", "datacenter", "hostname", "os", "rack", "region", "service",
        "service_environment", "service_version", "team"]
WHERE = ("usage_user > 90 AND time >= TIMESTAMP '2016-01-01 00:00:00' "
         "AND time < TIMESTAMP '2016-01-01 12:00:00'")
PARTS = [
    ("high-cpu-all", "*"),
    ("time and the ten integer fields", ", ".join(["time"] + FIELDS)),
    ("the ten tags", ", ".join(TAGS)),
    ("hostname alone", "hostname"),
    ("count(*)", "count(*)"),
]


class Client:
    """One kept-alive `http.client` connection, as `tsbs.py` times Quiver."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def body(self, path, sql):
        self.connection.request("POST", path, body=json.dumps({"sql": sql}),
                                headers={"x-arc-database": DB,
                                         "content-type": "application/json"})
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {data[:300]!r}")
        return data

    def arrow(self, sql):
        return pyarrow.ipc.open_stream(self.body("/api/v1/query/arrow", sql)).read_all()


def node_cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime, fields 14 and 15 of stat(5), in clock ticks.
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def quiver_runs(client, pid, sql, runs):
    """Median wall ms, node CPU ms, client user / sys ms and minor faults per query."""
    client.arrow(sql)
    rows = []
    for _ in range(runs):
        node0, usage0, wall0 = node_cpu_ms(pid), resource.getrusage(resource.RUSAGE_SELF), \
            time.perf_counter()
        table = client.arrow(sql)
        wall = (time.perf_counter() - wall0) * 1000
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        rows.append((wall, node_cpu_ms(pid) - node0,
                     (usage1.ru_utime - usage0.ru_utime) * 1000,
                     (usage1.ru_stime - usage0.ru_stime) * 1000,
                     usage1.ru_minflt - usage0.ru_minflt))
        del table
    return [statistics.median(column) for column in zip(*rows)]


def duckdb_runs(duck, sql, runs):
    """Median wall ms and process CPU ms per query."""
    duck.sql(sql).to_arrow_table()
    rows = []
    for _ in range(runs):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        duck.sql(sql).to_arrow_table()
        rows.append(((time.perf_counter() - wall0) * 1000, (time.process_time() - cpu0) * 1000))
    return [statistics.median(column) for column in zip(*rows)]


def serve_once(payload, chunk_bytes):
    """A bare HTTP/1.1 server on a free port answering every request with `payload`:
    with a Content-Length when `chunk_bytes` is None, else in chunks of that size."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def run():
        connection, _ = listener.accept()
        with connection:
            pending = b""
            while True:
                while b"\r\n\r\n" not in pending:
                    data = connection.recv(65536)
                    if not data:
                        return
                    pending += data
                head, _, pending = pending.partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                while len(pending) < length:
                    pending += connection.recv(65536)
                pending = pending[length:]
                if chunk_bytes is None:
                    connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n"
                                       % len(payload))
                    connection.sendall(payload)
                    continue
                connection.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for at in range(0, len(payload), chunk_bytes):
                    piece = payload[at:at + chunk_bytes]
                    connection.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                connection.sendall(b"0\r\n\r\n")

    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1]


def framing(payload, runs):
    print("\n| the same answer from a bare socket | client wall (ms) | client minor faults |")
    print("|---|---:|---:|")
    for label, chunk_bytes in [("Content-Length", None), ("chunked, 1.3 MB chunks", 1_300_000)]:
        client = Client(serve_once(payload, chunk_bytes))
        client.body("/", "")
        rows = []
        for _ in range(runs):
            usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            data = client.body("/", "")
            rows.append(((time.perf_counter() - wall0) * 1000,
                         resource.getrusage(resource.RUSAGE_SELF).ru_minflt - usage0.ru_minflt))
            assert data == payload
            del data
        wall, faults = (statistics.median(column) for column in zip(*rows))
        print(f"| {label} | {wall:.0f} | {faults:,.0f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a data directory tsbs.py --keep left")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--framing", action="store_true",
                        help="also time the response framing alone, from a bare socket")
    parser.add_argument("--binary", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "quiver"))
    parser.add_argument("--env", action="append", default=[],
                        help="extra KEY=VALUE for the node (levers), repeatable")
    args = parser.parse_args()

    node = Node(binary(args.binary), args.data, args.threads,
                dict(kv.split("=", 1) for kv in args.env))
    try:
        pattern, _ = parquet_files(args.data)
        duck = duckdb.connect()
        duck.execute(f"SET threads = {args.threads}")
        duck.execute(f"CREATE VIEW {TABLE} AS SELECT * FROM read_parquet('{pattern}')")
        client = Client(node.port)
        print(f"### `high-cpu-all` and its parts, medians of {args.runs}, "
              f"{args.threads} threads each\n")
        print("| select | Quiver wall (ms) | node CPU (ms) | client user / sys (ms) "
              "| client minor faults | DuckDB wall (ms) | DuckDB CPU (ms) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, columns in PARTS:
            sql = f"SELECT {columns} FROM {TABLE} WHERE {WHERE}"
            log(sql)
            wall, cpu, user, system, faults = quiver_runs(client, node.process.pid, sql,
                                                          args.runs)
            d_wall, d_cpu = duckdb_runs(duck, sql, args.runs)
            print(f"| {label} | {wall:.0f} | {cpu:.0f} | {user:.0f} / {system:.0f} "
                  f"| {faults:,.0f} | {d_wall:.0f} | {d_cpu:.0f} |")
        if args.framing:
            framing(client.body("/api/v1/query/arrow",
                                f"SELECT * FROM {TABLE} WHERE {WHERE}"), args.runs)
    finally:
        node.stop()


if __name__ == "__main__":
    main()
