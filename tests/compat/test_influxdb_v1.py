"""The InfluxDB 1.x Python client (`influxdb`) against Quiver's `POST /write`."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import requests
from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError

from conftest import TOKEN, assert_string_type, assert_timestamp_type
from timeutil import assert_utc_rfc3339, rfc3339_to_ns

T0_S = 1_700_000_000  # 2023-11-14T22:13:20Z


def token_client(node, database, **kw) -> InfluxDBClient:
    """A 1.x client that authenticates with `Authorization: Token <token>`.

    The client's own username/password mode sends HTTP Basic auth (see
    test_username_password_basic_auth); the other tests use a header the client
    passes through unchanged so that they exercise everything else.
    """
    return InfluxDBClient(
        node.host,
        node.port,
        database=database,
        headers={"Authorization": f"Token {TOKEN}"},
        retries=1,
        **kw,
    )


def point(i: int, time, host="a"):
    return {
        "measurement": "cpu",
        "tags": {"host": host, "region": "eu west"},
        "fields": {"usage": 0.5 + i, "count": 10 + i, "ok": i % 2 == 0, "note": f'n "{i}"'},
        "time": time,
    }


def test_username_password_basic_auth(node, db):
    """The documented constructor: username + password (the token).

    influxdb-python 5.x sends these as HTTP Basic auth
    (`Authorization: Basic base64("u:compat-token")`), never as `?p=`; InfluxDB 1.x
    servers accept that, and API.md promises 1.x clients work unchanged.
    """
    c = InfluxDBClient(node.host, node.port, username="u", password=TOKEN, database=db, retries=1)
    assert c.write_points([point(0, T0_S)], time_precision="s") is True
    rows = node.rows(db, "SELECT host, usage FROM cpu")
    assert rows == [{"host": "a", "usage": 0.5}]


def test_p_query_parameter_auth(node, db):
    """`?p=<token>` (and `u=`), sent through the client's lower-level write()."""
    c = InfluxDBClient(node.host, node.port, username=None, password=None, retries=1)
    ok = c.write(
        ["cpu,host=a usage=1.25 1700000000"],
        params={"db": db, "u": "u", "p": TOKEN, "precision": "s"},
        protocol="line",
    )
    assert ok is True
    assert node.rows(db, "SELECT host, usage, time FROM cpu") == [
        {"host": "a", "usage": 1.25, "time": "2023-11-14T22:13:20Z"}
    ]


def test_bad_token_is_401(node):
    c = InfluxDBClient(
        node.host, node.port, database="v1_bad_token",
        headers={"Authorization": "Token wrong"}, retries=1,
    )
    with pytest.raises(InfluxDBClientError) as e:
        c.write_points([point(0, T0_S)], time_precision="s")
    assert e.value.code == 401


def test_write_points_values_and_types(node, db):
    """json points with tags and float/int/bool/string fields into the client's database."""
    c = token_client(node, db)
    pts = [point(i, T0_S + i, host=f"h{i}") for i in range(3)]
    assert c.write_points(pts, time_precision="s") is True

    rows = node.rows(db, "SELECT time, host, region, usage, count, ok, note FROM cpu ORDER BY time")
    assert len(rows) == 3
    for i, r in enumerate(rows):
        assert_utc_rfc3339(r["time"])
        assert rfc3339_to_ns(r["time"]) == (T0_S + i) * 10**9
        assert r["host"] == f"h{i}"
        assert r["region"] == "eu west"
        assert r["usage"] == 0.5 + i and isinstance(r["usage"], float)
        assert r["count"] == 10 + i and type(r["count"]) is int
        assert r["ok"] is (i % 2 == 0)
        assert r["note"] == f'n "{i}"'

    t = node.types(db, "cpu", ["time", "host", "region", "usage", "count", "ok", "note"])
    assert_timestamp_type(t["time"])
    assert_string_type(t["host"])
    assert_string_type(t["region"])
    assert t["usage"] == "Float64"
    assert t["count"] == "Int64"
    assert t["ok"] == "Boolean"
    assert t["note"] == "Utf8"


def test_write_points_database_argument(node, db):
    """`database=` on write_points beats the client's default database."""
    other = db + "_other"
    c = token_client(node, other)
    assert c.write_points([point(0, T0_S)], database=db, time_precision="s") is True
    assert node.rows(db, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]
    # Nothing went to the client's default database.
    measurements = json.loads(
        node.request("GET", f"/api/v1/measurements?database={other}",
                     headers={"Authorization": f"Bearer {TOKEN}"})[2]
    )
    assert measurements["success"] is True
    assert [m for m in measurements["measurements"] if m["database"] == other] == []


