//! Raft groups: a process runs one openraft instance per group it is a member of, each
//! with its own log, state machine and loops. Group 0 is the first group of every
//! cluster: with one data group (the default) it holds everything, as a single-group
//! cluster always has; with more, it holds the cluster's metadata (tokens and policies)
//! and the data groups hold the rows.

use std::borrow::Cow;

/// A Raft group's number.
pub type GroupId = u32;

/// The group every cluster starts with (see the module comment).
pub const FIRST_GROUP: GroupId = 0;

/// Prefix of the `/internal/` routes of a group other than [`FIRST_GROUP`].
pub const GROUP_PATH_PREFIX: &str = "/internal/groups/";

/// The `/internal/` path of `path` for `group`: [`FIRST_GROUP`]'s paths stay as they
/// were before groups existed (so a single-group node speaks to peers as it always
/// has); another group's are `/internal/groups/{group}/...`.
pub fn group_path(group: GroupId, path: &str) -> Cow<'_, str> {
    if group == FIRST_GROUP {
        return Cow::Borrowed(path);
    }
    let rest = path.strip_prefix("/internal/").unwrap_or(path);
    Cow::Owned(format!("{GROUP_PATH_PREFIX}{group}/{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_group_keeps_its_paths_and_the_others_carry_their_number() {
        assert_eq!(
            group_path(0, "/internal/raft/append"),
            "/internal/raft/append"
        );
        assert_eq!(
            group_path(3, "/internal/raft/append"),
            "/internal/groups/3/raft/append"
        );
        assert_eq!(
            group_path(12, "/internal/files/data/a.parquet"),
            "/internal/groups/12/files/data/a.parquet"
        );
    }
}
