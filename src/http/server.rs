//! The accept loop: hyper HTTP/1.1 connections with a cap on how many are open, a
//! deadline for request headers (which also closes idle keep-alive connections), and a
//! graceful stop that lets in-flight requests finish.
//!
//! axum's own `serve` has none of these knobs; a thousand idle sockets would otherwise
//! hold a thousand file descriptors, and the next file the WAL or a flush creates would
//! fail for want of one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Limits of the HTTP listener (`http.*` settings).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Most connections open at once; more wait in the kernel's accept queue.
    pub connections_max: usize,
    /// Longest wait for a request's headers, including the idle time of a kept-alive
    /// connection before its next request.
    pub header_timeout_ms: u64,
    /// Longest a graceful stop waits for in-flight requests.
    pub shutdown_timeout_ms: u64,
}

/// Pause after a failed `accept` (out of file descriptors, usually) before trying
/// again, so the loop does not spin.
const ACCEPT_RETRY_MS: u64 = 50;

/// Serves `router` on `listener` until `stop` resolves, then waits (at most
/// `shutdown_timeout_ms`) for open requests to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_timeout_ms))
        .keep_alive(true);
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot?,
            () = &mut stop => break,
        };
        if slots.available_permits() == 0 {
            metrics::counter!("quiver_http_connection_cap_reached_total").increment(1);
        }
        let (stream, _peer) = tokio::select! {
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
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
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
