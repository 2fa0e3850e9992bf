//! A data group this node is not a member of: its members are known from placement,
//! and what this node needs of it (writes, deletes, rules, read barriers, table
//! snapshots, file ranges, the list of its tables) is asked of a member over the
//! peers' `/internal/groups/{group}/...` routes (`src/http/remote_group.rs` answers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use parking_lot::RwLock;
use quiver_raft::{CommandResult, GroupId, LeaderRequest, PeerClient, PeerError, WriteError};
use quiver_storage::{TableSnapshot, TableSnapshotWire};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::routing_store::group_component;

/// Paths of the calls, before the group's prefix is put in (`quiver_raft::group_path`).
pub mod paths {
    /// Commit a write, delete or rule through a member (`LeaderRequest`).
    pub const COMMIT: &str = "/internal/commit";
    /// Wait until the member has applied everything committed now.
    pub const BARRIER: &str = "/internal/barrier";
    /// A table's snapshot.
    pub const TABLE: &str = "/internal/table";
    /// The group's tables.
    pub const CATALOG: &str = "/internal/catalog";
    /// Bytes of one of the group's files.
    pub const RANGE: &str = "/internal/range";
    /// A delete request, run by the member as if sent to it.
    pub const DELETE: &str = "/internal/delete";
}

/// Which table a snapshot is asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableRequest {
    /// Database.
    pub database: String,
    /// Measurement.
    pub measurement: String,
    /// Only the schema: no rows and no files (planning a scan that runs on a member).
    #[serde(default)]
    pub schema_only: bool,
}

/// One table of a group, as its catalog lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TableListing {
    /// Database.
    pub database: String,
    /// Measurement.
    pub measurement: String,
    /// Rows in files and memory.
    pub rows: u64,
    /// Parquet files.
    pub file_count: u64,
    /// Bytes of Parquet files.
    pub file_bytes: u64,
    /// Rows in memory.
    pub memory_rows: u64,
    /// Smallest time, if any rows.
    pub time_min: Option<i64>,
    /// Largest time.
    pub time_max: Option<i64>,
}

/// Bytes of a file: `start..end` (`None`: from the beginning / to the end), or only
/// its size (`head`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RangeRequest {
    /// Path inside the group's store.
    pub path: String,
    /// First byte.
    pub start: Option<u64>,
    /// One past the last byte.
    pub end: Option<u64>,
    /// Only the size.
    pub head: bool,
}

/// A file's bytes and its size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RangeAnswer {
    /// The file's size.
    pub size: u64,
    /// Where the bytes start.
    pub start: u64,
    /// The bytes.
    pub data: bytes::Bytes,
}

/// A data group held by other nodes.
pub struct RemoteGroup {
    id: GroupId,
    /// Its members (id, address), in id order: from placement at start, then from
    /// what a member says (the group's own Raft membership) as replicas move.
    members: RwLock<Vec<(u64, String)>>,
    client: PeerClient,
    /// The member asked first (its node id): the last one that answered, so a read
    /// barrier and the snapshots after it go to the same member.
    preferred: AtomicU64,
    /// The group's leader as a member last said (0: not known). Changes are sent to
    /// it first: through another member they would take one more hop, the member
    /// forwarding the whole entry to the leader.
    leader: AtomicU64,
    /// The group's tables as last listed (for names; a table is read from a member).
    catalog: RwLock<Vec<TableListing>>,
    /// Longest wait for a member's answer.
    timeout: Duration,
}

/// How a call may be retried on another member.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// A read: any failure tries the next member.
    Any,
    /// A change: only a call that provably did nothing moves on.
    OnlyIfRefused,
}

impl RemoteGroup {
    /// The group `id` with `members`, reached through `client`.
    pub fn new(
        id: GroupId,
        members: Vec<(u64, String)>,
        client: &PeerClient,
        timeout: Duration,
    ) -> Self {
        debug_assert!(!members.is_empty());
        RemoteGroup {
            id,
            members: RwLock::new(members),
            client: client.for_group(id),
            preferred: AtomicU64::new(0),
            leader: AtomicU64::new(0),
            catalog: RwLock::new(Vec::new()),
            timeout,
        }
    }

    /// The group's number.
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// Its members' addresses (as peers reach them), in id order.
    pub fn member_addrs(&self) -> Vec<String> {
        self.members
            .read()
            .iter()
            .map(|(_, addr)| addr.clone())
            .collect()
    }

