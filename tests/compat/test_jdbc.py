"""pgjdbc (Debian's `libpostgresql-jdbc-java`, run with the JDK) against the Postgres
door: `DatabaseMetaData` as database browsers and BI tools call it (DBeaver,
DataGrip, Metabase, Tableau), then an aggregation. The program is
`tests/compat/jdbc/MetaData.java`, compiled here; `scripts/compat.sh` installs the
JDK and the driver when they are missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from conftest import TOKEN

JAR = Path(os.environ.get("PGJDBC_JAR", "/usr/share/java/postgresql.jar"))
SOURCE = Path(__file__).parent / "jdbc" / "MetaData.java"
T0_NS = 1_700_000_000_000_000_000

LINES = [
    f"cpu,host=a usage=0.25,count=1i {T0_NS}",
    f"cpu,host=a usage=0.75,count=2i {T0_NS + 1_000_000_000}",
    f"cpu,host=b usage=1.5,count=3i {T0_NS + 2_000_000_000}",
    f"mem,host=a used=10i {T0_NS}",
]


@pytest.fixture(scope="module")
def metadata_class(tmp_path_factory) -> Path:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (scripts/compat.sh installs a JDK)")
    if not JAR.exists():
        pytest.fail(f"{JAR} is missing (scripts/compat.sh installs libpostgresql-jdbc-java)")
    out = tmp_path_factory.mktemp("jdbc")
    subprocess.run(
        ["javac", "-cp", str(JAR), "-d", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def run_java(node, classes: Path, db: str, table: str, user: str, password: str):
    url = f"jdbc:postgresql://{node.host}:{node.pg_port}/{db}?sslmode=disable"
    return subprocess.run(
        # A JVM zone other than UTC: a `timestamp` would then be read as Paris wall
        # time, a `timestamptz` stays the instant it is.
        ["java", "-Duser.timezone=Europe/Paris", "-cp", f"{JAR}:{classes}", "MetaData",
         url, user, password, table],
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_metadata(
    node, classes: Path, db: str, table: str, user: str = "quiver", password: str = TOKEN
) -> dict[str, list[list[str]]]:
    proc = run_java(node, classes, db, table, user, password)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{node.log_tail()}"
    out: dict[str, list[list[str]]] = {}
    for line in proc.stdout.splitlines():
        kind, *values = line.split("\t")
        out.setdefault(kind, []).append(values)
    return out


def test_pgjdbc_database_metadata_and_an_aggregation(node, db, metadata_class):
    node.write_lines(db, LINES)
    node.write_lines(f"{db}_other", [f"disk,host=a used=1i {T0_NS}"])
    out = run_metadata(node, metadata_class, db, "cpu")

    assert out["product"] == [["PostgreSQL", "16.6"]]
    assert [db] in out["catalog"], out["catalog"]
    schemas = [s[0] for s in out["schema"]]
    assert db in schemas and "pg_catalog" in schemas, schemas
    assert f"{db}_other" not in schemas, schemas
    assert out["table"] == [[db, "cpu", "TABLE"], [db, "mem", "TABLE"]], out["table"]

    columns = {c[1]: c for c in out["column"]}
    assert set(columns) == {"time", "host", "usage", "count"}, out["column"]
    # java.sql.Types: DOUBLE 8, BIGINT -5, VARCHAR 12, TIMESTAMP 93.
    assert columns["usage"][2:4] == ["float8", "8"], columns
    assert columns["count"][2:4] == ["int8", "-5"], columns
    assert columns["host"][2:4] == ["text", "12"], columns
    assert columns["time"][2] == "timestamptz", columns
    assert columns["time"][3] in ("93", "2014"), columns
    assert sorted(int(c[4]) for c in out["column"]) == [1, 2, 3, 4]

    # getPrimaryKeys and getIndexInfo: no rows (Quiver has neither), no error.
    assert out["keys"] == [["0", "0"]], out.get("keys")

    types = {t[0]: int(t[1]) for t in out["type"]}
    assert types.get("int8") == -5 and types.get("float8") == 8, out["type"][:20]
    assert types.get("text") == 12 and types.get("bool") in (-7, 16), out["type"][:20]

    assert out["result_columns"] == [["host", "count", "avg"]]
    assert out["row"] == [["a", "2", "0.5"], ["b", "1", "1.5"]]
    # getTimestamp and getObject(OffsetDateTime) give the instant written (T0_NS).
    assert out["time"] == [["2023-11-14T22:13:20Z", "2023-11-14T22:13:20Z"]], out["time"]


def scram_logins(node) -> float:
    status, _, body = node.request("GET", "/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith("quiver_pg_scram_logins_total "):
            return float(line.split()[-1])
    return 0.0


def test_pgjdbc_logs_in_by_scram_with_a_token_id(node, db, metadata_class):
    """pgjdbc answers the door's SCRAM-SHA-256 request (user = the token's id) and runs
    its metadata calls; a wrong token is refused with Postgres's message."""
    node.write_lines(db, LINES)
    request = urllib.request.Request(
        node.url + "/api/v1/tokens",
        data=json.dumps({"name": "jdbc", "scopes": ["read"], "databases": [db]}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        created = json.loads(r.read())

    before = scram_logins(node)
    out = run_metadata(node, metadata_class, db, "cpu", created["id"], created["token"])
    assert scram_logins(node) == before + 1
    assert out["row"] == [["a", "2", "0.5"], ["b", "1", "1.5"]]

    wrong = run_java(node, metadata_class, db, "cpu", created["id"], "not-the-token")
    assert wrong.returncode != 0
    assert "password authentication failed" in wrong.stderr, wrong.stderr
