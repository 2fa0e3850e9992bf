"""SQLAlchemy 2 with psycopg 3, and pandas on top of it, against the Postgres door.

What Superset, dbt, Jupyter notebooks and `pandas.read_sql` do first: the dialect
reads the server's version, its default schema and its types from `pg_catalog` at
connect time; the inspector lists schemas, tables and columns from `pg_class`,
`pg_namespace` and `pg_attribute`; pandas runs an aggregation and names its columns
after the result's.
"""

from __future__ import annotations

import json
import urllib.request

import pandas as pd
import pytest
import sqlalchemy as sa

from conftest import TOKEN

T0_NS = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC

LINES = [
    f"cpu,host=a usage=0.25,count=1i {T0_NS}",
    f"cpu,host=a usage=0.75,count=2i {T0_NS + 1_000_000_000}",
    f"cpu,host=b usage=1.5,count=3i {T0_NS + 2_000_000_000}",
    f"mem,host=a used=10i {T0_NS}",
]


def engine_for(node, db: str, token: str = TOKEN) -> sa.Engine:
    url = sa.URL.create(
        "postgresql+psycopg",
        username="quiver",
        password=token,
        host=node.host,
        port=node.pg_port,
        database=db,
    )
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


@pytest.fixture
def sa_db(node, db):
    node.write_lines(db, LINES)
    node.write_lines(f"{db}_other", [f"disk,host=a used=1i {T0_NS}"])
    return db


def test_sqlalchemy_connects_and_its_inspector_lists_the_database(node, sa_db):
    engine = engine_for(node, sa_db)
    with engine.connect() as conn:
        # What the dialect learnt at connect time, from pg_catalog and settings.
        assert engine.dialect.server_version_info[:2] == (16, 6)
        assert engine.dialect.default_schema_name == sa_db
        assert conn.execute(sa.text("SELECT 1 + 1")).scalar_one() == 2

    inspector = sa.inspect(engine)
    assert sa_db in inspector.get_schema_names()
    # The connection's database only: another database's tables are not in it.
    assert inspector.get_table_names() == ["cpu", "mem"]
    assert inspector.get_table_names(schema=sa_db) == ["cpu", "mem"]
    assert inspector.has_table("cpu") and not inspector.has_table("disk")
    columns = {c["name"]: c for c in inspector.get_columns("cpu")}
    assert set(columns) == {"count", "host", "time", "usage"}, columns
    assert isinstance(columns["usage"]["type"], sa.Float), columns["usage"]
    assert isinstance(columns["count"]["type"], sa.BigInteger), columns["count"]
    assert isinstance(columns["host"]["type"], sa.Text), columns["host"]
    assert isinstance(columns["time"]["type"], sa.TIMESTAMP), columns["time"]
    assert columns["time"]["type"].timezone is True, columns["time"]
    assert inspector.get_foreign_keys("cpu") == []
    assert inspector.get_view_names() == []


def test_pandas_read_sql_runs_an_aggregation(node, sa_db):
    engine = engine_for(node, sa_db)
    frame = pd.read_sql(
        "SELECT host, count(*), avg(usage), max(time) FROM cpu GROUP BY host ORDER BY host",
        engine,
    )
    # Postgres's names for unaliased aggregates, as pandas shows them.
    assert list(frame.columns) == ["host", "count", "avg", "max"]
    assert frame["host"].tolist() == ["a", "b"]
    assert frame["count"].tolist() == [2, 1]
    assert frame["avg"].tolist() == [0.5, 1.5]
    assert str(frame["max"].iloc[1]).startswith("2023-11-14 22:13:22")
    # timestamptz: pandas gets UTC-aware times.
    assert str(frame["max"].dt.tz) == "UTC", frame.dtypes


def test_keys_and_indexes_reflect_as_none_and_read_sql_table_works(node, sa_db):
    """Quiver has no primary keys, indexes or unique constraints: the inspector says
    so (its queries expand `pg_index.indkey`, answered with no rows) instead of
    failing, so `pandas.read_sql_table`, which reflects them, reads a measurement."""
    engine = engine_for(node, sa_db)
    inspector = sa.inspect(engine)
    pk = inspector.get_pk_constraint("cpu")
    assert pk["constrained_columns"] == [] and pk["name"] is None, pk
    assert inspector.get_indexes("cpu") == []
    assert inspector.get_unique_constraints("cpu") == []

    frame = pd.read_sql_table("cpu", engine, schema=sa_db)
    assert sorted(frame.columns) == ["count", "host", "time", "usage"]
    assert sorted(frame["usage"].tolist()) == [0.25, 0.75, 1.5]


def scoped_token(node, databases: list[str]) -> str:
    """A read token limited to `databases`, made with the admin token."""
    request = urllib.request.Request(
        node.url + "/api/v1/tokens",
        data=json.dumps({"name": "analyst", "scopes": ["read"], "databases": databases}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())["token"]


def test_sqlalchemy_with_a_token_for_some_databases_sees_only_them(node, sa_db):
    """pg_database lists the databases the token reads, and nothing else; an admin
    token's list has the other database too."""
    token = scoped_token(node, [sa_db])
    query = sa.text("SELECT datname FROM pg_catalog.pg_database ORDER BY 1")
    with engine_for(node, sa_db, token).connect() as conn:
        scoped = conn.execute(query).scalars().all()
    with engine_for(node, sa_db).connect() as conn:
        everything = conn.execute(query).scalars().all()
    assert sa_db in scoped and f"{sa_db}_other" not in scoped, scoped
    assert sa_db in everything and f"{sa_db}_other" in everything, everything
    assert sa.inspect(engine_for(node, sa_db, token)).get_table_names() == ["cpu", "mem"]
