//! Request bodies are encoded on a thread of their own, ahead of the schedule, into a
//! bounded queue that is full (or holds the whole run) before the clock starts. So the
//! sender never encodes on the clock, and the encoder's CPU is measured by itself.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::batch::{encode_columnar_batch, encode_lp_batch, BatchShape};
use crate::load::WireFormat;

/// What the encoder thread reports when it is done.
#[derive(Debug, Clone, Copy, Default)]
pub struct EncoderStats {
    /// CPU time of the encoder thread, in seconds.
    pub cpu_s: f64,
    /// Body bytes encoded.
    pub bytes: u64,
}

/// A running encoder: bodies arrive on `bodies`; `primed` fires once the queue is
/// full or every body is encoded; `done` carries the stats at the end.
pub struct Encoder {
    /// Encoded bodies, in batch order.
    pub bodies: mpsc::Receiver<Bytes>,
    /// Fires when the clock may start.
    pub primed: oneshot::Receiver<()>,
    /// The encoder thread; its result is the stats.
    pub thread: std::thread::JoinHandle<EncoderStats>,
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc == 0 {
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    } else {
        0.0
    }
}

/// Starts encoding `batches` batches of `batch_rows` rows into a queue of `queue_max`.
pub fn start(
    format: WireFormat,
    shape: Arc<BatchShape>,
    host_names: Arc<Vec<String>>,
    batch_rows: u64,
    batches: u64,
    queue_max: usize,
) -> std::io::Result<Encoder> {
    let queue_max = queue_max.max(1);
    let (tx, rx) = mpsc::channel::<Bytes>(queue_max);
    let (primed_tx, primed_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("sizing-encoder".into())
        .spawn(move || {
            let cpu_start = thread_cpu_s();
            let mut bytes = 0u64;
            let mut primed = Some(primed_tx);
            for batch in 0..batches {
                let first = batch * batch_rows;
                let body = match format {
                    WireFormat::Msgpack => {
                        encode_columnar_batch(&shape, &host_names, first, batch_rows)
                    }
                    WireFormat::Lp => encode_lp_batch(&shape, &host_names, first, batch_rows),
                };
                bytes += body.len() as u64;
                if tx.blocking_send(Bytes::from(body)).is_err() {
                    break; // the run ended early
                }
                if batch + 1 == queue_max as u64 {
                    if let Some(p) = primed.take() {
                        let _ = p.send(());
                    }
                }
            }
            if let Some(p) = primed.take() {
                let _ = p.send(());
            }
            EncoderStats {
                cpu_s: thread_cpu_s() - cpu_start,
                bytes,
            }
        })?;
    Ok(Encoder {
        bodies: rx,
        primed: primed_rx,
        thread,
    })
}
