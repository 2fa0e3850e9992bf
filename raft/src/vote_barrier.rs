//! Whether this node may grant votes: a node that starts with an empty log inside an
//! existing cluster must not, until it holds every committed entry again.
//!
//! A voter whose data directory was lost comes back with no log and no vote. Were it
//! to vote at once, it could help elect a candidate that lacks entries it had itself
//! acknowledged (the majority that committed them included its old self), and those
//! acknowledged writes would be lost. So the barrier closes when a node finds itself
//! with an empty log in a cluster that already has entries, and opens only once a
//! leader has told it a commit index *of the leader's own term* and its log reaches
//! that index: an entry of the current term being committed means every earlier
//! committed entry precedes it, so the node then holds all of them. The node still
//! accepts entries (and counts towards commits) meanwhile; only its vote waits.
//! Its candidacy waits too (`RaftNode` turns openraft's elections off while the barrier
//! is closed): a candidate votes for itself, so a node that stood with one peer behind
//! it would be elected without the entries it lost (the simulation found exactly that).
//!
//! A node that lost its data lost its vote with it, and a vote is a promise: having
//! voted in term T, the node refuses leaders of older terms. Forgetting it, the node
//! would accept entries from a stale leader (one partitioned away while a later term
//! elected someone else) and count towards that leader's majority: two leaders then
//! commit different entries at the same index, and acknowledged writes are lost (the
//! simulation did this: a wiped node, acked by a leader of term 1 after term 2 had
//! committed). So such a node takes no entries until it has heard the vote of every
//! peer, and then refuses leaders older than the newest of those votes: whoever it
//! voted for holds a vote at least that new, since a candidate votes for itself.
//!
//! The closed state is persisted (`raft-vote-barrier` beside the log), so a node that
//! crashes while catching up, with a partial log, does not come back as a full voter.
//!
//! An empty log is not always a lost one: a node that lost power before its first
//! fsync (it had acknowledged nothing) has one too. A marker written the first time a
//! node starts on a log directory (`raft-node`, fsynced) tells them apart: with it, an
//! empty log never held an acknowledged entry and the node votes at once. Without this,
//! two such nodes of three (one wiped, one that lost power early) left the third unable
//! to win an election, forever (found by the simulation, `raft/tests/it/sim`).

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::durable_file::{read_durable, write_durable, DurableFileError};
use crate::types::{LogId, Vote};

const BARRIER_FILE: &str = "raft-vote-barrier";
/// Written (fsynced) the first time a node starts on a log directory: present, the
/// directory is this node's own and was never wiped, so an empty log in it never
/// acknowledged an entry; absent with an empty log, the node is new or lost its data.
const NODE_FILE: &str = "raft-node";

/// The persisted state of a closed barrier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Closed {
    /// The log index to reach, once a leader has named one.
    catch_up_to: Option<u64>,
    /// The node lost its vote with its data: it takes entries only from leaders at
    /// least as new as `vote_floor`, and none until that is known.
    #[serde(default)]
    vote_lost: bool,
    /// The newest vote any peer held when asked (all of them answered).
    #[serde(default)]
    vote_floor: Option<Vote>,
    /// The last entry of the log this node erased (see [`VoteBarrier::close_erasing`]):
    /// it still knows how far its log reached, so it may vote for a candidate whose
    /// log reaches at least as far.
    #[serde(default)]
    erased_log_end: Option<LogId>,
}

/// Whether this node takes entries (AppendEntries, snapshot chunks) from a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntriesVerdict {
    /// Take them.
    Take,
    /// Not yet: the node lost its vote and has not heard every peer's yet. The reason.
    NotYet(String),
    /// The leader is older than a vote a peer holds: answer with that vote, so the
    /// stale leader steps down.
    Stale(Vote),
}

/// See the module documentation.
pub struct VoteBarrier {
    path: PathBuf,
    closed: Mutex<Option<Closed>>,
}

impl VoteBarrier {
    /// Loads the barrier from the log directory (open unless a closed one was saved).
    pub fn load(dir: &Path) -> Result<VoteBarrier, DurableFileError> {
        let path = dir.join(BARRIER_FILE);
        let closed: Option<Closed> = read_durable(&path)?;
        Ok(VoteBarrier {
            path,
            closed: Mutex::new(closed),
        })
    }

    /// Whether `dir` was this node's log directory before (see `NODE_FILE`). A marker
    /// naming another node is an error: the directory belongs to someone else.
    pub fn directory_known(dir: &Path, node_id: u64) -> Result<bool, DurableFileError> {
        match read_durable::<u64>(&dir.join(NODE_FILE))? {
            None => Ok(false),
            Some(id) if id == node_id => Ok(true),
            Some(id) => Err(DurableFileError::Io {
                path: dir.join(NODE_FILE).display().to_string(),
                source: std::io::Error::other(format!(
                    "this log directory belongs to node {id}, not to node {node_id}"
                )),
            }),
        }
    }