@pytest.mark.parametrize(
    "precision,ts,expect_ns",
    [
        ("s", T0_S, T0_S * 10**9),
        ("ms", T0_S * 10**3 + 123, T0_S * 10**9 + 123_000_000),
        ("u", T0_S * 10**6 + 123_456, T0_S * 10**9 + 123_456_000),
        # The client's nanosecond precision is spelled 'n' (as InfluxDB 1.x and
        # QuestDB's ILP/HTTP client send it).
        ("n", T0_S * 10**9 + 123_456_789, T0_S * 10**9 + 123_456_789),
    ],
)
def test_time_precision(node, db, precision, ts, expect_ns):
    c = token_client(node, db)
    assert c.write_points([point(1, ts)], time_precision=precision) is True
    rows = node.rows(db, "SELECT time, usage FROM cpu")
    assert len(rows) == 1
    assert_utc_rfc3339(rows[0]["time"])
    assert rfc3339_to_ns(rows[0]["time"]) == expect_ns
    assert rows[0]["usage"] == 1.5


def test_time_as_rfc3339_string_and_datetime(node, db):
    """No precision: the client turns string/datetime times into nanoseconds."""
    c = token_client(node, db)
    pts = [
        point(0, "2023-11-14T22:13:20.123456Z", host="s"),
        point(1, dt.datetime(2023, 11, 14, 22, 13, 21, 654321, tzinfo=dt.timezone.utc), host="d"),
    ]
    assert c.write_points(pts) is True
    rows = node.rows(db, "SELECT host, time FROM cpu ORDER BY host")
    assert [(r["host"], rfc3339_to_ns(r["time"])) for r in rows] == [
        ("d", (T0_S + 1) * 10**9 + 654_321_000),
        ("s", T0_S * 10**9 + 123_456_000),
    ]


class CountingSession(requests.Session):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def request(self, method, url, *a, **kw):
        if method == "POST" and url.endswith("/write"):
            self.writes += 1
        return super().request(method, url, *a, **kw)


def test_batch_size(node, db):
    session = CountingSession()
    c = token_client(node, db, session=session)
    pts = [point(i, T0_S + i, host=f"h{i % 4}") for i in range(25)]
    assert c.write_points(pts, time_precision="s", batch_size=10) is True
    assert session.writes == 3
    assert node.rows(db, "SELECT count(*) AS n, sum(count) AS s FROM cpu") == [
        {"n": 25, "s": sum(10 + i for i in range(25))}
    ]


def test_gzip(node, db):
    c = token_client(node, db, gzip=True)
    assert c.write_points([point(i, T0_S + i) for i in range(5)], time_precision="s") is True
    assert node.rows(db, "SELECT count(*) AS n FROM cpu") == [{"n": 5}]


def test_bad_line_is_400_with_rejected_lines(node, db):
    """Partial write: valid lines are committed, the client sees 400 and the rejected list."""
    c = token_client(node, db)
    lines = [
        "cpu,host=a usage=1.0 1700000000",
        "cpu,host=b usage=oops 1700000001",
        "cpu,host=c usage=3.0 1700000002",
    ]
    with pytest.raises(InfluxDBClientError) as e:
        c.write_points(lines, protocol="line", time_precision="s")
    assert e.value.code == 400
    body = json.loads(e.value.content)
    assert body["success"] is False
    assert "1 of 3 lines rejected" in body["error"]
    assert [r["line"] for r in body["rejected"]] == [2]
    assert body["rejected"][0]["text"].startswith("cpu,host=b usage=oops")
    assert [r["host"] for r in node.rows(db, "SELECT host FROM cpu ORDER BY host")] == ["a", "c"]


def test_field_type_conflict_is_rejected(node, db):
    c = token_client(node, db)
    assert c.write_points([point(0, T0_S)], time_precision="s") is True
    bad = {"measurement": "cpu", "tags": {"host": "x"}, "fields": {"usage": "text"}, "time": T0_S + 1}
    with pytest.raises(InfluxDBClientError) as e:
        c.write_points([bad], time_precision="s")
    assert e.value.code == 400
    body = json.loads(e.value.content)
    assert [r["line"] for r in body["rejected"]] == [1]
    assert node.rows(db, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]
