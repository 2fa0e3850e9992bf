//! Settings of the query engine, each with its unit in the name.

/// Limits and tuning of every query the engine runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryConfig {
    /// Partitions (parallel streams) a query plan aims for; usually the number of cores.
    pub target_partitions: usize,
    /// Rows per Arrow batch inside the engine.
    pub batch_size: usize,
    /// Wall-clock limit of one query, planning and execution together, in milliseconds.
    pub timeout_ms: u64,
    /// Memory one query may hold at once (operators' state and the collected result),
    /// in bytes. Nothing spills to disk: past this limit the query fails.
    pub memory_bytes_max: usize,
}

/// Longest SQL text accepted, in bytes; longer statements are refused before parsing.
pub const SQL_BYTES_MAX: usize = 1024 * 1024;

/// Most binary operators (`OR`, `AND`, `=`, `+`, `UNION`, `JOIN`, ...) one statement may
/// hold. A chain `a OR b OR ...` parses into a tree as deep as it is long, and DataFusion
/// walks expression trees recursively while planning and executing: about 1,000 such
/// operators overflow a 2 MiB thread stack and abort the process. IN lists are flat and
/// do not count against this.
pub const EXPRESSION_OPERATORS_MAX: usize = 500;

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            target_partitions: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            batch_size: 8192,
            timeout_ms: 60_000,
            memory_bytes_max: 1024 * 1024 * 1024,
        }
    }
}

impl QueryConfig {
    /// The same settings with zeros (which DataFusion cannot use) raised to one.
    pub(crate) fn sanitized(mut self) -> Self {
        self.target_partitions = self.target_partitions.max(1);
        self.batch_size = self.batch_size.max(1);
        self.timeout_ms = self.timeout_ms.max(1);
        self
    }
}
