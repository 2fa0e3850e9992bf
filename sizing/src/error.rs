//! The one error type of the sizing tools' library code.

use std::path::PathBuf;

/// What can go wrong while sizing. A failed *gate* is not an error of the tool: it is
/// a result, written to the report first and then returned as [`Error::GateFailed`]
/// so that the command exits non-zero naming it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag or combination of flags that cannot work.
    #[error("{0}")]
    InvalidArgs(String),
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// What was being read or written.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// An HTTP request could not be sent or its answer read.
    #[error("{what}: {source}")]
    Http {
        /// Which request.
        what: String,
        /// Why it failed.
        source: reqwest::Error,
    },
    /// A node answered, but not with what the tool needs.
    #[error("{what}: HTTP {status}: {body}")]
    Server {
        /// Which request.
        what: String,
        /// The answer's status.
        status: u16,
        /// The first bytes of the answer's body.
        body: String,
    },
    /// An answer or a file was not the JSON expected.
    #[error("{what}: {detail}")]
    Malformed {
        /// What was being parsed.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
    /// A node did not start, or did not become ready in time.
    #[error("node {what}: {detail}")]
    Node {
        /// Which node (its URL or id).
        what: String,
        /// What happened, with the end of its log when there is one.
        detail: String,
    },
    /// The failover drill failed (it keeps its own error type).
    #[error("failover drill: {0}")]
    Drill(String),
    /// A gate failed on a chosen operating point; the report has been written.
    #[error("gate failed: {0}")]
    GateFailed(String),
}

impl Error {
    /// An [`Error::Io`] naming `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Http`] naming the request.
    pub fn http(what: impl Into<String>, source: reqwest::Error) -> Error {
        Error::Http {
            what: what.into(),
            source,
        }
    }

    /// An [`Error::Malformed`] naming what was parsed.
    pub fn malformed(what: impl ToString, detail: impl ToString) -> Error {
        Error::Malformed {
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// Results of the sizing library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
