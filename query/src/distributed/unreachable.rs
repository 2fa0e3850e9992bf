//! Workers a call recently failed to reach, so that a stage goes to another member of
//! its group, and so that the query that met the failure can tell it may run again.
//!
//! A stage over a killed node fails before it has produced a row (the connection is
//! refused, or the node went away before answering). The receiving node marks that
//! worker, plans the query again (routing now skips the marked worker) and runs it on
//! the group's next member: the client gets its answer, not an error, as long as one
//! member of every group it reads can be reached.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionConfig;
use parking_lot::Mutex;
use url::Url;

/// How long a worker that could not be reached is passed over (unless every member
/// of a group is: then the first is tried anyway).
const AVOID_FOR: Duration = Duration::from_secs(10);

/// Most times one query is run again after a worker failed it (each run must have
/// met a new failure: a group of three members has two to skip).
const RERUNS_MAX: u32 = 4;

/// See the module documentation. One per engine, shared by its queries.
#[derive(Debug, Default)]
pub struct UnreachableWorkers {
    since: Mutex<HashMap<Url, Instant>>,
    /// Failures recorded so far: a query compares it before and after a run to know
    /// whether a worker failed it.
    failures: AtomicU64,
}

impl UnreachableWorkers {
    /// Records that a call to `url` failed before the worker answered.
    pub(crate) fn mark(&self, url: &Url) {
        tracing::debug!(%url, "query worker could not be reached; its stages go elsewhere for a while");
        metrics::counter!("quiver_query_worker_unreachable_total").increment(1);
        self.since.lock().insert(url.clone(), Instant::now());
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether `url` failed within the last [`AVOID_FOR`].
    pub(crate) fn avoid(&self, url: &Url) -> bool {
        let mut since = self.since.lock();
        match since.get(url) {
            Some(at) if at.elapsed() < AVOID_FOR => true,
            Some(_) => {
                since.remove(url);
                false
            }
            None => false,
        }
    }

    /// Failures recorded so far (only ever grows).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// Watches one query's runs: a run that fails after a worker could not be reached,
/// before the query sent anything, may run again (planned anew, so routed anew).
pub(crate) struct Reruns {
    workers: Option<Arc<UnreachableWorkers>>,
    failures_before: u64,
    reruns: u32,
}

impl Reruns {
    /// Watches runs planned with `config` (its engine's record, if it distributes).
    pub(crate) fn new(config: &SessionConfig) -> Self {
        Reruns {
            workers: config.get_extension::<UnreachableWorkers>(),
            failures_before: 0,
            reruns: 0,
        }
    }

    /// Called as a run starts.
    pub(crate) fn starting(&mut self) {
        self.failures_before = self.workers.as_ref().map_or(0, |w| w.failures());
    }

    /// Whether the run that just failed should run again: a worker failed during it
    /// and the query has reruns left.
    pub(crate) fn run_again(&mut self) -> bool {
        if !self.worker_failed() || self.reruns >= RERUNS_MAX {
            return false;
        }
        self.reruns += 1;
        metrics::counter!("quiver_query_reruns_after_unreachable_worker_total").increment(1);
        true
    }

    /// Whether a worker failed during the last run (its error is then about the
    /// cluster, not the query).
    pub(crate) fn worker_failed(&self) -> bool {
        self.workers
            .as_ref()
            .is_some_and(|w| w.failures() > self.failures_before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_worker_is_avoided_and_counted() {
        let workers = UnreachableWorkers::default();
        let (a, b) = (
            Url::parse("http://127.0.0.1:1").unwrap(),
            Url::parse("http://127.0.0.1:2").unwrap(),
        );
        assert!(!workers.avoid(&a));
        assert_eq!(workers.failures(), 0);
        workers.mark(&a);
        assert!(workers.avoid(&a));
        assert!(!workers.avoid(&b));
        assert_eq!(workers.failures(), 1);
    }

    #[test]
    fn a_run_is_repeated_only_after_a_new_failure_and_only_so_often() {
        let workers = Arc::new(UnreachableWorkers::default());
        let config = SessionConfig::new().with_extension(Arc::clone(&workers));
        let mut reruns = Reruns::new(&config);
        reruns.starting();
        assert!(!reruns.run_again(), "a query's own error is not rerun");
        let url = Url::parse("http://127.0.0.1:1").unwrap();
        for _ in 0..RERUNS_MAX {
            reruns.starting();
            workers.mark(&url);
            assert!(reruns.run_again());
        }
        reruns.starting();
        workers.mark(&url);
        assert!(!reruns.run_again(), "reruns are bounded");
        assert!(reruns.worker_failed());
        let mut without = Reruns::new(&SessionConfig::new());
        without.starting();
        assert!(!without.run_again());
    }
}
