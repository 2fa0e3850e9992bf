//! The model behind [`super::SimFs`]: what the running OS shows, what a completed sync
//! made durable, and what a power loss leaves.
//!
//! Files are inodes with two contents: `volatile` (what reads see now) and `durable`
//! (as of the last completed `fdatasync`). Names are a map from path to inode or
//! directory, kept twice: `names` (now) and `names_durable` (as of each directory's last
//! fsync); every create, rename and delete since a directory's last fsync waits in its
//! `changes`, in order.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    io,
    path::{Path, PathBuf},
};

/// A directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    Dir,
    File(u64),
}

/// One unsynced change to a directory.
#[derive(Debug, Clone)]
enum Change {
    Link {
        path: PathBuf,
        node: Node,
    },
    Unlink {
        path: PathBuf,
    },
    /// Atomic even across a power loss: the old name and the new one never both survive.
    Rename {
        from: PathBuf,
        to: PathBuf,
        node: Node,
    },
}

impl Change {
    fn apply(&self, names: &mut BTreeMap<PathBuf, Node>) {
        match self {
            Change::Link { path, node } => {
                names.insert(path.clone(), *node);
            }
            Change::Unlink { path } => {
                names.remove(path);
            }
            Change::Rename { from, to, node } => {
                names.remove(from);
                names.insert(to.clone(), *node);
            }
        }
    }

    fn node(&self) -> Option<Node> {
        match self {
            Change::Link { node, .. } | Change::Rename { node, .. } => Some(*node),
            Change::Unlink { .. } => None,
        }
    }
}

/// A file's bytes, now and as of its last completed `fdatasync`.
#[derive(Debug, Clone, Default)]
pub(super) struct Contents {
    pub volatile: Vec<u8>,
    pub durable: Vec<u8>,
}

/// The whole simulated disk. Paths are absolute; `/` always exists.
#[derive(Debug, Clone, Default)]
pub(super) struct Disk {
    names: BTreeMap<PathBuf, Node>,
    names_durable: BTreeMap<PathBuf, Node>,
    changes: BTreeMap<PathBuf, Vec<Change>>,
    files: BTreeMap<u64, Contents>,
    inode_next: u64,
}

fn error(kind: io::ErrorKind, path: &Path, what: &str) -> io::Error {
    io::Error::new(kind, format!("SimFs: {}: {what}", path.display()))
}

impl Disk {
    fn is_dir(&self, path: &Path) -> bool {
        path.parent().is_none() || self.names.get(path) == Some(&Node::Dir)
    }

    /// The parent of a path that may be created; it must be an existing directory.
    fn parent_dir(&self, path: &Path) -> io::Result<PathBuf> {
        if !path.is_absolute() {
            return Err(error(
                io::ErrorKind::InvalidInput,
                path,
                "paths must be absolute",
            ));
        }
        let Some(parent) = path.parent() else {
            return Err(error(io::ErrorKind::AlreadyExists, path, "is the root"));
        };
        if !self.is_dir(parent) {
            return Err(error(io::ErrorKind::NotFound, parent, "no such directory"));
        }
        Ok(parent.to_path_buf())
    }

    fn record(&mut self, dir: PathBuf, change: Change) {
        change.apply(&mut self.names);
        self.changes.entry(dir).or_default().push(change);
    }

    pub fn exists(&self, path: &Path) -> bool {
        path.parent().is_none() || self.names.contains_key(path)
    }

