"""Parquet files in an S3 bucket (`storage.object_store`), against a real S3 API server.

The server is moto's (PyPI `moto[server]`), started by the test. Quiver reaches it
through a small TCP relay the test owns, so "the store goes away" is the relay
refusing connections while moto keeps its objects (moto holds them in memory; killing
moto itself would lose the bucket, which no real outage does).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest

from conftest import TOKEN, Node, QueryError, binary_path, free_port

DEADLINE_S = 60.0
BUCKET = "quiver-test"
PREFIX = "cluster-a"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class Relay:
    """Forwards loopback TCP connections to `target_port`; `stop()` closes the listener
    and every open connection (the store is unreachable), `start()` brings it back on
    the same port."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def poll(what: str, check, deadline_s: float = DEADLINE_S):
    """Calls `check` until it returns something truthy; fails naming `what` at the deadline."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture(scope="module")
def moto():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def up():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1):
                return True
        except OSError:
            return False

    try:
        poll("moto to start", up)
        s3 = boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1", **KEYS
        )
        s3.create_bucket(Bucket=BUCKET)
        yield port, s3
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def node_on_bucket(moto, settings: dict[str, str]):
    """A node keeping its Parquet files in the bucket under a fresh prefix, reached
    through a relay; `settings` adds credentials and limits. Yields (node, relay, s3
    client, the node's prefix)."""
    moto_port, s3 = moto
    relay = Relay(moto_port)
    relay.start()
    workdir = Path(tempfile.mkdtemp(prefix="quiver-s3-"))
    prefix = f"{PREFIX}-{uuid.uuid4().hex[:6]}"
    env = {
        "QUIVER_STORAGE_OBJECT_STORE": f"s3://{BUCKET}/{prefix}",
        "QUIVER_STORAGE_OBJECT_STORE_ENDPOINT": f"http://127.0.0.1:{relay.port}",
        "QUIVER_STORAGE_OBJECT_STORE_ALLOW_HTTP": "true",
        "QUIVER_STORAGE_FLUSH_AGE_MS": "300",
        "QUIVER_RAFT_FLUSH_CHECK_INTERVAL_MS": "100",
        **settings,
    }
    node = Node(binary_path(), workdir, extra_env=env, data_dir=workdir / "data")
    node.start()
    try:
        yield node, relay, s3, f"{prefix}/node-1/"
    finally:
        node.stop()
        relay.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def bucket_node(moto):
    """Credentials as settings, and a cache for whole files."""
    with node_on_bucket(
        moto,
        {
            "QUIVER_STORAGE_OBJECT_STORE_REGION": "us-east-1",
            "QUIVER_STORAGE_OBJECT_STORE_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
            "QUIVER_STORAGE_OBJECT_STORE_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
            "QUIVER_STORAGE_OBJECT_STORE_TIMEOUT_MS": "2000",
            "QUIVER_STORAGE_CACHE_BYTES_MAX": str(64 * 1024 * 1024),
        },
    ) as found:
        yield found


def bucket_files(s3, prefix: str) -> dict[str, int]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "data/")
    return {o["Key"]: o["Size"] for o in listed.get("Contents", [])}


def lines(measurement: str, start: int, count: int) -> list[str]:
    base = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
    return [
        f"{measurement},host=h{i % 7} value={i}i,load={i / 4} {base + i * 1_000_000_000}"
        for i in range(start, start + count)
    ]


def count_and_sum(node: Node, db: str, measurement: str) -> tuple[int, int]:
    row = node.rows(db, f'SELECT count(*) AS n, sum(value) AS s FROM "{measurement}"')[0]
    return row["n"], row["s"] or 0


