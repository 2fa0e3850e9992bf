//! The query engine's view of a node with several data groups: every database and
//! measurement of every group, each measurement read from the group that holds it.

use std::sync::Arc;

use object_store::ObjectStore;
use quiver_storage::{TableSnapshot, TableSource};

use super::routing_store::{group_component, RoutingStore};
use super::Groups;

/// A [`TableSource`] over the data groups of this node (stage one of groups: every
/// node holds every group, so every group's storage is local).
pub struct GroupsSource {
    groups: Groups,
    store: Arc<dyn ObjectStore>,
}

impl GroupsSource {
    /// The source over `groups`' data groups.
    pub fn new(groups: Groups) -> Self {
        let store = Arc::new(RoutingStore::new(
            groups
                .holding_rows()
                .map(|g| (g.id, g.storage.object_store())),
        ));
        GroupsSource { groups, store }
    }
}

impl TableSource for GroupsSource {
    fn databases(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .groups
            .holding_rows()
            .flat_map(|g| g.storage.databases())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        let mut all: Vec<String> = self
            .groups
            .holding_rows()
            .flat_map(|g| g.storage.measurements(database))
            .collect();
        all.sort();
        all.dedup();
        all
    }

    fn resolve_measurement(&self, database: &str, name: &str) -> Option<String> {
        // The exact name is found in its own group without listing the others.
        let group = self.groups.route(database, name);
        if group.storage.resolve_measurement(database, name).as_deref() == Some(name) {
            return Some(name.to_string());
        }
        quiver_storage::resolve_name(name, &self.measurements(database)).map(str::to_string)
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        let group = self.groups.route(database, measurement);
        let mut snapshot = group.storage.table(database, measurement)?;
        snapshot.files = snapshot.files.with_path_prefix(&group_component(group.id));
        Some(snapshot)
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store)
    }
}
