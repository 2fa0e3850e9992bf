#!/usr/bin/env python3
"""How placed data groups share a cluster's work (issue 37, "Done when").

Starts N nodes on loopback with `cluster.data_groups = G` and `cluster.replication = R`,
sends the same line-protocol rows through every node in turn from a few writer
threads, waits until every node reads every row and the rows are in Parquet, then
reports per node:

- bytes of Parquet files on its disk, against the data's size (one replica of every
  group): with R = 3 of N = 5 each node should hold 0.6 of it;
- how many groups it leads (openraft elects leaders; no placement of leaders yet);
- CPU-seconds (utime + stime from /proc) per acknowledged row.

Run it at 3 and 5 nodes to compare the CPU per row a node spends:

    python3 benches/placement.py --nodes 5 --groups 8 --replication 3 [--bin target/debug/quiver]
    python3 benches/placement.py --nodes 3 --groups 8 --replication 3
"""

import argparse
import random
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "placement-bench-secret"


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def parquet_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            if name.endswith(".parquet"):
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except FileNotFoundError:
                    pass  # deleted by the node meanwhile (a merge's input)
    return total


def body(batch, measurements, hosts, points):
    lines = []
    for m in range(measurements):
        for h in range(hosts):
            for p in range(points):
                t = 1_700_000_000_000_000_000 + (batch * points + p) * 1_000_000_000
                # Values that vary as a real gauge does (a fixed pattern compresses to
                # almost nothing and makes every byte share meaningless).
                rnd = random.Random(hash((batch, m, h, p)))
                usage = round(rnd.uniform(0, 100), 2)
                lines.append(f"m{m},host=h{h},dc=d{h % 3} usage={usage},n={rnd.randrange(1_000_000)}i {t}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--replication", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--measurements", type=int, default=40)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--bin", default=os.path.join(REPO, "target/debug/quiver"))
    ap.add_argument("--balance-bytes-min", default="1",
                    help="cluster.balance_bytes_min: the default 1GiB is more than this data")
    args = ap.parse_args()

    hosts, points = 10, 5
    rows_per_batch = args.measurements * hosts * points
    work = tempfile.mkdtemp(prefix="quiver-placement-")
    ports = [free_port() for _ in range(args.nodes)]
    peers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(ports))
    procs = []
    for i, port in enumerate(ports):
        data = os.path.join(work, f"n{i + 1}")
        os.makedirs(data)
        env = dict(os.environ,
                   QUIVER_CLUSTER_NODE_ID=str(i + 1), QUIVER_CLUSTER_PEERS=peers,
                   QUIVER_CLUSTER_SECRET=SECRET,
                   QUIVER_CLUSTER_DATA_GROUPS=str(args.groups),
                   QUIVER_CLUSTER_REPLICATION=str(args.replication),
                   QUIVER_CLUSTER_BALANCE_BYTES_MIN=args.balance_bytes_min,
                   QUIVER_STORAGE_FLUSH_AGE_MS="1000", QUIVER_LOG_LEVEL="info")
        out = open(os.path.join(data, "node.log"), "ab")
        procs.append(subprocess.Popen(
            [args.bin, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{port}",
             "--data-dir", os.path.join(data, "data")], env=env,
            stdout=subprocess.DEVNULL, stderr=out))
    urls = [f"http://127.0.0.1:{p}" for p in ports]
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

    # Bodies made before the clock starts: making them is slower than the cluster
    # takes them, and a slow sender inflates each row's share of the nodes' idle work.
    bodies = [body(b, args.measurements, hosts, points) for b in range(args.batches)]
    cpu_before = [cpu_seconds(p.pid) for p in procs]
    next_batch = [0]
    lock = threading.Lock()
    failures = []

    def writer():
        session = requests.Session()
        while True:
            with lock:
                batch = next_batch[0]
                if batch >= args.batches:
                    return
                next_batch[0] += 1
            url = urls[batch % len(urls)]
            text = bodies[batch]
            for _ in range(20):
                r = session.post(f"{url}/write?db=db", data=text, timeout=60)
                if r.status_code == 204:
                    break
                if r.status_code not in (429, 503):
                    failures.append((batch, r.status_code, r.text[:200]))
                    break
                time.sleep(0.2)

    started = time.monotonic()
    threads = [threading.Thread(target=writer) for _ in range(args.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    cpu_after = [cpu_seconds(p.pid) for p in procs]
    rows = args.batches * rows_per_batch
    if failures:
        log("failed batches:", failures[:5])

    # Every node reads every row; then wait for the rows to be in Parquet.
    for url in urls:
        while True:
            r = requests.post(f"{url}/api/v1/query", json={"sql": "SELECT count(*) FROM m0"},
                              headers={"x-arc-database": "db"}, timeout=60)
            if r.ok and r.json()["data"][0][0] == rows // args.measurements:
                break
            time.sleep(0.5)
    while True:
        storage = requests.get(f"{urls[0]}/api/v1/storage", timeout=60).json()
        in_memory = sum(m["rows_in_memory"] for d in storage["databases"] for m in d["measurements"])
        if in_memory == 0:
            break
        time.sleep(0.5)
    time.sleep(2)  # let every replica's flush of the last rows land

    # Wait until the byte balance has made its moves: no move started for two of its
    # check intervals (10 s each).
    def moves(name):
        total = 0.0
        for url in urls:
            for line in requests.get(f"{url}/metrics", timeout=30).text.splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    total += float(line.rsplit(" ", 1)[1])
        return total
    settle_deadline = time.monotonic() + 300
    last, quiet_since = None, time.monotonic()
    while time.monotonic() < settle_deadline:
        now = (moves("quiver_group_moves_started_total"), moves("quiver_group_moves_finished_total"))
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif now[0] == now[1] and time.monotonic() - quiet_since > 25:
            break
        time.sleep(1)
    moves_made = int(last[1]) if last else 0

    # Superseded files (merge inputs) leave the disk some time after the merge; wait
    # until each node's Parquet bytes are its live files' (those its catalog lists).
    def live_and_disk(i):
        groups = requests.get(f"{urls[i]}/api/v1/cluster/groups", timeout=30).json()["groups"]
        held = [g for g in groups if g.get("held_here") and g["role"] == "data"]
        data_dir = os.path.join(work, f"n{i + 1}", "data", "groups")
        disk = sum(parquet_bytes(os.path.join(data_dir, str(g["id"]))) for g in held)
        return sum(g["bytes"] for g in held), disk
    gc_deadline = time.monotonic() + 300
    while time.monotonic() < gc_deadline:
        pairs = [live_and_disk(i) for i in range(len(urls))]
        if all(disk <= live * 1.01 for live, disk in pairs):
            break
        time.sleep(2)
    log("live / on-disk Parquet bytes per node:", pairs)

    balance_views = [requests.get(f"{url}/api/v1/cluster/balance", timeout=30).json() for url in urls]
    balance_view = next((v for v in balance_views if v.get("decides")), balance_views[0])
    log("balance as the metadata leader sees it:", json.dumps(balance_view))

    per_node = []
    group_bytes = {}
    for i, url in enumerate(urls):
        groups = requests.get(f"{url}/api/v1/cluster/groups", timeout=30).json()["groups"]
        node_id = i + 1
        held = [g for g in groups if g.get("held_here") and g["role"] == "data"]
        leads = sum(1 for g in held if g["leader"] == node_id)
        data_dir = os.path.join(work, f"n{node_id}", "data", "groups")
        node_bytes = 0
        for g in held:
            b = parquet_bytes(os.path.join(data_dir, str(g["id"])))
            node_bytes += b
            group_bytes.setdefault(g["id"], []).append(b)
        per_node.append({"node": node_id, "groups_held": [g["id"] for g in held],
                         "leads": leads, "parquet_bytes": node_bytes,
                         "cpu_s_per_million_rows": round((cpu_after[i] - cpu_before[i]) / rows * 1e6, 2)})
    data_bytes = sum(sum(b) / len(b) for b in group_bytes.values())
    for n in per_node:
        n["share_of_data"] = round(n["parquet_bytes"] / data_bytes, 3)
    for p in procs:
        p.kill()
    print(json.dumps({
        "nodes": args.nodes, "data_groups": args.groups, "replication": args.replication,
        "rows": rows, "seconds": round(elapsed, 1), "rows_per_s": round(rows / elapsed),
        "failed_batches": len(failures), "data_bytes_one_replica": round(data_bytes),
        "balance_moves": moves_made,
        "max_leads": max(n["leads"] for n in per_node),
        "cpu_s_per_million_rows_summed": round(sum(n["cpu_s_per_million_rows"] for n in per_node), 2),
        "cpu_s_per_million_rows_max_node": max(n["cpu_s_per_million_rows"] for n in per_node),
        "per_node": per_node,
    }, indent=1))


if __name__ == "__main__":
    main()
