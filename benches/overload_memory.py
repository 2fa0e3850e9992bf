#!/usr/bin/env python3
"""Peak memory under overload against the configured budget (issue 10, "bounded by
bytes").

Starts one node with explicit memory budgets (`http.write_bytes_in_flight_max` for the
write path, `storage.memory_bytes_max` for buffered rows), then drives it with
`quiver sizing load` (50,000-row batches by default, ~2 MB each) at 8 writers (its comfortable rate) and at 64 writers (about ten
times more requests in flight than it can serve; refusals are retried after
`Retry-After`), each run writing the same number of rows. Samples the node's resident
memory every 50 ms and reports the peak (and VmHWM) next to the budgets, plus
persisted == acked from the load tool.

    python3 benches/overload_memory.py --rows 5000000 [--bin target/release/quiver]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

MIB = 1024 * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def run(exe, workers, rows, batch_size, write_budget, buffer_budget):
    work = tempfile.mkdtemp(prefix="quiver-overload-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, QUIVER_HTTP_WRITE_BYTES_IN_FLIGHT_MAX=str(write_budget),
               QUIVER_STORAGE_MEMORY_BYTES_MAX=str(buffer_budget), QUIVER_LOG_LEVEL="warn")
    with open(os.path.join(work, "node.log"), "ab") as out:
        node = subprocess.Popen([exe, "serve", "--auth", "none", "--http-addr", f"127.0.0.1:{port}",
                                 "--data-dir", os.path.join(work, "data")],
                                env=env, stdout=subprocess.DEVNULL, stderr=out)
    while True:
        try:
            if requests.get(f"{url}/ready", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.05)
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes(node.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    load = subprocess.run([exe, "sizing", "load", "--url", url, "--rows", str(rows),
                           "--workers", str(workers), "--batch-size", str(batch_size),
                           "--retry-refused-s", "600"],
                          stdout=subprocess.PIPE, text=True, check=True)
    seconds = time.monotonic() - started
    report = json.loads(load.stdout[load.stdout.index("{"):])
    refused = requests.get(f"{url}/metrics").text
    refusals = sum(float(l.rsplit(" ", 1)[1]) for l in refused.splitlines()
                   if l.startswith("quiver_writes_refused_total"))
    stop.set()
    sampler.join()
    hwm = rss_bytes(node.pid, "VmHWM")
    node.kill()
    node.wait()
    return {"workers": workers, "peak_rss": max(peak[0], hwm), "seconds": seconds,
            "acked": report.get("acked_rows"), "persisted": report.get("persisted_rows"),
            "refusals": int(refusals)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--batch-size", type=int, default=50_000)
    parser.add_argument("--write-budget-mib", type=int, default=256)
    parser.add_argument("--buffer-budget-mib", type=int, default=512)
    parser.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/quiver-target")),
        "release", "quiver"))
    args = parser.parse_args()
    budget = (args.write_budget_mib + args.buffer_budget_mib) * MIB
    results = [run(args.bin, w, args.rows, args.batch_size, args.write_budget_mib * MIB,
                   args.buffer_budget_mib * MIB) for w in (8, 64)]
    print(f"budgets: http.write_bytes_in_flight_max {args.write_budget_mib} MiB + "
          f"storage.memory_bytes_max {args.buffer_budget_mib} MiB = {budget // MIB} MiB")
    print("| writers | peak RSS MiB | peak / budgets | rows/s | refusals (429/503) | persisted == acked |")
    print("|---:|---:|---:|---:|---:|---|")
    for r in results:
        ok = r["acked"] == r["persisted"] == args.rows
        print(f"| {r['workers']} | {r['peak_rss'] / MIB:,.0f} | {r['peak_rss'] / budget:.2f} "
              f"| {args.rows / r['seconds']:,.0f} | {r['refusals']:,} | {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
