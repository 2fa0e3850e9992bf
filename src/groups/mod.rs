//! The Raft groups of the cluster, which of them this node runs, and which group a
//! row belongs to.
//!
//! A shard is (database, measurement); it belongs to one data group, chosen by a
//! stable hash of its names modulo `cluster.data_groups` (time is never part of the
//! key, so one measurement's writes never pile onto one hot tail group). With one data
//! group (the default) the first group holds everything, as it always has; with more,
//! the first group holds tokens and policies and the data groups hold the rows. Each
//! data group has `cluster.replication` members ([`placement`]); a node runs the
//! groups it is a member of and reaches the others through their members
//! ([`RemoteGroup`]).
//!
//! Replicas move between nodes ([`moves`]): the members of a data group are its own
//! Raft membership, which other nodes learn from its members. What is not built yet
//! (docs/ARCHITECTURE.md, "Groups"): placement that moves replicas by itself, a number
//! of data groups that changes once a node holds data, and continuous queries with
//! more than one data group.

mod layout;
pub mod members_cache;
pub mod moves;
mod peer_store;
pub mod placement;
pub mod remote;
mod routing_store;
mod source;

use std::sync::Arc;

use parking_lot::RwLock;
use quiver_raft::{GroupId, RaftNode, FIRST_GROUP};
use quiver_storage::Storage;

pub use layout::{check_layout, check_placement, group_dirs, write_synced};
pub use remote::RemoteGroup;
pub use source::{one_group_source, GroupsSource};

/// One group on this node: its Raft instance and the storage its state machine
/// applies to.
#[derive(Clone)]
pub struct Group {
    /// The group's number.
    pub id: GroupId,
    /// Its Raft side (writes, status, internal routes).
    pub node: RaftNode,
    /// Its storage (rows, files, policies).
    pub storage: Arc<Storage>,
}

/// A data group as this node knows it: run here, being copied here, or held by other
/// nodes. Changes as replicas move ([`moves`]).
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // one per group
pub enum DataGroup {
    /// This node is a voter.
    Local(Group),
    /// This node runs the group as a learner catching up before it becomes a voter: its
    /// Raft answers the leader, while rows and reads still go to the members.
    Joining {
        /// The group as it runs here.
        group: Group,
        /// The members, where rows and reads go meanwhile.
        members: Arc<RemoteGroup>,
    },
    /// Other nodes are its members.
    Remote(Arc<RemoteGroup>),
}

impl DataGroup {
    fn route(&self) -> Route {
        match self {
            DataGroup::Local(g) => Route::Local(g.clone()),
            DataGroup::Joining { members, .. } | DataGroup::Remote(members) => {
                Route::Remote(Arc::clone(members))
            }
        }
    }

    /// The group's number.
    pub fn id(&self) -> GroupId {
        match self {
            DataGroup::Local(g) | DataGroup::Joining { group: g, .. } => g.id,
            DataGroup::Remote(r) => r.id(),
        }
    }

    /// The group as it runs on this node (a voter or a learner catching up).
    pub fn running(&self) -> Option<&Group> {
        match self {
            DataGroup::Local(g) | DataGroup::Joining { group: g, .. } => Some(g),
            DataGroup::Remote(_) => None,
        }
    }
}

/// Where a shard's group is: here, or on other nodes.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // a few per request, moved, never stored in bulk
pub enum Route {
    /// A group this node runs.
    Local(Group),
    /// A group held by other nodes.
    Remote(Arc<RemoteGroup>),
}

impl Route {
    /// The group's number.
    pub fn id(&self) -> GroupId {
        match self {
            Route::Local(g) => g.id,
            Route::Remote(r) => r.id(),
        }
    }
}

/// Every group of the cluster, as this node reaches it. Clones share the data groups'
/// list, so a replica moved here or away is seen by every holder at once.
#[derive(Clone)]
pub struct Groups {
    /// The first group (metadata; with one data group, also the data). Every node runs
    /// it.
    first: Group,
    /// The data groups `1..=G` when there are several; empty with one.
    data: Arc<RwLock<Vec<DataGroup>>>,
}

impl Groups {
    /// The groups of a node: the first, and the data groups in order of their number
    /// (`1..=G`; none with one data group).
    pub fn new(first: Group, data: Vec<DataGroup>) -> Self {
        debug_assert_eq!(first.id, FIRST_GROUP);
        debug_assert!(data
            .iter()
            .enumerate()
            .all(|(i, g)| g.id() as usize == i + 1));
        Groups {
            first,
            data: Arc::new(RwLock::new(data)),
        }
    }

    /// The first group (tokens, policies, cluster membership).
    pub fn first(&self) -> &Group {
        &self.first
    }

    /// The group numbered `id`, if this node runs it as a voter.
    pub fn get(&self, id: GroupId) -> Option<Group> {
        if id == FIRST_GROUP {
            return Some(self.first.clone());
        }
        match self.data.read().get((id as usize).checked_sub(1)?)? {
            DataGroup::Local(g) => Some(g.clone()),
            _ => None,
        }
    }