    /// Its members' ids.
    pub fn member_ids(&self) -> Vec<u64> {
        self.members.read().iter().map(|(id, _)| *id).collect()
    }

    /// Its members (id, address), in id order.
    pub fn members(&self) -> Vec<(u64, String)> {
        self.members.read().clone()
    }

    /// The members, the preferred one first.
    fn members_in_order(&self) -> Vec<(u64, String)> {
        let mut members = self.members();
        let preferred = self.preferred.load(Ordering::Relaxed);
        if let Some(at) = members.iter().position(|(id, _)| *id == preferred) {
            members.rotate_left(at);
        }
        members
    }

    /// The members, the known leader first (for changes).
    fn members_leader_first(&self) -> Vec<(u64, String)> {
        let mut members = self.members();
        let leader = self.leader.load(Ordering::Relaxed);
        if let Some(at) = members.iter().position(|(id, _)| *id == leader) {
            members.rotate_left(at);
        }
        members
    }

    /// Asks the members for the group's current voters (its Raft membership) and keeps
    /// them: after a replica moved, rows and reads go to the new members. When none of
    /// the known members is a voter any more (every replica moved while this node was
    /// down), `others` (the cluster's nodes) are asked too. A node that answers without
    /// being a voter itself (it left the group, or does not hold it) is passed over.
    /// Returns the members now known, and whether they changed.
    pub async fn refresh_members(
        &self,
        others: &[(u64, String)],
    ) -> Result<(Vec<(u64, String)>, bool), PeerError> {
        let mut last_error = None;
        let mut asked = self.members_in_order();
        asked.extend(
            others
                .iter()
                .filter(|o| !asked.contains(o))
                .cloned()
                .collect::<Vec<_>>(),
        );
        for (id, addr) in asked {
            match self
                .client
                .get::<quiver_raft::PeerState>(&addr, quiver_raft::PEER_STATE_PATH, self.timeout)
                .await
            {
                Ok(state) if state.members.iter().any(|(m, _)| *m == id) => {
                    let leader = state
                        .vote
                        .filter(|v| v.committed)
                        .map_or(0, |v| v.leader_id.node_id);
                    self.leader.store(leader, Ordering::Relaxed);
                    let mut members = state.members;
                    members.sort_unstable();
                    let mut known = self.members.write();
                    let changed = *known != members;
                    if changed {
                        tracing::info!(group = self.id, from = ?*known, to = ?members, "the group's members changed");
                        known.clone_from(&members);
                    }
                    return Ok((members, changed));
                }
                Ok(_) => {
                    tracing::debug!(group = self.id, %addr, "not a voter of the group any more");
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| PeerError::Refused {
            addr: String::new(),
            message: format!("no member of group {} is a voter of it", self.id),
        }))
    }

    /// Sets the members (a move this node took part in knows them first).
    pub fn set_members(&self, mut members: Vec<(u64, String)>) {
        debug_assert!(!members.is_empty());
        members.sort_unstable();
        *self.members.write() = members;
    }

    /// Calls `path` on the preferred member, then the others as `retry` allows.
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
        retry: Retry,
    ) -> Result<Resp, PeerError> {
        let order = match retry {
            // A change goes to the leader, which commits it without a forward.
            Retry::OnlyIfRefused => self.members_leader_first(),
            Retry::Any => self.members_in_order(),
        };
        let mut last_error = None;
        for (id, addr) in order {
            match self.client.call(&addr, path, request, self.timeout).await {
                Ok(answer) => {
                    self.preferred.store(id, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(e) if retry == Retry::Any || e.refused_before_acting() => {
                    tracing::debug!(group = self.id, %addr, error = %e, "member did not answer; trying another");
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| PeerError::Refused {
            addr: String::new(),
            message: "the group has no members".into(),
        }))
    }

    /// What no member answering means for a change: nothing was written when none was
    /// reached, unknown otherwise.
    fn change_error(&self, e: PeerError) -> WriteError {
        if e.refused_before_acting() {
            WriteError::Unavailable(format!("no member of group {} reachable: {e}", self.id))
        } else {
            WriteError::Unknown(format!("group {}: {e}", self.id))
        }
    }

    /// Commits a write, delete or rule through a member (which forwards it to the
    /// group's leader), like `RaftNode::write` does for a local group.
    pub async fn commit(&self, request: LeaderRequest) -> Result<CommandResult, WriteError> {
        let answer: Result<CommandResult, WriteError> = self
            .call(paths::COMMIT, &request, Retry::OnlyIfRefused)
            .await
            .map_err(|e| self.change_error(e))?;
        if let (Ok(_), LeaderRequest::Write(command)) = (&answer, &request) {
            // Known at once, without waiting for the next listing.
            let mut catalog = self.catalog.write();
            for table in &command.tables {
                if !catalog
                    .iter()
                    .any(|t| t.database == command.database && t.measurement == table.measurement)
                {
                    catalog.push(TableListing {
                        database: command.database.clone(),
                        measurement: table.measurement.clone(),
                        rows: 0,
                        file_count: 0,
                        file_bytes: 0,
                        memory_rows: 0,
                        time_min: None,
                        time_max: None,
                    });
                }
            }
        }
        answer
    }

    /// Waits until the preferred member has applied everything the group committed
    /// when the call began (a linearizable read's barrier).
    pub async fn read_barrier(&self) -> Result<(), WriteError> {
        let answer: Result<(), WriteError> = self
            .call(paths::BARRIER, &(), Retry::Any)
            .await
            .map_err(|e| WriteError::Unavailable(format!("group {}: {e}", self.id)))?;
        answer
    }

    /// A table's snapshot from a member, its files under this group's path prefix.
    pub async fn table(
        &self,
        database: &str,
        measurement: &str,
    ) -> quiver_storage::Result<Option<TableSnapshot>> {
        self.snapshot(database, measurement, false).await
    }

    /// A table's schema from a member, without its rows or files.
    pub async fn schema(
        &self,
        database: &str,
        measurement: &str,
    ) -> quiver_storage::Result<Option<SchemaRef>> {
        Ok(self
            .snapshot(database, measurement, true)
            .await?
            .map(|s| s.schema))
    }

    async fn snapshot(
        &self,
        database: &str,
        measurement: &str,
        schema_only: bool,
    ) -> quiver_storage::Result<Option<TableSnapshot>> {
        let request = TableRequest {
            database: database.to_string(),
            measurement: measurement.to_string(),
            schema_only,
        };
        let answer: Result<Option<TableSnapshotWire>, String> = self
            .call(paths::TABLE, &request, Retry::Any)
            .await
            .map_err(|e| self.unreachable(e))?;
        let wire = answer.map_err(|e| {
            quiver_storage::Error::GroupUnreachable(format!(
                "group {} could not give {database}.{measurement}: {e}",
                self.id
            ))
        })?;
        wire.map(|w| w.into_snapshot(&group_component(self.id)))
            .transpose()
    }

    /// The members' node ids, the one that answered this node last first: where a
    /// query sends a scan of this group.
    pub fn members_preferred(&self) -> Vec<u64> {
        self.members_in_order()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// Bytes of one of the group's files.
    pub async fn range(&self, request: &RangeRequest) -> quiver_storage::Result<RangeAnswer> {
        let answer: Result<RangeAnswer, String> = self
            .call(paths::RANGE, request, Retry::Any)
            .await
            .map_err(|e| self.unreachable(e))?;
        answer.map_err(|e| {
            quiver_storage::Error::GroupUnreachable(format!(
                "group {}: {}: {e}",
                self.id, request.path
            ))
        })
    }

    /// Runs a delete request on a member (which holds the measurement): its answer as
    /// (HTTP status, JSON body).
    pub async fn delete(&self, request: &serde_json::Value) -> Result<(u16, String), WriteError> {
        let text = request.to_string();
        self.call(paths::DELETE, &text, Retry::OnlyIfRefused)
            .await
            .map_err(|e| self.change_error(e))
    }

    /// Lists the group's tables again from a member, and keeps the list.
    pub async fn refresh_catalog(&self) -> quiver_storage::Result<Vec<TableListing>> {
        let listing: Vec<TableListing> = self
            .call(paths::CATALOG, &(), Retry::Any)
            .await
            .map_err(|e| self.unreachable(e))?;
        *self.catalog.write() = listing.clone();
        Ok(listing)
    }

    /// The tables as last listed.
    pub fn cached_catalog(&self) -> Vec<TableListing> {
        self.catalog.read().clone()
    }

    fn unreachable(&self, e: PeerError) -> quiver_storage::Error {
        quiver_storage::Error::GroupUnreachable(format!(
            "no member of group {} (nodes {:?}) answered: {e}",
            self.id,
            self.member_ids()
        ))
    }
}

/// How often the tables of the groups this node does not hold are listed again.
pub const CATALOG_REFRESH_MS: u64 = 2_000;
