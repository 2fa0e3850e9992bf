//! Where each group keeps its log and its data, and the guard that keeps the number of
//! data groups fixed once rows are placed by it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use quiver_raft::{GroupId, FIRST_GROUP};

/// File in the data directory recording `cluster.data_groups` once the node started
/// with it.
const LAYOUT_FILE: &str = "data_groups";

/// A group's directories.
#[derive(Debug, Clone)]
pub struct GroupDirs {
    /// Its Parquet files, catalog and snapshots.
    pub data: PathBuf,
    /// Its log.
    pub wal: PathBuf,
}

/// The directories of `group`: the first group keeps the node's own (so a node that
/// ran before groups existed finds its data where it left it); data group `g` lives in
/// `groups/g` under each.
pub fn group_dirs(data_dir: &Path, wal_dir: &Path, group: GroupId) -> GroupDirs {
    if group == FIRST_GROUP {
        return GroupDirs {
            data: data_dir.to_path_buf(),
            wal: wal_dir.to_path_buf(),
        };
    }
    let sub = Path::new("groups").join(group.to_string());
    GroupDirs {
        data: data_dir.join(&sub),
        wal: wal_dir.join(&sub),
    }
}

/// Refuses a start whose `cluster.data_groups` differs from the one the node's rows
/// were placed by: a measurement's group is its hash modulo that number, so another
/// number would look for it in the wrong group. `first_holds_rows` says whether the
/// first group already holds rows (a node that ran with one data group). Records the
/// number on the first start.
pub fn check_layout(data_dir: &Path, data_groups: usize, first_holds_rows: bool) -> Result<()> {
    let file = data_dir.join(LAYOUT_FILE);
    let recorded = match std::fs::read_to_string(&file) {
        Ok(text) => Some(
            text.trim()
                .parse::<usize>()
                .with_context(|| format!("{}: not a number of data groups", file.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    let before = recorded.unwrap_or(if first_holds_rows { 1 } else { data_groups });
    if before != data_groups {
        bail!(
            "cluster.data_groups = {data_groups}, but this node's rows were placed in {before} \
             data group(s) (recorded in {}): each measurement lives in the group its name \
             hashes to, so changing the number would hide written rows. Start with \
             cluster.data_groups = {before}",
            file.display()
        );
    }
    if recorded.is_none() {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        crate::groups::layout::write_synced(&file, &data_groups.to_string())?;
    }
    Ok(())
}

/// File in the data directory recording what placement was computed from.
const PLACEMENT_FILE: &str = "placement";

/// Refuses a start whose placement inputs (`cluster.replication` and the node ids of
/// `cluster.peers`) differ from those the node's groups were placed by: they name the
/// groups' first members, which a node falls back to for a group whose members it has
/// not recorded (replicas move with `quiver cluster move`, not by changing these).
/// Records them on the first start. Only a node with several data groups places them.
pub fn check_placement(data_dir: &Path, replication: usize, nodes: &[u64]) -> Result<()> {
    let file = data_dir.join(PLACEMENT_FILE);
    let ids: Vec<String> = nodes.iter().map(u64::to_string).collect();
    let now = format!("replication={replication} nodes={}", ids.join(","));
    match std::fs::read_to_string(&file) {
        Ok(text) if text.trim() == now => Ok(()),
        Ok(text) => bail!(
            "this node's data groups were placed with {} (recorded in {}), but it starts with \
             {now}: each data group's first members follow from these. Start with the \
             recorded cluster.replication and cluster.peers, and move replicas with quiver \
             cluster move, drain or rebalance",
            text.trim(),
            file.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            write_synced(&file, &now)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", file.display())),
    }
}

/// Writes `text` to `file` durably (temporary file, fsync, rename, directory fsync).
pub fn write_synced(file: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let tmp = file.with_extension("tmp");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("renaming to {}", file.display()))?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_number_of_data_groups_is_kept_once_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        check_layout(dir.path(), 4, false).expect("first start records 4");
        check_layout(dir.path(), 4, false).expect("same number again");
        let e = check_layout(dir.path(), 2, false).expect_err("a change is refused");
        assert!(e.to_string().contains("cluster.data_groups = 4"), "{e}");
    }

    #[test]
    fn a_node_that_held_rows_in_one_group_keeps_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = check_layout(dir.path(), 3, true).expect_err("rows were placed in one");
        assert!(e.to_string().contains("placed in 1"), "{e}");
        check_layout(dir.path(), 1, true).expect("one stays");
    }

    #[test]
    fn the_placement_inputs_are_kept_once_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        check_placement(dir.path(), 3, &[1, 2, 3, 4, 5]).expect("first start records");
        check_placement(dir.path(), 3, &[1, 2, 3, 4, 5]).expect("same again");
        let e = check_placement(dir.path(), 2, &[1, 2, 3, 4, 5]).expect_err("replication");
        assert!(
            e.to_string().contains("replication=3 nodes=1,2,3,4,5"),
            "{e}"
        );
        check_placement(dir.path(), 3, &[1, 2, 3, 4]).expect_err("another node set");
    }

    #[test]
    fn the_first_group_keeps_the_node_directories() {
        let d = group_dirs(Path::new("/d"), Path::new("/w"), 0);
        assert_eq!((d.data, d.wal), (PathBuf::from("/d"), PathBuf::from("/w")));
        let d = group_dirs(Path::new("/d"), Path::new("/w"), 3);
        assert_eq!(
            (d.data, d.wal),
            (PathBuf::from("/d/groups/3"), PathBuf::from("/w/groups/3"))
        );
    }
}
