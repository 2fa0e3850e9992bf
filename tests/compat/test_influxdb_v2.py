"""The InfluxDB 2.x Python client (`influxdb-client`) against `POST /api/v2/write`."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.rest import ApiException

from conftest import TOKEN, assert_string_type, assert_timestamp_type
from timeutil import assert_utc_rfc3339, rfc3339_to_ns

T0_S = 1_700_000_000  # 2023-11-14T22:13:20Z
T0_NS = T0_S * 10**9


@pytest.fixture
def client(node):
    c = InfluxDBClient(url=node.url, token=TOKEN, org="any", timeout=30_000)
    yield c
    c.close()


@pytest.fixture
def write(client):
    api = client.write_api(write_options=SYNCHRONOUS)
    yield api
    api.close()


def test_points_values_and_types(node, db, write):
    pts = [
        Point("cpu")
        .tag("host", f"h{i}")
        .tag("region", "eu west")
        .field("usage", 0.25 + i)
        .field("count", 100 + i)
        .field("ok", i == 1)
        .field("note", f'say "hi" {i}')
        .time(T0_NS + i, WritePrecision.NS)
        for i in range(3)
    ]
    write.write(bucket=db, record=pts, write_precision=WritePrecision.NS)

    rows = node.rows(db, "SELECT time, host, region, usage, count, ok, note FROM cpu ORDER BY time")
    assert len(rows) == 3
    for i, r in enumerate(rows):
        assert_utc_rfc3339(r["time"])
        assert rfc3339_to_ns(r["time"]) == T0_NS + i
        assert r["host"] == f"h{i}"
        assert r["region"] == "eu west"
        assert r["usage"] == 0.25 + i and isinstance(r["usage"], float)
        assert r["count"] == 100 + i and type(r["count"]) is int
        assert r["ok"] is (i == 1)
        assert r["note"] == f'say "hi" {i}'

    t = node.types(db, "cpu", ["time", "host", "region", "usage", "count", "ok", "note"])
    assert_timestamp_type(t["time"])
    assert_string_type(t["host"])
    assert_string_type(t["region"])
    assert t["usage"] == "Float64"
    assert t["count"] == "Int64"
    assert t["ok"] == "Boolean"
    assert t["note"] == "Utf8"


@pytest.mark.parametrize(
    "precision,ts,expect_ns",
    [
        (WritePrecision.NS, T0_NS + 123_456_789, T0_NS + 123_456_789),
        (WritePrecision.US, T0_S * 10**6 + 123_456, T0_NS + 123_456_000),
        (WritePrecision.MS, T0_S * 10**3 + 123, T0_NS + 123_000_000),
        (WritePrecision.S, T0_S, T0_NS),
    ],
)
def test_write_precision(node, db, write, precision, ts, expect_ns):
    p = Point("cpu").tag("host", "a").field("usage", 1.5).time(ts, precision)
    write.write(bucket=db, record=p, write_precision=precision)
    rows = node.rows(db, "SELECT time, usage FROM cpu")
    assert len(rows) == 1
    assert rfc3339_to_ns(rows[0]["time"]) == expect_ns
    assert rows[0]["usage"] == 1.5


def test_point_datetime_time(node, db, write):
    when = dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.timezone.utc)
    write.write(bucket=db, record=Point("cpu").field("usage", 2.0).time(when, WritePrecision.MS),
                write_precision=WritePrecision.MS)
    assert [rfc3339_to_ns(r["time"]) for r in node.rows(db, "SELECT time FROM cpu")] == [
        T0_NS + 123_000_000
    ]


def test_line_strings(node, db, write):
    lines = [
        f"net,iface=eth0 rx=12i,tx=34u,up=T,err=0.5,label=\"a b\" {T0_S}",
        f"net,iface=eth1 rx=56i,tx=78u,up=false,err=1.5,label=\"c,d\" {T0_S + 1}",
    ]
    write.write(bucket=db, record=lines, write_precision=WritePrecision.S)
    rows = node.rows(db, "SELECT iface, rx, tx, up, err, label, time FROM net ORDER BY iface")
    assert rows == [
        {"iface": "eth0", "rx": 12, "tx": 34, "up": True, "err": 0.5, "label": "a b",
         "time": "2023-11-14T22:13:20Z"},
        {"iface": "eth1", "rx": 56, "tx": 78, "up": False, "err": 1.5, "label": "c,d",
         "time": "2023-11-14T22:13:21Z"},
    ]
    t = node.types(db, "net", ["rx", "tx", "up", "err", "label"])
    assert t == {"rx": "Int64", "tx": "UInt64", "up": "Boolean", "err": "Float64", "label": "Utf8"}


def test_single_line_string_and_int64_extremes(node, db, write):
    big = 2**63 - 1
    write.write(bucket=db, record=f"lim v={big}i,w={-(2**63)}i,u=18446744073709551615u {T0_NS}")
    rows = node.rows(db, "SELECT v, w, u FROM lim")
    assert rows == [{"v": big, "w": -(2**63), "u": 2**64 - 1}]


def test_dicts(node, db, write):
    recs = [
        {
            "measurement": "mem",
            "tags": {"host": "a"},
            "fields": {"used": 1.25, "pages": 7, "swap": False, "state": "ok"},
            "time": T0_S * 1000 + 5,
        },
        {
            "measurement": "mem",
            "tags": {"host": "b"},
            "fields": {"used": 2.5, "pages": 8, "swap": True, "state": "warn"},
            "time": T0_S * 1000 + 6,
        },
    ]
    write.write(bucket=db, record=recs, write_precision=WritePrecision.MS)
    rows = node.rows(db, "SELECT host, used, pages, swap, state, time FROM mem ORDER BY host")
    assert [(r["host"], r["used"], r["pages"], r["swap"], r["state"], rfc3339_to_ns(r["time"]))
            for r in rows] == [
        ("a", 1.25, 7, False, "ok", T0_NS + 5_000_000),
        ("b", 2.5, 8, True, "warn", T0_NS + 6_000_000),
    ]
    t = node.types(db, "mem", ["used", "pages", "swap", "state", "host"])
    assert (t["used"], t["pages"], t["swap"], t["state"]) == ("Float64", "Int64", "Boolean", "Utf8")
    assert_string_type(t["host"])


def test_bucket_selects_database(node, db, write):
    write.write(bucket=db + "_a", record=f"b v=1i {T0_NS}")
    write.write(bucket=db + "_b", record=f"b v=2i {T0_NS}")
    assert node.rows(db + "_a", "SELECT v FROM b") == [{"v": 1}]
    assert node.rows(db + "_b", "SELECT v FROM b") == [{"v": 2}]


def test_gzip(node, db):
    with InfluxDBClient(url=node.url, token=TOKEN, org="any", enable_gzip=True) as c:
        with c.write_api(write_options=SYNCHRONOUS) as w:
            w.write(bucket=db, record=[f"gz v={i}i {T0_NS + i}" for i in range(10)])
    assert node.rows(db, "SELECT count(*) AS n, sum(v) AS s FROM gz") == [{"n": 10, "s": 45}]


def test_bad_token_is_401(node, db):
    with InfluxDBClient(url=node.url, token="wrong", org="any") as c:
        with pytest.raises(ApiException) as e:
            c.write_api(write_options=SYNCHRONOUS).write(bucket=db, record=f"x v=1 {T0_NS}")
    assert e.value.status == 401


def test_bad_lines_are_400_with_rejected_list(node, db, write):
    lines = [
        f"cpu,host=a usage=1.0 {T0_NS}",
        "cpu,host=b usage= oops",
        f"cpu,host=c usage=3.0 {T0_NS + 2}",
        "just-a-measurement",
    ]
    with pytest.raises(ApiException) as e:
        write.write(bucket=db, record=lines)
    assert e.value.status == 400
    body = json.loads(e.value.body)
    assert body["success"] is False
    assert "2 of 4 lines rejected" in body["error"]
    assert [r["line"] for r in body["rejected"]] == [2, 4]
    assert all(r["error"] for r in body["rejected"])
    assert body["rejected"][1]["text"] == "just-a-measurement"
    # accept_partial is the default: the valid lines were committed.
    assert [r["host"] for r in node.rows(db, "SELECT host FROM cpu ORDER BY host")] == ["a", "c"]
