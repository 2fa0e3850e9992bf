//! The worker's listener: Arrow Flight over HTTP/2 (tonic), for the cluster's nodes only.

use std::sync::Arc;

use datafusion_distributed::Worker;
use tokio::runtime::Handle;

use super::routing::WORKER_SECRET_HEADER;
use crate::error::Error;

/// Serves `worker` on `listener` from `runtime`, refusing calls without `secret`.
pub(crate) fn serve(
    worker: Worker,
    listener: std::net::TcpListener,
    secret: String,
    runtime: &Handle,
) -> Result<(), Error> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Internal(format!("query worker listener: {e}")))?;
    let secret: Arc<str> = secret.into();
    let check = move |request: tonic::Request<()>| -> Result<tonic::Request<()>, tonic::Status> {
        let presented = request
            .metadata()
            .get(WORKER_SECRET_HEADER)
            .and_then(|v| v.to_str().ok());
        match presented {
            Some(p) if constant_time_eq(p.as_bytes(), secret.as_bytes()) => Ok(request),
            _ => Err(tonic::Status::unauthenticated(
                "cluster secret missing or wrong",
            )),
        }
    };
    let service =
        tonic::service::interceptor::InterceptedService::new(worker.into_worker_server(), check);
    runtime.spawn(async move {
        let incoming = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => tokio_stream::wrappers::TcpListenerStream::new(l),
            Err(e) => {
                tracing::error!(error = %e, "query worker listener");
                return;
            }
        };
        // tonic sets TCP_NODELAY only on listeners it opens itself. Without it, a
        // stage's small last frames wait for the receiving node's delayed ACK (about
        // 40 ms on Linux): measured, a one-host TSBS query took 92 ms through a stage
        // and 4 ms on a member.
        let incoming = futures::StreamExt::map(incoming, |accepted| {
            accepted.inspect(|stream| {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY on a worker connection");
                }
            })
        });
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "query worker stopped");
        }
    });
    Ok(())
}

/// Byte equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
