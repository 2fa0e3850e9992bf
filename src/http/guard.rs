//! What every request passes before its handler: the token, checked before a byte of
//! the body is read, and a deadline on the body, whatever the route.
//!
//! Handlers that take the body whole (queries, tokens, deletes) read it before their
//! first line runs; a client that sends headers promising a large body and then one
//! byte held its connection, and the body's buffer, until the connection died. Now an
//! unknown token is refused before the handler runs: its body is read and thrown away
//! (never buffered) for at most [`UNAUTHENTICATED_DRAIN_MS`], so a client with a wrong
//! token reads the 401 rather than a reset; and every body must arrive within
//! `http.body_timeout_ms`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::body::{discard_body, expects_continue};
use super::error::ApiError;
use super::AppState;

/// Longest an unauthenticated request's body is read (and thrown away) before the 401
/// is sent: a client with a wrong token that sends its body at once reads the 401 (a
/// refusal sent while it still sends would reach it as a reset), a client that trickles
/// it holds its connection no longer than this.
const UNAUTHENTICATED_DRAIN_MS: u64 = 5_000;
/// Beyond `http.body_timeout_ms`, so that the write path's own deadline (a 408 naming
/// the setting) comes first where it applies.
const BODY_DEADLINE_GRACE_MS: u64 = 1_000;

/// Routes answered without a token: liveness, readiness, ping, the console's static
/// page and files (no data: the page asks for a token and sends it with every call),
/// and `/internal/` (the cluster secret, checked there before the body). `/metrics`
/// decides per request what it shows.
fn open_route(path: &str) -> bool {
    matches!(
        path,
        "/health" | "/ready" | "/ping" | "/metrics" | "/ui" | "/ui/"
    ) || path.starts_with("/ui/assets/")
        || path.starts_with("/internal/")
}

/// The middleware (see the module documentation).
pub async fn guard(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    if app.auth.enabled() && !open_route(request.uri().path()) {
        let query_token = request.uri().query().and_then(token_param);
        if !app
            .auth
            .authenticates(request.headers(), query_token.as_deref())
        {
            metrics::counter!("quiver_http_unauthenticated_total").increment(1);
            let headers = request.headers().clone();
            if !expects_continue(&headers) {
                let deadline = started + Duration::from_millis(UNAUTHENTICATED_DRAIN_MS);
                let bytes_max = app.config.http.body_bytes_max;
                discard_body(request.into_body(), bytes_max, deadline).await;
            }
            return ApiError::with_status(
                StatusCode::UNAUTHORIZED,
                "missing or unknown token (Authorization: Bearer <token>)",
            )
            .into_response();
        }
    }
    let deadline =
        started + Duration::from_millis(app.config.http.body_timeout_ms + BODY_DEADLINE_GRACE_MS);
    let expired = Arc::new(AtomicBool::new(false));
    let request = request
        .map(|body| Body::new(DeadlineBody::new(body, deadline).noting_expiry(expired.clone())));
    let response = next.run(request).await;
    if expired.load(Ordering::Relaxed) && response.status().is_client_error() {
        // The handler's extractor saw the body fail; say why, as the write path does.
        return ApiError::with_status(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive within http.body_timeout_ms",
        )
        .into_response();
    }
    response
}

/// The `p` parameter of a query string (InfluxDB 1.x clients put the token there).
fn token_param(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "p").then(|| percent_decode(value))
    })
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request body that fails once `deadline` passes before it has all arrived.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    expired: Option<Arc<AtomicBool>>,
}

impl DeadlineBody {
    fn new(inner: Body, deadline: Instant) -> DeadlineBody {
        DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(deadline.into())),
            expired: None,
        }
    }

    /// Sets `flag` when the deadline ends the body.
    fn noting_expiry(mut self, flag: Arc<AtomicBool>) -> DeadlineBody {
        self.expired = Some(flag);
        self
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                metrics::counter!("quiver_http_body_timeouts_total").increment(1);
                if let Some(flag) = &self.expired {
                    flag.store(true, Ordering::Relaxed);
                }
                Poll::Ready(Some(Err(axum::Error::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the request body did not arrive within http.body_timeout_ms",
                )))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_parameter_is_found_and_decoded() {
        assert_eq!(token_param("db=x&p=a%2Bb%3D&u=y").as_deref(), Some("a+b="));
        assert_eq!(token_param("p=plain").as_deref(), Some("plain"));
        assert_eq!(token_param("db=x"), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_at_its_deadline() {
        let (mut tx, body) = {
            let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
            (tx, Body::from_stream(rx))
        };
        futures::SinkExt::send(&mut tx, Ok(Bytes::from_static(b"x")))
            .await
            .unwrap();
        let body = DeadlineBody::new(body, Instant::now() + Duration::from_millis(50));
        let read = axum::body::to_bytes(Body::new(body), 1 << 20).await;
        let e = read.unwrap_err().to_string();
        assert!(e.contains("http.body_timeout_ms"), "{e}");
        drop(tx);
    }
}
