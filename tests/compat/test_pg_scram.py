"""SCRAM-SHA-256 logins on the Postgres door, with the real clients.

The user name picks the exchange: a token's id (or `bootstrap` for the bootstrap
token) logs in by SCRAM, so the token never crosses the connection; any other user
name gets the cleartext password exchange, as before. psycopg (libpq 16+) is told to
accept nothing but SCRAM (`require_auth=scram-sha-256`); for asyncpg and psql the
node's `quiver_pg_scram_logins_total` counter shows which exchange ran. pgjdbc's SCRAM
login is in test_jdbc.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import asyncpg
import psycopg
import pytest

from conftest import TOKEN

T0_NS = 1_700_000_000_000_000_000


def api(node, method, path, body=None):
    request = urllib.request.Request(
        node.url + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def scram_logins(node) -> float:
    status, _, body = node.request("GET", "/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith("quiver_pg_scram_logins_total "):
            return float(line.split()[-1])
    return 0.0


def conninfo(node, db, user, password, scram_only=True) -> str:
    info = (
        f"host={node.host} port={node.pg_port} dbname={db} user={user} "
        f"password={password} sslmode=disable connect_timeout=10"
    )
    return info + (" require_auth=scram-sha-256" if scram_only else "")


@pytest.fixture
def scram_db(node, db):
    node.write_lines(db, [f"cpu,host=a usage=0.5 {T0_NS}", f"cpu,host=b usage=1.5 {T0_NS}"])
    return db


@pytest.fixture
def reader(node, scram_db):
    """A read token limited to the test's database: its id and secret."""
    created = api(node, "POST", "/api/v1/tokens",
                  {"name": "scram", "scopes": ["read"], "databases": [scram_db]})
    yield created["id"], created["token"]
    try:
        api(node, "DELETE", f"/api/v1/tokens/{created['id']}")
    except urllib.error.HTTPError:
        pass  # the test revoked it


def test_psycopg_logs_in_by_scram_with_a_token_id_and_is_refused_a_wrong_token(
    node, scram_db, reader
):
    assert psycopg.pq.version() >= 160000, "require_auth needs libpq 16"
    token_id, secret = reader
    with psycopg.connect(conninfo(node, scram_db, token_id, secret), autocommit=True) as conn:
        rows = conn.execute("SELECT host, usage FROM cpu ORDER BY host").fetchall()
        assert rows == [("a", 0.5), ("b", 1.5)]

    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(conninfo(node, scram_db, token_id, secret[:-1] + "x"))
    assert "password authentication failed" in str(refused.value), refused.value

    # Another token's secret does not pass for this id either.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(conninfo(node, scram_db, token_id, TOKEN))

    # A token limited to this database may not open another by SCRAM.
    with pytest.raises(psycopg.OperationalError) as elsewhere:
        psycopg.connect(conninfo(node, f"{scram_db}_x", token_id, secret))
    assert "may not read" in str(elsewhere.value), elsewhere.value


def test_the_bootstrap_token_logs_in_by_scram_as_user_bootstrap(node, scram_db):
    with psycopg.connect(conninfo(node, scram_db, "bootstrap", TOKEN), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone()[0] == 2


def test_any_other_user_name_still_gets_the_cleartext_exchange(node, scram_db, reader):
    _, secret = reader
    # libpq refuses a cleartext request when only SCRAM is allowed...
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(conninfo(node, scram_db, "quiver", secret))
    assert "password" in str(refused.value), refused.value
    # ...and logs in with it otherwise, as clients did before SCRAM.
    with psycopg.connect(
        conninfo(node, scram_db, "quiver", secret, scram_only=False), autocommit=True
    ) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone()[0] == 2


def test_a_scram_session_stops_when_its_token_is_revoked(node, scram_db, reader):
    token_id, secret = reader
    with psycopg.connect(conninfo(node, scram_db, token_id, secret), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone()[0] == 2
        api(node, "DELETE", f"/api/v1/tokens/{token_id}")
        deadline = time.monotonic() + 30
        while True:
            try:
                conn.execute("SELECT count(*) FROM cpu").fetchone()
            except psycopg.Error as e:
                assert "revoked" in str(e), e
                break
            assert time.monotonic() < deadline, "the revoked token still reads"
            time.sleep(0.1)


def test_asyncpg_logs_in_by_scram(node, scram_db, reader):
    token_id, secret = reader

    async def run(password):
        conn = await asyncpg.connect(host=node.host, port=node.pg_port, database=scram_db,
                                     user=token_id, password=password, ssl=False, timeout=10)
        try:
            return await conn.fetchval("SELECT sum(usage) FROM cpu")
        finally:
            await conn.close()

    before = scram_logins(node)
    assert asyncio.run(run(secret)) == 2.0
    assert scram_logins(node) == before + 1
    with pytest.raises(asyncpg.InvalidPasswordError):
        asyncio.run(run("not-the-token"))


def test_psql_logs_in_by_scram(node, scram_db, reader):
    if shutil.which("psql") is None:
        pytest.fail("psql is not installed (scripts/compat.sh installs postgresql-client)")
    token_id, secret = reader

    def psql(password):
        env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="10")
        env.pop("PGSSLMODE", None)
        return subprocess.run(
            ["psql", "-X", "-At", "-h", node.host, "-p", str(node.pg_port), "-U", token_id,
             "-d", scram_db, "-c", "SELECT count(*) FROM cpu"],
            env=env, capture_output=True, text=True, timeout=60,
        )

    before = scram_logins(node)
    ok = psql(secret)
    assert ok.returncode == 0 and ok.stdout.strip() == "2", ok.stderr
    assert scram_logins(node) == before + 1
    wrong = psql("not-the-token")
    assert wrong.returncode != 0
    assert "password authentication failed" in wrong.stderr, wrong.stderr
