#!/usr/bin/env python3
"""Bytes on disk for the TSBS cpu-only shape: Quiver against VictoriaMetrics (issue 41).

Both servers get the same line-protocol bodies (`benches/tsbs.py`'s generator: 1,000
hosts with TSBS's ten tags, ten integer fields moving as random walks, a row per host
every 10 s). Each is then left to settle before it is measured: Quiver until its merges
are done and the files they replaced are gone (the data is from 2016, so every day is
closed), VictoriaMetrics after `/internal/force_flush` and `/internal/force_merge`,
until its directory stops changing for 20 s. Sizes:

* Quiver: the live Parquet files (what a query reads; the log is truncated once rows
  are in Parquet) and, for the record, the whole data directory;
* VictoriaMetrics: its whole `-storageDataPath` (data parts and the index it needs).

Also printed: Quiver's bytes per row for each column (from the files' footers) and the
entropy of the field values' steps, the floor no lossless encoding of this data goes
under. One markdown table to stdout, progress to stderr.

    pip install pyarrow numpy requests
    python3 benches/storage_vs_victoriametrics.py [--hosts 1000 --hours 12] [--bin PATH]

Needs /usr/bin/victoria-metrics (`apt-get install victoria-metrics`).
"""

import argparse
import collections
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tsbs  # noqa: E402  (the same generator and settling rules)
from query_vs_duckdb import Node, binary, free_port, log  # noqa: E402

VM = "/usr/bin/victoria-metrics"


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                pass  # a part merged away while walking
    return total


def start_vm(work):
    port = free_port()
    data = os.path.join(work, "vm")
    process = subprocess.Popen(
        [VM, f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}",
         "-retentionPeriod=100y", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url, data
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("victoria-metrics did not start")
        time.sleep(0.1)


def settle_vm(url, data):
    requests.get(f"{url}/internal/force_flush", timeout=60)
    requests.get(f"{url}/internal/force_merge", timeout=600)
    last, stable_since = None, time.monotonic()
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        size = dir_bytes(data)
        if size != last:
            last, stable_since = size, time.monotonic()
        if time.monotonic() - stable_since > 20:
            return size
        time.sleep(1)
    raise SystemExit("victoria-metrics did not settle within 15 minutes")


def vm_rows(url):
    """Samples VictoriaMetrics holds of the first field (one series per host and field)."""
    end = int(tsbs.START.replace(tzinfo=tsbs.dt.timezone.utc).timestamp()) + 30 * 86400
    r = requests.get(f"{url}/api/v1/query", timeout=120, params={
        "query": 'sum(count_over_time(cpu_usage_user[60d]))', "time": str(end)})
    result = r.json()["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def column_bytes(files):
    per = collections.Counter()
    for path in files:
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(g).column(c)
                per[column.path_in_schema] += column.total_compressed_size
    return per


def step_entropy_bits(hosts, hours, seed):
    """Empirical entropy (bits) of one field value given the one before it."""
    steps = hours * 3600 // tsbs.INTERVAL_S
    values = tsbs.field_values(hosts, steps, seed)
    diffs = np.diff(values, axis=0).ravel()
    _, counts = np.unique(diffs, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-lines", type=int, default=5000)
    parser.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(tsbs.REPO, "target")), "release", "quiver"))
    args = parser.parse_args()
    if not os.access(VM, os.X_OK):
        raise SystemExit("install victoria-metrics first: apt-get install victoria-metrics")
    exe = binary(args.bin)
    work = tempfile.mkdtemp(prefix="quiver-storage-")
    node = vm = None
    try:
        # Replaced files go 5 s after their merge (5 minutes by default, for queries
        # reading them; none run here): only the settled files are measured.
        node = Node(exe, work, 2, {"QUIVER_COMPACTION_CHECK_INTERVAL_MS": "1000",
                                   "QUIVER_COMPACTION_INPUT_GRACE_MS": "5000",
                                   "QUIVER_QUERY_TIMEOUT_MS": "4000"})
        rows = tsbs.load(node, args.hosts, args.hours, args.seed, args.workers, args.batch_lines)
        _, files = tsbs.parquet_files(node.data_dir)
        per_column = column_bytes(files)
        quiver_parquet = sum(os.path.getsize(f) for f in files)
        quiver_dir = dir_bytes(os.path.join(node.data_dir, "data")) - dir_bytes(
            os.path.join(node.data_dir, "data", "wal"))
        node.stop()
        node = None

        vm, vm_url, vm_data = start_vm(work)
        log(f"loading {rows:,} rows into VictoriaMetrics")
        tsbs.post_batches([vm_url], tsbs.line_batches(
            args.hosts, args.hours, args.seed, args.batch_lines), args.workers)
        log("waiting for VictoriaMetrics to merge")
        vm_bytes = settle_vm(vm_url, vm_data)
        stored = vm_rows(vm_url)
        if stored != rows:
            raise SystemExit(f"victoria-metrics holds {stored:,} of {rows:,} rows")

        entropy = step_entropy_bits(args.hosts, args.hours, args.seed)
        print(f"| measure ({rows:,} rows, {len(files)} Parquet files) | bytes | bytes/row |")
        print("|---|---:|---:|")
        print(f"| Quiver, live Parquet files | {quiver_parquet:,} | {quiver_parquet / rows:.2f} |")
        print(f"| Quiver, data directory without the log | {quiver_dir:,} | {quiver_dir / rows:.2f} |")
        print(f"| VictoriaMetrics, storage directory | {vm_bytes:,} | {vm_bytes / rows:.2f} |")
        print(f"| ratio, Quiver Parquet / VictoriaMetrics | {quiver_parquet / vm_bytes:.2f}× | |")
        print(f"| entropy floor of the ten fields ({entropy:.2f} bits a step) | "
              f"{int(entropy * 10 * rows / 8):,} | {entropy * 10 / 8:.2f} |")
        print()
        print("| Quiver column | bytes/row |")
        print("|---|---:|")
        for name, size in sorted(per_column.items(), key=lambda kv: -kv[1]):
            print(f"| {name} | {size / rows:.3f} |")
    finally:
        if node is not None:
            node.stop()
        if vm is not None:
            vm.terminate()
            vm.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
