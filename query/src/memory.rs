//! Two memory limits for every query: its own, and the node's shared by all queries.
//!
//! Each query gets a [`QueryMemoryPool`] (DataFusion's [`MemoryPool`]): a greedy pool of
//! `memory_bytes_max` that reports its largest consumers when full, which also draws
//! every byte from the one [`NodeMemory`] of the engine. A reservation succeeds only if
//! both have room, so one query cannot take more than its share and all of them together
//! cannot take more than the node allows. Dropping a query's reservations (the query
//! ending, failing or being cancelled) gives the bytes back to both.

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
    TrackConsumersPool,
};

use crate::error::MemoryLimitHit;

/// Memory consumers named in a "memory limit exceeded" message.
const MEMORY_CONSUMERS_REPORTED: NonZeroUsize = NonZeroUsize::MIN.saturating_add(4);

/// The node-wide budget every query's pool draws from.
#[derive(Debug)]
pub(crate) struct NodeMemory {
    used_bytes: AtomicUsize,
    bytes_max: usize,
}

impl NodeMemory {
    pub(crate) fn new(bytes_max: usize) -> Self {
        NodeMemory {
            used_bytes: AtomicUsize::new(0),
            bytes_max,
        }
    }

    /// Bytes all running queries hold now.
    pub(crate) fn used_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit; otherwise returns how much was in use.
    fn try_take(&self, bytes: usize) -> Result<(), usize> {
        self.used_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= self.bytes_max)
            })
            .map(|_| ())
    }

    /// Takes `bytes` unconditionally (DataFusion's infallible `grow`).
    fn take(&self, bytes: usize) {
        self.used_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn give_back(&self, bytes: usize) {
        let before = self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(before >= bytes, "node query memory went negative");
    }
}

/// One query's pool: its own limit, and every byte also counted against the node's.
#[derive(Debug)]
pub(crate) struct QueryMemoryPool {
    query: TrackConsumersPool<GreedyMemoryPool>,
    query_bytes_max: usize,
    node: Arc<NodeMemory>,
    /// Set when a reservation failed because of the node's limit, not the query's.
    node_refused: AtomicBool,
}

impl QueryMemoryPool {
    pub(crate) fn new(query_bytes_max: usize, node: Arc<NodeMemory>) -> Self {
        QueryMemoryPool {
            query: TrackConsumersPool::new(
                GreedyMemoryPool::new(query_bytes_max),
                MEMORY_CONSUMERS_REPORTED,
            ),
            query_bytes_max,
            node,
            node_refused: AtomicBool::new(false),
        }
    }

    /// Which limit refused memory, for the error message.
    pub(crate) fn limit_hit(&self) -> MemoryLimitHit {
        if self.node_refused.load(Ordering::Relaxed) {
            MemoryLimitHit::Node {
                bytes_max: self.node.bytes_max,
            }
        } else {
            MemoryLimitHit::Query {
                bytes_max: self.query_bytes_max,
            }
        }
    }

    /// A reservation for bytes the engine holds outside DataFusion's operators (a
    /// collected result).
    pub(crate) fn reservation(self: &Arc<Self>, name: &str) -> MemoryReservation {
        let pool: Arc<dyn MemoryPool> = Arc::clone(self) as Arc<dyn MemoryPool>;
        MemoryConsumer::new(name).register(&pool)
    }
}

impl fmt::Display for QueryMemoryPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "query pool ({} of {} bytes; node {} of {} bytes)",
            self.query.reserved(),
            self.query_bytes_max,
            self.node.used_bytes(),
            self.node.bytes_max
        )
    }
}

impl MemoryPool for QueryMemoryPool {
    fn name(&self) -> &str {
        "quiver-query"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.query.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.query.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.node.take(additional);
        self.query.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.query.shrink(reservation, shrink);
        self.node.give_back(shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        if let Err(used) = self.node.try_take(additional) {
            self.node_refused.store(true, Ordering::Relaxed);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{} could not take {additional} more bytes: all queries hold {used} of \
                 {} bytes",
                reservation.consumer().name(),
                self.node.bytes_max
            )));
        }
        if let Err(err) = self.query.try_grow(reservation, additional) {
            self.node.give_back(additional);
            return Err(err);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.query.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.query_bytes_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_limits_apply_and_bytes_come_back() {
        let node = Arc::new(NodeMemory::new(1000));
        let a = Arc::new(QueryMemoryPool::new(600, Arc::clone(&node)));
        let b = Arc::new(QueryMemoryPool::new(600, Arc::clone(&node)));
        let ra = a.reservation("a");
        let rb = b.reservation("b");
        assert!(ra.try_grow(700).is_err(), "over the query's own limit");
        assert_eq!(a.limit_hit(), MemoryLimitHit::Query { bytes_max: 600 });
        assert_eq!(node.used_bytes(), 0, "a refused grow takes nothing");
        ra.try_grow(600).expect("fits both");
        assert!(rb.try_grow(500).is_err(), "over the node's limit");
        assert_eq!(b.limit_hit(), MemoryLimitHit::Node { bytes_max: 1000 });
        rb.try_grow(400).expect("fits what the node has left");
        assert_eq!(node.used_bytes(), 1000);
        drop(ra);
        assert_eq!(node.used_bytes(), 400);
        rb.shrink(100);
        drop(rb);
        assert_eq!(node.used_bytes(), 0);
    }
}
