#!/usr/bin/env python3
"""Quiver on the TSBS devops cpu-only shape against DuckDB on the same files (issue 13).

Generates the Time Series Benchmark Suite's `cpu-only` data shape (measurement `cpu`,
ten tags hostname, region, datacenter, rack, os, arch, team, service, service_version,
service_environment; ten integer fields usage_user ... usage_guest_nice; one row per
host every 10 s), loads it into a release `quiver` node over line protocol (`/write`),
waits until every row is in Parquet, then runs each TSBS query type as SQL through
Quiver's HTTP API and the same SQL in DuckDB over the Parquet files the node wrote.
Answers are compared (same rows, numbers to 1e-9 relative) and one markdown table goes
to stdout: per query type the median of Quiver and of DuckDB, their ratio and the
geometric mean. Progress goes to stderr.

    pip install duckdb requests pyarrow numpy
    python3 benches/tsbs.py --hosts 1000 --hours 12     # 4,320,000 rows (the default)

Query translations follow TSBS's TimescaleDB/ClickHouse ones (`time_bucket`, `IN` lists
of random hosts, random windows inside the data): single-groupby-M-H-T (max of M
metrics, H hosts, T hours, per minute), cpu-max-all-N (max of all ten metrics, N hosts,
8 hours, per hour), double-groupby-M (avg of M metrics per host and hour over 12 hours),
high-cpu-1/all (every column of rows with usage_user > 90 over 12 hours), lastpoint (the
newest row of every host, as a join against max(time) per host) and
groupby-orderby-limit (the last five minutes before a random time, max usage_user).
Hosts and windows are drawn from a seeded generator, so both engines get the same
queries and two runs of the script get the same ones too.

Fairness, as `benches/query_vs_duckdb.py`: both engines read the same Parquet files,
with the same number of threads, after one warm-up run each; their timed runs
alternate (Quiver, DuckDB, Quiver, ...) so neither always runs on a warmer machine.
Results travel as Arrow on both sides: Quiver's `/api/v1/query/arrow` (plan, execute,
encode, HTTP transfer, decode) against DuckDB's `to_arrow_table()` in this process.
Quiver is timed through a kept-alive `http.client` connection (the ratio and geometric
mean) and, in the same alternation, through `requests` (the last two columns), whose
own per-call cost is 1-3 ms here: both are printed, so a reader sees what the client
library adds.
"""

import argparse
import datetime as dt
import glob
import http.client
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import concurrent.futures

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from query_vs_duckdb import Node, binary, log  # noqa: E402  (same node, same rules)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DB = "bench"
TABLE = "cpu"
INTERVAL_S = 10
START = dt.datetime(2016, 1, 1)  # TSBS's default start
FIELDS = ["usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait",
          "usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"]
REGIONS = {
    "us-east-1": ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"],
    "us-west-1": ["us-west-1a", "us-west-1b"],
    "us-west-2": ["us-west-2a", "us-west-2b", "us-west-2c"],
    "eu-west-1": ["eu-west-1a", "eu-west-1b", "eu-west-1c"],
    "eu-central-1": ["eu-central-1a", "eu-central-1b"],
    "ap-southeast-1": ["ap-southeast-1a", "ap-southeast-1b"],
    "ap-southeast-2": ["ap-southeast-2a", "ap-southeast-2b"],
    "ap-northeast-1": ["ap-northeast-1a", "ap-northeast-1c"],
    "sa-east-1": ["sa-east-1a", "sa-east-1b", "sa-east-1c"],
}


# ---------------------------------------------------------------------------- data


def host_tags(hosts, rng):
    """Each host's ten tags, drawn as TSBS draws them."""
    out = []
    for h in range(hosts):
        region = rng.choice(sorted(REGIONS))
        out.append([
            ("hostname", f"host_{h}"),
            ("region", region),
            ("datacenter", rng.choice(REGIONS[region])),
            ("rack", str(rng.randrange(100))),
            ("os", rng.choice(["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"])),
            ("arch", rng.choice(["x64", "x86"])),
            ("team", rng.choice(["SF", "NYC", "LON", "CHI"])),
            ("service", str(rng.randrange(20))),
            ("service_version", str(rng.randrange(2))),
            ("service_environment", rng.choice(["production", "staging", "test"])),
        ])
    return out


