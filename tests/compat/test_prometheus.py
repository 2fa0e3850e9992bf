"""Debian's real `prometheus` server remote-writing to `POST /api/v1/prom/write`.

Prometheus scrapes its own `/metrics` and Quiver's every 200 ms and remote-writes
everything to Quiver. The test checks that the samples arrive and equal, sample for
sample, what Prometheus's own HTTP API returns for the same series; then it drops the
Quiver scrape job (a config reload), which makes Prometheus send stale markers for that
job's series: Quiver skips them (no NaN row) and counts them.

`scripts/compat.sh` installs the `prometheus` package when it is missing.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import TOKEN, free_port
from timeutil import rfc3339_to_ns

DEADLINE_S = 90.0
SCRAPE_INTERVAL = "200ms"


def prometheus_config(prom_port: int, quiver_port: int, db: str, scrape_quiver: bool) -> str:
    jobs = [("prometheus", prom_port)] + ([("quiver", quiver_port)] if scrape_quiver else [])
    scrape = "\n".join(
        f"""  - job_name: {job}
    scrape_interval: {SCRAPE_INTERVAL}
    static_configs:
      - targets: ['127.0.0.1:{port}']"""
        for job, port in jobs
    )
    return f"""global:
  scrape_interval: {SCRAPE_INTERVAL}
  evaluation_interval: 1s
scrape_configs:
{scrape}
remote_write:
  - url: http://127.0.0.1:{quiver_port}/api/v1/prom/write?db={db}
    authorization:
      credentials: {TOKEN}
    queue_config:
      batch_send_deadline: 200ms
      min_backoff: 50ms
      max_backoff: 1s
    metadata_config:
      send_interval: 1s
"""


class Prometheus:
    """A `prometheus` process on a loopback port of the test's choosing."""

    def __init__(self, workdir: Path, quiver_port: int, db: str):
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("the prometheus binary is missing: scripts/compat.sh installs it")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.quiver_port = quiver_port
        self.db = db
        self.config = workdir / "prometheus.yml"
        self.config.write_text(prometheus_config(self.port, quiver_port, db, True))
        self.log_path = workdir / "prometheus.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def wait_ready(self) -> None:
        wait_for(self, "prometheus /-/ready", lambda: self.get("/-/ready")[0] == 200)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def raw_samples(self, selector: str, at_s: float, window_s: int) -> dict[tuple, list]:
        """Every stored sample of `selector` in the `window_s` seconds up to `at_s`, per
        label set: {labels: [(ms, value), ...]} from a range-vector instant query (raw
        samples, no interpolation)."""
        q = urllib.parse.urlencode({"query": f"{selector}[{window_s}s]", "time": f"{at_s:.3f}"})
        status, body = self.get(f"/api/v1/query?{q}")
        assert status == 200, body
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        out = {}
        for series in doc["data"]["result"]:
            labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
            out[labels] = [(round(float(t) * 1000), float(v)) for t, v in series["values"]]
        return out

    def drop_quiver_job(self) -> None:
        self.config.write_text(prometheus_config(self.port, self.quiver_port, self.db, False))
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_for(prom: Prometheus, what: str, check) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        if prom.proc.poll() is not None:
            pytest.fail(f"prometheus exited while waiting for {what}:\n{prom.log_tail()}")
        if check():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; prometheus log:\n{prom.log_tail()}")
        time.sleep(0.1)


@pytest.fixture
def prometheus(node, db, tmp_path):
    p = Prometheus(tmp_path, node.port, db)
    try:
        p.wait_ready()
        yield p
    finally:
        p.stop()


def quiver_samples(node, db: str, table: str, where: str, labels: list[str]) -> dict[tuple, list]:
    """Quiver's rows of `table` matching `where`, per label set, as Prometheus shows them."""
    cols = ", ".join(f'"{c}"' for c in labels)
    rows = node.rows(db, f'SELECT {cols}, time, value FROM "{table}" WHERE {where} ORDER BY time')
    out: dict[tuple, list] = {}
    for r in rows:
        key = tuple(sorted((c, r[c]) for c in labels if r[c] is not None))
        out.setdefault(key, []).append((rfc3339_to_ns(r["time"]) // 1_000_000, r["value"]))
    return out


def metric_value(node, name: str) -> float:
    status, _, body = node.request("GET", "/metrics")
    assert status == 200
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def table_rows(node, db: str, sql: str) -> list[dict]:
    try:
        return node.rows(db, sql)
    except Exception:  # the table does not exist until the first write lands
        return []


def test_remote_write_samples_equal_prometheus_own(node, db, prometheus):
    # Both jobs' `up` and Quiver's own counter of remote-written rows arrive.
    def arrived() -> bool:
        jobs = {r["job"] for r in table_rows(node, db, "SELECT DISTINCT job FROM up")}
        counted = table_rows(
            node, db,
            "SELECT count(*) AS n FROM quiver_rows_written_total "
            "WHERE format = 'prometheus_remote_write'",
        )
        return jobs == {"prometheus", "quiver"} and bool(counted) and counted[0]["n"] >= 3

    wait_for(prometheus, "samples of both jobs in Quiver", arrived)

    labels = {
        "up": ["instance", "job"],
        "quiver_rows_written_total": ["format", "instance", "job"],
        "prometheus_http_requests_total": ["code", "handler", "instance", "job"],
    }
    where = {
        "up": "true",
        "quiver_rows_written_total": "format = 'prometheus_remote_write'",
        "prometheus_http_requests_total": "handler = '/metrics'",
    }
    selector = {
        "up": "up",
        "quiver_rows_written_total": 'quiver_rows_written_total{format="prometheus_remote_write"}',
        "prometheus_http_requests_total": 'prometheus_http_requests_total{handler="/metrics"}',
    }
    compared = 0
    for table in labels:
        ours = quiver_samples(node, db, table, where[table], labels[table])
        assert ours, f"no {table} rows in Quiver"
        for key, samples in ours.items():
            first_ms, last_ms = samples[0][0], samples[-1][0]
            window_s = (last_ms - first_ms) // 1000 + 60
            theirs = prometheus.raw_samples(selector[table], last_ms / 1000, window_s)
            assert key in theirs, f"{table}{key} unknown to Prometheus: {sorted(theirs)}"
            # Every sample Prometheus holds between the first and the last one Quiver
            # received: remote write sends a series in order, so none may be missing.
            expected = [(t, v) for t, v in theirs[key] if first_ms <= t <= last_ms]
            assert samples == expected, f"{table}{key}"
            compared += len(samples)
    assert compared >= 6

    # Types as documented: tags are strings, the sample a float, time a timestamp.
    types = node.types(db, "up", ["time", "job", "value"])
    assert types["value"] == "Float64"
    assert types["time"].startswith("Timestamp")

    # Dropping the Quiver job makes Prometheus mark its series stale: the markers are
    # skipped (counted), never stored as NaN.
    stale_before = metric_value(node, "quiver_prom_stale_samples_skipped_total")
    prometheus.drop_quiver_job()
    wait_for(
        prometheus,
        "stale markers counted by Quiver",
        lambda: metric_value(node, "quiver_prom_stale_samples_skipped_total") > stale_before,
    )
    nan_rows = node.rows(db, "SELECT count(*) AS n FROM up WHERE isnan(value)")
    assert nan_rows == [{"n": 0}]
