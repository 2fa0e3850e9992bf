//! The query runtime: a Tokio runtime of its own, so queries cannot starve ingest.
//!
//! DataFusion runs a plan as Tokio tasks (one or more per partition) on whatever runtime
//! polls it, and a CPU-bound aggregation does not yield for milliseconds at a time. On
//! the node's main runtime, which also serves writes, applies Raft entries and answers
//! heartbeats, a few heavy queries would occupy every worker thread and delay all of
//! that. So every query is planned and executed on this runtime instead:
//!
//! * its `threads` worker threads are the only place query work runs (the HTTP handler
//!   only moves finished chunks to the socket);
//! * on Linux those threads (and its blocking pool) run at nice `thread_nice` (10 by
//!   default): when queries and ingest compete for CPU, the scheduler gives the main
//!   runtime about nine times their share, and when the machine is otherwise idle queries
//!   still get every core;
//! * how many queries run on it at once is bounded by the engine's admission.

use tokio::runtime::{Builder, Handle, Runtime};

use crate::config::THREAD_STACK_BYTES;
use crate::error::Error;

/// Owns the runtime; shutting it down does not wait for queries still running.
#[derive(Debug)]
pub(crate) struct QueryRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl QueryRuntime {
    /// A multi-threaded runtime of `threads` workers named `quiver-query`.
    pub(crate) fn new(threads: usize, thread_nice: i32) -> Result<Self, Error> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("quiver-query")
            .thread_stack_size(THREAD_STACK_BYTES)
            .on_thread_start(move || lower_thread_priority(thread_nice))
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the query runtime: {e}")))?;
        let handle = runtime.handle().clone();
        Ok(QueryRuntime {
            runtime: Some(runtime),
            handle,
        })
    }

    /// Where query tasks are spawned.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for QueryRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside another runtime; this does not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Sets the calling thread's nice value (Linux keeps one per thread).
#[cfg(target_os = "linux")]
fn lower_thread_priority(nice: i32) {
    if nice <= 0 {
        return;
    }
    // SAFETY: setpriority only reads its integer arguments; `who = 0` is the calling
    // thread on Linux, so no other thread or process is affected.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc != 0 {
        tracing::warn!(
            nice,
            error = %std::io::Error::last_os_error(),
            "cannot lower the priority of a query thread"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_thread_priority(_nice: i32) {}
