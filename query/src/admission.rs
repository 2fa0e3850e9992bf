//! How many queries run at once, and how many may wait.
//!
//! `concurrency_max` slots; a query that finds them all taken waits in a queue of at
//! most `queue_max`, and is refused as [`Error::Busy`] when that is full too. Waiting
//! counts against the query's deadline. A slot is held until the query's result stream
//! is dropped, so a result being streamed to a slow client still counts as running.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::Error;

/// Slots and the wait queue, shared by every query of an engine.
#[derive(Debug)]
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    concurrency_max: usize,
    queued: AtomicUsize,
    queue_max: usize,
}

/// A running query's slot; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// Decrements the queue length however the wait ends (admitted, timed out, cancelled).
struct InQueue<'a>(&'a AtomicUsize);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub(crate) fn new(concurrency_max: usize, queue_max: usize) -> Self {
        assert!(
            concurrency_max >= 1,
            "at least one query must be able to run"
        );
        Admission {
            slots: Arc::new(Semaphore::new(concurrency_max)),
            concurrency_max,
            queued: AtomicUsize::new(0),
            queue_max,
        }
    }

    /// Queries holding a slot now.
    pub(crate) fn running(&self) -> usize {
        self.concurrency_max - self.slots.available_permits()
    }

    /// Queries waiting for a slot now.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// A slot now, or after waiting in the queue until `deadline`.
    pub(crate) async fn admit(&self, deadline: Instant, timeout_ms: u64) -> Result<Slot, Error> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(Slot { _permit: permit });
        }
        let position = self.queued.fetch_add(1, Ordering::Relaxed);
        let _in_queue = InQueue(&self.queued);
        if position >= self.queue_max {
            return Err(Error::Busy {
                running: self.running(),
                queued: position,
            });
        }
        match tokio::time::timeout_at(deadline, Arc::clone(&self.slots).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Slot { _permit: permit }),
            // The semaphore is never closed.
            Ok(Err(closed)) => Err(Error::Internal(format!("query slots: {closed}"))),
            Err(_elapsed) => Err(Error::Timeout { ms: timeout_ms }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn queue_full_is_busy_and_slots_come_back() {
        let admission = Arc::new(Admission::new(1, 1));
        let far = Instant::now() + Duration::from_secs(60);
        let first = admission.admit(far, 60_000).await.expect("a free slot");
        assert_eq!(admission.running(), 1);

        let waiter = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.admit(far, 60_000).await.map(|_| ()) })
        };
        let waited_since = Instant::now();
        while admission.queued() == 0 {
            assert!(
                waited_since.elapsed() < Duration::from_secs(5),
                "never queued"
            );
            tokio::task::yield_now().await;
        }
        match admission.admit(far, 60_000).await {
            Err(err @ Error::Busy { .. }) => {
                assert_eq!(err.http_status(), 429);
                assert!(err.to_string().contains("1 running and 1 waiting"), "{err}");
            }
            other => panic!("expected busy, got {other:?}"),
        }
        assert_eq!(admission.queued(), 1, "the refused query left the queue");

        drop(first);
        waiter
            .await
            .expect("join")
            .expect("admitted once the slot was free");
        assert_eq!(admission.queued(), 0);
        assert_eq!(admission.running(), 0);
    }

    #[tokio::test]
    async fn waiting_past_the_deadline_is_a_timeout() {
        let admission = Admission::new(1, 4);
        let _held = admission
            .admit(Instant::now() + Duration::from_secs(60), 60_000)
            .await
            .expect("slot");
        let err = admission
            .admit(Instant::now() + Duration::from_millis(20), 20)
            .await
            .expect_err("no slot frees up");
        assert!(matches!(err, Error::Timeout { ms: 20 }), "{err:?}");
        assert_eq!(admission.queued(), 0);
    }
}
