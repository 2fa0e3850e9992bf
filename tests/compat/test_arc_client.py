"""Arc's Python SDK (`arc-tsdb-client`, import `arc_client`) against Quiver.

Endpoints the SDK uses here: POST /api/v1/write/msgpack (gzip by default),
POST /api/v1/write/line-protocol, POST /api/v1/query, POST /api/v1/query/arrow,
GET /api/v1/measurements, GET /health, GET /ready; `Authorization: Bearer` and
`x-arc-database` on every request.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from arc_client import (
    ArcAuthenticationError,
    ArcClient,
    ArcIngestionError,
    ArcQueryError,
)

from conftest import TOKEN, assert_string_type, assert_timestamp_type
from timeutil import assert_utc_rfc3339, rfc3339_to_ns

T0_S = 1_700_000_000  # 2023-11-14T22:13:20Z
T0_US = T0_S * 10**6
T0_NS = T0_S * 10**9


@pytest.fixture
def arc(node, db):
    c = ArcClient(host=node.host, port=node.port, token=TOKEN, database=db, timeout=30)
    yield c
    c.close()


def test_health_and_ready(arc):
    assert arc.health().status == "ok"
    assert arc.ready() is True


@pytest.mark.parametrize("compress", [True, False], ids=["gzip", "plain"])
def test_write_columnar(node, db, arc, compress):
    arc.write.write_columnar(
        measurement="cpu",
        columns={
            "time": [T0_US, T0_US + 1, T0_US + 2],
            "host": ["a", "b", "c"],
            "usage": [12.5, 47.25, 0.0],
            "cores": [4, 8, 16],
            "up": [True, False, True],
        },
        compress=compress,
    )
    rows = node.rows(db, "SELECT time, host, usage, cores, up FROM cpu ORDER BY time")
    assert len(rows) == 3
    for r, (t, h, u, c, up) in zip(rows, [(0, "a", 12.5, 4, True), (1, "b", 47.25, 8, False),
                                          (2, "c", 0.0, 16, True)]):
        assert_utc_rfc3339(r["time"])
        assert rfc3339_to_ns(r["time"]) == (T0_US + t) * 1000
        assert (r["host"], r["usage"], r["cores"], r["up"]) == (h, u, c, up)
        assert isinstance(r["usage"], float) and type(r["cores"]) is int
    t = node.types(db, "cpu", ["time", "host", "usage", "cores", "up"])
    assert_timestamp_type(t["time"])
    assert_string_type(t["host"])
    assert (t["usage"], t["cores"], t["up"]) == ("Float64", "Int64", "Boolean")


@pytest.mark.parametrize("unit,times", [("s", [T0_S]), ("ms", [T0_S * 1000 + 7])])
def test_write_columnar_time_units(node, db, arc, unit, times):
    """The SDK scales s/ms to µs; Quiver infers µs from the magnitude."""
    arc.write.write_columnar("u", {"time": times, "v": [1.0]}, time_unit=unit)
    want = times[0] * (10**9 if unit == "s" else 10**6)
    assert [rfc3339_to_ns(r["time"]) for r in node.rows(db, "SELECT time FROM u")] == [want]


def test_write_columnar_other_database(node, db, arc):
    arc.write.write_columnar("cpu", {"time": [T0_US], "v": [1.0]}, database=db + "_x")
    assert node.rows(db + "_x", "SELECT v FROM cpu") == [{"v": 1.0}]


def test_write_records_row_format(node, db, arc):
    arc.write.write_records(
        [
            {"measurement": "disk", "timestamp": T0_US + 10, "tags": {"dev": "sda"},
             "fields": {"free": 1.5, "inodes": 100, "ro": False}},
            {"measurement": "disk", "timestamp": T0_US + 20, "tags": {"dev": "sdb"},
             "fields": {"free": 2.5, "inodes": 200, "ro": True}},
        ]
    )
    rows = node.rows(db, "SELECT dev, free, inodes, ro, time FROM disk ORDER BY dev")
    assert [(r["dev"], r["free"], r["inodes"], r["ro"], rfc3339_to_ns(r["time"])) for r in rows] == [
        ("sda", 1.5, 100, False, (T0_US + 10) * 1000),
        ("sdb", 2.5, 200, True, (T0_US + 20) * 1000),
    ]
    t = node.types(db, "disk", ["dev", "free", "inodes", "ro"])
    assert_string_type(t["dev"])
    assert (t["free"], t["inodes"], t["ro"]) == ("Float64", "Int64", "Boolean")


def test_buffered_writer(node, db, arc):
    with arc.write.buffered(batch_size=4, flush_interval=60) as buf:
        for i in range(10):
            buf.write({"measurement": "buf", "timestamp": T0_US + i, "tags": {"k": f"k{i % 2}"},
                       "fields": {"v": float(i)}})
    assert node.rows(db, "SELECT count(*) AS n, sum(v) AS s FROM buf") == [{"n": 10, "s": 45.0}]


def test_buffered_writer_sparse_fields_send_nulls(node, db, arc):
    """Records with different field sets: the SDK pads columns with msgpack nil."""
    with arc.write.buffered(batch_size=100, flush_interval=60) as buf:
        buf.write({"measurement": "sp", "timestamp": T0_US, "fields": {"a": 1.0}})
        buf.write({"measurement": "sp", "timestamp": T0_US + 1, "fields": {"b": 2}})
    rows = node.rows(db, "SELECT a, b FROM sp ORDER BY time")
    assert rows == [{"a": 1.0, "b": None}, {"a": None, "b": 2}]


def test_write_line_protocol_and_point(node, db, arc):
    arc.write.write_line_protocol(
        [f'lp,host=a v=1.5,n=2i,ok=t,s="x y" {T0_NS}', f'lp,host=b v=2.5,n=3i,ok=f,s="z" {T0_NS + 1}']
    )
    arc.write.write_point("lp", fields={"v": 3.5, "n": 4, "ok": True, "s": "w"}, tags={"host": "c"},
                          timestamp=T0_US + 5)
    rows = node.rows(db, "SELECT host, v, n, ok, s, time FROM lp ORDER BY host")
    assert [(r["host"], r["v"], r["n"], r["ok"], r["s"], rfc3339_to_ns(r["time"])) for r in rows] == [
        ("a", 1.5, 2, True, "x y", T0_NS),
        ("b", 2.5, 3, False, "z", T0_NS + 1),
        ("c", 3.5, 4, True, "w", (T0_US + 5) * 1000),
    ]
    t = node.types(db, "lp", ["v", "n", "ok", "s"])
    assert t == {"v": "Float64", "n": "Int64", "ok": "Boolean", "s": "Utf8"}


def test_query_json(db, arc):
    arc.write.write_columnar("q", {"time": [T0_US, T0_US + 1], "host": ["a", "b"], "v": [1.0, 2.0]})
    res = arc.query.query("SELECT host, v, time FROM q ORDER BY host")
    assert res.success is True
    assert res.columns == ["host", "v", "time"]
    assert res.data == [["a", 1.0, "2023-11-14T22:13:20Z"], ["b", 2.0, "2023-11-14T22:13:20.000001Z"]]
    assert res.row_count == 2
    assert res.execution_time_ms >= 0
    assert_utc_rfc3339(res.timestamp)
    # database= on the call wins over the client's default
    other = arc.query.query("SELECT count(*) AS n FROM q", database=db)
    assert other.data == [[2]]


def test_query_arrow(db, arc):
    arc.write.write_columnar(
        "qa",
        {"time": [T0_US, T0_US + 1], "host": ["a", "b"], "v": [1.5, 2.5], "n": [1, 2], "ok": [True, False]},
    )
    table = arc.query.query_arrow("SELECT time, host, v, n, ok FROM qa ORDER BY time")
    assert isinstance(table, pa.Table)
    assert table.num_rows == 2
    schema = table.schema
    assert pa.types.is_timestamp(schema.field("time").type)
    assert schema.field("time").type.unit == "ns"
    host_t = schema.field("host").type
    assert pa.types.is_string(host_t) or pa.types.is_large_string(host_t) or (
        pa.types.is_dictionary(host_t) and pa.types.is_string(host_t.value_type)
    )
    assert schema.field("v").type == pa.float64()
    assert schema.field("n").type == pa.int64()
    assert schema.field("ok").type == pa.bool_()
    assert table.column("time").cast(pa.int64()).to_pylist() == [T0_NS, T0_NS + 1000]
    assert [str(x) for x in table.column("host").to_pylist()] == ["a", "b"]
    assert table.column("v").to_pylist() == [1.5, 2.5]
    assert table.column("n").to_pylist() == [1, 2]
    assert table.column("ok").to_pylist() == [True, False]


def test_list_measurements(db, arc):
    """SDK reads `{"measurements": [...]}` from GET /api/v1/measurements."""
    arc.write.write_columnar("lm", {"time": [T0_US], "v": [1.0]})
    got = arc.query.list_measurements(database=db)
    assert [(m.database, m.measurement) for m in got] == [(db, "lm")]


def test_bad_sql_raises_query_error(arc):
    with pytest.raises(ArcQueryError) as e:
        arc.query.query("SELECT nope FROM missing_table")
    assert "400" in str(e.value)
    with pytest.raises(ArcQueryError):
        arc.query.query_arrow("SELECT nope FROM missing_table")


def test_bad_line_protocol_raises_ingestion_error(node, db, arc):
    with pytest.raises(ArcIngestionError) as e:
        arc.write.write_line_protocol([f"bl v=1.0 {T0_NS}", "bl v=", f"bl v=3.0 {T0_NS + 1}"])
    msg = str(e.value)
    assert "400" in msg and "1 of 3 lines rejected" in msg
    assert node.rows(db, "SELECT count(*) AS n FROM bl") == [{"n": 2}]


def test_bad_msgpack_rejects_whole_request(node, db, arc):
    """A column whose values mix types: the whole request is a 400, nothing written."""
    arc.write.write_columnar("bm", {"time": [T0_US], "v": [1.0]})
    with pytest.raises(ArcIngestionError) as e:
        arc.write.write_columnar("bm", {"time": [T0_US + 1, T0_US + 2], "v": [2.0, [1, 2]]})
    assert "400" in str(e.value)
    assert node.rows(db, "SELECT count(*) AS n FROM bm") == [{"n": 1}]


def test_bad_token(node, db):
    with ArcClient(host=node.host, port=node.port, token="wrong", database=db) as c:
        with pytest.raises(ArcIngestionError) as e:
            c.write.write_columnar("x", {"time": [T0_US], "v": [1.0]})
        assert isinstance(e.value.__cause__, ArcAuthenticationError)
