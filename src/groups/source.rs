//! The query engine's view of a cluster with several data groups: every database and
//! measurement of every group, each measurement read from the group that holds it.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use object_store::ObjectStore;
use quiver_raft::GroupId;
use quiver_storage::{HeldElsewhere, TableSnapshot, TableSource};

use futures::future::BoxFuture;

use super::peer_store::PeerFileStore;
use super::routing_store::{group_component, RoutingStore};
use super::{DataGroup, Groups, Route};

/// A [`TableSource`] over every data group: those this node runs read here, the
/// others from their members (snapshots and file ranges over the peers' routes).
pub struct GroupsSource {
    groups: Groups,
    store: Arc<dyn ObjectStore>,
}

impl GroupsSource {
    /// The source over `groups`' data groups.
    pub fn new(groups: Groups) -> Self {
        let lookup = groups.clone();
        let store = Arc::new(RoutingStore::new(Arc::new(move |id| {
            match lookup.data_group(id)? {
                DataGroup::Local(g) => Some(g.storage.object_store()),
                DataGroup::Joining { members: r, .. } | DataGroup::Remote(r) => {
                    let store: Arc<dyn ObjectStore> = Arc::new(PeerFileStore::new(r));
                    Some(store)
                }
            }
        })));
        GroupsSource { groups, store }
    }

    /// Names of the groups' tables: (database, measurement).
    fn names(&self) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = Vec::new();
        for g in self.groups.holding_rows() {
            for database in g.storage.databases() {
                for m in g.storage.measurements(&database) {
                    all.push((database.clone(), m));
                }
            }
        }
        for r in self.groups.remote() {
            all.extend(
                r.cached_catalog()
                    .into_iter()
                    .map(|t| (t.database, t.measurement)),
            );
        }
        all
    }
}

impl TableSource for GroupsSource {
    fn databases(&self) -> Vec<String> {
        let mut all: Vec<String> = self.names().into_iter().map(|(d, _)| d).collect();
        all.sort();
        all.dedup();
        all
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        let mut all: Vec<String> = self
            .names()
            .into_iter()
            .filter(|(d, _)| d == database)
            .map(|(_, m)| m)
            .collect();
        all.sort();
        all.dedup();
        all
    }

    fn resolve_measurement(&self, database: &str, name: &str) -> Option<String> {
        // The exact name is found in its own group without listing the others; another
        // node's group is asked when the table is read (it answers "none" if absent),
        // so a table created there a moment ago is not missed.
        match self.groups.route(database, name) {
            Route::Local(group) => {
                if group.storage.resolve_measurement(database, name).as_deref() == Some(name) {
                    return Some(name.to_string());
                }
            }
            Route::Remote(_) => return Some(name.to_string()),
        }
        quiver_storage::resolve_name(name, &self.measurements(database)).map(str::to_string)
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        match self.groups.route(database, measurement) {
            Route::Local(group) => {
                let mut snapshot = group.storage.table(database, measurement)?;
                snapshot.files = snapshot.files.with_path_prefix(&group_component(group.id));
                Some(snapshot)
            }
            Route::Remote(_) => None,
        }
    }

    fn fetch_table(
        &self,
        database: &str,
        measurement: &str,
    ) -> BoxFuture<'static, quiver_storage::Result<Option<TableSnapshot>>> {
        match self.groups.route(database, measurement) {
            Route::Local(_) => {
                let snapshot = self.table(database, measurement);
                Box::pin(std::future::ready(Ok(snapshot)))
            }
            Route::Remote(remote) => {
                let (database, measurement) = (database.to_string(), measurement.to_string());
                Box::pin(async move { remote.table(&database, &measurement).await })
            }
        }
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store)
    }

    fn held_elsewhere(&self, database: &str, measurement: &str) -> Option<HeldElsewhere> {
        match self.groups.route(database, measurement) {
            Route::Local(_) => None,
            Route::Remote(remote) => Some(HeldElsewhere {
                group: u64::from(remote.id()),
                members: remote.members_preferred(),
            }),
        }
    }

    fn fetch_schema(
        &self,
        database: &str,
        measurement: &str,
    ) -> BoxFuture<'static, quiver_storage::Result<Option<SchemaRef>>> {
        match self.groups.route(database, measurement) {
            Route::Local(_) => {
                let schema = self.table(database, measurement).map(|s| s.schema);
                Box::pin(std::future::ready(Ok(schema)))
            }
            Route::Remote(remote) => {
                let (database, measurement) = (database.to_string(), measurement.to_string());
                Box::pin(async move { remote.schema(&database, &measurement).await })
            }
        }
    }
}

/// A source over one group's tables (a delete's view of its rows, say) read through
/// the query engine, whose object store routes by group when the node runs several:
/// every file path gets the group's prefix then.
pub fn one_group_source(
    groups: &Groups,
    group: GroupId,
    inner: Arc<dyn TableSource>,
) -> Arc<dyn TableSource> {
    if groups.is_sharded() {
        Arc::new(OneGroup {
            inner,
            prefix: group_component(group),
        })
    } else {
        inner
    }
}

struct OneGroup {
    inner: Arc<dyn TableSource>,
    prefix: String,
}

impl TableSource for OneGroup {
    fn databases(&self) -> Vec<String> {
        self.inner.databases()
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        self.inner.measurements(database)
    }

    fn resolve_measurement(&self, database: &str, name: &str) -> Option<String> {
        self.inner.resolve_measurement(database, name)
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        let mut snapshot = self.inner.table(database, measurement)?;
        snapshot.files = snapshot.files.with_path_prefix(&self.prefix);
        Some(snapshot)
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.inner.object_store()
    }
}
