"""Real Postgres clients against Quiver's Postgres wire protocol door (`--pg-addr`).

- Debian's `psql` (`postgresql-client`): `\\l`, `\\dt`, `\\d cpu`, an aggregation, a
  refused password; its default `sslmode=prefer` sends an SSLRequest first, which a
  node without a certificate (this one) answers `N` (over TLS: test_tls_doors.py).
- Python `psycopg` 3: server-side parameters (`Parse`/`Bind` with `$1`), text and
  binary results, named prepared statements, `BEGIN`/`COMMIT` as psycopg sends them,
  `SHOW`, errors with their SQLSTATE, a cancel request stopping a running query.
- `asyncpg`: the extended protocol with `Describe` before `Bind` (it encodes its
  parameters from the types the server describes) and binary results throughout.
- several statements in one simple query, as Npgsql sends at connect.

`scripts/compat.sh` installs `postgresql-client` when `psql` is missing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import subprocess
import threading
import time

import asyncpg
import psycopg
import pytest

from conftest import TOKEN

T0_NS = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC
# The door sends `time` as `timestamptz` (UTC instants), so clients hand out
# zone-aware datetimes.
T0 = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)

LINES = [
    f'cpu,host=a usage=0.25,count=1i,ok=true,note="first",big=18446744073709551615u {T0_NS}',
    f'cpu,host=a usage=0.75,count=2i,ok=false,note="second",big=1u {T0_NS + 1_000_000_000}',
    f'cpu,host=b usage=1.5,count=3i,ok=true,note="third",big=20000u {T0_NS + 2_000_123_000}',
    f"mem,host=a used=10i {T0_NS}",
]


@pytest.fixture
def pg_db(node, db):
    node.write_lines(db, LINES)
    return db


def psql(node, db, *args, password=TOKEN, check=True):
    env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="10")
    env.pop("PGSSLMODE", None)
    proc = subprocess.run(
        ["psql", "-X", "-h", node.host, "-p", str(node.pg_port), "-U", "quiver", "-d", db, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert proc.returncode == 0, f"psql {args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def need_psql():
    if shutil.which("psql") is None:
        pytest.fail("psql is not installed (scripts/compat.sh installs postgresql-client)")


def test_psql_lists_and_describes_tables_and_aggregates(node, pg_db, need_psql):
    listing = psql(node, pg_db, "-c", r"\dt").stdout
    assert "cpu" in listing and "mem" in listing, listing
    assert "table" in listing

    only_cpu = psql(node, pg_db, "-c", r"\dt c*").stdout
    assert "cpu" in only_cpu and "mem" not in only_cpu, only_cpu

    described = psql(node, pg_db, "-c", r"\d cpu").stdout
    assert f'Table "{pg_db}.cpu"' in described, described
    for column, pg_type in [
        ("time", "timestamp with time zone"),
        ("host", "text"),
        ("usage", "double precision"),
        ("count", "bigint"),
        ("ok", "boolean"),
        ("note", "text"),
        ("big", "numeric"),
    ]:
        line = next((l for l in described.splitlines() if l.strip().startswith(column + " ")), None)
        assert line is not None and pg_type in line, f"{column}: {described}"

    missing = psql(node, pg_db, "-c", r"\d nosuch", check=False)
    assert "Did not find any relation named" in missing.stderr, missing

    databases = psql(node, pg_db, "-c", r"\l").stdout
    assert pg_db in databases, databases

    out = psql(
        node,
        pg_db,
        "-A",
        "-t",
        "-F",
        "|",
        "-c",
        "SELECT host, count(*), sum(usage), max(time) FROM cpu GROUP BY host ORDER BY host",
    ).stdout
    assert out.strip().splitlines() == [
        "a|2|1|2023-11-14 22:13:21+00",
        "b|1|1.5|2023-11-14 22:13:22.000123+00",
    ], out


def test_psql_refuses_a_wrong_password(node, pg_db, need_psql):
    proc = psql(node, pg_db, "-c", "SELECT 1", password="not-a-token", check=False)
    assert proc.returncode != 0
    assert "password authentication failed" in proc.stderr, proc.stderr


def conninfo(node, db, password=TOKEN):
    return f"host={node.host} port={node.pg_port} dbname={db} user=quiver password={password}"


def test_psycopg_server_side_parameters_text_and_binary(node, pg_db):
    query = "SELECT time, host, usage, count, ok, note, big FROM cpu WHERE host = %s AND usage > %s ORDER BY time"
    expected = [
        (T0 + dt.timedelta(seconds=1), "a", 0.75, 2, False, "second", 1),
    ]
    # Not autocommit: psycopg wraps the queries in BEGIN ... COMMIT.
    with psycopg.connect(conninfo(node, pg_db)) as conn:
        for binary in (False, True):
            with conn.cursor(binary=binary) as cur:
                cur.execute(query, ("a", 0.5))
                rows = cur.fetchall()
                assert [r[:6] for r in rows] == [e[:6] for e in expected], (binary, rows)
                # timestamptz: an aware datetime in UTC, text and binary alike.
                assert rows[0][0].utcoffset() == dt.timedelta(0), (binary, rows)
                assert int(rows[0][6]) == 1
                assert [d.name for d in cur.description] == [
                    "time", "host", "usage", "count", "ok", "note", "big",
                ]
        # A named prepared statement, executed twice with other values.
        with conn.cursor() as cur:
            for host, n in [("a", 2), ("b", 1)]:
                cur.execute("SELECT count(*) FROM cpu WHERE host = %s", (host,), prepare=True)
                assert cur.fetchone()[0] == n
            cur.execute(
                "SELECT big, time FROM cpu WHERE time >= %s ORDER BY time", (T0 + dt.timedelta(seconds=2),)
            )
            big, time = cur.fetchone()
            assert int(big) == 20000
            assert time == T0 + dt.timedelta(seconds=2, microseconds=123)
            cur.execute("SELECT big FROM cpu ORDER BY time LIMIT 1", binary=True)
            assert int(cur.fetchone()[0]) == 18446744073709551615
        conn.commit()


def test_psycopg_session_statements_and_errors(node, pg_db):
    with psycopg.connect(conninfo(node, pg_db), autocommit=True) as conn:
        assert conn.info.server_version >= 120000
        conn.execute("SET application_name = 'compat'")
        assert conn.execute("SHOW server_version_num").fetchone()[0] == str(conn.info.server_version)
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
            (pg_db,),
        ).fetchall()
        assert rows == [("cpu",), ("mem",)]
        with pytest.raises(psycopg.errors.SyntaxErrorOrAccessRuleViolation) as missing:
            conn.execute("SELECT * FROM nosuch")
        assert "nosuch" in str(missing.value)
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("DROP TABLE cpu")
        # The connection is still usable after errors.
        assert conn.execute("SELECT count(*) FROM mem").fetchone()[0] == 1

    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(conninfo(node, pg_db, password="wrong"))
    assert "password authentication failed" in str(refused.value)


def test_a_revoked_token_ends_its_open_sessions(node, pg_db):
    """Regression (issue 36, item 9): a token revoked while a Postgres session was open
    kept that session reading. Its next statement now fails (FATAL 28000), as a revoked
    role ends a Postgres session's access."""
    import json
    import urllib.request

    def api(method, path, body=None):
        request = urllib.request.Request(
            node.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            raw = r.read()
            return json.loads(raw) if raw else None

    created = api("POST", "/api/v1/tokens", {"name": "analyst", "scopes": ["read"]})
    with psycopg.connect(conninfo(node, pg_db, password=created["token"]), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM mem").fetchone()[0] == 1
        api("DELETE", f"/api/v1/tokens/{created['id']}")
        deadline = time.monotonic() + 30
        while True:
            try:
                conn.execute("SELECT count(*) FROM mem").fetchone()
            except psycopg.Error as e:
                assert "revoked" in str(e), e
                break
            assert time.monotonic() < deadline, "the revoked token still reads"
            time.sleep(0.1)


def test_grafana_version_and_builder_introspection(node, pg_db):
    """What Grafana's Postgres data source sends before a dashboard query: the version
    check of its config editor, and its query builder's table and column lists."""
    with psycopg.connect(conninfo(node, pg_db), autocommit=True) as conn:
        version = conn.execute(
            "SELECT current_setting('server_version_num')::int/100 AS version"
        ).fetchone()[0]
        assert version == 1600
        tables = conn.execute(
            "SELECT quote_ident(table_name) AS \"table\" FROM information_schema.tables "
            "WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog', "
            "'_timescaledb_cache', '_timescaledb_catalog', '_timescaledb_internal') "
            "AND table_type = 'BASE TABLE' AND table_schema = %s ORDER BY 1",
            (pg_db,),
        ).fetchall()
        assert tables == [("cpu",), ("mem",)]
        columns = dict(
            conn.execute(
                "SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" "
                "FROM information_schema.columns WHERE quote_ident(table_schema) = %s "
                "AND quote_ident(table_name) = 'cpu'",
                (pg_db,),
            ).fetchall()
        )
        assert "time" in columns and "host" in columns, columns
        with pytest.raises(psycopg.errors.SyntaxErrorOrAccessRuleViolation) as unknown:
            conn.execute("SELECT current_setting('shared_buffers')")
        assert "unrecognized configuration parameter" in str(unknown.value)


# Grafana's Postgres data source, `postgresMetaQuery.ts` (Grafana 10 to 12): the
# search_path constraint its builder adds to table and column lookups, verbatim.
GRAFANA_SCHEMA_CONSTRAINT = """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""

GRAFANA_SHOW_TABLES = f"""SELECT
    CASE WHEN {GRAFANA_SCHEMA_CONSTRAINT}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {GRAFANA_SCHEMA_CONSTRAINT} THEN 0 ELSE 1 END, 1"""


def grafana_get_schema(table: str) -> str:
    part = "'" + table.replace("'", "''") + "'"
    return f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident({part}),1) = 2
        THEN quote_ident(table_schema) = (parse_ident({part}))[1]
          AND quote_ident(table_name) = (parse_ident({part}))[2]
        ELSE quote_ident(table_name) = {part}
          AND {GRAFANA_SCHEMA_CONSTRAINT}
      END"""


def test_grafana_builder_queries_as_grafana_sends_them(node, pg_db):
    """The builder's own SQL, unchanged: schemas, tables (the connection's database
    first and unqualified, others qualified), a table's columns by plain and qualified
    name, and the TimescaleDB check (no extensions)."""
    other = f"{pg_db}_other"
    node.write_lines(other, [f"disk,host=a used=1i {T0_NS}"])
    with psycopg.connect(conninfo(node, pg_db), autocommit=True) as conn:
        schemas = [r[0] for r in conn.execute(
            """SELECT schema_name AS "name"
    FROM information_schema.schemata
    WHERE schema_name NOT IN ('information_schema',
                              'pg_catalog',
                              'pg_toast',
                              '_timescaledb_cache',
                              '_timescaledb_catalog',
                              '_timescaledb_internal',
                              '_timescaledb_config',
                              'timescaledb_information',
                              'timescaledb_experimental')
    ORDER BY schema_name"""
        ).fetchall()]
        assert pg_db in schemas and other in schemas, schemas

        tables = [r[0] for r in conn.execute(GRAFANA_SHOW_TABLES).fetchall()]
        assert tables[:2] == ["cpu", "mem"], tables
        assert f"{other}.disk" in tables, tables

        for name in ("cpu", f"{pg_db}.cpu"):
            columns = dict(conn.execute(grafana_get_schema(name)).fetchall())
            assert {"time", "host", "usage", "count"} <= set(columns), (name, columns)
        # Another database's table by its plain name is not on the search path.
        assert conn.execute(grafana_get_schema("disk")).fetchall() == []

        timescale = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"
        )
        assert [d.name for d in timescale.description] == ["extversion"]
        assert timescale.fetchall() == []

        version = conn.execute("SELECT version()").fetchone()[0]
        assert version.startswith("PostgreSQL 16.6 (Quiver "), version

        # The search path is the connection's database, however it is read.
        assert conn.execute("SHOW search_path").fetchone()[0] == pg_db
        assert conn.execute("SELECT current_setting('search_path')").fetchone()[0] == pg_db


def test_psycopg_cancel_stops_a_query_while_it_runs(node, pg_db):
    slow = "SELECT count(*) FROM generate_series(1, 30000000000) a WHERE a.value % 7 = 3"
    with psycopg.connect(conninfo(node, pg_db), autocommit=True) as conn:
        done = threading.Event()

        def cancel_until_done():
            # Again every half second: a cancel that arrives before the query started
            # cancels nothing, as in Postgres.
            while not done.wait(0.5):
                conn.cancel_safe()

        canceller = threading.Thread(target=cancel_until_done)
        started = time.monotonic()
        canceller.start()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled):
                conn.execute(slow)
        finally:
            done.set()
            canceller.join()
        # Well before query.timeout_ms (30 s), and the connection goes on.
        assert time.monotonic() - started < 15
        assert conn.execute("SELECT 1").fetchone()[0] == 1


