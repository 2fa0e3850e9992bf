//! The members of each data group as this node last learned them, kept on disk so a
//! restart after a replica moved knows where the group is (placement alone names the
//! group's first members, some of which may have left it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use quiver_raft::GroupId;

/// The file, in the data directory.
const MEMBERS_FILE: &str = "groups/members.json";

fn file(data_dir: &Path) -> PathBuf {
    data_dir.join(MEMBERS_FILE)
}

/// Members (id, address) per data group, as last recorded; empty when none was.
pub fn load(data_dir: &Path) -> Result<BTreeMap<GroupId, Vec<(u64, String)>>> {
    let path = file(data_dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{}: not a list of group members", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Records `members` as group `group`'s (durably; a concurrent record of another group
/// is serialised by the caller, one move at a time per node).
pub fn record(data_dir: &Path, group: GroupId, members: &[(u64, String)]) -> Result<()> {
    let mut all = load(data_dir)?;
    if all.get(&group).map(Vec::as_slice) == Some(members) {
        return Ok(());
    }
    all.insert(group, members.to_vec());
    let path = file(data_dir);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string(&all).context("encoding group members")?;
    super::layout::write_synced(&path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_members_are_read_back_per_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load(dir.path()).expect("empty").is_empty());
        let one = vec![(1, "a:1".to_string()), (2, "b:2".to_string())];
        let two = vec![(3, "c:3".to_string())];
        record(dir.path(), 1, &one).expect("record 1");
        record(dir.path(), 2, &two).expect("record 2");
        record(dir.path(), 1, &two).expect("record 1 again");
        let all = load(dir.path()).expect("load");
        assert_eq!(all.get(&1), Some(&two));
        assert_eq!(all.get(&2), Some(&two));
    }
}
