//! Which node runs a stage, and how the nodes reach each other's workers.
//!
//! A stage over a measurement held elsewhere goes to the first member of its group
//! that has a worker address (the group's members come preferred first: the member
//! that last answered this node). Every call carries the cluster secret, which the
//! receiving worker checks before decoding anything.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion_distributed::grpc::{
    create_worker_client, BoxCloneSyncChannel, DefaultChannelResolver,
};
use datafusion_distributed::{
    ChannelResolver, RouteTasksEvent, RouteTasksEventResponse, RouteTasksHandler, WorkerChannel,
    WorkerResolver,
};
use url::Url;

use super::group_scan::GroupScanExec;

/// The header carrying the cluster secret on calls between workers.
pub const WORKER_SECRET_HEADER: &str = "x-quiver-cluster-secret";

/// The query workers of the cluster's nodes, by node id.
pub trait WorkerDirectory: Send + Sync + 'static {
    /// The worker of node `node`, if it has one.
    fn url(&self, node: u64) -> Option<Url>;
    /// Every node's worker.
    fn all(&self) -> Vec<Url>;
}

/// Sends a stage over a remote measurement to a member of its group.
pub(crate) struct ToTheData {
    pub(crate) directory: Arc<dyn WorkerDirectory>,
}

impl RouteTasksHandler for ToTheData {
    fn handle(&self, ev: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
        let mut members: Option<(String, u64, Vec<u64>)> = None;
        let walked = ev.plan.apply(|node| {
            if let Some(scan) = node.downcast_ref::<GroupScanExec>() {
                let s = scan.scan();
                members = Some((s.measurement.clone(), s.group, s.members.clone()));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if let Err(e) = walked {
            return Some(Err(e));
        }
        let (measurement, group, members) = members?;
        let url = members.iter().find_map(|&m| self.directory.url(m));
        Some(match url {
            Some(url) => Ok(RouteTasksEventResponse::new(vec![url; ev.task_count])),
            None => Err(DataFusionError::Execution(format!(
                "measurement {measurement} is in data group {group}, held by nodes {members:?}, \
                 and none of them has a query worker address (cluster.query_workers)"
            ))),
        })
    }
}

/// Every node's worker, for the library's own bookkeeping (stages are routed by
/// [`ToTheData`]).
pub(crate) struct Directory(pub(crate) Arc<dyn WorkerDirectory>);

impl WorkerResolver for Directory {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.all())
    }
}

/// Connections to workers, reused per address, each call carrying the cluster secret.
#[derive(Clone)]
pub(crate) struct SecretChannels {
    inner: DefaultChannelResolver,
    secret: Arc<str>,
}

impl SecretChannels {
    pub(crate) fn new(secret: &str) -> Self {
        SecretChannels {
            inner: DefaultChannelResolver::default(),
            secret: secret.into(),
        }
    }
}

#[async_trait]
impl ChannelResolver for SecretChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = self.inner.get_channel(url).await?;
        let value = http::HeaderValue::from_str(&self.secret)
            .map_err(|e| DataFusionError::Configuration(format!("cluster secret: {e}")))?;
        let with_secret = tower::ServiceBuilder::new()
            .map_request(move |mut request: http::Request<tonic::body::Body>| {
                request
                    .headers_mut()
                    .insert(WORKER_SECRET_HEADER, value.clone());
                request
            })
            .service(channel);
        Ok(create_worker_client(BoxCloneSyncChannel::new(with_secret)))
    }
}
