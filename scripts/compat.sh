#!/usr/bin/env bash
# Client-compatibility tests: real Python client libraries (InfluxDB 1.x/2.x, Arc SDK,
# QuestDB ILP/HTTP, psycopg and asyncpg, SQLAlchemy and pandas, ADBC Flight SQL,
# influxdb3-python), an S3 API server (moto, for Parquet files in a bucket), a real
# Prometheus server (remote write), Debian's psql and pgjdbc (with the JDK), and the
# console in a headless chromium, against a real `quiver` node. Needs the debug binary built by
# `cargo build`/`cargo test` (or QUIVER_BIN pointing at one) and python3 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
bin="${QUIVER_BIN:-$CARGO_TARGET_DIR/debug/quiver}"
if [ ! -x "$bin" ]; then
    echo "compat: no quiver binary at $bin (run cargo build, or set QUIVER_BIN)" >&2
    exit 2
fi
export QUIVER_BIN="$bin"
# Real programs the tests drive (Debian packages): Prometheus remote-writes to Quiver;
# psql (postgresql-client) and pgjdbc (libpostgresql-jdbc-java, run by a JDK) talk to
# its Postgres door; chromium, driven by chromedriver (chromium-driver) through
# Selenium, loads the console (test_console.py).
missing=()
command -v prometheus >/dev/null || missing+=(prometheus)
command -v psql >/dev/null || missing+=(postgresql-client)
{ command -v java >/dev/null && command -v javac >/dev/null; } || missing+=(default-jdk-headless)
[ -f "${PGJDBC_JAR:-/usr/share/java/postgresql.jar}" ] || missing+=(libpostgresql-jdbc-java)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "compat: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The clients go into a virtual environment of their own (kept beside the build, so a
# second run reuses it), never into the system's Python: a stock Debian refuses that
# (PEP 668) and may not even have pip. Needs python3 with its venv module (Debian:
# python3-venv).
venv="${COMPAT_VENV:-$CARGO_TARGET_DIR/compat-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
        echo "compat: cannot create a virtual environment at $venv; install python3-venv" >&2
        exit 2
    }
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$venv/bin/python" -m pip install -q -r tests/compat/requirements.txt
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest -q tests/compat "$@"
