#!/usr/bin/env python3
"""The TSBS cpu-only query set on a cluster of data groups against one node (issue 38).

Loads the same TSBS devops cpu-only data (benches/tsbs.py: same generator, same seed)
into a single node and into N local nodes with G data groups of R replicas and
`cluster.query_workers`, then runs every TSBS query type on every cluster node (those
outside the measurement's group ship its scan and partial aggregates to a member) and
compares each answer with the single node's (same rows; numbers to 1e-9 relative).
For each aggregation it also reads, from EXPLAIN ANALYZE on a member (whose local plan
holds the operators of the stage a non-member ships), the bytes the stage sends
against the bytes of rows its scans decoded. Then it kills one member of the group
(not the coordinator) with SIGKILL and compares every surviving node's answers again.

    python3 benches/tsbs_cluster.py --hosts 100 --hours 12 --nodes 5 --groups 8 \\
        --replication 3 --bin target/debug/quiver

Prints one markdown table (per query: rows, answers on every node before and after the
kill, stage bytes / decoded bytes, median time on the single node and on a non-member)
and exits non-zero if any answer differs.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed import SECRET, stage_and_scan_bytes  # noqa: E402
from query_vs_duckdb import Node, free_port, log  # noqa: E402
from tsbs import (DB, INTERVAL_S, TABLE, line_batches, post_batches, query_set,  # noqa: E402
                  quiver_arrow, same)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Member:
    """One node of the cluster on a loopback port, authentication off."""

    def __init__(self, exe, work, node_id, ports, worker_ports, groups, replication):
        self.id = node_id
        self.port = ports[node_id - 1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.session = requests.Session()
        data = os.path.join(work, f"n{node_id}")
        os.makedirs(data)
        peers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(ports))
        workers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(worker_ports))
        env = dict(os.environ, QUIVER_CLUSTER_NODE_ID=str(node_id), QUIVER_CLUSTER_PEERS=peers,
                   QUIVER_CLUSTER_SECRET=SECRET, QUIVER_CLUSTER_DATA_GROUPS=str(groups),
                   QUIVER_CLUSTER_REPLICATION=str(replication),
                   QUIVER_CLUSTER_QUERY_WORKERS=workers,
                   QUIVER_CLUSTER_QUERY_WORKER_ADDR=f"127.0.0.1:{worker_ports[node_id - 1]}",
                   QUIVER_WAL_SYNC="batch", QUIVER_STORAGE_FLUSH_AGE_MS="1000",
                   QUIVER_STORAGE_MEMORY_BYTES_MAX=str(2 * 1024**3),
                   QUIVER_QUERY_TIMEOUT_MS="120000", QUIVER_LOG_LEVEL="warn")
        self.log = open(os.path.join(data, "node.log"), "ab")
        self.process = subprocess.Popen(
            [exe, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{self.port}",
             "--data-dir", os.path.join(data, "data")],
            env=env, stdout=self.log, stderr=self.log)

    def ready(self):
        try:
            return self.session.get(f"{self.url}/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def metric(self, name):
        text = self.session.get(f"{self.url}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"))

    def rows(self, sql):
        r = self.session.post(f"{self.url}/api/v1/query", headers={"x-arc-database": DB},
                              json={"sql": sql}, timeout=600)
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
        return r.json()["data"]

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def post_all(urls, hosts, hours, seed, workers, batch_lines):
    """Every TSBS batch to `urls` in turn."""
    post_batches(urls, line_batches(hosts, hours, seed, batch_lines), workers, attempts=30)


def wait_rows(ask, rows, what):
    deadline = time.monotonic() + 600
    while True:
        try:
            got = ask(f"SELECT count(*) AS n FROM {TABLE}")
            if got and list(got[0].values() if isinstance(got[0], dict) else got[0])[0] == rows:
                return
        except RuntimeError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} never held {rows} rows")
        time.sleep(0.5)


def median_ms(ask, sql, runs):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        ask(sql)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--hours", type=int, default=12)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--replication", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3, help="timed runs per query and side")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-lines", type=int, default=5000)
    ap.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "debug", "quiver"))
    args = ap.parse_args()
    rows = args.hosts * args.hours * 3600 // INTERVAL_S
    work = tempfile.mkdtemp(prefix="quiver-tsbs-cluster-")
    single_dir = os.path.join(work, "single")
    os.makedirs(single_dir)
    single = Node(args.bin, single_dir, os.cpu_count() or 1,
                  {"QUIVER_QUERY_TIMEOUT_MS": "120000"})
    ports = [free_port() for _ in range(args.nodes)]
    worker_ports = [free_port() for _ in range(args.nodes)]
    members = [Member(args.bin, work, i + 1, ports, worker_ports, args.groups,
                      args.replication) for i in range(args.nodes)]
    ok = True
    try:
        deadline = time.monotonic() + 120
        while not all(m.ready() for m in members):
            if time.monotonic() > deadline:
                raise SystemExit(f"the cluster did not become ready; see {work}")
            time.sleep(0.2)
        log(f"loading {rows:,} rows into one node and into {args.nodes} nodes "
            f"({args.groups} groups, replication {args.replication})")
        post_all([single.url], args.hosts, args.hours, args.seed, args.workers,
                 args.batch_lines)
        post_all([m.url for m in members], args.hosts, args.hours, args.seed, args.workers,
                 args.batch_lines)
        wait_rows(lambda sql: single.query(sql)["data"], rows, "the single node")
        for m in members:
            wait_rows(m.rows, rows, m.url)
        plans = {m.id: " ".join(str(c) for r in m.rows(f"EXPLAIN SELECT count(*) FROM {TABLE}")
                                for c in r) for m in members}
        away = [m for m in members if "GroupScanExec" in plans[m.id]]
        held = [m for m in members if "GroupScanExec" not in plans[m.id]]
        if not away or not held:
            raise SystemExit(f"{TABLE} is held by every node or by none: {plans}")
        log(f"{TABLE} held by nodes {[m.id for m in held]}; coordinator node {away[0].id}")
        # Rows in Parquet on the members, so stage bytes are measured against file scans.
        deadline = time.monotonic() + 300
        while any(m.metric("quiver_buffer_rows") > 0 for m in held):
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)

        queries = query_set(args.seed, args.hosts, args.hours)
        expected = {name: quiver_arrow(single, sql) for name, sql, _ in queries}

        def agree(nodes):
            out = {}
            for name, sql, ordered in queries:
                out[name] = [same(quiver_arrow(m, sql), expected[name], ordered) for m in nodes]
            return out

        before = agree(members)
        victim = held[-1]
        victim.kill()
        log(f"killed node {victim.id}, a member of {TABLE}'s group")
        alive = [m for m in members if m is not victim]
        after = agree(alive)
        coordinator = away[0]
        print(f"### TSBS cpu-only on {args.nodes} nodes ({args.groups} groups, replication "
              f"{args.replication}) against one node: {rows:,} rows ({args.hosts} hosts x "
              f"{args.hours} h), `{os.path.basename(os.path.dirname(args.bin))}` build\n")
        print("| query type | rows | same on all nodes | same with node "
              f"{victim.id} killed | stage bytes / decoded bytes | one node (ms) | "
              f"node {coordinator.id}, not a member (ms) |")
        print("|---|---:|:---:|:---:|---:|---:|---:|")
        total_sent = total_scanned = 0.0
        for name, sql, _ in queries:
            n_before, n_after = sum(before[name]), sum(after[name])
            ok &= n_before == len(members) and n_after == len(alive)
            ratio = ""
            if "JOIN" not in sql and ("GROUP BY" in sql):
                near = "\n".join(str(c) for r in held[0].rows("EXPLAIN ANALYZE " + sql)
                                 for c in r)
                sent, scanned = stage_and_scan_bytes(near)
                total_sent, total_scanned = total_sent + sent, total_scanned + scanned
                ratio = f"{sent / scanned * 100:.2f} %" if scanned else "n/a"
            one = median_ms(lambda s: quiver_arrow(single, s), sql, args.runs)
            far = median_ms(lambda s: quiver_arrow(coordinator, s), sql, args.runs)
            print(f"| {name} | {expected[name].num_rows:,} | {n_before}/{len(members)} "
                  f"| {n_after}/{len(alive)} | {ratio} | {one:.1f} | {far:.1f} |")
        if total_scanned:
            print(f"\nAll aggregations together: the stages sent {total_sent:,.0f} bytes, "
                  f"{total_sent / total_scanned * 100:.2f} % of the {total_scanned:,.0f} bytes "
                  f"their scans decoded.")
    finally:
        single.stop()
        for m in members:
            if m.process.poll() is None:
                m.kill()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"logs kept in {work}")
    if not ok:
        raise SystemExit("some answers differ from the single node's")


if __name__ == "__main__":
    main()
