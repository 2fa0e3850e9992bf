//! The two sides of a distributed query's session: the receiving node's (which plans,
//! routes and merges) and the worker's (which decodes and runs a stage).

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion_distributed::{
    DistributedExt, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext,
};
use quiver_storage::TableSource;

use super::codec::QuiverCodec;
use super::routing::{Directory, SecretChannels, ToTheData, WorkerDirectory};
use super::unreachable::UnreachableWorkers;

/// What a node needs to run scans on other nodes: where their workers are, and the
/// secret their calls carry.
#[derive(Clone)]
pub struct Distribution {
    /// The cluster's query workers.
    pub directory: Arc<dyn WorkerDirectory>,
    /// The cluster secret (`cluster.secret`), sent with every call to a worker.
    pub secret: String,
    /// Workers that just failed a call, passed over for a while; shared by every
    /// query of the engine.
    pub unreachable: Arc<UnreachableWorkers>,
}

impl Distribution {
    /// The workers in `directory`, reached with `secret`, none known unreachable yet.
    pub fn new(directory: Arc<dyn WorkerDirectory>, secret: String) -> Self {
        Distribution {
            directory,
            secret,
            unreachable: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distribution").finish_non_exhaustive()
    }
}

/// `builder` able to send stages to other nodes (the planning side).
pub(crate) fn coordinator(
    builder: SessionStateBuilder,
    distribution: &Distribution,
    source: &Arc<dyn TableSource>,
) -> SessionStateBuilder {
    let mut builder = builder
        .with_distributed_user_codec(QuiverCodec::new(Arc::clone(source)))
        .with_distributed_worker_resolver(Directory(Arc::clone(&distribution.directory)))
        .with_distributed_channel_resolver(SecretChannels::new(
            &distribution.secret,
            Arc::clone(&distribution.unreachable),
        ))
        .with_distributed_route_tasks_handler(ToTheData {
            directory: Arc::clone(&distribution.directory),
            unreachable: Arc::clone(&distribution.unreachable),
        });
    // The query that meets an unreachable worker finds the record here (`produce`).
    if let Some(config) = builder.config() {
        config.set_extension(Arc::clone(&distribution.unreachable));
    }
    builder
}

/// The worker that runs stages other nodes send: `functions_from` lends it Quiver's
/// functions (stages name them), its scans read `source`, and its memory comes from
/// `runtime` (the node's query memory).
pub(crate) fn worker(
    functions_from: &SessionState,
    distribution: &Distribution,
    source: &Arc<dyn TableSource>,
    runtime: Arc<RuntimeEnv>,
    group_runs: bool,
) -> Worker {
    let scalar: Vec<_> = functions_from
        .scalar_functions()
        .values()
        .cloned()
        .collect();
    let aggregate: Vec<_> = functions_from
        .aggregate_functions()
        .values()
        .cloned()
        .collect();
    let window: Vec<_> = functions_from
        .window_functions()
        .values()
        .cloned()
        .collect();
    let source = Arc::clone(source);
    let secret = distribution.secret.clone();
    let directory = Arc::clone(&distribution.directory);
    let unreachable = Arc::clone(&distribution.unreachable);
    Worker::from_session_builder(move |ctx: WorkerQueryContext| {
        let builder = ctx
            .builder
            .with_scalar_functions(scalar.clone())
            .with_aggregate_functions(aggregate.clone())
            .with_window_functions(window.clone())
            .with_distributed_user_codec(QuiverCodec::new(Arc::clone(&source)))
            .with_distributed_channel_resolver(SecretChannels::new(
                &secret,
                Arc::clone(&unreachable),
            ))
            .with_distributed_worker_resolver(Directory(Arc::clone(&directory)));
        let builder = match group_runs {
            true => builder.with_distributed_worker_plan_rewrite_handler(quiver_rules_again),
            false => builder,
        };
        async move { Ok::<_, datafusion::error::DataFusionError>(builder.build()) }
    })
    .with_runtime_env(runtime)
}

/// Quiver's own run-by-run partial aggregation, applied again to a stage it was
/// taken out of for shipping (`stages::shippable`).
fn quiver_rules_again(
    ev: WorkerPlanRewriteEvent,
) -> datafusion::error::Result<WorkerPlanRewriteEventResponse> {
    let plan = crate::run_aggregate::PartialAggregateOverRuns
        .optimize(ev.plan, ev.session_config.options())?;
    Ok(WorkerPlanRewriteEventResponse::new(plan))
}
