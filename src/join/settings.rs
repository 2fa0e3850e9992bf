//! The settings a node takes from the cluster it joins, and their record on disk: a
//! joined node restarts from the record, so a restart never depends on the node it
//! first joined through being up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use quiver_raft::GroupId;
use serde::{Deserialize, Serialize};

/// The record, in the data directory (written last: its presence means the join's
/// settings and the groups' members are on disk).
const JOINED_FILE: &str = "joined.json";

/// What a node of the cluster tells a node that joins it: the settings every node of
/// the cluster must share, and where each data group is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// The cluster's static voters (`cluster.peers`): each data group's first members
    /// follow from them, so a joining node needs the same list.
    pub peers: Vec<(u64, String)>,
    /// `cluster.data_groups`.
    pub data_groups: usize,
    /// `cluster.replication`.
    pub replication: usize,
    /// Each data group's voters (id, address) as the answering node knows them: after
    /// moves they differ from the placement the peers give.
    pub members: BTreeMap<GroupId, Vec<(u64, String)>>,
    /// The metadata group's members (id, address): a joining node's id must not be
    /// one of them at another address.
    pub nodes: Vec<(u64, String)>,
    /// `cluster.query_workers`: a joining node with a worker of its own routes stages
    /// by the same list (and the others learn its worker from it).
    #[serde(default)]
    pub query_workers: String,
}

impl ClusterSettings {
    /// Refuses settings no node could join: a node running alone has no cluster to be
    /// added to (the joining node would start a cluster of its own).
    pub fn check(&self, url: &str) -> Result<()> {
        if self.peers.is_empty() {
            bail!(
                "cluster.join {url}: that node runs alone (no cluster.peers), so there is no \
                 cluster to join; start it with cluster.peers first"
            );
        }
        if self.data_groups == 0 || self.replication == 0 {
            bail!(
                "cluster.join {url}: the node answered data_groups = {}, replication = {}",
                self.data_groups,
                self.replication
            );
        }
        Ok(())
    }

    /// Refuses an id the cluster already gives a node at another address (two nodes
    /// would answer to one id).
    pub fn check_id(&self, url: &str, node_id: u64, advertised: &str) -> Result<()> {
        let Some((_, known)) = self.nodes.iter().find(|(id, _)| *id == node_id) else {
            return Ok(());
        };
        let (known, advertised) = (
            quiver_raft::base_url(known),
            quiver_raft::base_url(advertised),
        );
        if known != advertised {
            bail!(
                "cluster.join {url}: node {node_id} is already a member of the cluster at \
                 {known}, and this node would be at {advertised}: choose another \
                 cluster.node_id (--node-id), or remove node {node_id} from the cluster first"
            );
        }
        Ok(())
    }

    /// The peers as `cluster.peers` writes them.
    pub fn peers_setting(&self) -> String {
        self.peers
            .iter()
            .map(|(id, addr)| format!("{id}={addr}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// How far the join got, in the data directory (absent: not added yet).
const PROGRESS_FILE: &str = "joined.progress";

fn file(data_dir: &Path) -> PathBuf {
    data_dir.join(JOINED_FILE)
}

/// How far a join got: recorded so that a restart finishes it, and so that a node
/// removed from the cluster later does not ask to be added again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Progress {
    /// Not a voter yet.
    Asking,
    /// A voter of the metadata group; replicas not yet asked for.
    Added,
    /// Replicas asked for (or none to ask for): nothing left to do.
    Done,
}

/// The recorded progress.
pub fn progress(data_dir: &Path) -> Result<Progress> {
    let path = data_dir.join(PROGRESS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim() {
            "added" => Ok(Progress::Added),
            "done" => Ok(Progress::Done),
            other => bail!("{}: unknown join progress {other:?}", path.display()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Progress::Asking),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Records `progress` durably.
pub fn record_progress(data_dir: &Path, progress: Progress) -> Result<()> {
    let text = match progress {
        Progress::Asking => return Ok(()),
        Progress::Added => "added",
        Progress::Done => "done",
    };
    crate::groups::write_synced(&data_dir.join(PROGRESS_FILE), text)
}

/// The settings recorded by an earlier start, if any.
pub fn load(data_dir: &Path) -> Result<Option<ClusterSettings>> {
    let path = file(data_dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{}: not the settings of a joined cluster", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Records `settings` durably, and each data group's members where a start reads
/// them (`groups/members.json`), members first.
pub fn record(data_dir: &Path, settings: &ClusterSettings) -> Result<()> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    for (group, members) in &settings.members {
        crate::groups::members_cache::record(data_dir, *group, members)?;
    }
    let text = serde_json::to_string(settings).context("encoding the cluster's settings")?;
    crate::groups::write_synced(&file(data_dir), &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ClusterSettings {
        ClusterSettings {
            peers: vec![(1, "http://a:1".into()), (2, "http://b:2".into())],
            data_groups: 2,
            replication: 2,
            members: BTreeMap::from([(1, vec![(2, "http://b:2".to_string())])]),
            nodes: vec![(1, "http://a:1".into()), (2, "b:2".into())],
            query_workers: String::new(),
        }
    }

    #[test]
    fn recorded_settings_are_read_back_with_the_groups_members() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(load(dir.path()).expect("nothing yet"), None);
        record(dir.path(), &settings()).expect("record");
        assert_eq!(load(dir.path()).expect("load"), Some(settings()));
        let members = crate::groups::members_cache::load(dir.path()).expect("members");
        assert_eq!(members.get(&1), settings().members.get(&1));
        assert_eq!(settings().peers_setting(), "1=http://a:1,2=http://b:2");
    }

    #[test]
    fn the_progress_of_a_join_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(progress(dir.path()).expect("none"), Progress::Asking);
        record_progress(dir.path(), Progress::Added).expect("added");
        assert_eq!(progress(dir.path()).expect("added"), Progress::Added);
        record_progress(dir.path(), Progress::Done).expect("done");
        assert_eq!(progress(dir.path()).expect("done"), Progress::Done);
    }

    #[test]
    fn a_node_running_alone_cannot_be_joined() {
        let alone = ClusterSettings {
            peers: Vec::new(),
            ..settings()
        };
        let e = alone.check("http://a:1").expect_err("refused");
        assert!(e.to_string().contains("runs alone"), "{e}");
        settings().check("http://a:1").expect("a cluster");
    }

    #[test]
    fn an_id_the_cluster_has_at_another_address_is_refused() {
        let e = settings()
            .check_id("http://a:1", 2, "c:3")
            .expect_err("node 2 is b:2");
        assert!(e.to_string().contains("already a member"), "{e}");
        settings()
            .check_id("http://a:1", 2, "http://b:2")
            .expect("the same node again");
        settings()
            .check_id("http://a:1", 3, "c:3")
            .expect("a new id");
    }
}
