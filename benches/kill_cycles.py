#!/usr/bin/env python3
"""Acknowledged = persisted across repeated kill -9 (issue 10, "kill -9 cycles").

Starts one node (`wal.sync=fsync`, the default; flushes forced often so kills land in
every phase: buffering, freezing, Parquet writing, snapshots, log purges), runs writer
threads that post MessagePack batches with unique batch ids and remember which were
acknowledged (204), kills the node with SIGKILL at a random moment, restarts it on the
same directories, and repeats. At the end it counts rows per batch id: every
acknowledged batch must be there exactly once; an unacknowledged one (its answer lost
in the kill) may be there whole or not at all, never partly or twice.

    python3 benches/kill_cycles.py --cycles 50 [--bin target/debug/quiver]
"""

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS_PER_BATCH = 500


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(batch_id):
    base = 1_700_000_000_000 + batch_id * ROWS_PER_BATCH
    return msgpack.packb({"m": "k", "columns": {
        "time": [base + i for i in range(ROWS_PER_BATCH)],
        "host": [f"h{i % 13}" for i in range(ROWS_PER_BATCH)],
        "batch": [batch_id] * ROWS_PER_BATCH,
        "v": [float(i) for i in range(ROWS_PER_BATCH)],
    }})


class Node:
    def __init__(self, exe, data_dir):
        self.exe, self.data_dir = exe, data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self):
        env = dict(os.environ, QUIVER_STORAGE_FLUSH_ROWS_MAX="20000",
                   QUIVER_STORAGE_FLUSH_AGE_MS="300",
                   QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN="500", QUIVER_LOG_LEVEL="warn")
        with open(os.path.join(self.data_dir, "node.log"), "ab") as out:
            self.process = subprocess.Popen(
                [self.exe, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{self.port}",
                 "--data-dir", os.path.join(self.data_dir, "data")],
                env=env, stdout=subprocess.DEVNULL, stderr=out)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None:
                raise SystemExit(f"node exited with {self.process.returncode}; see {self.data_dir}/node.log")
            time.sleep(0.05)
        raise SystemExit("node not ready within 120 s")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def writer(node, ids, acked, unknown, stop):
    session = requests.Session()
    while not stop.is_set():
        with ids["lock"]:
            batch_id = ids["next"]
            ids["next"] += 1
        try:
            r = session.post(f"{node.url}/api/v1/write/msgpack", data=batch(batch_id),
                             headers={"x-arc-database": "kill"}, timeout=30)
            if r.status_code == 204:
                acked.add(batch_id)
            elif r.status_code in (429, 503):
                pass  # refused before anything was written
            else:
                unknown.add(batch_id)
        except requests.RequestException:
            unknown.add(batch_id)  # the kill cut the answer: outcome unknown
            time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/quiver-target")),
        "release", "quiver"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="quiver-kill-")
    node = Node(args.bin, work)
    ids = {"lock": threading.Lock(), "next": 0}
    acked, unknown = set(), set()
    started = time.monotonic()
    for cycle in range(args.cycles):
        node.start()
        stop = threading.Event()
        threads = [threading.Thread(target=writer, args=(node, ids, acked, unknown, stop))
                   for _ in range(args.writers)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.3, 2.5))
        node.kill()
        stop.set()
        for t in threads:
            t.join()
        log(f"cycle {cycle + 1}/{args.cycles}: {len(acked)} batches acknowledged so far")
    node.start()
    rows = requests.post(f"{node.url}/api/v1/query", headers={"x-arc-database": "kill"},
                         json={"sql": "SELECT batch, count(*) FROM k GROUP BY batch"},
                         timeout=120).json()["data"]
    counts = {int(b): int(c) for b, c in rows}
    lost = sorted(b for b in acked if counts.get(b) != ROWS_PER_BATCH)
    torn = sorted(b for b, c in counts.items() if c != ROWS_PER_BATCH)
    phantom = sorted(b for b in counts if b not in acked and b not in unknown)
    node.kill()
    print(f"| kill -9 cycles | batches acknowledged | acknowledged rows lost | batches partly stored or duplicated | unknown-outcome batches stored | run time |")
    print(f"|---:|---:|---:|---:|---:|---:|")
    stored_unknown = sum(1 for b in unknown if b in counts)
    print(f"| {args.cycles} | {len(acked):,} | {len(lost) * ROWS_PER_BATCH} | {len(torn)} "
          f"| {stored_unknown} of {len(unknown)} | {time.monotonic() - started:.0f} s |")
    if lost or torn or phantom:
        raise SystemExit(f"FAILED: lost {lost[:10]}, torn {torn[:10]}, phantom {phantom[:10]}; data in {work}")


if __name__ == "__main__":
    main()