    pub fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        let parent = self.parent_dir(path)?;
        if self.exists(path) {
            return Err(error(io::ErrorKind::AlreadyExists, path, "exists"));
        }
        let path = path.to_path_buf();
        let node = Node::Dir;
        self.record(parent, Change::Link { path, node });
        Ok(())
    }

    /// The inode of an existing file.
    pub fn lookup_file(&self, path: &Path) -> io::Result<u64> {
        match self.names.get(path) {
            Some(Node::File(inode)) => Ok(*inode),
            Some(Node::Dir) => Err(error(io::ErrorKind::IsADirectory, path, "is a directory")),
            None if path.parent().is_none() => {
                Err(error(io::ErrorKind::IsADirectory, path, "is a directory"))
            }
            None => Err(error(io::ErrorKind::NotFound, path, "no such file")),
        }
    }

    pub fn create_new(&mut self, path: &Path) -> io::Result<u64> {
        let parent = self.parent_dir(path)?;
        if self.exists(path) {
            return Err(error(io::ErrorKind::AlreadyExists, path, "exists"));
        }
        let inode = self.inode_next;
        self.inode_next += 1;
        self.files.insert(inode, Contents::default());
        let path = path.to_path_buf();
        let node = Node::File(inode);
        self.record(parent, Change::Link { path, node });
        Ok(inode)
    }

    pub fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        self.lookup_file(path)?;
        let parent = self.parent_dir(path)?;
        let path = path.to_path_buf();
        self.record(parent, Change::Unlink { path });
        Ok(())
    }

    pub fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let inode = self.lookup_file(from)?;
        let parent = self.parent_dir(to)?;
        if from.parent() != Some(parent.as_path()) {
            let what = "rename across directories is not modelled";
            return Err(error(io::ErrorKind::InvalidInput, to, what));
        }
        if self.names.get(to) == Some(&Node::Dir) {
            return Err(error(io::ErrorKind::IsADirectory, to, "is a directory"));
        }
        let (from, to) = (from.to_path_buf(), to.to_path_buf());
        let node = Node::File(inode);
        self.record(parent, Change::Rename { from, to, node });
        Ok(())
    }

    pub fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        if !self.is_dir(dir) {
            return Err(error(io::ErrorKind::NotFound, dir, "no such directory"));
        }
        Ok(self
            .names
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name().map(|n| n.to_os_string()))
            .collect())
    }

    /// Makes every change to `dir`'s entries durable.
    pub fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        if !self.is_dir(dir) {
            return Err(error(io::ErrorKind::NotFound, dir, "no such directory"));
        }
        for change in self.changes.remove(dir).unwrap_or_default() {
            change.apply(&mut self.names_durable);
        }
        Ok(())
    }

    pub fn contents(&mut self, inode: u64) -> io::Result<&mut Contents> {
        self.files.get_mut(&inode).ok_or_else(|| {
            let what = format!("inode {inode} is gone");
            error(io::ErrorKind::NotFound, Path::new("/"), &what)
        })
    }

    /// The power goes out. Without `torn`, exactly what completed syncs covered
    /// survives. With it, each directory also keeps a random prefix of its unsynced
    /// changes (in the order they were made) and each file a random prefix of its
    /// unsynced bytes, as a disk that wrote back part of its cache.
    pub fn power_loss(&mut self, mut torn: Option<&mut super::Rng>) {
        for (_, changes) in std::mem::take(&mut self.changes) {
            let keep = torn
                .as_deref_mut()
                .map_or(0, |rng| rng.below(changes.len() as u64 + 1) as usize);
            for change in &changes[..keep] {
                change.apply(&mut self.names_durable);
            }
        }
        // A name survives only if every directory above it survived.
        let durable = &self.names_durable;
        let reachable = |path: &Path| {
            path.ancestors()
                .skip(1)
                .all(|dir| dir.parent().is_none() || durable.get(dir) == Some(&Node::Dir))
        };
        let survivors: BTreeMap<PathBuf, Node> = durable
            .iter()
            .filter(|(path, _)| reachable(path))
            .map(|(path, node)| (path.clone(), *node))
            .collect();
        self.names = survivors.clone();
        self.names_durable = survivors;
        self.forget_unreachable_files();
        for contents in self.files.values_mut() {
            let kept = match torn.as_deref_mut() {
                Some(rng) => torn_contents(contents, rng),
                None => contents.durable.clone(),
            };
            contents.volatile.clone_from(&kept);
            contents.durable = kept;
        }
    }

    /// Drops inodes no name (current, durable or pending) refers to. Only safe once no
    /// handle is open: after a restart or power loss.
    pub fn forget_unreachable_files(&mut self) {
        let mut live: Vec<u64> = Vec::new();
        let changed = self.changes.values().flatten().filter_map(Change::node);
        for node in self
            .names
            .values()
            .chain(self.names_durable.values())
            .copied()
            .chain(changed)
        {
            if let Node::File(inode) = node {
                live.push(inode);
            }
        }
        live.sort_unstable();
        self.files
            .retain(|inode, _| live.binary_search(inode).is_ok());
    }
}

/// What a file holds after a torn power loss: its bytes up to a random point between
/// where its synced and current contents first differ and the end of the current
/// contents, then whatever the synced contents had beyond that point.
fn torn_contents(contents: &Contents, rng: &mut super::Rng) -> Vec<u8> {
    let Contents { volatile, durable } = contents;
    let same = volatile
        .iter()
        .zip(durable.iter())
        .take_while(|(a, b)| a == b)
        .count();
    if same == volatile.len() && same == durable.len() {
        return durable.clone();
    }
    let cut = same + rng.below((volatile.len() - same) as u64 + 1) as usize;
    let mut kept = volatile[..cut].to_vec();
    if durable.len() > cut {
        kept.extend_from_slice(&durable[cut..]);
    }
    kept
}
