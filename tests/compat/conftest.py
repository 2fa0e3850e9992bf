"""A real `quiver` node for the client-compatibility tests.

One node serves the whole session; every test writes into its own database (or,
where a client cannot choose one, its own measurement), so tests stay independent.

The binary comes from `QUIVER_BIN`, else `$CARGO_TARGET_DIR/debug/quiver` with
`CARGO_TARGET_DIR` defaulting to `~/.cache/quiver-target`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

TOKEN = "compat-token"
READY_DEADLINE_S = 60.0

# What `arrow_typeof` may print for a string column. Tags are dictionary-encoded
# by Quiver; string fields are plain Utf8. Both are strings to every client.
STRING_TYPES = {
    "Utf8",
    "LargeUtf8",
    "Utf8View",
    "Dictionary(Int32, Utf8)",
    "Dictionary(UInt32, Utf8)",
    "Dictionary(Int16, Utf8)",
    "Dictionary(Int8, Utf8)",
}


def binary_path() -> Path:
    explicit = os.environ.get("QUIVER_BIN")
    if explicit:
        return Path(explicit)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/quiver-target")
    return Path(target) / "debug" / "quiver"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QueryError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class Node:
    """A running `quiver serve` process and the HTTP calls tests make to it."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        extra_env: dict[str, str] | None = None,
        data_dir: Path | None = None,
        ca: Path | None = None,
    ):
        self.binary = binary
        self.workdir = workdir
        # Settings as QUIVER_* variables, and a data directory kept across restarts
        # (tests that kill and restart the node); without one, each start gets its own.
        self.extra_env = dict(extra_env or {})
        self.data_dir = data_dir
        # With a CA (the node has a certificate in `extra_env`), HTTP calls go over
        # HTTPS trusting only that CA.
        self.ssl_context = ssl.create_default_context(cafile=str(ca)) if ca else None
        self.host = "127.0.0.1"
        self.port = 0
        self.pg_port = 0
        self.flight_port = 0
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / "quiver.log"

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        last_error = ""
        # A port picked by bind-and-release can be taken by someone else before
        # quiver binds it; try a few ports before giving up.
        for _attempt in range(3):
            self.port = free_port()
            self.pg_port = free_port()
            self.flight_port = free_port()
            scheme = "https" if self.ssl_context else "http"
            self.url = f"{scheme}://{self.host}:{self.port}"
            data_dir = self.data_dir or self.workdir / f"data-{self.port}"
            env = dict(os.environ)
            env["QUIVER_BOOTSTRAP_TOKEN"] = TOKEN
            env.update(self.extra_env)
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    "serve",
                    "--http-addr",
                    f"{self.host}:{self.port}",
                    "--data-dir",
                    str(data_dir),
                    # The Postgres wire protocol door (tests/compat/test_postgres.py).
                    "--pg-addr",
                    f"{self.host}:{self.pg_port}",
                    # The Arrow Flight SQL door (tests/compat/test_flight.py).
                    "--flight-addr",
                    f"{self.host}:{self.flight_port}",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log.close()
            if self._wait_ready():
                return
            last_error = self.log_tail()
            self.stop()
        raise RuntimeError(f"quiver did not become ready; log tail:\n{last_error}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(
                    self.url + "/ready", timeout=2, context=self.ssl_context
                ) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: no shutdown path runs, as in a crash."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    # -- HTTP helpers ------------------------------------------------------
    def request(self, method: str, path: str, body: bytes | None = None, headers=None):
        """Raw request; returns (status, headers, body bytes) without raising on 4xx/5xx."""
        req = urllib.request.Request(self.url + path, data=body, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl_context) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def write_lines(self, db: str, lines: list[str]) -> None:
        """Writes nanosecond line protocol to `db` through /api/v2/write; asserts 204."""
        status, _, body = self.request(
            "POST",
            f"/api/v2/write?bucket={db}&precision=ns",
            "\n".join(lines).encode(),
            {"Authorization": f"Token {TOKEN}"},
        )
        assert status == 204, body

    def sql(self, db: str, query: str) -> dict:
        """Runs SQL through POST /api/v1/query against database `db`; returns the JSON."""
        status, _, body = self.request(
            "POST",
            "/api/v1/query",
            json.dumps({"sql": query}).encode(),
            {
                "content-type": "application/json",
                "x-arc-database": db,
                "Authorization": f"Bearer {TOKEN}",
            },
        )
        if status != 200:
            raise QueryError(status, body.decode(errors="replace"))
        doc = json.loads(body)
        assert doc.get("success") is True, doc
        return doc

    def rows(self, db: str, query: str) -> list[dict]:
        """The result of `query` as a list of {column: value} dicts."""
        doc = self.sql(db, query)
        return [dict(zip(doc["columns"], row)) for row in doc["data"]]

    def types(self, db: str, table: str, columns: list[str]) -> dict[str, str]:
        """`arrow_typeof` of each column of `table` (from its first row)."""
        exprs = ", ".join(f'arrow_typeof("{c}") AS "{c}"' for c in columns)
        got = self.rows(db, f'SELECT {exprs} FROM "{table}" LIMIT 1')
        assert got, f"{db}.{table} is empty"
        return got[0]


@pytest.fixture(scope="session")
def node(tmp_path_factory):
    binary = binary_path()
    if not binary.is_file():
        pytest.exit(
            f"quiver binary not found at {binary}: build it (cargo build) or set QUIVER_BIN",
            returncode=2,
        )
    workdir = Path(tempfile.mkdtemp(prefix="quiver-compat-"))
    n = Node(binary, workdir)
    n.start()
    try:
        yield n
    finally:
        n.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def sql(node):
    """`sql(db, query)` -> parsed JSON (`columns`, `data`, ...) of POST /api/v1/query."""
    return node.sql


@pytest.fixture
def db(request) -> str:
    """A fresh database name for this test."""
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:40]
    return f"{base}_{uuid.uuid4().hex[:6]}"


def assert_string_type(t: str) -> None:
    assert t in STRING_TYPES, f"expected a string type, got {t}"


def assert_timestamp_type(t: str) -> None:
    assert t.startswith("Timestamp"), f"expected a timestamp type, got {t}"
