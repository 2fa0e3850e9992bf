//! The Raft groups this node runs, and which group a row belongs to.
//!
//! A shard is (database, measurement); it belongs to one data group, chosen by a
//! stable hash of its names modulo `cluster.data_groups` (time is never part of the
//! key, so one measurement's writes never pile onto one hot tail group). With one data
//! group (the default) the first group holds everything, as it always has; with more,
//! the first group holds tokens and policies and the data groups hold the rows.
//!
//! What this stage does not do yet (docs/ARCHITECTURE.md, "Groups"): every node is a
//! member of every group (`cluster.replication` must equal the node count), the
//! number of data groups is fixed once a node holds data, and continuous queries need
//! one data group.

mod layout;
mod routing_store;
mod source;

use std::sync::Arc;

use quiver_raft::{GroupId, RaftNode, FIRST_GROUP};
use quiver_storage::Storage;

pub use layout::{check_layout, group_dirs};
pub use source::GroupsSource;

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

/// Every group this node runs.
#[derive(Clone)]
pub struct Groups {
    /// The first group (metadata; with one data group, also the data).
    first: Group,
    /// The data groups `1..=G` when there are several; empty with one.
    data: Vec<Group>,
}

impl Groups {
    /// The groups of a node: the first, and the data groups in order of their number
    /// (`1..=G`; none with one data group).
    pub fn new(first: Group, data: Vec<Group>) -> Self {
        debug_assert_eq!(first.id, FIRST_GROUP);
        debug_assert!(data.iter().enumerate().all(|(i, g)| g.id as usize == i + 1));
        Groups { first, data }
    }

    /// The first group (tokens, policies, cluster membership).
    pub fn first(&self) -> &Group {
        &self.first
    }

    /// The group numbered `id`, if this node runs it.
    pub fn get(&self, id: GroupId) -> Option<&Group> {
        if id == FIRST_GROUP {
            return Some(&self.first);
        }
        self.data.get((id as usize).checked_sub(1)?)
    }

    /// Every group, the first one first.
    pub fn all(&self) -> impl Iterator<Item = &Group> {
        std::iter::once(&self.first).chain(self.data.iter())
    }

    /// The groups that hold rows: the data groups, or the first group when it is the
    /// only one.
    pub fn holding_rows(&self) -> impl Iterator<Item = &Group> {
        let only_first = self.data.is_empty().then_some(&self.first);
        only_first.into_iter().chain(self.data.iter())
    }

    /// Whether rows are spread over several data groups.
    pub fn is_sharded(&self) -> bool {
        !self.data.is_empty()
    }

    /// Every table of the groups holding rows (each table is in one group).
    pub fn summaries(&self, database: Option<&str>) -> Vec<quiver_storage::TableSummary> {
        let mut all: Vec<quiver_storage::TableSummary> = self
            .holding_rows()
            .flat_map(|g| g.storage.summaries(database))
            .collect();
        if self.is_sharded() {
            all.sort_by(|a, b| a.key.cmp(&b.key));
        }
        all
    }

    /// The fatal error that stopped some group's Raft, if one did: the node exits.
    pub fn fatal(&self) -> Option<String> {
        self.all()
            .find_map(|g| g.node.fatal().map(|why| self.name_group(g.id, why)))
    }

    /// Why some group cannot serve writes now (see `RaftNode::unready_reason`).
    pub fn unready_reason(&self) -> Option<String> {
        self.all().find_map(|g| {
            g.node
                .unready_reason()
                .map(|why| self.name_group(g.id, why))
        })
    }

    /// Why segments of some group have failed to be written for `after`.
    pub fn flush_failing(&self, after: std::time::Duration) -> Option<String> {
        self.holding_rows().find_map(|g| {
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

    /// Waits until this node has applied, in every group holding rows, everything
    /// committed there when the call began (a linearizable read).
    pub async fn read_barrier(&self) -> Result<(), quiver_raft::WriteError> {
        let barriers = self.holding_rows().map(|g| g.node.read_barrier());
        futures::future::try_join_all(barriers).await.map(|_| ())
    }

    /// The stored schema of `measurement`, from the group that holds it.
    pub fn schema_of(
        &self,
        database: &str,
        measurement: &str,
    ) -> Option<quiver_storage::MeasurementSchema> {
        self.route(database, measurement)
            .storage
            .schema_of(database, measurement)
    }

    /// Checks decoded rows against the stored schemas, each measurement in the group
    /// that holds it (`Storage::check_write`).
    pub fn check_write(
        &self,
        database: &str,
        tables: &[(String, arrow::record_batch::RecordBatch)],
    ) -> quiver_storage::Result<()> {
        for (group, part) in self.partition(database, tables.iter().collect(), |(m, _)| m) {
            let part: Vec<(String, arrow::record_batch::RecordBatch)> =
                part.into_iter().cloned().collect();
            group.storage.check_write(database, &part)?;
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
    ) -> Vec<(&Group, Vec<T>)> {
        let mut parts: Vec<(&Group, Vec<T>)> = Vec::new();
        for item in items {
            let group = self.route(database, measurement(&item));
            match parts.iter_mut().find(|(g, _)| g.id == group.id) {
                Some((_, list)) => list.push(item),
                None => parts.push((group, vec![item])),
            }
        }
        parts.sort_by_key(|(g, _)| g.id);
        parts
    }

    /// The group that holds `measurement` of `database`.
    pub fn route(&self, database: &str, measurement: &str) -> &Group {
        if self.data.is_empty() {
            return &self.first;
        }
        let index = shard_hash(database, measurement) % self.data.len() as u64;
        &self.data[index as usize]
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
