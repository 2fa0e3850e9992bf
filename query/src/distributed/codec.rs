//! How a [`GroupScanExec`] crosses the network: its description as protobuf, decoded on
//! the node that runs it into a scan of that node's tables.
//!
//! DataFusion's own operators in a stage are encoded by datafusion-proto; functions
//! (Quiver's `avg`, `time_bucket`, ...) travel by name and resolve in the receiving
//! node's registry, which holds the same functions (`worker`).

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::Serializeable;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf;
use prost::Message;
use quiver_storage::TableSource;

use super::group_scan::{GroupScan, GroupScanExec};

/// Encodes and decodes Quiver's plan nodes; decoded scans read `source`.
pub(crate) struct QuiverCodec {
    source: Arc<dyn TableSource>,
}

impl QuiverCodec {
    pub(crate) fn new(source: Arc<dyn TableSource>) -> Self {
        QuiverCodec { source }
    }
}

impl fmt::Debug for QuiverCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QuiverCodec")
    }
}

/// A [`GroupScan`] on the wire.
#[derive(Clone, PartialEq, prost::Message)]
struct GroupScanProto {
    #[prost(string, tag = "1")]
    database: String,
    #[prost(string, tag = "2")]
    measurement: String,
    #[prost(uint64, tag = "3")]
    group: u64,
    #[prost(uint64, repeated, tag = "4")]
    members: Vec<u64>,
    /// Present: `projection` lists the columns (possibly none).
    #[prost(bool, tag = "5")]
    projected: bool,
    #[prost(uint64, repeated, tag = "6")]
    projection: Vec<u64>,
    /// Each filter as datafusion-proto's logical expression bytes.
    #[prost(bytes = "vec", repeated, tag = "7")]
    filters: Vec<Vec<u8>>,
    #[prost(uint64, optional, tag = "8")]
    limit: Option<u64>,
    #[prost(message, optional, tag = "9")]
    table_schema: Option<protobuf::Schema>,
    #[prost(uint64, tag = "10")]
    partitions: u64,
}

fn wire_error(what: impl fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("a shipped Quiver scan: {what}"))
}

impl PhysicalExtensionCodec for QuiverCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return Err(wire_error(format!(
                "{} inputs, none expected",
                inputs.len()
            )));
        }
        let proto = GroupScanProto::decode(buf).map_err(wire_error)?;
        let schema: Schema = proto
            .table_schema
            .as_ref()
            .ok_or_else(|| wire_error("no schema"))?
            .try_into()?;
        let filters = proto
            .filters
            .iter()
            .map(|bytes| Expr::from_bytes_with_ctx(bytes, ctx))
            .collect::<Result<Vec<_>>>()?;
        let to_usize = |v: u64| usize::try_from(v).map_err(wire_error);
        let scan = GroupScan {
            database: proto.database,
            measurement: proto.measurement,
            group: proto.group,
            members: proto.members,
            projection: match proto.projected {
                true => Some(
                    proto
                        .projection
                        .into_iter()
                        .map(to_usize)
                        .collect::<Result<Vec<_>>>()?,
                ),
                false => None,
            },
            filters,
            limit: proto.limit.map(to_usize).transpose()?,
            table_schema: Arc::new(schema),
            partitions: to_usize(proto.partitions)?,
        };
        Ok(Arc::new(GroupScanExec::new(
            scan,
            Arc::clone(&self.source),
        )?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(exec) = node.downcast_ref::<GroupScanExec>() else {
            return Err(DataFusionError::NotImplemented(format!(
                "{} cannot run on another node",
                node.name()
            )));
        };
        let scan = exec.scan();
        let filters = scan
            .filters
            .iter()
            .map(|f| f.to_bytes().map(|b| b.to_vec()))
            .collect::<Result<Vec<_>>>()?;
        let proto = GroupScanProto {
            database: scan.database.clone(),
            measurement: scan.measurement.clone(),
            group: scan.group,
            members: scan.members.clone(),
            projected: scan.projection.is_some(),
            projection: scan
                .projection
                .iter()
                .flatten()
                .map(|&i| i as u64)
                .collect(),
            filters,
            limit: scan.limit.map(|l| l as u64),
            table_schema: Some(scan.table_schema.as_ref().try_into()?),
            partitions: scan.partitions as u64,
        };
        proto.encode(buf).map_err(wire_error)
    }
}