def storage_doc(node: Node, db: str) -> dict:
    status, _, body = node.request(
        "GET", f"/api/v1/storage?database={db}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200, body
    return json.loads(body)


def metric(node: Node, name: str) -> float:
    """The value of an unlabelled metric in /metrics (0 when absent)."""
    status, _, body = node.request("GET", "/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def in_memory(node: Node, db: str) -> int:
    doc = storage_doc(node, db)
    return sum(m["rows_in_memory"] for d in doc["databases"] for m in d["measurements"])


def test_files_go_to_the_bucket_and_survive_a_kill(bucket_node):
    node, _relay, s3, prefix = bucket_node
    db = f"s3_{uuid.uuid4().hex[:6]}"
    node.write_lines(db, lines("cpu", 0, 5000))
    poll("every row flushed", lambda: in_memory(node, db) == 0)
    files = bucket_files(s3, prefix)
    # 5,000 seconds of rows span two hours: a file each.
    assert len(files) == 2, files
    assert all(k.endswith(".parquet") and size > 0 for k, size in files.items()), files
    assert storage_doc(node, db)["location"] == f"s3://{BUCKET}/{prefix.rstrip('/')}"
    # Nothing Parquet on local disk: the bucket holds the files.
    local = list((node.data_dir / "parquet").rglob("*.parquet"))
    assert local == [], local
    expected = (5000, sum(range(5000)))
    assert count_and_sum(node, db, "cpu") == expected
    # Once the files are in the local cache, the same answer comes from it.
    poll("the files cached", lambda: metric(node, "quiver_object_cache_bytes") > 0)
    hits = metric(node, "quiver_object_cache_hits_total")
    assert count_and_sum(node, db, "cpu") == expected
    assert metric(node, "quiver_object_cache_hits_total") > hits
    node.kill()
    node.start()
    assert count_and_sum(node, db, "cpu") == expected
    # A start deletes the files its newest snapshot does not list (a kill can come
    # before the snapshot that records them) and replay writes them again, one upload
    # at a time: compare the bucket once no row waits in memory.
    poll("every row flushed after the restart", lambda: in_memory(node, db) == 0)
    assert bucket_files(s3, prefix) == files


def test_an_unreachable_bucket_loses_nothing_and_pushes_back(bucket_node):
    node, relay, s3, prefix = bucket_node
    db = f"s3_{uuid.uuid4().hex[:6]}"
    node.write_lines(db, lines("mem", 0, 1000))
    poll("the first rows flushed", lambda: in_memory(node, db) == 0)
    other = f"s3_{uuid.uuid4().hex[:6]}"
    node.write_lines(other, lines("mem", 0, 1000))
    poll("the other database's rows flushed", lambda: in_memory(node, other) == 0)
    before = bucket_files(s3, prefix)
    # Read once, so the first file is in the local cache.
    assert count_and_sum(node, db, "mem") == (1000, sum(range(1000)))
    poll("the first file cached", lambda: metric(node, "quiver_object_cache_bytes") > 0)
    relay.stop()
    # A file that is neither in the bucket's reach nor cached: 503, retry later.
    try:
        count_and_sum(node, other, "mem")
        raise AssertionError("a query of an unreachable, uncached file answered")
    except QueryError as e:
        assert e.status == 503 and "retry later" in e.body, e
    # Acknowledged while the bucket is away: the rows are in the WAL and in memory; the
    # older rows are read from the cache.
    node.write_lines(db, lines("mem", 1000, 2000))
    assert count_and_sum(node, db, "mem") == (3000, sum(range(3000)))

    poll(
        "a failed flush to the unreachable bucket",
        lambda: metric(node, "quiver_flush_failures_total") > 0,
    )
    assert in_memory(node, db) == 2000
    assert bucket_files(s3, prefix) == before
    # A crash while the bucket is away: the rows come back from the log, and reach
    # the bucket once it is back.
    node.kill()
    relay.start()
    node.start()
    assert count_and_sum(node, db, "mem") == (3000, sum(range(3000)))
    poll("the waiting rows flushed once the bucket is back", lambda: in_memory(node, db) == 0)
    assert len(bucket_files(s3, prefix)) > len(before)
    assert count_and_sum(node, db, "mem") == (3000, sum(range(3000)))


def test_full_buffers_refuse_writes_naming_the_bucket(moto):
    """With the bucket away and buffers at their budget, writes get 503 with the reason;
    what was acknowledged before is all there once the bucket is back."""
    # Credentials from the usual AWS variables this time.
    settings = {
        "QUIVER_STORAGE_OBJECT_STORE_TIMEOUT_MS": "1000",
        "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
        "AWS_REGION": "us-east-1",
        "QUIVER_STORAGE_MEMORY_BYTES_MAX": str(2 * 1024 * 1024),
    }
    with node_on_bucket(moto, settings) as (node, relay, _s3, node_prefix):
        prefix = node_prefix.removesuffix("/node-1/")
        db = f"s3_{uuid.uuid4().hex[:6]}"
        relay.stop()
        acked = 0
        refusal = None
        deadline = time.monotonic() + DEADLINE_S
        # Writes are acknowledged until buffers reach their budget; then refused, first
        # while the first flush is still being tried, then naming the failing bucket.
        while time.monotonic() < deadline:
            status, _, body = node.request(
                "POST",
                f"/api/v2/write?bucket={db}&precision=ns",
                "\n".join(lines("disk", acked, 2000)).encode(),
                {"Authorization": f"Token {TOKEN}"},
            )
            if status == 204:
                acked += 2000
            elif status == 503:
                refusal = body.decode()
                if f"s3://{BUCKET}/{prefix}" in refusal:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"unexpected {status}: {body!r}")
        assert refusal is not None, "writes were never refused while the bucket was away"
        assert "buffers are full" in refusal and f"s3://{BUCKET}/{prefix}" in refusal, refusal
        assert acked > 0
        relay.start()
        poll("the buffered rows flushed", lambda: in_memory(node, db) == 0)
        assert count_and_sum(node, db, "disk") == (acked, sum(range(acked)))
        node.kill()
        node.start()
        assert count_and_sum(node, db, "disk") == (acked, sum(range(acked)))


def run_quiver(subcommand: str, node: Node, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs `quiver <subcommand>` with the node's settings (flags and QUIVER_* environment)
    to its end; returns its exit code and output."""
    env = dict(os.environ)
    env["QUIVER_BOOTSTRAP_TOKEN"] = TOKEN
    env.update(node.extra_env)
    env.update(extra_env or {})
    out = subprocess.run(
        [
            str(node.binary),
            subcommand,
            "--http-addr",
            f"127.0.0.1:{free_port()}",
            "--data-dir",
            str(node.data_dir),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.returncode, out.stdout + out.stderr


def start_fails(node: Node) -> str:
    """Starts the node expecting it to refuse; returns what it said."""
    try:
        node.start()
    except RuntimeError as e:
        return str(e) + node.log_path.read_text(errors="replace")
    node.stop()
    raise AssertionError("the node started")


# A quick owner beat (a stopped writer is recognised in 750 ms), and no merges, so the
# set of objects stays what the flushes wrote.
OWNER_BEAT = {
    "QUIVER_STORAGE_OBJECT_STORE_OWNER_BEAT_MS": "300",
    "QUIVER_COMPACTION_ENABLED": "false",
}


def test_a_lost_disk_deletes_nothing_in_the_bucket_and_restore_brings_it_back(moto):
    """Regression: a single node whose data and WAL directories were lost started again
    on its bucket prefix, became ready, and its start sweep deleted every object there,
    the only copy of the flushed rows. Now it refuses to start, deletes nothing, and
    `quiver restore` adopts the files."""
    settings = {
        "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
        "AWS_REGION": "us-east-1",
        **OWNER_BEAT,
    }
    with node_on_bucket(moto, settings) as (node, _relay, s3, prefix):
        db = f"s3_{uuid.uuid4().hex[:6]}"
        # Several measurements over several hours: a few dozen objects.
        for m in range(6):
            node.write_lines(db, lines(f"m{m}", 0, 20_000))
        poll("every row flushed", lambda: in_memory(node, db) == 0)
        expected = {f"m{m}": count_and_sum(node, db, f"m{m}") for m in range(6)}
        files = bucket_files(s3, prefix)
        assert len(files) >= 24, files
        node.kill()
        # The disk is lost: data directory and WAL with it.
        shutil.rmtree(node.data_dir)
        said = start_fails(node)
        assert "holds Parquet files this data directory did not write" in said, said
        assert "quiver restore" in said and "Nothing was deleted" in said, said
        assert bucket_files(s3, prefix) == files, "objects deleted"
        code, out = run_quiver("restore", node)
        assert code == 0, out
        assert f"{len(files)} files held from now on" in out, out
        node.start()
        for m, want in expected.items():
            assert count_and_sum(node, db, m) == want, m
        assert storage_doc(node, db)["unaccounted"]["files"] == 0
        # New rows go to new names: the adopted objects stay as they were.
        node.write_lines(db, lines("m0", 20_000, 1_000))
        poll("the new rows flushed", lambda: in_memory(node, db) == 0)
        now = bucket_files(s3, prefix)
        assert all(now.get(k) == size for k, size in files.items()), "an object was replaced"
        assert count_and_sum(node, db, "m0") == (21_000, sum(range(21_000)))


def test_two_nodes_never_write_one_prefix(moto):
    """A second process given the same prefix and node id is refused at start while the
    first runs, and nothing of the first's is touched."""
    settings = {
        "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
        "AWS_REGION": "us-east-1",
        **OWNER_BEAT,
    }
    with node_on_bucket(moto, settings) as (node, _relay, s3, prefix):
        db = f"s3_{uuid.uuid4().hex[:6]}"
        node.write_lines(db, lines("cpu", 0, 3_000))
        poll("every row flushed", lambda: in_memory(node, db) == 0)
        files = bucket_files(s3, prefix)
        other_dir = Path(tempfile.mkdtemp(prefix="quiver-s3-other-"))
        try:
            other = Node(binary_path(), other_dir, extra_env=node.extra_env, data_dir=other_dir / "data")
            said = start_fails(other)
            assert "being written by another running process" in said, said
            # `quiver restore` refuses a live owner too.
            code, out = run_quiver("restore", other)
            assert code != 0 and "another running process" in out, out
        finally:
            shutil.rmtree(other_dir, ignore_errors=True)
        assert bucket_files(s3, prefix) == files
        assert count_and_sum(node, db, "cpu") == (3_000, sum(range(3_000)))


def quiver_cli(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Runs `quiver ARGS` to its end with `env` added; returns its exit code and output."""
    full = dict(os.environ)
    full.update(env)
    out = subprocess.run(
        [str(binary_path()), *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
    )
    return out.returncode, out.stdout.decode(errors="replace")


def aws_env(moto_port: int) -> dict[str, str]:
    """The `AWS_*` variables a `quiver` command needs to reach moto directly."""
    return {
        "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{moto_port}",
        "AWS_ALLOW_HTTP": "true",
    }


def digest(node: Node) -> list:
    status, _, body = node.request(
        "GET", "/api/v1/cluster/digest", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200, body
    return json.loads(body)["tables"]


def test_a_backup_in_a_bucket_is_incremental_and_restores_a_new_node(moto):
    """`quiver backup --to s3://...` of a running node, twice (the second uploads only
    what is new), then `quiver restore --from s3://...` into empty directories: the new
    node holds the same rows, flushed and not yet flushed, with the same digest."""
    moto_port, s3 = moto
    aws = aws_env(moto_port)
    # No merges: the second backup must find the first one's files unchanged.
    quick_flush = {
        "QUIVER_STORAGE_FLUSH_AGE_MS": "300",
        "QUIVER_RAFT_FLUSH_CHECK_INTERVAL_MS": "100",
        "QUIVER_COMPACTION_ENABLED": "false",
    }
    workdir = Path(tempfile.mkdtemp(prefix="quiver-s3-backup-"))
    prefix = f"backups-{uuid.uuid4().hex[:6]}"
    url = f"s3://{BUCKET}/{prefix}"
    db = f"bk_{uuid.uuid4().hex[:6]}"
    node = Node(binary_path(), workdir, extra_env=quick_flush, data_dir=workdir / "data")
    restored = Node(binary_path(), workdir, extra_env=quick_flush, data_dir=workdir / "new")
    node.start()
    try:
        for m in range(3):
            node.write_lines(db, lines(f"m{m}", 0, 5_000))
        poll("every row flushed", lambda: in_memory(node, db) == 0)
        backup = ["backup", "--url", node.url, "--token", TOKEN, "--to", url]
        code, out = quiver_cli(backup, aws)
        assert code == 0, out
        keys = [
            o["Key"]
            for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/").get("Contents", [])
        ]
        parquet = [k for k in keys if k.endswith(".parquet")]
        assert parquet and all(k.startswith(f"{prefix}/groups/") for k in parquet), keys
        assert sum(k.endswith(".json") and "/manifests/" in k for k in keys) == 1, keys
        assert not any(k.endswith(".part") for k in keys), keys

        # More rows, some still in memory when the second backup's snapshot is taken.
        node.write_lines(db, lines("m1", 5_000, 2_000))
        poll("the new rows flushed", lambda: in_memory(node, db) == 0)
        node.write_lines(db, lines("m2", 5_000, 300))
        code, out = quiver_cli(backup, aws)
        assert code == 0, out
        reused = int(out.split(" already in ")[0].rsplit(", ", 1)[1])
        assert reused >= len(parquet), f"the second backup re-uploaded old files: {out}"
        expected = {f"m{m}": count_and_sum(node, db, f"m{m}") for m in range(3)}
        assert expected["m2"][0] == 5_300
        before = digest(node)
        node.stop()

        new_dir = workdir / "new"
        code, out = quiver_cli(
            [
                "restore",
                "--from",
                url,
                "--data-dir",
                str(new_dir),
                "--http-addr",
                f"127.0.0.1:{free_port()}",
            ],
            {**aws, "QUIVER_BOOTSTRAP_TOKEN": TOKEN},
        )
        assert code == 0, out
        assert "restore: downloading" in out and "restore: group 0" in out, out
        assert not (new_dir / ".restore-staging").exists(), "the download is cleared"
        restored.start()
        for m, want in expected.items():
            assert count_and_sum(restored, db, m) == want, m
        assert digest(restored) == before

        # A damaged object is found before anything is written.
        victim = next(k for k in parquet)
        s3.put_object(Bucket=BUCKET, Key=victim, Body=b"not parquet")
        other = workdir / "other"
        code, out = quiver_cli(
            [
                "restore",
                "--from",
                url,
                "--data-dir",
                str(other),
                "--http-addr",
                f"127.0.0.1:{free_port()}",
            ],
            aws,
        )
        assert code != 0 and "corrupt" in out and victim.split("/")[-1] in out, out
        assert not any(p.suffix == ".parquet" for p in other.rglob("*")), "nothing written"
    finally:
        node.stop()
        restored.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_import_reads_files_from_a_bucket_and_stores_them_once(moto):
    """`quiver import s3://bucket/key.lp ...`: the object's rows are stored, and an import
    run again (as after an interruption) stores none of them twice."""
    moto_port, s3 = moto
    aws = aws_env(moto_port)
    workdir = Path(tempfile.mkdtemp(prefix="quiver-s3-import-"))
    key = f"history-{uuid.uuid4().hex[:6]}/cpu.lp"
    body = "\n".join(lines("cpu", 0, 30_000)) + "\n"
    s3.put_object(Bucket=BUCKET, Key=key, Body=body.encode())
    db = f"imp_{uuid.uuid4().hex[:6]}"
    node = Node(binary_path(), workdir, data_dir=workdir / "data")
    node.start()
    try:
        args = [
            "import",
            "--url",
            node.url,
            "--token",
            TOKEN,
            "--database",
            db,
            "--chunk-bytes",
            "100000",
            f"s3://{BUCKET}/{key}",
        ]
        code, out = quiver_cli(args, aws)
        assert code == 0, out
        assert "30000 rows acknowledged" in out.replace(",", ""), out
        want = (30_000, sum(range(30_000)))
        assert count_and_sum(node, db, "cpu") == want
        code, out = quiver_cli(args + ["--restart"], aws)
        assert code == 0, out
        assert count_and_sum(node, db, "cpu") == want, "rows stored twice"
        code, out = quiver_cli(args[:-1] + [f"s3://{BUCKET}/no-such-object.lp"], aws)
        assert code != 0 and "no-such-object.lp" in out, out
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)
