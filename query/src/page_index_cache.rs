//! Parquet readers whose cached metadata keeps the page index.
//!
//! DataFusion's Parquet opener asks for a file's metadata without its page index and
//! loads the index afterwards, only when a predicate needs it; that second load is
//! never put into the metadata cache. So a query filtering on a host read and decoded
//! the page index of every file it opened, every time: a `perf` profile of TSBS
//! `single-groupby-1-1-1` in a loop put 6–9 % of the node's CPU there
//! (`load_page_index`, `parse_index_data`). Files never change once written, so these
//! readers ask for the page index with the footer; the cache keeps both (within
//! `query.footer_cache_bytes_max`), and the opener finds the index already loaded.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::future::BoxFuture;
use futures::FutureExt;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};

/// [`CachedParquetFileReaderFactory`], its readers always fetching the page index.
#[derive(Debug)]
pub(crate) struct PageIndexedReaderFactory(pub(crate) CachedParquetFileReaderFactory);

impl ParquetFileReaderFactory for PageIndexedReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::common::Result<Box<dyn AsyncFileReader + Send>> {
        let inner = self.0.create_reader(
            partition_index,
            partitioned_file,
            metadata_size_hint,
            metrics,
        )?;
        Ok(Box::new(PageIndexedReader(inner)))
    }
}

/// A reader that asks for the page index whenever it is asked for metadata.
struct PageIndexedReader(Box<dyn AsyncFileReader + Send>);

impl AsyncFileReader for PageIndexedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.0.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.0.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        // `Optional`: a file written without a page index still opens.
        let with_index = options
            .cloned()
            .unwrap_or_default()
            .with_page_index_policy(PageIndexPolicy::Optional);
        async move { self.0.get_metadata(Some(&with_index)).await }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, RecordBatch};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};

    use super::*;

    /// A file of 10,000 rows in pages of 1,000 with page statistics, in `store`.
    async fn paged_file(store: &Arc<dyn ObjectStore>) -> PartitionedFile {
        let batch = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from_iter_values(0..10_000)) as _,
        )])
        .unwrap();
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_data_page_row_count_limit(1_000)
            .build();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let path = Path::from("f.parquet");
        store.put(&path, bytes.into()).await.unwrap();
        PartitionedFile::from(store.head(&path).await.unwrap())
    }

    async fn has_page_index(
        factory: &dyn ParquetFileReaderFactory,
        file: &PartitionedFile,
    ) -> bool {
        // What DataFusion's opener asks for: the footer, no page index.
        let skip = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Skip);
        let mut reader = factory
            .create_reader(0, file.clone(), None, &ExecutionPlanMetricsSet::new())
            .unwrap();
        let metadata = reader.get_metadata(Some(&skip)).await.unwrap();
        metadata.column_index().is_some() && metadata.offset_index().is_some()
    }

    #[tokio::test]
    async fn the_cached_metadata_keeps_the_page_index() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let file = paged_file(&store).await;
        let runtime = RuntimeEnvBuilder::new()
            .with_metadata_cache_limit(1 << 20)
            .build_arc()
            .unwrap();
        let cache = runtime.cache_manager.get_file_metadata_cache();
        let plain = CachedParquetFileReaderFactory::new(Arc::clone(&store), Arc::clone(&cache));
        let indexed = PageIndexedReaderFactory(CachedParquetFileReaderFactory::new(
            Arc::clone(&store),
            cache,
        ));
        assert!(
            !has_page_index(&plain, &file).await,
            "DataFusion's reader caches the footer alone"
        );
        assert!(has_page_index(&indexed, &file).await);
        assert!(
            has_page_index(&plain, &file).await,
            "the cache now holds the page index for every reader"
        );
    }
}
