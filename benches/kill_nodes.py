#!/usr/bin/env python3
"""Acknowledged = stored exactly once across kill -9s of random nodes of a cluster with
several data groups (issue 37, "20 kill -9s of random nodes under load").

Starts N nodes (8 data groups, replication 3) on loopback. Writer threads post
line-protocol batches (16 measurements x 50 rows, field `b` = the batch's number)
through random live nodes, each batch with its own `Idempotency-Key`, resent on any
answer but 204 (429/503: nothing written; 504 or a reset connection: outcome
unknown) until it is acknowledged. Meanwhile a random node (leader or not) is killed
with SIGKILL, restarted on the same directories after a pause, and waited for, one at a
time, `--kills` times: every group keeps a majority throughout. At the end every
measurement is counted per batch on two nodes: each acknowledged batch must be there
exactly once (50 rows per measurement).

    python3 benches/kill_nodes.py --kills 20 [--nodes 5] [--bin target/debug/quiver]
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "kill-nodes-token-0123456789"
SECRET = "kill-nodes-secret-0123456789abcdef"
MEASUREMENTS = 16
ROWS = 50


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(batch):
    lines = []
    for m in range(MEASUREMENTS):
        for r in range(ROWS):
            t = 1_700_000_000_000_000_000 + (batch * 1000 + r) * 1_000_000
            lines.append(f"m{m},host=h{r} v={batch},b={batch}i {t}")
    return "\n".join(lines).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.path.join(REPO, "target/debug/quiver"))
    args = ap.parse_args()
    rng = random.Random(args.seed)

    work = tempfile.mkdtemp(prefix="quiver-kill-nodes-")
    ports = [free_port() for _ in range(args.nodes)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    peers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(ports))
    procs = {}

    def start(i):
        env = dict(os.environ, QUIVER_CLUSTER_NODE_ID=str(i + 1), QUIVER_CLUSTER_PEERS=peers,
                   QUIVER_CLUSTER_SECRET=SECRET, QUIVER_BOOTSTRAP_TOKEN=TOKEN,
                   QUIVER_CLUSTER_DATA_GROUPS=str(args.groups),
                   QUIVER_CLUSTER_REPLICATION="3",
                   QUIVER_STORAGE_FLUSH_AGE_MS="2000", QUIVER_LOG_LEVEL="warn")
        out = open(os.path.join(work, f"n{i + 1}.log"), "ab")
        procs[i] = subprocess.Popen(
            [args.bin, "serve", "--http-addr", f"127.0.0.1:{ports[i]}",
             "--data-dir", os.path.join(work, f"n{i + 1}")],
            env=env, stdout=out, stderr=out)

    def ready(i, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{urls[i]}/ready", timeout=2).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.1)
        return False

    headers = {"Authorization": f"Bearer {TOKEN}"}
    for i in range(args.nodes):
        start(i)
    for i in range(args.nodes):
        if not ready(i):
            raise SystemExit(f"node {i + 1} not ready; see {work}")

    down = set()
    acked, given_up = [], []
    answers = {}
    stop = threading.Event()
    lock = threading.Lock()
    next_batch = [0]

    def writer():
        session = requests.Session()
        while not stop.is_set():
            with lock:
                batch = next_batch[0]
                next_batch[0] += 1
            data = body(batch)
            deadline = time.monotonic() + 120
            while True:
                with lock:
                    live = [i for i in range(args.nodes) if i not in down]
                node = rng.choice(live)
                try:
                    r = session.post(f"{urls[node]}/write?db=db", data=data, timeout=60,
                                     headers=dict(headers, **{"Idempotency-Key": f"batch-{batch}"}))
                    status = r.status_code
                except requests.RequestException:
                    status = 0
                with lock:
                    answers[status] = answers.get(status, 0) + 1
                    if status == 204:
                        acked.append(batch)
                        break
                if time.monotonic() > deadline:
                    with lock:
                        given_up.append(batch)
                    break
                time.sleep(0.05)

    threads = [threading.Thread(target=writer) for _ in range(args.writers)]
    for t in threads:
        t.start()
    kills = []
    started = time.monotonic()
    for k in range(args.kills):
        time.sleep(rng.uniform(2.0, 5.0))
        victim = rng.randrange(args.nodes)
        with lock:
            down.add(victim)
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        t_kill = time.monotonic()
        time.sleep(rng.uniform(0.5, 3.0))
        start(victim)
        if not ready(victim):
            raise SystemExit(f"node {victim + 1} not ready after kill {k + 1}; see {work}")
        with lock:
            down.discard(victim)
        kills.append({"node": victim + 1, "back_after_s": round(time.monotonic() - t_kill, 1)})
        log(f"kill {k + 1}: node {victim + 1}, ready again after {kills[-1]['back_after_s']} s")
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started

    # Count every batch on two nodes (each reads every group, from its members).
    wrong = []
    for node in (0, args.nodes - 1):
        for m in range(MEASUREMENTS):
            deadline = time.monotonic() + 60
            while True:
                r = requests.post(f"{urls[node]}/api/v1/query",
                                  json={"sql": f"SELECT b, count(*) FROM m{m} GROUP BY b"},
                                  headers=dict(headers, **{"x-arc-database": "db"}), timeout=60)
                if r.ok:
                    got = {row[0]: row[1] for row in r.json()["data"]}
                    bad = [b for b in acked if got.get(b) != ROWS]
                    extra = [b for b, n in got.items() if n not in (0, ROWS)]
                    if not bad and not extra:
                        break
                if time.monotonic() > deadline:
                    wrong.append({"node": node + 1, "measurement": f"m{m}",
                                  "status": r.status_code,
                                  "acked_not_once": bad[:5] if r.ok else None,
                                  "partial_or_doubled": extra[:5] if r.ok else None})
                    break
                time.sleep(0.5)
    for p in procs.values():
        p.kill()
    print(json.dumps({
        "nodes": args.nodes, "data_groups": args.groups, "kills": len(kills),
        "seconds": round(elapsed, 1), "batches_acknowledged": len(acked),
        "rows_acknowledged": len(acked) * MEASUREMENTS * ROWS,
        "batches_given_up": len(given_up), "answers": answers,
        "tables_wrong": wrong, "ok": not wrong and not given_up, "work_dir": work,
    }, indent=1))


if __name__ == "__main__":
    main()
