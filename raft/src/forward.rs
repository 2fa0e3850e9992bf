//! What a follower asks the leader to do on its behalf (`POST /internal/forward`):
//! writes already decoded on the follower, read indexes for linearizable reads, and
//! membership changes. Clients never see "not the leader".

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::command::{CommandResult, DeleteCommand, WriteCommand};
use crate::types::NodeId;

/// URL path of forwarded requests.
pub const FORWARD_PATH: &str = "/internal/forward";

/// A request only the leader can serve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LeaderRequest {
    /// Propose rows.
    Write(WriteCommand),
    /// Propose a change of the replicated settings.
    Policy(quiver_storage::PolicyChange),
    /// Propose a delete (a tombstone).
    Delete(DeleteCommand),
    /// Confirm leadership and return the index a linearizable read must wait for.
    ReadIndex,
    /// Add a non-voting member that starts receiving the log.
    AddLearner {
        /// Its id.
        node_id: NodeId,
        /// Its address (`host:port` or URL).
        addr: String,
    },
    /// Make learners voters (`add`) or remove members (`remove`).
    ChangeVoters {
        /// Learners to promote.
        add: BTreeSet<NodeId>,
        /// Members to remove.
        remove: BTreeSet<NodeId>,
    },
    /// Hand leadership to voter `to` (see `RaftNode::hand_over`): a move asks this
    /// before removing a replica that leads, so no write is left pending on it.
    HandOver {
        /// The voter to lead next.
        to: NodeId,
    },
    /// Sent by a leader handing leadership over to the voter that should lead next
    /// (`RaftNode::hand_over`), not to a leader: stand for election now.
    StandForElection {
        /// The leader's last log index, which the voter's log must hold.
        last_log_index: u64,
    },
}

/// The leader's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LeaderAnswer {
    /// A write's result and the index of its entry: a follower that forwarded the
    /// write waits until it has applied that index before it answers its client, so the
    /// client's next local read there sees the write.
    Committed {
        /// What applying the entry produced.
        result: CommandResult,
        /// The entry's log index.
        index: u64,
    },
    /// The read index (`None` on an empty log).
    ReadIndex(Option<u64>),
    /// The membership change is committed.
    MembershipChanged,
    /// The voter asked to stand for election did.
    Standing,
}
