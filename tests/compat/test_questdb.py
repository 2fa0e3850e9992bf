"""QuestDB's Python client (`questdb`) over ILP/HTTP against Quiver's `POST /write`.

What the client sends (questdb 6.0.0, `http::addr=HOST:PORT;token=...`):
  1. `GET /settings` to negotiate the ILP protocol version; Quiver answers 404, so the
     client falls back to protocol version 1 (text floats, InfluxDB-compatible lines).
  2. `POST /write?precision=n` with `Authorization: Bearer <token>` and a
     line-protocol body (`table,sym=v f=1.5,i=7i,b=t,s="x" <ns>`).
QuestDB has no database selector, so rows land in Quiver's `default` database; each
test uses its own table name.
"""

from __future__ import annotations

import uuid

import pytest
from questdb import QuestDBError, Sender, TimestampNanos

from conftest import TOKEN, assert_string_type, assert_timestamp_type
from timeutil import assert_utc_rfc3339, rfc3339_to_ns

T0_NS = 1_700_000_000 * 10**9


@pytest.fixture
def table():
    return f"qdb_{uuid.uuid4().hex[:8]}"


def conf(node, **extra) -> str:
    items = {"addr": f"{node.host}:{node.port}", "token": TOKEN, "retry_timeout": "0", **extra}
    return "http::" + "".join(f"{k}={v};" for k, v in items.items())


def test_sender_rows(node, table):
    with Sender.from_conf(conf(node)) as s:
        assert s.protocol_version == 1  # /settings is 404 on Quiver: ILP v1 text
        for i in range(3):
            s.row(
                table,
                symbols={"host": f"h{i}", "region": "eu west"},
                columns={"usage": 0.5 + i, "count": 10 + i, "ok": i == 1, "note": f'n "{i}"'},
                at=TimestampNanos(T0_NS + 123_456_789 + i),
            )
        s.flush()

    rows = node.rows("default", f"SELECT time, host, region, usage, count, ok, note FROM {table} ORDER BY time")
    assert len(rows) == 3
    for i, r in enumerate(rows):
        assert_utc_rfc3339(r["time"])
        assert rfc3339_to_ns(r["time"]) == T0_NS + 123_456_789 + i
        assert (r["host"], r["region"]) == (f"h{i}", "eu west")
        assert r["usage"] == 0.5 + i and isinstance(r["usage"], float)
        assert r["count"] == 10 + i and type(r["count"]) is int
        assert r["ok"] is (i == 1)
        assert r["note"] == f'n "{i}"'
    t = node.types("default", table, ["time", "host", "usage", "count", "ok", "note"])
    assert_timestamp_type(t["time"])
    assert_string_type(t["host"])
    assert (t["usage"], t["count"], t["ok"], t["note"]) == ("Float64", "Int64", "Boolean", "Utf8")


def test_field_type_conflict_surfaces_server_error(node, table):
    """The client raises with Quiver's 400 error: its message and the rejected line.

    The body carries InfluxDB 2's `code`, `message` and `line` beside Quiver's own
    fields; QuestDB's client reads those (as from QuestDB's own errors) and shows
    `<message> [code: ..., line: N]`."""
    with Sender.from_conf(conf(node)) as s:
        s.row(table, columns={"v": 1.5}, at=TimestampNanos(T0_NS))
        s.flush()
        s.row(table, columns={"v": "text"}, at=TimestampNanos(T0_NS + 1))
        with pytest.raises(QuestDBError) as e:
            s.flush()
    msg = str(e.value)
    assert "partial write: 1 of 1 lines rejected" in msg, msg
    assert "code: invalid" in msg and "line: 1]" in msg, msg
    assert node.rows("default", f"SELECT v FROM {table}") == [{"v": 1.5}]
