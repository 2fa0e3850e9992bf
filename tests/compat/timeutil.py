"""RFC3339 timestamps as Quiver's JSON returns them, to integer nanoseconds."""

from __future__ import annotations

import calendar
import re

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$"
)


def rfc3339_to_ns(s: str) -> int:
    """Parses an RFC3339(Nano) string exactly (no float rounding)."""
    assert isinstance(s, str), f"timestamp should be an RFC3339 string, got {s!r}"
    m = _RFC3339.match(s)
    assert m, f"not an RFC3339 timestamp: {s!r}"
    y, mo, d, h, mi, sec, frac, zone = m.groups()
    secs = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(sec), 0, 0, 0))
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        secs -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    nanos = int((frac or "").ljust(9, "0"))
    return secs * 1_000_000_000 + nanos


def assert_utc_rfc3339(s: str) -> None:
    m = _RFC3339.match(s) if isinstance(s, str) else None
    assert m and m.group(8) == "Z", f"expected an RFC3339 UTC ('Z') timestamp, got {s!r}"