def test_asyncpg_binary_protocol_with_described_parameters(node, pg_db):
    async def run():
        conn = await asyncpg.connect(
            host=node.host, port=node.pg_port, user="quiver", password=TOKEN, database=pg_db, ssl=False
        )
        try:
            rows = await conn.fetch(
                "SELECT time, host, usage, count, ok, note FROM cpu WHERE time >= $1 AND usage < $2 ORDER BY time",
                T0,
                1.0,
            )
            assert [tuple(r) for r in rows] == [
                (T0, "a", 0.25, 1, True, "first"),
                (T0 + dt.timedelta(seconds=1), "a", 0.75, 2, False, "second"),
            ]
            stmt = await conn.prepare("SELECT count(*) AS n, avg(usage) AS mean FROM cpu WHERE host = $1")
            assert [p.name for p in stmt.get_parameters()] == ["text"]
            a = await stmt.fetchrow("a")
            b = await stmt.fetchrow("b")
            assert (a["n"], a["mean"]) == (2, 0.5)
            assert (b["n"], b["mean"]) == (1, 1.5)
            big = await conn.fetchval("SELECT big FROM cpu WHERE host = $1", "b")
            assert int(big) == 20000
            with pytest.raises(asyncpg.PostgresError):
                await conn.fetch("SELECT * FROM nosuch")
            assert await conn.fetchval("SELECT 1 + 1") == 2
        finally:
            await conn.close()

    asyncio.run(run())


