//! The Postgres door (`pg.addr`) at the byte level: `SSLRequest` answered `N`, the
//! password taken as a token (and not asked with auth off), the startup database
//! selecting the Quiver database, a simple query, errors with their SQLSTATE. Real
//! clients (psql, psycopg, asyncpg) are exercised by `tests/compat/test_postgres.py`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{free_port, Node, NodeSpec, TOKEN};

/// A backend message: its type byte and body.
async fn read_message(socket: &mut TcpStream) -> (u8, Vec<u8>) {
    let tag = socket.read_u8().await.expect("message type");
    let len = socket.read_i32().await.expect("message length") as usize;
    let mut body = vec![0; len - 4];
    socket.read_exact(&mut body).await.expect("message body");
    (tag, body)
}

/// Messages until (and including) the first of type `until`.
async fn read_until(socket: &mut TcpStream, until: u8) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), read_message(socket))
            .await
            .expect("the server answers within 30 s");
        let done = message.0 == until;
        out.push(message);
        if done {
            return out;
        }
    }
}

async fn send(socket: &mut TcpStream, tag: Option<u8>, body: &[u8]) {
    let mut message = Vec::new();
    if let Some(tag) = tag {
        message.push(tag);
    }
    message.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    message.extend_from_slice(body);
    socket.write_all(&message).await.expect("send");
}

