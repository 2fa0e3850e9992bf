#!/usr/bin/env python3
"""Quiver's SQL against DuckDB on the same data (issue 5's benchmark).

Starts a release `quiver` node, ingests N rows through the HTTP MessagePack endpoint
(24 hours of data, `host` tag from 10,000 hosts, three f64 fields rounded to two
decimals; `quiver sizing load` makes them), waits until every row is in Parquet, then
runs the same SQL through Quiver's HTTP API and through DuckDB (same thread count) over
the Parquet files Quiver wrote. Prints one markdown report on stdout: per-query median
times and their ratio (Quiver / DuckDB), the geometric mean, p95 with concurrent
clients, bytes per row on disk, and rows/s of a 1,000,000-row SELECT * through the JSON
and Arrow endpoints. Progress goes to stderr.

    pip install duckdb requests pyarrow
    python3 benches/query_vs_duckdb.py --rows 20000000

Times on the Quiver side are HTTP round trips (plan, execute, encode, transfer, parse);
on the DuckDB side `execute().fetchall()` in this process. Answers of both engines are
compared (row count and every number to 1e-6) and the table says whether they agree.
"""

import argparse
import concurrent.futures
import datetime as dt
import glob
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import duckdb
import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DB = "bench"
TABLE = "cpu"
DAY_MS = 24 * 3600 * 1000


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(path):
    if os.path.exists(path):
        return path
    log(f"{path} is missing: building it (cargo build --release --workspace --bins)")
    subprocess.run(
        ["cargo", "build", "--release", "--workspace", "--bins"], cwd=REPO, check=True
    )
    return path


class Node:
    """A release node on a loopback port, with authentication off."""

    def __init__(self, exe, data_dir, threads, extra_env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        env = dict(os.environ)
        env.update(
            {
                # Ingest speed is not what is measured here; batch keeps it short.
                "QUIVER_WAL_SYNC": "batch",
                # The last rows reach Parquet a second after the load ends.
                "QUIVER_STORAGE_FLUSH_AGE_MS": "1000",
                # The load outruns the Parquet writer for a while; room for the backlog
                # instead of 503s (which the load tool counts as failed, not retried).
                "QUIVER_STORAGE_MEMORY_BYTES_MAX": str(8 * 1024**3),
                "QUIVER_QUERY_TARGET_PARTITIONS": str(threads),
                "QUIVER_QUERY_THREADS": str(threads),
                "QUIVER_LOG_LEVEL": "warn",
            }
        )
        env.update(extra_env or {})
        self.log_file = open(os.path.join(data_dir, "node.log"), "ab")
        self.process = subprocess.Popen(
            [exe, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{self.port}",
             "--data-dir", os.path.join(data_dir, "data")],
            env=env, stdout=self.log_file, stderr=self.log_file,
        )
        self.session = requests.Session()
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.session.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"quiver did not become ready; see {self.log_file.name}")
            time.sleep(0.1)

    def metric(self, name):
        text = self.session.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def query(self, sql, session=None):
        r = (session or self.session).post(
            f"{self.url}/api/v1/query",
            headers={"x-arc-database": DB},
            json={"sql": sql},
            timeout=600,
        )
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
        return r.json()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def ingest(exe, node, rows, hosts, workers):
    interval_ms = DAY_MS * hosts // rows
    log(f"ingesting {rows:,} rows: {hosts:,} hosts, one row per host every {interval_ms} ms")
    started = time.monotonic()
    load = subprocess.run(
        [exe, "sizing", "load", "--url", node.url, "--database", DB, "--measurement", TABLE,
         "--rows", str(rows), "--hosts", str(hosts), "--interval-ms", str(interval_ms),
         "--workers", str(workers), "--batch-size", "10000"],
        check=True, stdout=subprocess.PIPE, text=True,
    )
    seconds = time.monotonic() - started
    report = json.loads(load.stdout[load.stdout.index("{"):])
    if report["acked_rows"] != rows:
        raise SystemExit(f"only {report['acked_rows']:,} of {rows:,} rows were acknowledged: "
                         f"{load.stdout.strip()}")
    log(f"ingested in {seconds:.1f} s ({rows / seconds:,.0f} rows/s); waiting for Parquet")
    deadline = time.monotonic() + 600
    while True:
        if (node.metric("quiver_parquet_rows") >= rows
                and node.metric("quiver_buffer_rows") == 0
                and node.metric("quiver_frozen_segments") == 0):
            return seconds
        if time.monotonic() > deadline:
            raise SystemExit("rows did not all reach Parquet within 10 minutes")
        time.sleep(0.5)


