//! The connections the Flight SQL door serves: accepted here, let in by the door's
//! [`ConnectionGate`] (`flight.connections_max`, `flight.connections_per_address_max`;
//! more are closed at once, and counted), and with `http.tls_cert` set, their TLS
//! handshakes run here, each on its own task, so only finished TLS streams reach tonic
//! and one slow client never holds up the rest.
//!
//! tonic's own TLS (its `tls-*` features) would bring a second TLS stack configuration
//! of the same rustls; this keeps the one `ServerConfig` every door shares.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::gate::{ConnectionGate, Ticket};

/// A handshake not finished by then is dropped (a client that connects and stalls).
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Handshakes running at once; connections beyond are closed at once, and counted.
const HANDSHAKES_IN_FLIGHT_MAX: usize = 256;

/// Finished connections waiting for tonic to pick them up.
const READY_QUEUE: usize = 64;

/// Pause after a failed `accept` (for example when out of file descriptors).
const ACCEPT_BACKOFF_MS: u64 = 100;

/// One client's connection, as tonic serves it; its gate slot is freed when it drops.
pub struct Connection {
    io: Io,
    _ticket: Ticket,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        match &self.io {
            Io::Plain(s) => s.connect_info(),
            Io::Tls(s) => s.get_ref().0.connect_info(),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// The connections accepted on `listener` that `gate` lets in, TLS handshakes done
/// when `config` is given; the accept loop ends (and the listener closes) when the
/// stream is dropped.
pub fn incoming(
    listener: TcpListener,
    config: Option<Arc<rustls::ServerConfig>>,
    gate: ConnectionGate,
) -> impl Stream<Item = io::Result<Connection>> {
    let (ready, waiting) = mpsc::channel(READY_QUEUE);
    tokio::spawn(accept_loop(
        listener,
        config.map(TlsAcceptor::from),
        gate,
        ready,
    ));
    futures::stream::unfold(waiting, |mut waiting| async move {
        waiting.recv().await.map(|c| (Ok(c), waiting))
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    gate: ConnectionGate,
    ready: mpsc::Sender<Connection>,
) {
    let handshakes = Arc::new(Semaphore::new(HANDSHAKES_IN_FLIGHT_MAX));
    let timeout = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
    loop {
        // The server going away drops the stream's receiver: stop listening then.
        let accepted = tokio::select! {
            () = ready.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "flight.addr: accept failed");
                tokio::time::sleep(Duration::from_millis(ACCEPT_BACKOFF_MS)).await;
                continue;
            }
        };
        let ticket = match gate.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(refusal) => {
                metrics::counter!("quiver_flight_connections_refused_total", "reason" => refusal.label())
                    .increment(1);
                tracing::warn!(%peer, reason = refusal.label(), "flight.addr: connection refused");
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let Some(acceptor) = acceptor.clone() else {
            // Fails only when the server stopped; the connection just closes.
            let _ = ready
                .send(Connection {
                    io: Io::Plain(socket),
                    _ticket: ticket,
                })
                .await;
            continue;
        };
        let Ok(permit) = Arc::clone(&handshakes).try_acquire_owned() else {
            metrics::counter!("quiver_flight_tls_handshakes_refused_total").increment(1);
            tracing::warn!(%peer, "flight.addr: too many TLS handshakes at once; connection closed");
            continue;
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(timeout, acceptor.accept(socket)).await {
                Ok(Ok(stream)) => {
                    drop(permit);
                    // Fails only when the server stopped; the connection just closes.
                    let _ = ready
                        .send(Connection {
                            io: Io::Tls(Box::new(stream)),
                            _ticket: ticket,
                        })
                        .await;
                }
                Ok(Err(e)) => {
                    metrics::counter!("quiver_flight_tls_handshake_failures_total").increment(1);
                    tracing::debug!(%peer, error = %e, "flight TLS handshake failed");
                }
                Err(_) => {
                    metrics::counter!("quiver_flight_tls_handshake_timeouts_total").increment(1);
                    tracing::debug!(%peer, "flight TLS handshake not finished in time; closed");
                }
            }
        });
    }
}