    /// The group numbered `id` if its Raft runs here, as a voter or as a learner
    /// catching up (what the group's internal Raft routes answer for).
    pub fn running(&self, id: GroupId) -> Option<Group> {
        if id == FIRST_GROUP {
            return Some(self.first.clone());
        }
        self.data
            .read()
            .get((id as usize).checked_sub(1)?)?
            .running()
            .cloned()
    }

    /// The data group numbered `id` as this node knows it.
    pub fn data_group(&self, id: GroupId) -> Option<DataGroup> {
        self.data.read().get((id as usize).checked_sub(1)?).cloned()
    }

    /// Replaces what this node knows of data group `group.id()` (a replica moved here
    /// or away). Returns the previous state.
    pub fn replace(&self, group: DataGroup) -> Option<DataGroup> {
        let index = (group.id() as usize).checked_sub(1)?;
        let mut data = self.data.write();
        let slot = data.get_mut(index)?;
        Some(std::mem::replace(slot, group))
    }

    /// The number of data groups (0 with one, which the first group holds).
    pub fn data_count(&self) -> usize {
        self.data.read().len()
    }

    /// Every group this node runs as a voter, the first one first.
    pub fn all(&self) -> Vec<Group> {
        std::iter::once(self.first.clone())
            .chain(self.local_data())
            .collect()
    }

    /// Every group whose Raft runs here, learners catching up included (what must be
    /// shut down, and whose failure stops the node).
    pub fn all_running(&self) -> Vec<Group> {
        let data = self.data.read();
        std::iter::once(self.first.clone())
            .chain(data.iter().filter_map(|g| g.running().cloned()))
            .collect()
    }

    fn local_data(&self) -> Vec<Group> {
        self.data
            .read()
            .iter()
            .filter_map(|g| match g {
                DataGroup::Local(g) => Some(g.clone()),
                _ => None,
            })
            .collect()
    }

    /// The data groups other nodes hold (those still being copied here included).
    pub fn remote(&self) -> Vec<Arc<RemoteGroup>> {
        self.data
            .read()
            .iter()
            .filter_map(|g| match g {
                DataGroup::Remote(r) | DataGroup::Joining { members: r, .. } => Some(Arc::clone(r)),
                DataGroup::Local(_) => None,
            })
            .collect()
    }

    /// Every data group (every group, with one), here or elsewhere, in order.
    pub fn routes(&self) -> Vec<Route> {
        let data = self.data.read();
        if data.is_empty() {
            return vec![Route::Local(self.first.clone())];
        }
        data.iter().map(DataGroup::route).collect()
    }

    /// The groups this node runs that hold rows: its data groups, or the first group
    /// when it is the only one.
    pub fn holding_rows(&self) -> Vec<Group> {
        if !self.is_sharded() {
            return vec![self.first.clone()];
        }
        self.local_data()
    }

    /// Whether rows are spread over several data groups.
    pub fn is_sharded(&self) -> bool {
        !self.data.read().is_empty()
    }

    /// Every table of the groups this node runs that hold rows (each table is in one
    /// group).
    pub fn summaries(&self, database: Option<&str>) -> Vec<quiver_storage::TableSummary> {
        let mut all: Vec<quiver_storage::TableSummary> = self
            .holding_rows()
            .iter()
            .flat_map(|g| g.storage.summaries(database))
            .collect();
        if self.is_sharded() {
            all.sort_by(|a, b| a.key.cmp(&b.key));
        }
        all
    }