/// Connects, asks for TLS (refused: `N`), and sends the startup message.
async fn start(port: u16, database: &str) -> TcpStream {
    let mut socket = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    send(&mut socket, None, &80_877_103i32.to_be_bytes()).await;
    assert_eq!(
        socket.read_u8().await.unwrap(),
        b'N',
        "SSLRequest is answered N"
    );
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for (k, v) in [("user", "quiver"), ("database", database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    send(&mut socket, None, &body).await;
    socket
}

/// The `C` (SQLSTATE) field of an error response.
fn sqlstate(body: &[u8]) -> String {
    body.split(|b| *b == 0)
        .find_map(|field| field.strip_prefix(b"C"))
        .map(|code| String::from_utf8_lossy(code).into_owned())
        .unwrap_or_default()
}

/// The text values of the data rows among `messages`.
fn data_rows(messages: &[(u8, Vec<u8>)]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter(|(tag, _)| *tag == b'D')
        .map(|(_, body)| {
            let count = i16::from_be_bytes([body[0], body[1]]) as usize;
            let mut at = 2;
            (0..count)
                .map(|_| {
                    let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                    at += 4;
                    (len >= 0).then(|| {
                        let value = String::from_utf8_lossy(&body[at..at + len as usize]);
                        at += len as usize;
                        value.into_owned()
                    })
                })
                .collect()
        })
        .collect()
}

async fn query(socket: &mut TcpStream, sql: &str) -> Vec<(u8, Vec<u8>)> {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    send(socket, Some(b'Q'), &body).await;
    read_until(socket, b'Z').await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pg_door_takes_a_token_as_password_and_answers_from_the_named_database() {
    let dir = tempfile::tempdir().unwrap();
    let pg_port = free_port();
    let node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_PG_ADDR", format!("127.0.0.1:{pg_port}")),
    )
    .await;
    let (status, _) = node
        .write_lp(
            "/write?db=demo&precision=s",
            "cpu,host=a usage=1.5 1700000000\ncpu,host=b usage=2.5 1700000001",
        )
        .await;
    assert_eq!(status, 204);

    // The right token: authenticated, then the database's rows.
    let mut socket = start(pg_port, "demo").await;
    let (tag, body) = read_message(&mut socket).await;
    assert_eq!(
        (tag, &body[..]),
        (b'R', &3i32.to_be_bytes()[..]),
        "cleartext password asked"
    );
    let mut password = TOKEN.as_bytes().to_vec();
    password.push(0);
    send(&mut socket, Some(b'p'), &password).await;
    let startup = read_until(&mut socket, b'Z').await;
    assert_eq!(
        startup[0],
        (b'R', 0i32.to_be_bytes().to_vec()),
        "authentication ok"
    );
    let answer = query(&mut socket, "SELECT host, usage FROM cpu ORDER BY host").await;
    assert_eq!(
        data_rows(&answer),
        vec![
            vec![Some("a".into()), Some("1.5".into())],
            vec![Some("b".into()), Some("2.5".into())],
        ]
    );
    // Refused statements and unknown tables are errors with a SQLSTATE; the connection
    // stays usable.
    let refused = query(&mut socket, "DELETE FROM cpu").await;
    let error = refused
        .iter()
        .find(|(tag, _)| *tag == b'E')
        .expect("an error");
    assert_eq!(sqlstate(&error.1), "0A000");
    let missing = query(&mut socket, "SELECT * FROM nosuch").await;
    let error = missing
        .iter()
        .find(|(tag, _)| *tag == b'E')
        .expect("an error");
    assert_eq!(sqlstate(&error.1), "42000");
    let again = query(&mut socket, "SELECT count(*) FROM cpu").await;
    assert_eq!(data_rows(&again), vec![vec![Some("2".into())]]);

    // Another database is empty for the same connection string but `-d other`.
    let mut socket = start(pg_port, "other").await;
    let _ = read_message(&mut socket).await;
    send(&mut socket, Some(b'p'), &password).await;
    let _ = read_until(&mut socket, b'Z').await;
    let other = query(
        &mut socket,
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'other'",
    )
    .await;
    assert_eq!(data_rows(&other), vec![vec![Some("0".into())]]);

    // A wrong token: FATAL 28P01.
    let mut socket = start(pg_port, "demo").await;
    let _ = read_message(&mut socket).await;
    send(&mut socket, Some(b'p'), b"wrong\0").await;
    let (tag, body) = read_message(&mut socket).await;
    assert_eq!(tag, b'E');
    assert_eq!(sqlstate(&body), "28P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_off_the_pg_door_asks_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let pg_port = free_port();
    let _node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_PG_ADDR", format!("127.0.0.1:{pg_port}"))
            .with("QUIVER_AUTH_ENABLED", "false"),
    )
    .await;
    let mut socket = start(pg_port, "demo").await;
    let startup = read_until(&mut socket, b'Z').await;
    assert_eq!(startup[0], (b'R', 0i32.to_be_bytes().to_vec()));
    let answer = query(&mut socket, "SHOW server_version_num").await;
    assert_eq!(data_rows(&answer), vec![vec![Some("160006".into())]]);
}

/// The column names of the first `RowDescription` among `messages`.
fn column_names(messages: &[(u8, Vec<u8>)]) -> Vec<String> {
    let Some((_, body)) = messages.iter().find(|(tag, _)| *tag == b'T') else {
        return Vec::new();
    };
    let count = i16::from_be_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    (0..count)
        .map(|_| {
            let end = at + body[at..].iter().position(|b| *b == 0).expect("a name");
            let name = String::from_utf8_lossy(&body[at..end]).into_owned();
            at = end + 1 + 18; // the name's NUL, then table OID .. format code
            name
        })
        .collect()
}

/// Connects to `database` with `password` and waits for `ReadyForQuery`.
async fn login(port: u16, database: &str, password: &str) -> TcpStream {
    let mut socket = start(port, database).await;
    let _ = read_message(&mut socket).await;
    let mut body = password.as_bytes().to_vec();
    body.push(0);
    send(&mut socket, Some(b'p'), &body).await;
    let startup = read_until(&mut socket, b'Z').await;
    assert_eq!(startup[0], (b'R', 0i32.to_be_bytes().to_vec()), "logged in");
    socket
}

/// One text column of a query's rows.
async fn column(socket: &mut TcpStream, sql: &str) -> Vec<String> {
    let answer = query(socket, sql).await;
    assert!(
        answer.iter().all(|(tag, _)| *tag != b'E'),
        "{sql}: {:?}",
        answer
            .iter()
            .find(|(tag, _)| *tag == b'E')
            .map(|(_, body)| String::from_utf8_lossy(body).into_owned())
    );
    data_rows(&answer)
        .into_iter()
        .map(|row| row[0].clone().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_catalog_shows_the_connections_database_to_the_tokens_databases() {
    let dir = tempfile::tempdir().unwrap();
    let pg_port = free_port();
    let node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_PG_ADDR", format!("127.0.0.1:{pg_port}")),
    )
    .await;
    for db in ["demo", "secret"] {
        let (status, _) = node
            .write_lp(
                &format!("/write?db={db}&precision=s"),
                "cpu,host=a usage=1.5 1700000000\nmem,host=a used=2i 1700000000",
            )
            .await;
        assert_eq!(status, 204);
    }
    let (status, created, _) = node
        .post(
            "/api/v1/tokens",
            &[("content-type", "application/json")],
            br#"{"name": "analyst", "scopes": ["read"], "databases": ["demo"]}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let analyst = created["token"].as_str().expect("a token").to_string();

    let mut admin = login(pg_port, "demo", TOKEN).await;
    let mut scoped = login(pg_port, "demo", &analyst).await;
    let databases = "SELECT datname FROM pg_catalog.pg_database ORDER BY 1";
    assert_eq!(
        column(&mut admin, databases).await,
        ["demo", "postgres", "secret"]
    );
    assert_eq!(column(&mut scoped, databases).await, ["demo", "postgres"]);
    // Only the connection's database has schemas and tables, whatever else the token
    // reads (as in Postgres, where a connection sees one database).
    for socket in [&mut admin, &mut scoped] {
        assert_eq!(
            column(
                socket,
                "SELECT nspname FROM pg_catalog.pg_namespace ORDER BY 1"
            )
            .await,
            ["demo", "information_schema", "pg_catalog"]
        );
        assert_eq!(
            column(
                socket,
                "SELECT c.relname FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = current_schema() ORDER BY 1"
            )
            .await,
            ["cpu", "mem"]
        );
    }
    // A table's OID stays the same from one statement to the next (psql's `\d` finds
    // the OID, then asks for the columns by it).
    let oid_of_cpu = "SELECT oid FROM pg_catalog.pg_class WHERE relname = 'cpu'";
    let first = column(&mut admin, oid_of_cpu).await;
    let _ = column(&mut admin, "SELECT count(*) FROM pg_catalog.pg_attribute").await;
    assert_eq!(column(&mut admin, oid_of_cpu).await, first);
    let columns = column(
        &mut admin,
        &format!(
            "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = {} ORDER BY attnum",
            first[0]
        ),
    )
    .await;
    assert_eq!(columns.len(), 3, "{columns:?}");
    assert!(columns.contains(&"usage".to_string()), "{columns:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaliased_result_columns_are_named_as_postgres_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let pg_port = free_port();
    let node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_PG_ADDR", format!("127.0.0.1:{pg_port}")),
    )
    .await;
    let (status, _) = node
        .write_lp(
            "/write?db=demo&precision=s",
            "cpu,host=a usage=1.5 1700000000",
        )
        .await;
    assert_eq!(status, 204);
    let mut socket = login(pg_port, "demo", TOKEN).await;
    // Regression (issue 39): `SELECT 1` was named `Int64(1)`, `avg(usage)`
    // `avg(cpu.usage)`.
    let answer = query(
        &mut socket,
        "SELECT 1, host, avg(usage), count(*), usage * 2, usage AS u, \
         CAST(1.5 AS int), current_schema() FROM cpu GROUP BY host, usage",
    )
    .await;
    assert_eq!(
        column_names(&answer),
        [
            "?column?",
            "host",
            "avg",
            "count",
            "?column?",
            "u",
            "int4",
            "current_schema"
        ]
    );
    assert_eq!(
        data_rows(&answer)[0][7].as_deref(),
        Some("demo"),
        "current_schema() is the connection's database"
    );
}
