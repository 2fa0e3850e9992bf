#!/usr/bin/env python3
"""Resident memory of one node under back-to-back line-protocol bursts, then idle.

Each run is a fresh `quiver sizing load` of TSBS-shaped line protocol (8 workers,
5,000-line bodies prepared before the clock starts) into the same node (`wal.sync =
fsync`); after each, the node's resident size (VmRSS, VmHWM) and its buffered bytes
(`quiver_buffer_bytes`) are printed. Then, unless `--no-idle`, the node sits idle until
its buffers have aged out (`storage.flush_age_ms`, 2 minutes by default) and its
resident size is printed again: what the node holds, against what it keeps.

    python3 benches/sustained_memory.py --binary target/release/quiver --runs 5
    python3 benches/sustained_memory.py --binary … --runs 6 --no-idle \\
        --env QUIVER_STORAGE_MEMORY_BYTES_MAX=536870912
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request

PORT = 18600
IDLE_CHECKS_S = (5, 15, 30, 135)


def status_mib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) // 1024
    return -1


def gauge(url, name):
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)", text, re.M)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rows", type=int, default=3_000_000, help="rows per run")
    ap.add_argument("--no-idle", action="store_true", help="stop after the last run")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the node")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="quiver-sustained.")
    env = dict(os.environ, QUIVER_WAL_SYNC="fsync", QUIVER_LOG_LEVEL="warn")
    env.update(kv.split("=", 1) for kv in args.env)
    url = f"http://127.0.0.1:{PORT}"
    node = subprocess.Popen(
        [args.binary, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{PORT}",
         "--data-dir", os.path.join(work, "data")],
        env=env, stderr=open(os.path.join(work, "node.log"), "w"))
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/ready")
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("the node did not become ready")
                time.sleep(0.05)

        def state():
            return (f"buffer {gauge(url, 'quiver_buffer_bytes') / 2**20:.0f} MiB, "
                    f"frozen {gauge(url, 'quiver_frozen_segments'):.0f}, "
                    f"resident {status_mib(node.pid, 'VmRSS')} MiB, "
                    f"peak {status_mib(node.pid, 'VmHWM')} MiB")

        for i in range(args.runs):
            out = subprocess.run(
                [args.binary, "sizing", "load", "--format", "lp", "--url", url,
                 "--rows", str(args.rows), "--workers", "8", "--batch-size", "5000",
                 "--shape", "tsbs", "--prepared", "--no-verify",
                 "--measurement", f"cpu{i % 2}"],
                capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            print(f"run {i + 1}: {r['rows_per_s']:,.0f} rows/s, "
                  f"p99 {r['latency_ms']['p99']} ms, failed {r['failed_rows']}; "
                  f"{state()}", flush=True)
        if not args.no_idle:
            idle_from = time.time()
            for s in IDLE_CHECKS_S:
                time.sleep(max(0.0, idle_from + s - time.time()))
                print(f"idle {s} s: {state()}", flush=True)
    finally:
        node.kill()
        node.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