    /// Marks `dir` as this node's log directory, durably (once).
    pub fn mark_directory(dir: &Path, node_id: u64) -> Result<(), DurableFileError> {
        if Self::directory_known(dir, node_id)? {
            return Ok(());
        }
        write_durable(&dir.join(NODE_FILE), &node_id, true)
    }

    /// Closes the barrier, durably, before this node erases its log, whose last entry
    /// was `log_end`: until it has caught up, it votes only for candidates whose log
    /// reaches at least that far (see [`VoteBarrier::refusal_for`]). Called again after
    /// a crash part-way through the erase (which shortens the log from its end), it
    /// keeps the furthest end recorded.
    pub fn close_erasing(&self, log_end: Option<LogId>) -> Result<(), DurableFileError> {
        let mut closed = self.closed.lock();
        let before = closed.unwrap_or_default();
        let state = Closed {
            erased_log_end: before.erased_log_end.max(log_end),
            ..before
        };
        write_durable(&self.path, &state, true)?;
        *closed = Some(state);
        Ok(())
    }

    /// Closes the barrier of a node that lost its vote with its data (see the module
    /// documentation): besides not voting, it takes no entries until
    /// [`VoteBarrier::set_vote_floor`].
    pub fn close_lost_vote(&self) -> Result<(), DurableFileError> {
        let mut closed = self.closed.lock();
        let state = Closed {
            vote_lost: true,
            ..closed.unwrap_or_default()
        };
        write_durable(&self.path, &state, true)?;
        *closed = Some(state);
        Ok(())
    }

    /// Whether the node waits to hear every peer's vote before taking entries.
    pub fn awaits_vote_floor(&self) -> bool {
        self.closed
            .lock()
            .is_some_and(|c| c.vote_lost && c.vote_floor.is_none())
    }

    /// Records the newest vote the peers hold (every peer answered), durably.
    pub fn set_vote_floor(&self, floor: Vote) -> Result<(), DurableFileError> {
        let mut closed = self.closed.lock();
        let Some(state) = closed.as_mut() else {
            return Ok(());
        };
        let next = Closed {
            vote_floor: Some(floor),
            ..*state
        };
        write_durable(&self.path, &next, true)?;
        *state = next;
        Ok(())
    }

    /// Whether to take entries from a leader holding `leader_vote`.
    pub fn entries_verdict(&self, leader_vote: &Vote) -> EntriesVerdict {
        match *self.closed.lock() {
            Some(Closed {
                vote_lost: true,
                vote_floor: None,
                ..
            }) => EntriesVerdict::NotYet(
                "this node lost its data and its vote: it takes entries once every peer \
                 has told it its vote"
                    .to_string(),
            ),
            Some(Closed {
                vote_lost: true,
                vote_floor: Some(floor),
                ..
            }) if leader_vote.leader_id().term < floor.leader_id().term => {
                EntriesVerdict::Stale(floor)
            }
            _ => EntriesVerdict::Take,
        }
    }

