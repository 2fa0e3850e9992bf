//! A connection flood from one address (issue 36, item 4): 1,100 connections that send
//! a query's headers promising a 2 MB body, one byte of it, then idle, took a node off
//! the air (every slot held, `/health` and writes timing out behind them). Now the
//! token is checked before any body is read, every body has a deadline, one address
//! holds at most its share of the slots, and every refused connection is told so.
//!
//! The flood comes from 127.0.0.2 (loopback answers all of 127/8); the node's peers and
//! its operator's checks from 127.0.0.1.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::{batch_payload, free_port, Node, NodeSpec, TOKEN};

const FLOOD: usize = 1_100;

async fn connect_from(source: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
}

/// This test process opens more sockets than the usual soft limit of 1,024.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// What a connection was answered within `wait`: its status line's code, 0 when it was
/// closed without one, `None` while it says nothing.
async fn answer(stream: &mut TcpStream, wait: Duration) -> Option<u16> {
    let mut buf = vec![0u8; 512];
    match tokio::time::timeout(wait, stream.read(&mut buf)).await {
        Err(_) => None,
        Ok(Ok(0)) | Ok(Err(_)) => Some(0),
        Ok(Ok(n)) => {
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            Some(
                head.split(' ')
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0),
            )
        }
    }
}

/// Opens the flood: `FLOOD` connections from 127.0.0.2, each sending a query's headers
/// (with or without the token) promising 2 MB, and one byte.
async fn flood(port: u16, token: bool) -> Vec<TcpStream> {
    let auth = if token {
        format!("Authorization: Bearer {TOKEN}\r\n")
    } else {
        String::new()
    };
    let request = format!(
        "POST /api/v1/query HTTP/1.1\r\nHost: x\r\n{auth}x-arc-database: db\r\n\
         Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{{"
    );
    let mut out = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        let Ok(mut stream) = connect_from([127, 0, 0, 2], port).await else {
            continue;
        };
        let _ = stream.write_all(request.as_bytes()).await;
        out.push(stream);
    }
    assert!(
        out.len() > FLOOD / 2,
        "only {} connections opened",
        out.len()
    );
    out
}

/// The node still serves 127.0.0.1 at once: health, a write, a query.
async fn still_serves(node: &Node, id: i64) {
    let started = Instant::now();
    let health = node
        .client
        .get(format!("{}/health", node.url))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("/health answers during the flood");
    assert_eq!(health.status(), 200);
    let body = batch_payload("cpu", id, 10, 1_700_000_000_000_000_000 + id * 1_000_000, 2);
    let (status, text) = node.write_msgpack("db", body).await;
    assert_eq!(status, 204, "{text}");
    let (status, _) = node.query("db", "SELECT count(*) FROM cpu").await;
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "served, but slowly: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_flood_from_one_address_leaves_the_node_serving_everyone_else() {
    raise_open_files_limit();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_HTTP_CONNECTIONS_MAX", 1_024)
            .with("QUIVER_HTTP_CONNECTIONS_PER_ADDRESS_MAX", 100)
            .with("QUIVER_HTTP_BODY_TIMEOUT_MS", 3_000),
    )
    .await;
    let port = node.spec.port;
    still_serves(&node, 0).await;

    // Without a token: every connection is answered 401 (or, past its address's share,
    // 429) at once; none holds a slot.
    let mut unauthenticated = flood(port, false).await;
    still_serves(&node, 1).await;
    let mut answered = std::collections::BTreeMap::<u16, usize>::new();
    for stream in &mut unauthenticated {
        let code = answer(stream, Duration::from_secs(5))
            .await
            .expect("an unauthenticated flood connection left unanswered");
        *answered.entry(code).or_default() += 1;
    }
    let told = answered.get(&401).copied().unwrap_or(0) + answered.get(&429).copied().unwrap_or(0);
    assert!(told >= unauthenticated.len() * 9 / 10, "{answered:?}");
    drop(unauthenticated);

    // With the token: the address holds at most its 100; the rest are told 429 at once;
    // the held ones end at the body deadline with an answer.
    let mut authenticated = flood(port, true).await;
    let total = authenticated.len();
    still_serves(&node, 2).await;
    // Every connection at once: those past the address's share were answered 429
    // already; the held ones are answered 408 at their body deadline (3 s).
    let answers = futures::future::join_all(
        authenticated
            .iter_mut()
            .map(|stream| answer(stream, Duration::from_secs(10))),
    )
    .await;
    let count = |code: u16| answers.iter().filter(|a| **a == Some(code)).count();
    assert_eq!(count(429) + count(408), total, "{answers:?}");
    assert!(count(408) <= 100, "{} connections held", count(408));
    assert!(
        count(429) + 150 >= total,
        "{} of {total} told 429",
        count(429)
    );
    drop(authenticated);
    still_serves(&node, 3).await;
    assert!(node.metric("quiver_http_connections_refused_total").await >= 1.0);
    let (status, body) = node.query("db", "SELECT count(*) AS n FROM cpu").await;
    assert_eq!(status, 200);
    assert_eq!(body["data"][0][0], json!(40), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flight_and_postgres_doors_cap_one_address_too() {
    let dir = tempfile::tempdir().unwrap();
    let (pg, flight) = (free_port(), free_port());
    let _node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_PG_ADDR", format!("127.0.0.1:{pg}"))
            .with("QUIVER_PG_CONNECTIONS_PER_ADDRESS_MAX", 5)
            .with("QUIVER_FLIGHT_ADDR", format!("127.0.0.1:{flight}"))
            .with("QUIVER_FLIGHT_CONNECTIONS_PER_ADDRESS_MAX", 5),
    )
    .await;
    // Postgres: the sixth connection from one address is told `53300` and closed.
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(connect_from([127, 0, 0, 2], pg).await.unwrap());
    }
    let mut sixth = connect_from([127, 0, 0, 2], pg).await.unwrap();
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), sixth.read(&mut buf))
        .await
        .expect("the refused Postgres connection is answered")
        .unwrap();
    assert_eq!(buf[0], b'E', "{:?}", &buf[..n]);
    assert!(String::from_utf8_lossy(&buf[..n]).contains("53300"));
    // Another address still gets in.
    let _other = connect_from([127, 0, 0, 3], pg).await.unwrap();
    // Flight: the sixth connection from one address is closed at once.
    let mut held_flight = Vec::new();
    for _ in 0..5 {
        held_flight.push(connect_from([127, 0, 0, 2], flight).await.unwrap());
    }
    let mut sixth = connect_from([127, 0, 0, 2], flight).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), sixth.read(&mut buf))
        .await
        .expect("the refused Flight connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}
