//! The one error type of quiver-query, split by who must act and mapped to HTTP status.

use datafusion::error::DataFusionError;

/// Why a query failed. Every variant carries a message fit to show the client.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The statement is not a read-only query (DDL, DML, `COPY`, `SET`, ...).
    #[error("{0}")]
    Refused(String),
    /// The SQL does not parse or plan, or fails on the data (the engine's own message).
    #[error("{0}")]
    Sql(String),
    /// The query ran past its time limit and was cancelled.
    #[error("query cancelled after exceeding its time limit of {ms} ms")]
    Timeout {
        /// The limit that was exceeded, in milliseconds.
        ms: u64,
    },
    /// The query needed more memory than its own limit or the node's shared query
    /// memory allows.
    #[error("{0}")]
    ResourcesExhausted(String),
    /// Every query slot is taken and the wait queue is full; try again shortly.
    #[error(
        "too many queries: {running} running and {queued} waiting, the most this node \
         takes (query.concurrency_max, query.queue_max); retry in a moment"
    )]
    Busy {
        /// Queries running when this one was refused.
        running: usize,
        /// Queries waiting when this one was refused.
        queued: usize,
    },
    /// The Parquet files could not be read from where they are kept (the object store
    /// is unreachable, a request to it timed out): the query may succeed once it is
    /// back.
    #[error("the stored files cannot be read now; retry later: {0}")]
    StoreUnavailable(String),
    /// A node holding data the query reads could not be reached (every member of a
    /// group, or the one a stage ran on after reruns): the query may succeed once the
    /// cluster has healed.
    #[error("{0}")]
    Unavailable(String),
    /// A fault on the server side (storage, I/O, a bug); not the client's doing.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// The HTTP status the API answers with for this error.
    pub fn http_status(&self) -> u16 {
        match self {
            Error::Refused(_) | Error::Sql(_) => 400,
            Error::Timeout { .. } => 504,
            Error::ResourcesExhausted(_) => 507,
            Error::Busy { .. } => 429,
            Error::StoreUnavailable(_) | Error::Unavailable(_) => 503,
            Error::Internal(_) => 500,
        }
    }

    /// Seconds the client should wait before retrying, for errors that are about load
    /// rather than the request (`Retry-After`).
    pub fn retry_after_s(&self) -> Option<u32> {
        match self {
            Error::Busy { .. } | Error::StoreUnavailable(_) | Error::Unavailable(_) => {
                Some(crate::config::BUSY_RETRY_AFTER_S)
            }
            _ => None,
        }
    }

    /// Says which memory limit a [`Error::ResourcesExhausted`] hit, and what to do about
    /// it; other errors pass unchanged.
    pub(crate) fn with_memory_limit(self, limit: MemoryLimitHit) -> Error {
        let Error::ResourcesExhausted(engine) = self else {
            return self;
        };
        Error::ResourcesExhausted(match limit {
            MemoryLimitHit::Query { bytes_max } => format!(
                "query exceeded its memory limit of {bytes_max} bytes \
                 (query.memory_bytes_max); read less (narrow the time range, filter, \
                 aggregate or add LIMIT): {engine}"
            ),
            MemoryLimitHit::Node { bytes_max } => format!(
                "queries running on this node together reached their shared memory limit \
                 of {bytes_max} bytes (query.node_memory_bytes_max); retry when fewer \
                 queries run, or read less: {engine}"
            ),
        })
    }
}

/// Which of the two memory limits a query ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryLimitHit {
    /// Its own pool (`memory_bytes_max`).
    Query {
        /// The per-query limit.
        bytes_max: usize,
    },
    /// The node's pool shared by all queries (`node_memory_bytes_max`).
    Node {
        /// The node-wide limit.
        bytes_max: usize,
    },
}

impl From<DataFusionError> for Error {
    fn from(err: DataFusionError) -> Self {
        let message = err.strip_backtrace();
        // A read the object store failed (the bucket unreachable, a timeout), however
        // deep in Parquet's or DataFusion's errors it is wrapped: Parquet's reader keeps
        // only the store error's text, so the text is what there is to go by.
        if matches!(err.find_root(), DataFusionError::ObjectStore(_))
            || message.contains("Object Store error")
        {
            return Error::StoreUnavailable(message);
        }
        if let DataFusionError::External(e) = err.find_root() {
            if let Some(quiver_storage::Error::GroupUnreachable(_)) = e.downcast_ref() {
                return Error::Unavailable(message);
            }
        }
        match err.find_root() {
            DataFusionError::ResourcesExhausted(_) => Error::ResourcesExhausted(message),
            DataFusionError::Internal(_)
            | DataFusionError::IoError(_)
            | DataFusionError::ObjectStore(_)
            | DataFusionError::ParquetError(_)
            | DataFusionError::ExecutionJoin(_)
            | DataFusionError::External(_) => Error::Internal(message),
            DataFusionError::ArrowError(arrow_err, _) => match arrow_err.as_ref() {
                arrow::error::ArrowError::IoError(..)
                | arrow::error::ArrowError::ExternalError(_)
                | arrow::error::ArrowError::MemoryError(_) => Error::Internal(message),
                _ => Error::Sql(message),
            },
            // Plan, SQL, schema, not-implemented, configuration and execution errors are
            // about the query the client sent.
            _ => Error::Sql(message),
        }
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(err: arrow::error::ArrowError) -> Self {
        Error::Internal(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_api_contract() {
        assert_eq!(Error::Refused("x".into()).http_status(), 400);
        assert_eq!(Error::Sql("x".into()).http_status(), 400);
        assert_eq!(Error::Timeout { ms: 1 }.http_status(), 504);
        assert_eq!(Error::ResourcesExhausted("x".into()).http_status(), 507);
        assert_eq!(Error::Internal("x".into()).http_status(), 500);
        let busy = Error::Busy {
            running: 2,
            queued: 3,
        };
        assert_eq!(busy.http_status(), 429);
        assert_eq!(busy.retry_after_s(), Some(1));
    }

    #[test]
    fn memory_errors_are_resources_exhausted() {
        let err = DataFusionError::ResourcesExhausted("no room".into()).context("sorting");
        assert!(matches!(Error::from(err), Error::ResourcesExhausted(_)));
    }
}
