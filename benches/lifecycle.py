#!/usr/bin/env python3
"""Data that lives for months (issue 9): what compaction does to a month of backfill,
how restart time and snapshot size grow with the file count, and what compaction costs
ingest.

    python3 benches/lifecycle.py --bin target/release/quiver [--days 60] [--measurements 20]
        [--file-counts 1000,10000,100000] [--restart-measurements 100]
        [--merge-rows-per-hour 250000] [--skip backfill,restart,merge,ingest]
        [--chunk-hours 168] [--check-interval-ms 500]

1. Backfill: `--days` of hourly rows into `--measurements` measurements (one Parquet
   file per measurement per hour) on a node with compaction off; count the files and
   time a 7-day and a whole-range aggregate (median of 5). Restart the same directory
   with compaction on and wait until the backlog is empty: count the files again, time
   the same queries, and report compaction rows/s (rows merged / wall time) and the
   node's peak resident memory while merging, beside its resident memory before.
2. Restart: for each file count, a fresh node with that many files (hourly rows of
   `--restart-measurements` measurements, compaction off), a snapshot of all of them,
   kill -9, and the time from the restart to `/ready`; the snapshot's size on disk;
   then, on the restarted node, the time of `GET /api/v1/storage`, of a table list and
   of one measurement's aggregate, and the node's resident memory.
3. Merge: one closed day of 24 hour files of `--merge-rows-per-hour` rows each (a
   100-host tag, a float and an integer field), written with compaction off, then
   restarted with compaction on until one day file is left: rows merged per second,
   MB read per second, peak resident memory, and the answers before and after compared.
4. Ingest while compaction runs: MessagePack batches for 20 s on a node whose
   compaction backlog is busy (a fresh backfill, compaction on), then 20 s on the same
   node once the backlog is empty; the ratio of the two rates, from the same run.

Every number is printed with how it was measured; the machine is shared, so compare
ratios measured in the same run, not absolute values across runs.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import requests

HOUR_NS = 3_600_000_000_000
DAY_NS = 24 * HOUR_NS


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, exe, root, **env):
        self.exe, self.root = exe, root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {f"QUIVER_{k.upper()}": str(v) for k, v in env.items()}
        self.process = None

    def start(self):
        env = dict(os.environ, QUIVER_LOG_LEVEL="warn", **self.env)
        started = time.monotonic()
        with open(os.path.join(self.root, "node.log"), "ab") as out:
            self.process = subprocess.Popen(
                [self.exe, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{self.port}",
                 "--data-dir", os.path.join(self.root, "data")],
                env=env, stdout=subprocess.DEVNULL, stderr=out)
        while True:
            try:
                if requests.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except requests.RequestException:
                pass
            if self.process.poll() is not None:
                raise SystemExit(f"node exited; see {self.root}/node.log")
            if time.monotonic() - started > 1800:
                raise SystemExit("node not ready in 30 minutes")
            time.sleep(0.02)

    def kill(self):
        self.process.kill()
        self.process.wait()

    def stop(self):
        self.process.terminate()
        self.process.wait()

    def rss_mb(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def metric(self, name):
        text = requests.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def storage(self):
        return requests.get(f"{self.url}/api/v1/storage", timeout=30).json()

    def sql(self, database, sql):
        r = requests.post(f"{self.url}/api/v1/query", json={"sql": sql},
                          headers={"x-arc-database": database}, timeout=600)
        r.raise_for_status()
        return r.json()

    def write(self, database, body):
        r = requests.post(f"{self.url}/api/v1/write/msgpack", data=body,
                          headers={"x-arc-database": database,
                                   "content-type": "application/msgpack"}, timeout=120)
        if r.status_code != 204:
            raise SystemExit(f"write refused: {r.status_code} {r.text[:300]}")

    def wait(self, what, check, timeout_s=3600):
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.2)

    def quiet(self):
        self.wait("buffers written", lambda: self.metric("quiver_buffer_rows") == 0
                  and self.metric("quiver_frozen_segments") == 0)


def hourly(measurement, start_ns, hours, hosts=4):
    time_col, host, value = [], [], []
    for h in range(hours):
        for i in range(hosts):
            time_col.append(start_ns + h * HOUR_NS + i * 1_000_000)
            host.append(f"h{i}")
            value.append(float(h % 97) + i)
    return msgpack.packb({"m": measurement, "columns": {"time": time_col, "host": host,
                                                        "v": value}})


def backfill(node, measurements, start_ns, hours, chunk_hours=24 * 7):
    """Week-long requests, a measurement at a time; requests shorter than a day go in
    time order across the measurements (a replay of history as a collector sent it), so
    each flush holds a few hours of each table and writes a file per hour."""
    chunks = [(m, h0) for m in range(measurements) for h0 in range(0, hours, chunk_hours)]
    if chunk_hours < 24:
        chunks.sort(key=lambda c: (c[1], c[0]))
    for m, h0 in chunks:
        node.write("bench", hourly(f"m{m}", start_ns + h0 * HOUR_NS,
                                   min(chunk_hours, hours - h0)))
    node.quiet()


def time_query(node, sql, repeats=5):
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        node.sql("bench", sql)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def files_on_disk(root):
    count = 0
    for _, _, names in os.walk(os.path.join(root, "data", "parquet")):
        count += sum(1 for n in names if n.endswith(".parquet"))
    return count


def snapshot_bytes(root):
    d = os.path.join(root, "data", "snapshots")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".snap"))


def bench_backfill(exe, days, measurements, chunk_hours=24 * 7, check_interval_ms=500):
    root = tempfile.mkdtemp(prefix="quiver-lifecycle-")
    common = dict(storage_flush_age_ms=500, limits_write_files_max=24 * 7 + 1,
                  raft_snapshot_interval_ms_min=2000)
    if check_interval_ms:
        common["compaction_check_interval_ms"] = check_interval_ms
    node = Node(exe, root, compaction_enabled="false", **common)
    node.start()
    end = time.time_ns() // HOUR_NS * HOUR_NS - 2 * DAY_NS
    start = end - days * DAY_NS
    started = time.monotonic()
    backfill(node, measurements, start, days * 24, chunk_hours)
    rows = node.sql("bench", "SELECT count(*) FROM m0")["data"][0][0] * measurements
    log(f"backfill: {rows} rows in {time.monotonic() - started:.1f} s")
    week = (f"SELECT host, avg(v), max(v) FROM m3 WHERE time >= to_timestamp_nanos({end - 7 * DAY_NS}) "
            f"GROUP BY host ORDER BY host")
    whole = "SELECT host, avg(v), max(v) FROM m3 GROUP BY host ORDER BY host"
    before = dict(files=files_on_disk(root), week_s=time_query(node, week),
                  whole_s=time_query(node, whole), rss_mb=node.rss_mb())
    answers = (node.sql("bench", week)["data"], node.sql("bench", whole)["data"])
    node.stop()
    node = Node(exe, root, compaction_enabled="true", **common)
    node.start()
    peak = [node.rss_mb()]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak.append(node.rss_mb())
            except OSError:
                return
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    last_change = [time.monotonic(), files_on_disk(root)]

    def settled():
        s = node.storage()
        files = s["files"]
        if files != last_change[1]:
            last_change[:] = [time.monotonic(), files]
        # Quiet for longer than two compaction checks: the first one comes an interval
        # after the start (10 s by default).
        quiet_s = max(5.0, 2.5 * (check_interval_ms or 10_000) / 1000)
        return s["compactions_pending"] == 0 and time.monotonic() - last_change[0] > quiet_s
    node.wait("compaction done", settled)
    merging_s = last_change[0] - started
    stop.set()
    sampler.join()
    after = dict(files=node.storage()["files"], week_s=time_query(node, week),
                 whole_s=time_query(node, whole))
    same = (node.sql("bench", week)["data"], node.sql("bench", whole)["data"]) == answers
    compacted_mb = node.metric("quiver_compaction_bytes_read_total") / 1e6
    node.stop()
    return dict(days=days, measurements=measurements, rows=rows, before=before, after=after,
                answers_equal=same, merging_s=round(merging_s, 1),
                compaction_rows_per_s=round(rows / merging_s) if merging_s > 0 else None,
                compaction_mb_read=round(compacted_mb, 1),
                rss_mb_before=round(before["rss_mb"]), rss_mb_peak_merging=round(max(peak)),
                files_ratio=round(before["files"] / max(after["files"], 1), 1),
                week_ratio=round(after["week_s"] / before["week_s"], 3),
                whole_ratio=round(after["whole_s"] / before["whole_s"], 3), dir=root)


def merge_chunk(start_ns, rows, spacing_ns):
    hosts = [f"host{i:03d}" for i in range(100)]
    return msgpack.packb({"m": "big", "columns": {
        "time": [start_ns + j * spacing_ns for j in range(rows)],
        "host": [hosts[j % 100] for j in range(rows)],
        "v": [float((j * 7919) % 10007) / 7.0 for j in range(rows)],
        "n": [(j * 104729) % 1_000_003 for j in range(rows)],
    }})


def same_sums(got, want):
    """Counts and integer sums equal; float sums equal up to the order of addition."""
    (g,), (w,) = got, want
    return all(a == b if isinstance(b, int) else abs(a - b) <= 1e-9 * max(abs(b), 1.0)
               for a, b in zip(g, w))


def bench_merge(exe, rows_per_hour, hours):
    """Merge throughput on large files: `hours` hour files of `rows_per_hour` rows each
    (one closed day), written with compaction off, then merged into one day file."""
    root = tempfile.mkdtemp(prefix="quiver-merge-")
    common = dict(storage_flush_age_ms=500, compaction_check_interval_ms=500,
                  limits_write_files_max=2)
    node = Node(exe, root, compaction_enabled="false", **common)
    node.start()
    day0 = time.time_ns() // DAY_NS * DAY_NS - 3 * DAY_NS
    chunk = 50_000
    spacing = HOUR_NS // rows_per_hour
    for h in range(hours):
        for c in range(0, rows_per_hour, chunk):
            n = min(chunk, rows_per_hour - c)
            node.write("bench", merge_chunk(day0 + h * HOUR_NS + c * spacing, n, spacing))
    node.quiet()
    before = dict(files=files_on_disk(root), rss_mb=node.rss_mb())
    sums = "SELECT count(*), sum(v), sum(n), count(DISTINCT host) FROM big"
    answer = node.sql("bench", sums)["data"]
    node.stop()
    node = Node(exe, root, compaction_enabled="true", **common)
    node.start()
    peak = [node.rss_mb()]
    started = time.monotonic()
    # The catalog's count, not the directory's: replaced inputs stay on disk for
    # `compaction.input_grace_ms` after the output is in place.
    last_change = [time.monotonic(), node.storage()["files"]]

    def settled():
        peak.append(node.rss_mb())
        files = node.storage()["files"]
        if files != last_change[1]:
            last_change[:] = [time.monotonic(), files]
        return node.storage()["compactions_pending"] == 0 and time.monotonic() - last_change[0] > 5
    node.wait("the day merged", settled, timeout_s=3600)
    merging_s = last_change[0] - started
    read_mb = node.metric("quiver_compaction_bytes_read_total") / 1e6
    same = same_sums(node.sql("bench", sums)["data"], answer)
    node.stop()
    rows = rows_per_hour * hours
    return dict(rows=rows, files_before=before["files"], files_after=last_change[1],
                merging_s=round(merging_s, 1),
                rows_per_s=round(rows / merging_s), mb_read=round(read_mb, 1),
                mb_read_per_s=round(read_mb / merging_s, 1),
                rss_mb_before=round(before["rss_mb"]), rss_mb_peak_merging=round(max(peak)),
                answers_equal=same, dir=root)


def bench_restart(exe, files, measurements=100):
    root = tempfile.mkdtemp(prefix="quiver-restart-")
    hours = max(1, files // measurements)
    node = Node(exe, root, compaction_enabled="false", storage_flush_age_ms=500,
                limits_write_files_max=hours + 1, raft_snapshot_interval_ms_min=500)
    node.start()
    start = time.time_ns() // HOUR_NS * HOUR_NS - (hours + 48) * HOUR_NS
    started = time.monotonic()
    for m in range(measurements):
        node.write("bench", hourly(f"m{m}", start, hours, hosts=1))
    node.quiet()
    write_s = time.monotonic() - started
    applied = requests.get(f"{node.url}/api/v1/cluster/status", timeout=10).json()["applied_index"]

    def snapshot_covers():
        d = os.path.join(root, "data", "snapshots")
        return any(n.endswith(".snap") and int(n.split("-")[0]) >= applied for n in os.listdir(d))
    node.wait("a snapshot of every file", snapshot_covers)
    count = files_on_disk(root)
    size = snapshot_bytes(root)
    node.kill()
    ready_s = node.start()
    rows = node.sql("bench", "SELECT count(*) FROM m0")["data"][0][0]
    # What an operator and an analyst do next on such a node: the storage summary, the
    # table list, and one measurement's aggregate (its files among all the others).
    timed = {}
    for name, call in [
        ("storage_api_s", lambda: node.storage()),
        ("table_list_s", lambda: node.sql("bench", "SELECT count(*) FROM information_schema.tables")),
        ("one_measurement_avg_s", lambda: node.sql("bench", f"SELECT avg(v) FROM m{measurements // 2}")),
    ]:
        t0 = time.monotonic()
        call()
        timed[name] = round(time.monotonic() - t0, 3)
    rss = node.rss_mb()
    node.kill()
    return dict(files=count, measurements=measurements, write_s=round(write_s, 1),
                snapshot_mb=round(size / 1e6, 2),
                snapshot_bytes_per_file=round(size / max(count, 1)), restart_to_ready_s=round(ready_s, 2),
                rows_m0=rows, rss_mb_after_restart=round(rss), **timed, dir=root)


def ingest_for(node, seconds, start_id):
    body = lambda i: msgpack.packb({"m": "ingest", "columns": {
        "time": [time.time_ns() - 60_000_000_000 + j for j in range(5000)],
        "host": [f"h{j % 50}" for j in range(5000)], "batch": [i] * 5000,
        "v": [float(j) for j in range(5000)]}})
    bodies = [body(start_id + i) for i in range(64)]
    rows = [0]
    stop = time.monotonic() + seconds

    def worker(k):
        i = k
        while time.monotonic() < stop:
            node.write("bench", bodies[i % len(bodies)])
            rows[0] += 5000
            i += 4
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows[0] / seconds


def bench_ingest(exe, days, measurements):
    root = tempfile.mkdtemp(prefix="quiver-ingest-")
    common = dict(storage_flush_age_ms=500, limits_write_files_max=24 * 7 + 1,
                  compaction_check_interval_ms=500)
    node = Node(exe, root, compaction_enabled="false", **common)
    node.start()
    end = time.time_ns() // HOUR_NS * HOUR_NS - 2 * DAY_NS
    backfill(node, measurements, end - days * DAY_NS, days * 24)
    node.stop()
    node = Node(exe, root, compaction_enabled="true", **common)
    node.start()
    node.wait("compaction under way", lambda: node.storage()["compactions_pending"] > 0
              or node.metric("quiver_compactions_total") > 0, timeout_s=120)
    during = ingest_for(node, 20, 0)
    backlog_left = node.storage()["compactions_pending"]
    node.wait("compaction done", lambda: node.storage()["compactions_pending"] == 0)
    time.sleep(5)
    after = ingest_for(node, 20, 1_000_000)
    node.stop()
    return dict(rows_per_s_while_compacting=round(during), rows_per_s_idle=round(after),
                ratio=round(during / after, 3), backlog_left_after_run=backlog_left)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--days", type=int, default=60)
    p.add_argument("--measurements", type=int, default=20)
    p.add_argument("--file-counts", default="1000,10000,100000")
    p.add_argument("--restart-measurements", type=int, default=100,
                   help="measurements the restart part spreads its files over")
    p.add_argument("--merge-rows-per-hour", type=int, default=250_000)
    p.add_argument("--skip", default="")
    p.add_argument("--chunk-hours", type=int, default=24 * 7,
                   help="hours of rows per backfill request (1: a file per hour at flush)")
    p.add_argument("--check-interval-ms", type=int, default=500,
                   help="compaction.check_interval_ms of the backfill node (0: the default)")
    args = p.parse_args()
    skip = set(args.skip.split(",")) - {""}
    out = {}
    if "backfill" not in skip:
        out["backfill"] = bench_backfill(args.bin, args.days, args.measurements,
                                         args.chunk_hours, args.check_interval_ms)
        log(json.dumps(out["backfill"]))
    if "restart" not in skip:
        out["restart"] = []
        for n in [int(x) for x in args.file_counts.split(",")]:
            r = bench_restart(args.bin, n, args.restart_measurements)
            log(json.dumps(r))
            out["restart"].append(r)
    if "merge" not in skip:
        out["merge"] = bench_merge(args.bin, args.merge_rows_per_hour, 24)
        log(json.dumps(out["merge"]))
    if "ingest" not in skip:
        out["ingest"] = bench_ingest(args.bin, args.days, args.measurements)
        log(json.dumps(out["ingest"]))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