def test_grafana_macro_sql_replayed(node, pg_db):
    """Grafana's Postgres data source expands its macros into SQL before sending it
    (`macros.go`): `$__timeFilter(time)`, `$__timeGroupAlias(time,'1s')`, `$__time`,
    `$__timeEpoch`, `$__unixEpochFilter`. The expanded forms, replayed as Grafana
    sends them, over the extended protocol as its Go driver does."""
    time_filter = "time BETWEEN '2023-11-14T22:13:20Z' AND '2023-11-14T22:13:23Z'"
    time_group = 'floor(extract(epoch from time)/1)*1 AS "time"'
    with psycopg.connect(conninfo(node, pg_db), autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT {time_group}, avg(usage) AS usage FROM cpu "
            f"WHERE {time_filter} GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert rows == [(1700000000.0, 0.25), (1700000001.0, 0.75), (1700000002.0, 1.5)], rows

        series = conn.execute(
            'SELECT time AS "time", host AS metric, usage FROM cpu '
            f"WHERE {time_filter} AND host = 'a' ORDER BY 1"
        ).fetchall()
        assert series == [(T0, "a", 0.25), (T0 + dt.timedelta(seconds=1), "a", 0.75)], series

        epochs = conn.execute(
            'SELECT extract(epoch from time) as "time", count FROM cpu '
            f"WHERE {time_filter} ORDER BY 1"
        ).fetchall()
        assert [int(r[0]) for r in epochs] == [1700000000, 1700000001, 1700000002], epochs

        # $__unixEpochFilter over an integer epoch column, and $__timeFrom() as a value.
        unix = conn.execute(
            "SELECT count(*) FROM cpu WHERE count >= 1 AND count <= 2 "
            "AND time >= '2023-11-14T22:13:20Z'"
        ).fetchone()
        assert unix == (2,), unix



def test_several_statements_in_one_simple_query(node, pg_db):
    """A simple query of several statements (Npgsql's connect-time batch, a pasted
    script) answers each in order; the first that fails answers its error, the rest do
    not run, and the connection stays usable."""
    with psycopg.connect(conninfo(node, pg_db), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(  # no parameters: the simple query protocol
            "SELECT count(*) FROM cpu; SELECT host FROM cpu WHERE note = 'a;b' OR host = 'b';"
            "\n-- a comment; not a statement\nSHOW standard_conforming_strings;"
        )
        results = [cur.fetchall()]
        while cur.nextset():
            results.append(cur.fetchall())
        assert results == [[(3,)], [("b",)], [("on",)]], results
        with pytest.raises(psycopg.Error) as excinfo:
            cur.execute("SELECT 1; SELECT nope FROM cpu; SELECT 2")
        assert "nope" in str(excinfo.value), excinfo.value
        assert conn.execute("SELECT count(*) FROM mem").fetchone() == (1,)