    /// Opens the barrier: a fresh cluster is forming, or this node has caught up.
    pub fn open(&self) -> Result<(), DurableFileError> {
        let mut closed = self.closed.lock();
        if closed.is_none() {
            return Ok(());
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DurableFileError::Io {
                    path: self.path.display().to_string(),
                    source,
                })
            }
        }
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|source| DurableFileError::Io {
                    path: dir.display().to_string(),
                    source,
                })?;
        }
        *closed = None;
        Ok(())
    }

    /// Whether the vote for a candidate whose log ends at `candidate_last` is refused,
    /// and why. A node that erased its log but remembers where it ended grants it when
    /// the candidate's log is at least as up to date as the erased one was: Raft's own
    /// rule, applied to the log the node acknowledged from, so the candidate holds every
    /// entry this node helped commit. Without this, a node whose snapshot install failed
    /// while another node was wiped left the only complete replica unable to win an
    /// election, forever (the cluster simulation, seed 158).
    pub fn refusal_for(&self, candidate_last: Option<&LogId>) -> Option<String> {
        let erased_end = self.closed.lock().map(|c| (c.vote_lost, c.erased_log_end));
        match erased_end {
            Some((false, Some(end))) if candidate_last.is_some_and(|c| *c >= end) => None,
            _ => self.refusal(),
        }
    }

    /// Whether votes (and this node's own candidacy) are refused, and why.
    pub fn refusal(&self) -> Option<String> {
        self.closed.lock().map(|c| match c.catch_up_to {
            Some(index) => format!(
                "this node may lack entries it acknowledged (it started with an empty log, an erased one or an old copy, in an existing cluster); it votes again once its log reaches index {index}"
            ),
            None => "this node may lack entries it acknowledged (it started with an empty log, an erased one or an old copy, in an existing cluster); it votes again once a leader has brought it up to date".to_string(),
        })
    }

    /// Called with each AppendEntries a leader sends: a commit index of the leader's own
    /// term becomes the index to reach. Returns true when the barrier just learned it.
    pub fn observe_leader_commit(
        &self,
        leader_term: u64,
        leader_commit: Option<(u64, u64)>,
    ) -> Result<bool, DurableFileError> {
        let mut closed = self.closed.lock();
        let Some(state) = closed.as_mut() else {
            return Ok(false);
        };
        if state.catch_up_to.is_some() {
            return Ok(false);
        }
        match leader_commit {
            Some((term, index)) if term == leader_term => {
                let next = Closed {
                    catch_up_to: Some(index),
                    ..*state
                };
                write_durable(&self.path, &next, true)?;
                *state = next;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Called after entries were appended: opens the barrier once the log reaches the
    /// index to reach. Returns true when it opened.
    pub fn observe_log(&self, last_log_index: Option<u64>) -> Result<bool, DurableFileError> {
        let reached = {
            let closed = self.closed.lock();
            match (*closed, last_log_index) {
                (
                    Some(Closed {
                        catch_up_to: Some(target),
                        ..
                    }),
                    Some(last),
                ) => last >= target,
                _ => false,
            }
        };
        if reached {
            self.open()?;
        }
        Ok(reached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_barrier_survives_a_restart_and_opens_only_at_a_current_term_commit() {
        let dir = tempfile::tempdir().unwrap();
        let barrier = VoteBarrier::load(dir.path()).unwrap();
        assert!(barrier.refusal().is_none());
        barrier.close_erasing(None).unwrap();
        assert!(barrier.refusal().is_some());
        // A commit index of an older term does not count.
        assert!(!barrier.observe_leader_commit(5, Some((4, 90))).unwrap());
        assert!(!barrier.observe_log(Some(200)).unwrap());
        assert!(barrier.observe_leader_commit(5, Some((5, 120))).unwrap());
        let reloaded = VoteBarrier::load(dir.path()).unwrap();
        assert!(reloaded.refusal().unwrap().contains("120"));
        assert!(!reloaded.observe_log(Some(119)).unwrap());
        assert!(reloaded.observe_log(Some(120)).unwrap());
        assert!(reloaded.refusal().is_none());
        assert!(VoteBarrier::load(dir.path()).unwrap().refusal().is_none());
    }

    #[test]
    fn a_node_that_lost_its_vote_takes_entries_only_from_leaders_as_new_as_its_peers_votes() {
        let vote = |term| Vote::new_committed(term, 2);
        let dir = tempfile::tempdir().unwrap();
        let barrier = VoteBarrier::load(dir.path()).unwrap();
        assert_eq!(barrier.entries_verdict(&vote(1)), EntriesVerdict::Take);
        // A barrier closed for an erased log (the vote kept) takes entries.
        barrier.close_erasing(None).unwrap();
        assert_eq!(barrier.entries_verdict(&vote(1)), EntriesVerdict::Take);
        assert!(!barrier.awaits_vote_floor());
        barrier.close_lost_vote().unwrap();
        assert!(barrier.awaits_vote_floor());
        // A node that lost its data with its vote votes for no one, however up to date.
        let far = LogId::new(openraft::CommittedLeaderId::new(50, 2), 1_000);
        assert!(barrier.refusal_for(Some(&far)).is_some());
        assert!(matches!(
            barrier.entries_verdict(&vote(9)),
            EntriesVerdict::NotYet(_)
        ));
        barrier.set_vote_floor(vote(2)).unwrap();
        let reloaded = VoteBarrier::load(dir.path()).unwrap();
        assert!(!reloaded.awaits_vote_floor());
        assert_eq!(
            reloaded.entries_verdict(&Vote::new_committed(1, 3)),
            EntriesVerdict::Stale(vote(2))
        );
        assert_eq!(reloaded.entries_verdict(&vote(2)), EntriesVerdict::Take);
        // Catching up keeps the floor; opening ends it.
        assert!(reloaded.observe_leader_commit(3, Some((3, 10))).unwrap());
        assert_eq!(
            VoteBarrier::load(dir.path())
                .unwrap()
                .entries_verdict(&vote(1)),
            EntriesVerdict::Stale(vote(2))
        );
        assert!(reloaded.observe_log(Some(10)).unwrap());
        assert_eq!(reloaded.entries_verdict(&vote(1)), EntriesVerdict::Take);
    }
}