def ts(t):
    return t.strftime("%Y-%m-%d %H:%M:%S")


def queries(t_min, t_max):
    """The mix: (name, SQL). The same text runs on both engines."""
    last_hour = ts(t_max - dt.timedelta(hours=1))
    last_6h = ts(t_max - dt.timedelta(hours=6))
    return [
        ("full count", f"SELECT count(*) FROM {TABLE}"),
        ("sum/avg/min/max",
         f"SELECT sum(usage_user), avg(usage_system), min(usage_idle), max(usage_idle) FROM {TABLE}"),
        ("hourly buckets",
         f"SELECT time_bucket(INTERVAL '1 hour', time) AS hour, count(*), avg(usage_user) "
         f"FROM {TABLE} GROUP BY hour ORDER BY hour"),
        ("last hour",
         f"SELECT count(*), avg(usage_user), max(usage_system) FROM {TABLE} "
         f"WHERE time >= TIMESTAMP '{last_hour}'"),
        ("5-min buckets, last 6 h",
         f"SELECT time_bucket(INTERVAL '5 minutes', time) AS m, max(usage_idle) FROM {TABLE} "
         f"WHERE time >= TIMESTAMP '{last_6h}' GROUP BY m ORDER BY m"),
        ("group by host, top 10",
         f"SELECT host, avg(usage_user) AS a FROM {TABLE} GROUP BY host ORDER BY a DESC, host LIMIT 10"),
        ("host x hour, top 10",
         f"SELECT host, date_trunc('hour', time) AS hour, avg(usage_user) AS a FROM {TABLE} "
         f"GROUP BY host, hour ORDER BY a DESC, host, hour LIMIT 10"),
        ("one host over the day",
         f"SELECT date_trunc('hour', time) AS hour, avg(usage_user), max(usage_system) "
         f"FROM {TABLE} WHERE host = 'host-42' GROUP BY hour ORDER BY hour"),
        ("distinct hosts", f"SELECT count(DISTINCT host) FROM {TABLE}"),
        ("HAVING",
         f"SELECT host, avg(usage_user) AS a FROM {TABLE} GROUP BY host "
         f"HAVING avg(usage_user) > 52 ORDER BY host"),
        ("95th percentile", f"SELECT quantile_cont(usage_user, 0.95) FROM {TABLE}"),
    ]


def parse_time(value):
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)


def normalise(cell):
    if isinstance(cell, dt.datetime):
        return cell.replace(tzinfo=None)
    if isinstance(cell, str) and len(cell) >= 19 and cell[4] == "-" and cell[10] == "T":
        try:
            return parse_time(cell)
        except ValueError:
            return cell
    return cell


def same(a_rows, b_rows):
    if len(a_rows) != len(b_rows):
        return False
    for a_row, b_row in zip(a_rows, b_rows):
        for a, b in zip(a_row, b_row):
            a, b = normalise(a), normalise(b)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9):
                    return False
            elif a != b:
                return False
    return True


def timed(fn, runs):
    times = []
    result = None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def p95_concurrent(make_client, clients, per_client):
    """p95 latency of `clients` clients each running its query `per_client` times in a
    row, all at once; `make_client()` returns one client's run-the-query callable."""
    def client(_):
        run = make_client()
        out = []
        for _ in range(per_client):
            started = time.perf_counter()
            run()
            out.append(time.perf_counter() - started)
        return out

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        latencies = sorted(t for ts_ in pool.map(client, range(clients)) for t in ts_)
    return latencies[max(0, math.ceil(0.95 * len(latencies)) - 1)]