    /// Every table of every data group, those of other nodes' groups as a member
    /// lists them now (or as last listed, when no member answers).
    pub async fn summaries_everywhere(
        &self,
        database: Option<&str>,
    ) -> Vec<quiver_storage::TableSummary> {
        let mut all = self.summaries(database);
        let listings = futures::future::join_all(self.remote().into_iter().map(|r| async move {
            match r.refresh_catalog().await {
                Ok(listing) => listing,
                Err(e) => {
                    tracing::warn!(group = r.id(), error = %e, "listing the group's tables from the last answer");
                    r.cached_catalog()
                }
            }
        }))
        .await;
        all.extend(
            listings
                .into_iter()
                .flatten()
                .filter(|t| database.is_none_or(|d| d == t.database))
                .map(|t| quiver_storage::TableSummary {
                    key: quiver_storage::TableKey::new(t.database.as_str(), t.measurement.as_str()),
                    file_count: t.file_count as usize,
                    file_bytes: t.file_bytes,
                    rows: t.rows,
                    time_min: t.time_min,
                    time_max: t.time_max,
                    memory_rows: t.memory_rows,
                    compactions_pending: 0,
                    sort_lead: None,
                }),
        );
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// The fatal error that stopped some group's Raft, if one did: the node exits.
    pub fn fatal(&self) -> Option<String> {
        self.all_running()
            .iter()
            .find_map(|g| g.node.fatal().map(|why| self.name_group(g.id, why)))
    }

    /// Why some group cannot serve writes now (see `RaftNode::unready_reason`).
    pub fn unready_reason(&self) -> Option<String> {
        self.all().iter().find_map(|g| {
            g.node
                .unready_reason()
                .map(|why| self.name_group(g.id, why))
        })
    }

    /// Why segments of some group have failed to be written for `after`.
    pub fn flush_failing(&self, after: std::time::Duration) -> Option<String> {
        self.holding_rows().iter().find_map(|g| {
            g.storage
                .flush_failing(after)
                .map(|why| self.name_group(g.id, why))
        })
    }

    /// `why`, naming the group when the node runs several.
    fn name_group(&self, id: GroupId, why: String) -> String {
        if self.is_sharded() {
            format!("group {id}: {why}")
        } else {
            why
        }
    }

    /// Waits until this node (or, for a group it does not hold, the member its reads
    /// go to) has applied, in every group holding rows, everything committed there
    /// when the call began (a linearizable read).
    pub async fn read_barrier(&self) -> Result<(), quiver_raft::WriteError> {
        let holding = self.holding_rows();
        let remote = self.remote();
        let local = futures::future::try_join_all(holding.iter().map(|g| g.node.read_barrier()));
        let remote = futures::future::try_join_all(remote.iter().map(|r| r.read_barrier()));
        futures::future::try_join(local, remote).await.map(|_| ())
    }

    /// The stored schema of `measurement`, from the group that holds it when this node
    /// runs it (`None` for another node's group: its members check at apply).
    pub fn schema_of(
        &self,
        database: &str,
        measurement: &str,
    ) -> Option<quiver_storage::MeasurementSchema> {
        match self.route(database, measurement) {
            Route::Local(g) => g.storage.schema_of(database, measurement),
            Route::Remote(_) => None,
        }
    }

    /// Checks decoded rows against the stored schemas, each measurement in the group
    /// that holds it (`Storage::check_write`); rows of other nodes' groups are checked
    /// by their members as the entry is applied.
    pub fn check_write(
        &self,
        database: &str,
        tables: &[(String, arrow::record_batch::RecordBatch)],
    ) -> quiver_storage::Result<()> {
        for (route, part) in self.partition(database, tables.iter().collect(), |(m, _)| m) {
            if let Route::Local(group) = route {
                let part: Vec<(String, arrow::record_batch::RecordBatch)> =
                    part.into_iter().cloned().collect();
                group.storage.check_write(database, &part)?;
            }
        }
        Ok(())
    }

    /// Splits `items` (rows of measurements of `database`) by the group holding each,
    /// keeping their order within a group; groups in order of their number.
    pub fn partition<T>(
        &self,
        database: &str,
        items: Vec<T>,
        measurement: impl Fn(&T) -> &str,
    ) -> Vec<(Route, Vec<T>)> {
        let mut parts: Vec<(Route, Vec<T>)> = Vec::new();
        for item in items {
            let id = self.group_of(database, measurement(&item));
            match parts.iter_mut().find(|(g, _)| g.id() == id) {
                Some((_, list)) => list.push(item),
                None => parts.push((self.route_to(id), vec![item])),
            }
        }
        parts.sort_by_key(|(g, _)| g.id());
        parts
    }

    /// The number of the group that holds `measurement` of `database`.
    pub fn group_of(&self, database: &str, measurement: &str) -> GroupId {
        let count = self.data_count();
        if count == 0 {
            return FIRST_GROUP;
        }
        (shard_hash(database, measurement) % count as u64) as GroupId + 1
    }

    /// The group that holds `measurement` of `database`.
    pub fn route(&self, database: &str, measurement: &str) -> Route {
        self.route_to(self.group_of(database, measurement))
    }

    /// Where group `id` is (the first group for an unknown number).
    fn route_to(&self, id: GroupId) -> Route {
        match self.data_group(id) {
            Some(g) => g.route(),
            None => Route::Local(self.first.clone()),
        }
    }
}

/// The shard key's hash: 64-bit FNV-1a over the database name, a zero byte and the
/// measurement name. Stable across builds and platforms (a route must never change
/// under data already written), unlike the standard library's seeded hasher.
pub fn shard_hash(database: &str, measurement: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for byte in database
        .bytes()
        .chain(std::iter::once(0))
        .chain(measurement.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_hash_is_stable_and_separates_database_from_measurement() {
        // Fixed values: a change here would move written measurements to other groups.
        assert_eq!(shard_hash("db", "cpu"), shard_hash("db", "cpu"));
        assert_eq!(shard_hash("", ""), 0xaf63_bd4c_8601_b7df);
        assert_ne!(shard_hash("ab", "c"), shard_hash("a", "bc"));
    }

    #[test]
    fn measurements_spread_over_the_data_groups() {
        let mut counts = [0usize; 8];
        for i in 0..8_000 {
            counts[(shard_hash("db", &format!("m{i}")) % 8) as usize] += 1;
        }
        for count in counts {
            assert!((800..1_200).contains(&count), "{counts:?}");
        }
    }
}
