"""Every door of a node with a certificate (`http.tls_cert`, `http.tls_key`) speaks TLS
on that certificate, and the real clients verify it against the node's CA:

- HTTP: HTTPS (the Node helper itself, and InfluxDB 3's client writing);
- Postgres: `psql`, psycopg and asyncpg with `sslmode=verify-full`; a client that does
  not ask for TLS is refused before it sends its password (the token); a SCRAM login
  with `channel_binding=require` (SCRAM-SHA-256-PLUS) is bound to the certificate;
- Flight SQL: ADBC over `grpc+tls://` and InfluxDB 3's client querying through
  Flight; a plain-text gRPC client gets no answer.

The CA and the node's certificate are made here with `cryptography`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import asyncpg
import psycopg
import pytest
from adbc_driver_flightsql import DatabaseOptions
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from influxdb_client_3 import InfluxDBClient3

from conftest import TOKEN, Node, binary_path

T0_NS = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC
DB = "tls_doors"
LINES = [
    f"cpu,host=a usage=0.25 {T0_NS}",
    f"cpu,host=a usage=0.75 {T0_NS + 1_000_000_000}",
    f"cpu,host=b usage=1.5 {T0_NS + 2_000_000_000}",
]


def make_pki(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for 127.0.0.1 and localhost: (ca, cert, key)."""
    now = dt.datetime.now(dt.timezone.utc)
    valid = (now - dt.timedelta(hours=1), now + dt.timedelta(days=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "quiver compat CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    node_key = ec.generate_private_key(ec.SECP256R1())
    node = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(node_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "node.pem", directory / "node.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(node.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        node_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture(scope="module")
def tls_node():
    workdir = Path(tempfile.mkdtemp(prefix="quiver-compat-tls-"))
    ca, cert, key = make_pki(workdir)
    node = Node(
        binary_path(),
        workdir,
        extra_env={"QUIVER_HTTP_TLS_CERT": str(cert), "QUIVER_HTTP_TLS_KEY": str(key)},
        ca=ca,
    )
    node.ca = ca
    node.start()
    try:
        node.write_lines(DB, LINES)
        yield node
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def conninfo(node, sslmode: str) -> str:
    return (
        f"host={node.host} port={node.pg_port} dbname={DB} user=quiver password={TOKEN} "
        f"sslmode={sslmode} sslrootcert={node.ca} connect_timeout=10"
    )


def test_https_is_what_the_http_door_speaks(tls_node):
    assert tls_node.url.startswith("https://")
    assert tls_node.rows(DB, "SELECT count(*) AS n FROM cpu") == [{"n": 3}]


def test_psql_verifies_the_certificate_and_queries_over_tls(tls_node):
    env = dict(os.environ)
    env.pop("PGSSLMODE", None)
    proc = subprocess.run(
        [
            "psql",
            "-X",
            conninfo(tls_node, "verify-full"),
            "-c",
            "\\conninfo",
            "-c",
            "SELECT host, round(avg(usage)::numeric, 2) AS avg FROM cpu GROUP BY host ORDER BY host",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "SSL connection (protocol: TLSv1.3" in proc.stdout, proc.stdout
    assert " a    | 0.50" in proc.stdout, proc.stdout
    assert " b    | 1.50" in proc.stdout, proc.stdout


def test_a_plain_connection_is_refused_before_the_password(tls_node):
    env = dict(os.environ)
    env.pop("PGSSLMODE", None)
    proc = subprocess.run(
        ["psql", "-X", conninfo(tls_node, "disable"), "-c", "SELECT 1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stdout
    assert "TLS connections only" in proc.stderr, proc.stderr
    assert "sslmode=require" in proc.stderr, proc.stderr


def test_a_certificate_from_another_ca_is_rejected_by_the_client(tls_node, tmp_path):
    other_ca, _, _ = make_pki(tmp_path)
    info = conninfo(tls_node, "verify-full").replace(str(tls_node.ca), str(other_ca))
    with pytest.raises(psycopg.OperationalError) as excinfo:
        psycopg.connect(info)
    assert "certificate verify failed" in str(excinfo.value), excinfo.value


def test_psycopg_over_tls_with_server_side_parameters(tls_node):
    with psycopg.connect(conninfo(tls_node, "verify-full"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        rows = conn.execute(
            "SELECT usage FROM cpu WHERE host = %s ORDER BY time", ("a",), prepare=True
        ).fetchall()
    assert rows == [(0.25,), (0.75,)]


def scram_plus_conninfo(node, libpq16=True) -> str:
    """A SCRAM login as `bootstrap` that libpq may finish only with channel binding
    (`require_auth` needs libpq 16: psycopg's own has it, Debian's psql 15 does not)."""
    return (
        conninfo(node, "verify-full").replace("user=quiver", "user=bootstrap")
        + " channel_binding=require"
        + (" require_auth=scram-sha-256" if libpq16 else "")
    )


def test_scram_sha_256_plus_binds_the_login_to_the_certificate(tls_node):
    # libpq with channel_binding=require picks SCRAM-SHA-256-PLUS and fails unless the
    # server offered it and proved the binding: the login is tied to this certificate.
    with psycopg.connect(scram_plus_conninfo(tls_node), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)
    env = dict(os.environ)
    env.pop("PGSSLMODE", None)
    proc = subprocess.run(
        ["psql", "-X", scram_plus_conninfo(tls_node, libpq16=False), "-tAc",
         "SELECT count(*) FROM cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3", proc.stdout
    with pytest.raises(psycopg.OperationalError) as excinfo:
        psycopg.connect(scram_plus_conninfo(tls_node).replace(f"password={TOKEN}", "password=wrong"))
    assert "28P01" in str(excinfo.value) or "authentication failed" in str(excinfo.value), excinfo.value


def test_asyncpg_binary_protocol_over_tls(tls_node):
    async def run():
        context = ssl.create_default_context(cafile=str(tls_node.ca))
        conn = await asyncpg.connect(
            host=tls_node.host,
            port=tls_node.pg_port,
            user="quiver",
            password=TOKEN,
            database=DB,
            ssl=context,
            timeout=10,
        )
        try:
            return await conn.fetch("SELECT host, usage FROM cpu WHERE usage > $1 ORDER BY time", 0.5)
        finally:
            await conn.close()

    rows = asyncio.run(run())
    assert [tuple(r) for r in rows] == [("a", 0.75), ("b", 1.5)]


def flight_connect(node, scheme: str):
    return flight_sql.connect(
        f"{scheme}://{node.host}:{node.flight_port}",
        db_kwargs={
            DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {TOKEN}",
            "adbc.flight.sql.rpc.call_header.database": DB,
            DatabaseOptions.TLS_ROOT_CERTS.value: node.ca.read_text(),
            DatabaseOptions.TIMEOUT_FETCH.value: "10",
            DatabaseOptions.TIMEOUT_QUERY.value: "10",
        },
        autocommit=True,
    )


def test_adbc_flight_sql_over_tls(tls_node):
    with flight_connect(tls_node, "grpc+tls") as conn, conn.cursor() as cur:
        cur.execute("SELECT host, usage FROM cpu ORDER BY time")
        rows = cur.fetch_arrow_table().to_pylist()
    assert rows == [
        {"host": "a", "usage": 0.25},
        {"host": "a", "usage": 0.75},
        {"host": "b", "usage": 1.5},
    ]


def test_plain_grpc_to_the_tls_door_gets_no_answer(tls_node):
    with pytest.raises(adbc_driver_manager.Error):
        with flight_connect(tls_node, "grpc") as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()


def test_influxdb3_client_writes_over_https_and_queries_flight_over_tls(tls_node):
    client = InfluxDBClient3(
        host=tls_node.url,
        token=TOKEN,
        database="tls_influxdb3",
        query_port_overwrite=tls_node.flight_port,
        ssl_ca_cert=str(tls_node.ca),
    )
    try:
        client.write(record="\n".join(LINES), write_precision="ns")
        table = client.query("SELECT host, usage FROM cpu ORDER BY time", language="sql")
        assert table.to_pylist() == [
            {"host": "a", "usage": 0.25},
            {"host": "a", "usage": 0.75},
            {"host": "b", "usage": 1.5},
        ]
    finally:
        client.close()


def test_the_same_certificate_on_every_door(tls_node):
    """The Postgres and Flight doors present the HTTP door's certificate."""
    http = ssl.get_server_certificate((tls_node.host, tls_node.port))
    flight = ssl.get_server_certificate((tls_node.host, tls_node.flight_port))
    assert http == flight
    assert http.strip() == tls_node.ca.parent.joinpath("node.pem").read_text().strip()
