//! Settings of the query engine, each with its unit in the name.

/// Limits and tuning of every query the engine runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryConfig {
    /// Partitions (parallel streams) a query plan aims for; usually the number of cores.
    pub target_partitions: usize,
    /// Rows per Arrow batch inside the engine.
    pub batch_size: usize,
    /// Wall-clock limit of one query, from admission (queueing included) to its last
    /// batch, in milliseconds.
    pub timeout_ms: u64,
    /// Memory one query may hold at once (operators' state and a collected result),
    /// in bytes. Nothing spills to disk: past this limit the query fails.
    pub memory_bytes_max: usize,
    /// Memory all running queries together may hold, in bytes: every query's pool also
    /// draws from this one, so many medium queries cannot add up to an out-of-memory.
    pub node_memory_bytes_max: usize,
    /// Queries executing at once; more wait in the queue.
    pub concurrency_max: usize,
    /// Queries waiting for a slot; beyond this a query is refused as busy (HTTP 429).
    pub queue_max: usize,
    /// Worker threads of the query runtime, which runs nothing but queries.
    pub threads: usize,
    /// Row pairs a nested-loop or cross join may compare, by the sound row bounds known
    /// when it is planned. Such a join can run without pausing, so a cancelled query
    /// could not stop during it; larger joins are refused (400) instead. 0 turns the
    /// check off.
    pub join_pairs_max: u64,
    /// Nice value (0..=19) of the query threads, so that under CPU contention the
    /// ingest path, on the main runtime at nice 0, gets most of the CPU. 0 disables it.
    pub thread_nice: i32,
    /// Memory for Parquet footers and page indexes kept across queries, in bytes.
    /// Files never change once written, so a repeated query reads none of them again;
    /// with files in a bucket each one saved is a round trip.
    pub footer_cache_bytes_max: usize,
    /// Group keys that arrive in runs (files are sorted by their tags) are aggregated
    /// and de-duplicated run by run instead of hashed row by row
    /// (`RunPartialAggregateExec`, `CollapseRunsExec`). Answers are the same either
    /// way; off is for measuring the difference, or for ruling these operators out.
    pub group_runs: bool,
}

/// Default of [`QueryConfig::join_pairs_max`]: a few seconds of one core's work.
pub const JOIN_PAIRS_MAX_DEFAULT: u64 = 1_000_000_000;

/// Longest SQL text accepted, in bytes; longer statements are refused before parsing.
pub const SQL_BYTES_MAX: usize = 1024 * 1024;

/// Most binary operators (`OR`, `AND`, `=`, `+`, `UNION`, `JOIN`, ...) one statement may
/// hold. A chain `a OR b OR ...` parses into a tree as deep as it is long, and DataFusion
/// walks expression trees recursively while planning and executing: about 1,000 such
/// operators overflow a 2 MiB thread stack and abort the process. IN lists are flat and
/// do not count against this.
pub const EXPRESSION_OPERATORS_MAX: usize = 500;

/// Seconds a client refused as busy is told to wait (`Retry-After`).
pub const BUSY_RETRY_AFTER_S: u32 = 1;

/// Stack of every query thread: planning recurses over expression trees, and a deep
/// (but legal) expression must fail with an error, not overflow a 2 MiB stack.
pub const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Results (batches or encoded chunks) a running query may have produced ahead of its
/// consumer; bounds the memory of a result the client reads slowly.
pub const RESULT_CHUNKS_AHEAD_MAX: usize = 2;

impl Default for QueryConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        QueryConfig {
            target_partitions: cores,
            batch_size: 8192,
            timeout_ms: 60_000,
            memory_bytes_max: 1024 * 1024 * 1024,
            node_memory_bytes_max: 2 * 1024 * 1024 * 1024,
            concurrency_max: 2 * cores,
            queue_max: 64,
            threads: cores,
            join_pairs_max: JOIN_PAIRS_MAX_DEFAULT,
            thread_nice: 10,
            footer_cache_bytes_max: 64 * 1024 * 1024,
            group_runs: true,
        }
    }
}

impl QueryConfig {
    /// The same settings with zeros (which DataFusion cannot use) raised to one, a zero
    /// join limit meaning none, and the nice value clamped to what Linux accepts.
    pub(crate) fn sanitized(mut self) -> Self {
        self.target_partitions = self.target_partitions.max(1);
        self.batch_size = self.batch_size.max(1);
        self.timeout_ms = self.timeout_ms.max(1);
        self.memory_bytes_max = self.memory_bytes_max.max(1);
        self.node_memory_bytes_max = self.node_memory_bytes_max.max(1);
        self.concurrency_max = self.concurrency_max.max(1);
        self.threads = self.threads.max(1);
        self.thread_nice = self.thread_nice.clamp(0, 19);
        if self.join_pairs_max == 0 {
            self.join_pairs_max = u64::MAX;
        }
        self
    }
}
