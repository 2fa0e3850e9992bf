//! The accept loop: hyper HTTP/1.1 connections let in by a [`ConnectionGate`] (a cap
//! on all of them, one per client address, a reserve for the cluster's peers), a
//! deadline for request headers (which also closes idle keep-alive connections), and a
//! graceful stop that lets in-flight requests finish.
//!
//! axum's own `serve` has none of these knobs; a thousand idle sockets would otherwise
//! hold a thousand file descriptors, and the next file the WAL or a flush creates would
//! fail for want of one.
//!
//! With TLS on, every connection is a TLS connection (nothing answers plain HTTP on the
//! port). The handshake runs in the connection's own task under the header deadline, so
//! a client that opens a socket and never finishes a handshake holds its slot no longer
//! than one that never sends headers.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::gate::{ConnectionGate, GateRefusal};

/// Limits of the HTTP listener (`http.*` settings).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Longest wait for a request's headers, including the idle time of a kept-alive
    /// connection before its next request; also the deadline of a TLS handshake.
    pub header_timeout_ms: u64,
    /// Longest a graceful stop waits for in-flight requests.
    pub shutdown_timeout_ms: u64,
}

/// Pause after a failed `accept` (out of file descriptors, usually) before trying
/// again, so the loop does not spin.
const ACCEPT_RETRY_MS: u64 = 50;

/// Serves `router` on `listener` (over TLS when `tls` is given) until `stop` resolves,
/// then waits (at most `shutdown_timeout_ms`) for open requests to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    gate: ConnectionGate,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()>,
) -> Result<()> {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_timeout_ms))
        .keep_alive(true);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying");
                    metrics::counter!("quiver_http_accept_errors_total").increment(1);
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Streamed responses end with a small final chunk written after the last data
        // chunk; with Nagle's algorithm on, it waits for the client's delayed ACK (about
        // 40 ms on Linux) and every query would take that long.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        metrics::gauge!("quiver_http_connections").increment(1.0);
        let service = TowerToHyperService::new(router.clone());
        // Subscribed now, so a stop that comes during a TLS handshake still reaches the
        // connection once it is set up.
        let watcher = graceful.watcher();
        let http = http.clone();
        let tls = tls.clone();
        let handshake_timeout = Duration::from_millis(limits.header_timeout_ms);
        let gate = gate.clone();
        // A free slot is taken here, in accept order: taken in the spawned task, a
        // connection accepted later could run first (tokio runs the newest task next)
        // and take the slot of one accepted before it.
        let admitted = gate.admit(peer.ip());
        tokio::spawn(async move {
            // A slot, waited for up to twice the header deadline: a connection that
            // finds every slot taken is served when one frees, or told it was refused.
            // Connections stalled in their headers or handshake free their slots at
            // that deadline, so a waiter that gave up at the same moment lost a race
            // it should win (seen under load: the fresh client was refused).
            let waited = match admitted {
                Err(GateRefusal::Full) => {
                    gate.admit_waiting(peer.ip(), handshake_timeout * 2).await
                }
                other => other,
            };
            let slot = match waited {
                Ok(ticket) => ticket,
                Err(refusal) => {
                    metrics::counter!("quiver_http_connections_refused_total", "reason" => refusal.label())
                        .increment(1);
                    metrics::gauge!("quiver_http_connections").decrement(1.0);
                    refuse_connection(stream, refusal, tls.is_some()).await;
                    return;
                }
            };
            match tls {
                None => serve_connection(&http, stream, service, watcher).await,
                Some(acceptor) => {
                    // Held outside the timeout, so a stalled handshake's socket closes
                    // (when `accept` drops, at the end of this arm) only after it was
                    // counted: whoever sees it closed sees it in the metrics.
                    let accept = acceptor.accept(stream);
                    tokio::pin!(accept);
                    match tokio::time::timeout(handshake_timeout, &mut accept).await {
                        Ok(Ok(stream)) => serve_connection(&http, stream, service, watcher).await,
                        Ok(Err(e)) => {
                            metrics::counter!("quiver_http_tls_handshake_failures_total")
                                .increment(1);
                            tracing::debug!(error = %e, "TLS handshake failed");
                        }
                        Err(_) => {
                            metrics::counter!("quiver_http_tls_handshake_timeouts_total")
                                .increment(1);
                            tracing::debug!(
                                timeout_ms = handshake_timeout.as_millis() as u64,
                                "TLS handshake not finished in time; connection closed"
                            );
                        }
                    }
                }
            }
            metrics::gauge!("quiver_http_connections").decrement(1.0);
            drop(slot);
        });
    }
    drop(listener);
    let timeout = Duration::from_millis(limits.shutdown_timeout_ms);
    if tokio::time::timeout(timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_ms = limits.shutdown_timeout_ms,
            "requests still open at the end of the graceful stop"
        );
    }
    Ok(())
}

/// Most time spent telling a refused connection why (reading its request's head, then
/// writing the answer).
const REFUSAL_WRITE_MS: u64 = 1_000;
/// Most bytes of a refused connection's request head read before answering.
const REFUSAL_HEAD_BYTES_MAX: usize = 16 * 1024;

/// Tells a connection the gate refused why, as an HTTP answer (503 when the node is
/// full, 429 when the client's address holds its share), then closes it: a refusal
/// reaches the client as a status, not as a connection that hangs in the accept queue.
/// Over TLS nothing can be said before a handshake, which is the work a flood must
/// not cost; the connection is closed.
async fn refuse_connection(mut stream: tokio::net::TcpStream, refusal: GateRefusal, tls: bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if tls {
        return;
    }
    // The answer follows the request's head, as HTTP/1.1 clients expect (one that gets
    // an answer before it has sent its request takes it for garbage): read it, briefly.
    let mut head = Vec::with_capacity(1024);
    let read_head = async {
        let mut buf = [0u8; 1024];
        while head.len() < REFUSAL_HEAD_BYTES_MAX && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(REFUSAL_WRITE_MS), read_head).await;
    let (status, setting) = match refusal {
        GateRefusal::Full => ("503 Service Unavailable", "http.connections_max"),
        GateRefusal::AddressFull => ("429 Too Many Requests", "http.connections_per_address_max"),
    };
    let body = serde_json::json!({
        "success": false,
        "error": refusal.message(setting),
        "code": "unavailable",
        "message": refusal.message(setting),
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 {status}\r\nRetry-After: 1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_millis(REFUSAL_WRITE_MS), write).await;
}

/// Serves HTTP/1.1 on one established connection (plain TCP or TLS) until it closes
/// or a graceful stop ends it.
async fn serve_connection<I>(
    http: &hyper::server::conn::http1::Builder,
    io: I,
    service: TowerToHyperService<Router>,
    watcher: Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = watcher.watch(http.serve_connection(TokioIo::new(io), service));
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Raises the soft limit of open file descriptors to the hard limit, so the connection
/// cap, not the OS default of 1,024, bounds sockets. Returns the limit in effect.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}