def field_values(hosts, steps, seed):
    """steps x hosts x 10 integers in 0..=100: a random walk per host and field,
    reflected at the edges (TSBS clamps its walks to the same range)."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 101, size=(1, hosts, len(FIELDS)))
    walk = start + np.cumsum(rng.integers(-3, 4, size=(steps, hosts, len(FIELDS))), axis=0)
    folded = np.mod(walk, 200)
    return np.where(folded > 100, 200 - folded, folded).astype(np.int64)


def line_batches(hosts, hours, seed, batch_lines):
    """Line-protocol bodies in time order (all hosts at t, then t + 10 s, ...)."""
    tags = host_tags(hosts, random.Random(seed))
    prefixes = [f"{TABLE}," + ",".join(f"{k}={v}" for k, v in t) + " " for t in tags]
    steps = hours * 3600 // INTERVAL_S
    values = field_values(hosts, steps, seed)
    # "usage_user=42i" for every field and value, looked up instead of formatted.
    pieces = [[f"{f}={v}i" for v in range(101)] for f in FIELDS]
    start_ns = int(START.replace(tzinfo=dt.timezone.utc).timestamp()) * 10**9
    lines = []
    for step in range(steps):
        suffix = f" {start_ns + step * INTERVAL_S * 10**9}"
        row_values = values[step].tolist()
        for h in range(hosts):
            v = row_values[h]
            lines.append(prefixes[h] + ",".join(p[x] for p, x in zip(pieces, v)) + suffix)
            if len(lines) == batch_lines:
                yield "\n".join(lines).encode()
                lines = []
    if lines:
        yield "\n".join(lines).encode()


def post_batches(urls, bodies, workers, attempts=10):
    """POSTs every line-protocol body to `urls` in turn from `workers` threads, each
    retried on 429/503 (a second apart) up to `attempts` times."""
    local = threading.local()

    def post(i, body):
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        for attempt in range(attempts):
            r = session.post(f"{urls[i % len(urls)]}/write", params={"db": DB}, data=body,
                             timeout=120)
            if r.status_code == 204:
                return
            if r.status_code in (429, 503) and attempt < attempts - 1:
                time.sleep(1)
                continue
            raise RuntimeError(f"write refused: {r.status_code} {r.text[:300]}")

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pending = set()
        for i, body in enumerate(bodies):
            pending.add(pool.submit(post, i, body))
            if len(pending) >= 2 * workers:
                done, pending = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for f in done:
                    f.result()
        for f in pending:
            f.result()


def load(node, hosts, hours, seed, workers, batch_lines):
    rows = hosts * hours * 3600 // INTERVAL_S
    log(f"loading {rows:,} rows ({hosts:,} hosts x {hours} h at {INTERVAL_S} s) over line protocol")
    started = time.monotonic()
    post_batches([node.url], line_batches(hosts, hours, seed, batch_lines), workers)
    seconds = time.monotonic() - started
    log(f"loaded in {seconds:.1f} s ({rows / seconds:,.0f} rows/s, generation included); "
        f"waiting for Parquet")
    deadline = time.monotonic() + 600
    while True:
        if (node.metric("quiver_parquet_rows") >= rows
                and node.metric("quiver_buffer_rows") == 0
                and node.metric("quiver_frozen_segments") == 0):
            break
        if time.monotonic() > deadline:
            raise SystemExit("rows did not all reach Parquet within 10 minutes")
        time.sleep(0.5)
    settle(node)
    return rows


def parquet_files(work):
    pattern = os.path.join(work, "data", "parquet", "data", DB, TABLE, "**", "*.parquet")
    return pattern, sorted(glob.glob(pattern, recursive=True))


def settle(node):
    """Waits until compaction is done and the files it replaced are gone: the data is
    from 2016, so every hour is closed and merges (the steady state any reader sees a
    few minutes after a load), and DuckDB reads every file on disk, so none may be a
    replaced input still kept for running queries."""
    log("waiting for compaction to settle")
    deadline = time.monotonic() + 900
    last, stable_since = None, time.monotonic()
    while time.monotonic() < deadline:
        storage = node.session.get(f"{node.url}/api/v1/storage", params={"db": DB},
                                   timeout=10).json()
        on_disk = len(parquet_files(node.data_dir)[1])
        state = (storage["files"], on_disk, storage.get("compactions_pending", 0))
        if state != last:
            last, stable_since = state, time.monotonic()
        # Stable for several compaction checks (the node checks every second here).
        if state[0] == state[1] and state[2] == 0 and time.monotonic() - stable_since > 5:
            log(f"settled: {on_disk} files")
            return
        time.sleep(0.5)
    raise SystemExit(f"compaction did not settle within 15 minutes: {last}")


# ---------------------------------------------------------------------------- queries


def ts(t):
    return f"TIMESTAMP '{t.strftime('%Y-%m-%d %H:%M:%S')}'"


class Draw:
    """Random hosts and windows, as TSBS draws them, from one seeded generator."""

    def __init__(self, seed, hosts, hours):
        self.rng = random.Random(seed)
        self.hosts = hosts
        self.end = START + dt.timedelta(hours=hours)

    def host_list(self, n):
        names = self.rng.sample(range(self.hosts), min(n, self.hosts))
        return ", ".join(f"'host_{h}'" for h in names)

    def window(self, hours):
        span = dt.timedelta(hours=hours)
        room = int((self.end - START - span).total_seconds())
        start = START + dt.timedelta(seconds=self.rng.randrange(room + 1) if room > 0 else 0)
        # TSBS windows start on a whole second; ours on a whole minute, so the minute
        # buckets are the same on both engines whatever their bucket origin.
        start = start.replace(second=0)
        return start, start + span


def max_list(metrics):
    return ", ".join(f"max({m}) AS max_{m}" for m in metrics)


def avg_list(metrics):
    return ", ".join(f"avg({m}) AS mean_{m}" for m in metrics)


def query_set(seed, hosts, hours):
    """(name, SQL, ordered) for every TSBS cpu-only query type."""
    d = Draw(seed, hosts, hours)
    out = []
    for metrics, nhosts, span in [(1, 1, 1), (1, 1, 12), (1, 8, 1), (5, 1, 1), (5, 1, 12),
                                  (5, 8, 1)]:
        start, end = d.window(span)
        out.append((
            f"single-groupby-{metrics}-{nhosts}-{span}",
            f"SELECT time_bucket(INTERVAL '1 minute', time) AS minute, "
            f"{max_list(FIELDS[:metrics])} FROM {TABLE} "
            f"WHERE hostname IN ({d.host_list(nhosts)}) AND time >= {ts(start)} "
            f"AND time < {ts(end)} GROUP BY minute ORDER BY minute",
            True,
        ))
    for nhosts in (1, 8):
        start, end = d.window(8)
        out.append((
            f"cpu-max-all-{nhosts}",
            f"SELECT time_bucket(INTERVAL '1 hour', time) AS hour, {max_list(FIELDS)} "
            f"FROM {TABLE} WHERE hostname IN ({d.host_list(nhosts)}) "
            f"AND time >= {ts(start)} AND time < {ts(end)} GROUP BY hour ORDER BY hour",
            True,
        ))
    for label, metrics in [("1", 1), ("5", 5), ("all", len(FIELDS))]:
        start, end = d.window(12)
        out.append((
            f"double-groupby-{label}",
            f"SELECT time_bucket(INTERVAL '1 hour', time) AS hour, hostname, "
            f"{avg_list(FIELDS[:metrics])} FROM {TABLE} "
            f"WHERE time >= {ts(start)} AND time < {ts(end)} "
            f"GROUP BY hour, hostname ORDER BY hour, hostname",
            True,
        ))
    for label, nhosts in [("1", 1), ("all", 0)]:
        start, end = d.window(12)
        hosts_clause = f"hostname IN ({d.host_list(nhosts)}) AND " if nhosts else ""
        out.append((
            f"high-cpu-{label}",
            f"SELECT * FROM {TABLE} WHERE {hosts_clause}usage_user > 90 "
            f"AND time >= {ts(start)} AND time < {ts(end)}",
            False,
        ))
    out.append((
        "lastpoint",
        f"SELECT c.* FROM {TABLE} c INNER JOIN "
        f"(SELECT hostname, max(time) AS max_time FROM {TABLE} GROUP BY hostname) m "
        f"ON c.hostname = m.hostname AND c.time = m.max_time ORDER BY c.hostname",
        True,
    ))
    _, end = d.window(1)
    out.append((
        "groupby-orderby-limit",
        f"SELECT time_bucket(INTERVAL '1 minute', time) AS minute, max(usage_user) AS "
        f"max_usage_user FROM {TABLE} WHERE time < {ts(end)} "
        f"GROUP BY minute ORDER BY minute DESC LIMIT 5",
        True,
    ))
    return out


# ---------------------------------------------------------------------------- running


class LeanClient:
    """One kept-alive connection through the standard library's `http.client`: the same
    request, response and Arrow decoding as `quiver_arrow`, without the 1-3 ms that
    `requests` spends per call on this machine in its own bookkeeping (a node answers
    `/health` in 0.3 ms through this client and in 1.7-2.7 ms through `requests`; a
    `SELECT 1` in 1.3 ms and 3.5-4.7 ms)."""

    def __init__(self, node):
        self.host, self.port = "127.0.0.1", node.port
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=600)

    def arrow(self, sql):
        body = json.dumps({"sql": sql})
        headers = {"x-arc-database": DB, "content-type": "application/json"}
        try:
            self.connection.request("POST", "/api/v1/query/arrow", body=body, headers=headers)
            response = self.connection.getresponse()
        except (http.client.HTTPException, OSError):
            # A connection the server closed while idle: once more on a fresh one.
            self.connection.close()
            self.connection = http.client.HTTPConnection(self.host, self.port, timeout=600)
            self.connection.request("POST", "/api/v1/query/arrow", body=body, headers=headers)
            response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {data[:300]!r}")
        return pyarrow.ipc.open_stream(data).read_all()


def quiver_arrow(node, sql, session=None):
    r = (session or node.session).post(
        f"{node.url}/api/v1/query/arrow", headers={"x-arc-database": DB},
        json={"sql": sql}, timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
    return pyarrow.ipc.open_stream(r.content).read_all()


def rows_of(table, names=None):
    """Rows as tuples in the column order `names` (default: the table's own),
    timestamps as naive datetimes."""
    names = names or table.column_names
    cols = []
    for name in names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("us"))
        if pa.types.is_string_view(column.type) or pa.types.is_dictionary(column.type):
            column = column.cast(pa.string())
        cols.append(column.to_pylist())
    return list(zip(*cols)) if cols else []


def same(q_table, d_table, ordered):
    if q_table.num_rows != d_table.num_rows or q_table.num_columns != d_table.num_columns:
        return False
    if q_table.column_names == [n.split(".")[-1] for n in d_table.column_names]:
        d_rows = rows_of(d_table)
    elif sorted(q_table.column_names) == sorted(d_table.column_names):
        d_rows = rows_of(d_table, q_table.column_names)
    else:
        d_rows = rows_of(d_table)
    q_rows = rows_of(q_table)
    if not ordered:
        key = lambda r: tuple((v is None, str(v)) for v in r)  # noqa: E731
        q_rows, d_rows = sorted(q_rows, key=key), sorted(d_rows, key=key)
    for a_row, b_row in zip(q_rows, d_rows):
        for a, b in zip(a_row, b_row):
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif a != b:
                return False
    return True


def measure(node, duck, queries, runs):
    """Per query type: (name, Quiver s, DuckDB s, rows, answers agree, Quiver through
    `requests` s). Timed runs alternate the three."""
    lean = LeanClient(node)
    results = []
    for name, sql, ordered in queries:
        log(f"{name}: {sql}")
        d_table = duck.sql(sql).to_arrow_table()  # warm-up: pages in the OS cache
        try:
            q_table = quiver_arrow(node, sql)  # warm-up: footers cached too
        except RuntimeError as e:
            # A refused query (a memory limit, say) is a result too: reported, not fatal.
            log(f"  quiver failed: {e}")
            results.append((name, None, None, 0, str(e).split(":", 1)[0], None))
            continue
        agree = same(q_table, d_table, ordered) and same(lean.arrow(sql), d_table, ordered)
        q_times, d_times, r_times = [], [], []
        for _ in range(runs):
            started = time.perf_counter()
            lean.arrow(sql)
            q_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            quiver_arrow(node, sql)
            r_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            duck.sql(sql).to_arrow_table()
            d_times.append(time.perf_counter() - started)
        q_s, d_s = statistics.median(q_times), statistics.median(d_times)
        r_s = statistics.median(r_times)
        results.append((name, q_s, d_s, q_table.num_rows, agree, r_s))
        log(f"  quiver {q_s * 1000:.1f} ms (through requests {r_s * 1000:.1f}), "
            f"duckdb {d_s * 1000:.1f} ms, ratio {q_s / d_s:.2f} ({r_s / d_s:.2f}), "
            f"{q_table.num_rows} rows, answers agree: {agree}")
    return results


def report(results, args, rows, files, disk_bytes, label):
    row_groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in files)
    ran = [r for r in results if r[1] is not None]
    geo = math.exp(sum(math.log(q / d) for _, q, d, _, _, _ in ran) / max(1, len(ran)))
    geo_requests = math.exp(
        sum(math.log(r / d) for _, _, d, _, _, r in ran) / max(1, len(ran)))
    worst = max(ran, key=lambda r: r[1] / r[2]) if ran else ("none", 1, 1)
    print(f"### TSBS cpu-only, Quiver vs DuckDB {duckdb.__version__}{label}: {rows:,} rows "
          f"({args.hosts:,} hosts x {args.hours} h), {args.threads} threads, "
          f"median of {args.runs}\n")
    print(f"On disk: {len(files)} Parquet files, {row_groups} row groups, "
          f"{disk_bytes / 1e6:.1f} MB, "
          f"**{disk_bytes / rows:.2f} bytes/row**.\n")
    print("| query type | Quiver (ms) | DuckDB (ms) | Quiver / DuckDB | rows | same answer "
          "| Quiver through `requests` (ms) | that / DuckDB |")
    print("|---|---:|---:|---:|---:|:---:|---:|---:|")
    for name, q, d, n, agree, r in results:
        if q is None:
            print(f"| {name} | failed ({agree}) | | | | NO | | |")
            continue
        print(f"| {name} | {q * 1000:.1f} | {d * 1000:.1f} | {q / d:.2f} | {n:,} "
              f"| {'yes' if agree else 'NO'} | {r * 1000:.1f} | {r / d:.2f} |")
    failed = len(results) - len(ran)
    print(f"| **geometric mean**{f' (of {len(ran)}; {failed} failed)' if failed else ''} "
          f"| | | **{geo:.2f}** | | | | {geo_requests:.2f} |\n")
    print(f"Worst: {worst[0]} at {worst[1] / worst[2]:.2f}x.\n")
    return all(r[4] is True for r in results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000, help="hosts (TSBS --scale)")
    parser.add_argument("--hours", type=int, default=12, help="hours of data at 10 s")
    parser.add_argument("--seed", type=int, default=123, help="data and query seed")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="query threads of both engines (default: all cores)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per query")
    parser.add_argument("--workers", type=int, default=4, help="concurrent write requests")
    parser.add_argument("--batch-lines", type=int, default=5000, help="lines per write")
    parser.add_argument("--only", default="", help="comma-separated query types to run")
    parser.add_argument("--binary", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "quiver"))
    parser.add_argument("--data", help="reuse the data directory a --keep run left")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--env", action="append", default=[],
                        help="extra KEY=VALUE for the node (levers), repeatable")
    args = parser.parse_args()

    exe = binary(args.binary)
    work = args.data or tempfile.mkdtemp(prefix="quiver-tsbs-")
    extra = {
        # Segments of up to flush_rows_max rows while loading; the tail a few seconds
        # after the last write.
        "QUIVER_STORAGE_FLUSH_AGE_MS": "10000",
        # Compaction checks every second and deletes replaced files 31 s later (the
        # grace must exceed the query timeout), so the benchmark reaches the settled
        # layout in a minute rather than several.
        "QUIVER_COMPACTION_CHECK_INTERVAL_MS": "1000",
        "QUIVER_COMPACTION_INPUT_GRACE_MS": "31000",
        "QUIVER_QUERY_TIMEOUT_MS": "30000",
    }
    extra.update(kv.split("=", 1) for kv in args.env)
    node = Node(exe, work, args.threads, extra)
    ok = False
    try:
        rows = args.hosts * args.hours * 3600 // INTERVAL_S
        if not args.data:
            load(node, args.hosts, args.hours, args.seed, args.workers, args.batch_lines)
        else:
            settle(node)
        pattern, files = parquet_files(work)
        if not files:
            raise SystemExit("no Parquet files found under the data directory")
        disk_bytes = sum(os.path.getsize(f) for f in files)

        duck = duckdb.connect()
        duck.execute(f"SET threads = {args.threads}")
        # Quiver keeps footers and page indexes cached across queries; so does DuckDB
        # with this (off by default).
        duck.execute("SET parquet_metadata_cache = true")
        duck.execute(f"CREATE VIEW {TABLE} AS SELECT * FROM read_parquet('{pattern}')")

        queries = query_set(args.seed, args.hosts, args.hours)
        if args.only:
            wanted = set(args.only.split(","))
            queries = [q for q in queries if q[0] in wanted]
        results = measure(node, duck, queries, args.runs)
        ok = report(results, args, rows, files, disk_bytes, "")
    finally:
        node.stop()
        if args.keep or args.data:
            log(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if not ok:
        raise SystemExit("some answers differ between the engines")


if __name__ == "__main__":
    main()
