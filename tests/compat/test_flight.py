"""Real Arrow Flight SQL clients against Quiver's Flight SQL door (`--flight-addr`).

- ADBC's Flight SQL driver (`adbc-driver-flightsql` through `adbc-driver-manager`'s
  DB-API): a query, a prepared statement with a bound parameter and with several rows
  of parameters, `adbc_get_objects`
  and `adbc_get_table_schema` (GetCatalogs, GetDbSchemas, GetTables with schemas), a
  refused token. The database is named by the `database` gRPC header, set with the
  driver's `adbc.flight.sql.rpc.call_header.database` option.
- InfluxDB 3's Python client (`influxdb3-python`): writes line protocol over HTTP
  (`/api/v3/write_lp`) and queries through Flight with its JSON ticket, unchanged
  but for the query port (Quiver serves Flight on its own port).
"""

from __future__ import annotations

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pytest
from adbc_driver_flightsql import DatabaseOptions
from influxdb_client_3 import InfluxDBClient3

from conftest import TOKEN

T0_NS = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC

LINES = [
    f"cpu,host=a usage=0.25,count=1i {T0_NS}",
    f"cpu,host=a usage=0.75,count=2i {T0_NS + 1_000_000_000}",
    f"cpu,host=b usage=1.5,count=3i {T0_NS + 2_000_000_000}",
    f"mem,host=a used=10i {T0_NS}",
]


@pytest.fixture
def flight_db(node, db):
    node.write_lines(db, LINES)
    return db


def connect(node, db, token=TOKEN):
    return flight_sql.connect(
        f"grpc://{node.host}:{node.flight_port}",
        db_kwargs={
            DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}",
            "adbc.flight.sql.rpc.call_header.database": db,
        },
        # Quiver is read-only and has no transactions: every statement stands alone.
        autocommit=True,
    )


def test_adbc_query_equals_the_http_answer(node, flight_db):
    sql = "SELECT host, usage, count FROM cpu ORDER BY time"
    with connect(node, flight_db) as conn, conn.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    assert table.column_names == ["host", "usage", "count"]
    got = [list(row.values()) for row in table.to_pylist()]
    assert got == [row for row in node.sql(flight_db, sql)["data"]]
    assert got == [["a", 0.25, 1], ["a", 0.75, 2], ["b", 1.5, 3]]


def test_adbc_aggregates_with_time_bucket(node, flight_db):
    with connect(node, flight_db) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT host, count(*) AS n, avg(usage) AS mean FROM cpu "
            "GROUP BY host ORDER BY host"
        )
        rows = cur.fetchall()
    assert rows == [("a", 2, 0.5), ("b", 1, 1.5)]


def test_adbc_prepared_statement_binds_a_parameter(node, flight_db):
    with connect(node, flight_db) as conn, conn.cursor() as cur:
        cur.execute("SELECT host, usage FROM cpu WHERE usage > $1 ORDER BY time", parameters=(0.5,))
        assert cur.fetchall() == [("a", 0.75), ("b", 1.5)]
        # The same statement again with another value: prepared once, bound twice.
        cur.execute("SELECT host, usage FROM cpu WHERE usage > $1 ORDER BY time", parameters=(1.0,))
        assert cur.fetchall() == [("b", 1.5)]


def test_adbc_prepared_query_runs_once_per_bound_row(node, flight_db):
    """A query bound to several rows of parameters answers each row in turn, as ADBC's
    Flight SQL driver sends them (one DoPut of all rows, then one DoGet)."""
    sql = "SELECT host, count AS n FROM cpu WHERE host = $1 AND count >= $2 ORDER BY time"
    rows = pa.record_batch([pa.array(["b", "a", "zz"]), pa.array([0, 2, 0])], names=["h", "c"])
    with connect(node, flight_db) as conn, conn.cursor() as cur:
        cur.execute(sql, parameters=rows)
        assert cur.fetchall() == [("b", 3), ("a", 2)]
        # The same statement with one row again: only that row's answer.
        cur.execute(sql, parameters=("a", 0))
        assert cur.fetchall() == [("a", 1), ("a", 2)]


def test_adbc_lists_catalog_schemas_tables_and_columns(node, flight_db):
    with connect(node, flight_db) as conn:
        objects = conn.adbc_get_objects(depth="all", db_schema_filter=flight_db).read_all().to_pylist()
        catalogs = {c["catalog_name"]: c for c in objects}
        assert "quiver" in catalogs, objects
        schemas = {s["db_schema_name"]: s for s in catalogs["quiver"]["catalog_db_schemas"]}
        assert list(schemas) == [flight_db]
        tables = {t["table_name"]: t for t in schemas[flight_db]["db_schema_tables"]}
        assert set(tables) == {"cpu", "mem"}
        assert tables["cpu"]["table_type"] == "TABLE"
        columns = [c["column_name"] for c in tables["cpu"]["table_columns"]]
        assert {"time", "host", "usage", "count"} <= set(columns), columns

        schema = conn.adbc_get_table_schema("cpu", db_schema_filter=flight_db)
        assert schema.field("usage").type == pa.float64()
        assert schema.field("count").type == pa.int64()
        assert pa.types.is_timestamp(schema.field("time").type)
        assert pa.types.is_string(schema.field("host").type) or pa.types.is_dictionary(
            schema.field("host").type
        )

        info = conn.adbc_get_info()
        assert info.get("vendor_name") == "Quiver", info


def test_adbc_bad_sql_is_an_invalid_argument(node, flight_db):
    with connect(node, flight_db) as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as excinfo:
            cur.execute("SELECT nope FROM cpu")
    assert "INVALID_ARGUMENT" in str(excinfo.value) or "InvalidArgument" in str(excinfo.value), excinfo.value
    assert "nope" in str(excinfo.value)


def test_adbc_refused_token_is_unauthenticated(node, flight_db):
    with pytest.raises(adbc_driver_manager.Error) as excinfo:
        with connect(node, flight_db, token="not-a-token") as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
    message = str(excinfo.value)
    assert "UNAUTHENTICATED" in message.upper() or "Unauthenticated" in message, message
    assert "token" in message, message


def test_influxdb3_client_writes_line_protocol_and_queries_through_flight(node, db):
    client = InfluxDBClient3(
        host=node.url,
        token=TOKEN,
        database=db,
        query_port_overwrite=node.flight_port,
    )
    try:
        client.write(record="\n".join(LINES[:3]), write_precision="ns")
        table = client.query("SELECT host, usage FROM cpu ORDER BY time", language="sql")
        assert table.to_pylist() == [
            {"host": "a", "usage": 0.25},
            {"host": "a", "usage": 0.75},
            {"host": "b", "usage": 1.5},
        ]
        reader = client.query("SELECT count(*) AS n FROM cpu", mode="reader")
        assert reader.read_all().to_pylist() == [{"n": 3}]

        with pytest.raises(Exception) as excinfo:
            client.query("SELECT * FROM cpu", language="influxql")
        assert "influxql" in str(excinfo.value), excinfo.value
    finally:
        client.close()