def select_star_rows_per_s(node, rows):
    sql = f"SELECT * FROM {TABLE} LIMIT {rows}"
    out = {}
    for name, path in [("JSON", "/api/v1/query"), ("Arrow IPC", "/api/v1/query/arrow")]:
        started = time.perf_counter()
        r = node.session.post(f"{node.url}{path}", headers={"x-arc-database": DB},
                              json={"sql": sql}, timeout=600)
        body = r.content
        seconds = time.perf_counter() - started
        if r.status_code != 200:
            raise RuntimeError(f"{name}: {r.status_code}: {body[:300]!r}")
        if name == "JSON":
            got = json.loads(body)["row_count"]
        else:
            import pyarrow.ipc
            got = pyarrow.ipc.open_stream(body).read_all().num_rows
        if got != rows:
            raise RuntimeError(f"{name}: {got} rows instead of {rows}")
        out[name] = (rows / seconds, len(body) / seconds / 1e6)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="query threads of both engines (default: all cores)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per query")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for p95")
    parser.add_argument("--per-client", type=int, default=3, help="queries per client for p95")
    parser.add_argument("--workers", type=int, default=4, help="concurrent ingest requests")
    parser.add_argument("--binary", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "quiver"))
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()

    exe = binary(args.binary)
    work = tempfile.mkdtemp(prefix="quiver-vs-duckdb-")
    node = Node(exe, work, args.threads)
    try:
        ingest_s = ingest(exe, node, args.rows, args.hosts, args.workers)
        bounds = node.query(f"SELECT min(time), max(time) FROM {TABLE}")["data"][0]
        t_min, t_max = parse_time(bounds[0]), parse_time(bounds[1])
        files = glob.glob(os.path.join(work, "data", "parquet", "data", DB, TABLE, "**", "*.parquet"),
                          recursive=True)
        if not files:
            raise SystemExit("no Parquet files found under the data directory")
        disk_bytes = sum(os.path.getsize(f) for f in files)

        duck = duckdb.connect()
        duck.execute(f"SET threads = {args.threads}")
        pattern = os.path.join(work, "data", "parquet", "data", DB, TABLE, "**", "*.parquet")
        duck.execute(f"CREATE VIEW {TABLE} AS SELECT * FROM read_parquet('{pattern}')")

        results = []
        for name, sql in queries(t_min, t_max):
            log(f"{name}: {sql}")
            node.query(sql)  # warm-up: footers cached, pages in the OS cache
            duck.execute(sql).fetchall()
            q_s, q_answer = timed(lambda: node.query(sql)["data"], args.runs)
            d_s, d_answer = timed(lambda: duck.execute(sql).fetchall(), args.runs)
            def quiver_client(sql=sql):
                session = requests.Session()
                return lambda: node.query(sql, session)

            def duck_client(sql=sql):
                # One connection per client to the same database: DuckDB runs them at
                # once on its shared pool of `threads`, as Quiver shares its runtime.
                cursor = duck.cursor()
                return lambda: cursor.execute(sql).fetchall()

            p95 = p95_concurrent(quiver_client, args.clients, args.per_client)
            d_p95 = p95_concurrent(duck_client, args.clients, args.per_client)
            agree = same(q_answer, [list(r) for r in d_answer])
            results.append((name, q_s, d_s, p95, d_p95, agree))
            log(f"  quiver {q_s * 1000:.1f} ms, duckdb {d_s * 1000:.1f} ms, "
                f"p95 x{args.clients} {p95 * 1000:.1f} / {d_p95 * 1000:.1f} ms, "
                f"answers agree: {agree}")
        select_rows = min(1_000_000, args.rows)
        throughput = select_star_rows_per_s(node, select_rows)
    finally:
        node.stop()
        if args.keep:
            log(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    geo = math.exp(sum(math.log(q / d) for _, q, d, _, _, _ in results) / len(results))
    print(f"### Quiver vs DuckDB {duckdb.__version__}: {args.rows:,} rows, {args.hosts:,} hosts, "
          f"{args.threads} threads\n")
    print(f"Ingest: {ingest_s:.1f} s ({args.rows / ingest_s:,.0f} rows/s) through "
          f"`/api/v1/write/msgpack`. On disk: {len(files)} Parquet files, "
          f"{disk_bytes / 1e6:.1f} MB, **{disk_bytes / args.rows:.2f} bytes/row**.\n")
    print(f"| query | Quiver median (ms) | DuckDB median (ms) | Quiver / DuckDB "
          f"| Quiver p95, {args.clients} clients (ms) | DuckDB p95, {args.clients} clients (ms) "
          f"| same answer |")
    print("|---|---:|---:|---:|---:|---:|:---:|")
    for name, q, d, p95, d_p95, agree in results:
        print(f"| {name} | {q * 1000:.1f} | {d * 1000:.1f} | {q / d:.2f} | {p95 * 1000:.0f} "
              f"| {d_p95 * 1000:.0f} | {'yes' if agree else 'NO'} |")
    print(f"| **geometric mean** | | | **{geo:.2f}** | | | |\n")
    for name, (rows_s, mb_s) in throughput.items():
        print(f"`SELECT * FROM {TABLE} LIMIT {select_rows:,}` through {name}: "
              f"{rows_s:,.0f} rows/s ({mb_s:.0f} MB/s)  ")


if __name__ == "__main__":
    main()
