//! Which node runs a stage, and how the nodes reach each other's workers.
//!
//! A stage over a measurement held elsewhere goes to the first member of its group
//! that has a worker address and did not just fail to answer (the group's members come
//! preferred first: the member that last answered this node). Every call carries the
//! cluster secret, which the receiving worker checks before decoding anything; a call
//! that fails before the worker answered marks that worker ([`UnreachableWorkers`]).

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
use super::unreachable::UnreachableWorkers;

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
    pub(crate) unreachable: Arc<UnreachableWorkers>,
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
        let urls: Vec<Url> = members
            .iter()
            .filter_map(|&m| self.directory.url(m))
            .collect();
        // Every member just failed: try the first again rather than fail unasked.
        let url = urls
            .iter()
            .find(|url| !self.unreachable.avoid(url))
            .or(urls.first())
            .cloned();
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
/// A call that fails before the worker answered marks the worker unreachable.
#[derive(Clone)]
pub(crate) struct SecretChannels {
    inner: DefaultChannelResolver,
    secret: Arc<str>,
    unreachable: Arc<UnreachableWorkers>,
}

impl SecretChannels {
    pub(crate) fn new(secret: &str, unreachable: Arc<UnreachableWorkers>) -> Self {
        SecretChannels {
            inner: DefaultChannelResolver::default(),
            secret: secret.into(),
            unreachable,
        }
    }
}

#[async_trait]
impl ChannelResolver for SecretChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = match self.inner.get_channel(url).await {
            Ok(channel) => channel,
            Err(e) => {
                self.unreachable.mark(url);
                return Err(e);
            }
        };
        let (unreachable, failed_url) = (Arc::clone(&self.unreachable), url.clone());
        let value = http::HeaderValue::from_str(&self.secret)
            .map_err(|e| DataFusionError::Configuration(format!("cluster secret: {e}")))?;
        let with_secret = tower::ServiceBuilder::new()
            .map_request(move |mut request: http::Request<tonic::body::Body>| {
                request
                    .headers_mut()
                    .insert(WORKER_SECRET_HEADER, value.clone());
                request
            })
            .map_err(move |e: tonic::transport::Error| {
                // No answer at all (a refused or broken connection): errors the worker
                // answers with arrive as statuses inside a response, not here.
                unreachable.mark(&failed_url);
                e
            })
            .service(channel);
        Ok(create_worker_client(BoxCloneSyncChannel::new(with_secret)))
    }
}
