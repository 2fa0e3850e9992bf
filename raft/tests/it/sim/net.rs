//! The simulation's network: every `/internal/` call between nodes goes through
//! [`SimLink`] (a `PeerTransport`), which delivers it straight to the target node's
//! handlers, the way `src/http/internal.rs` does over HTTP, unless the link is cut,
//! slow or loses answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use parking_lot::Mutex;
use quiver_raft::{
    raft_paths, LeaderAnswer, LeaderRequest, NodeId, PeerError, PeerTransport, RaftNode,
    TypeConfig, WriteError, FILES_PATH, FORWARD_PATH, PEER_STATE_PATH,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

/// What one direction of a link between two nodes does to calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkState {
    /// Calls do not get through (a partition).
    pub cut: bool,
    /// Added before each call is delivered.
    pub delay_ms: u64,
    /// Chance, in percent, that an answer is lost after the call was acted on.
    pub answer_loss_pct: u8,
    /// Up to this much more delay, drawn per call: calls overtake each other
    /// (reordering).
    pub jitter_ms: u64,
    /// Chance, in percent, that a Raft call (append, vote, snapshot chunk) is delivered
    /// a second time, later, its second answer dropped: a retransmission.
    pub duplicate_pct: u8,
}

struct Net {
    /// Running nodes by address, with the span their work logs in.
    nodes: HashMap<String, (NodeId, RaftNode, tracing::Span)>,
    /// Link state by (from, to).
    links: HashMap<(NodeId, NodeId), LinkState>,
    rng: StdRng,
}

/// The network all simulated nodes share.
#[derive(Clone)]
pub struct SimNet {
    net: Arc<Mutex<Net>>,
}

impl SimNet {
    pub fn new(seed: u64) -> Self {
        SimNet {
            net: Arc::new(Mutex::new(Net {
                nodes: HashMap::new(),
                links: HashMap::new(),
                rng: StdRng::seed_from_u64(seed ^ 0x0005_eed0_f4e7),
            })),
        }
    }

    /// The transport node `from` sends through.
    pub fn link_from(&self, from: NodeId) -> Arc<dyn PeerTransport> {
        Arc::new(SimLink {
            from,
            net: self.clone(),
        })
    }

    /// `node` answers at `addr` from now on, logging in `span`.
    pub fn attach(&self, addr: &str, id: NodeId, node: RaftNode, span: tracing::Span) {
        self.net
            .lock()
            .nodes
            .insert(addr.to_string(), (id, node, span));
    }

    /// Nothing answers at `addr` any more (the process is gone).
    pub fn detach(&self, addr: &str) {
        self.net.lock().nodes.remove(addr);
    }

    pub fn set_link(&self, from: NodeId, to: NodeId, state: LinkState) {
        self.net.lock().links.insert((from, to), state);
    }

    pub fn heal(&self) {
        self.net.lock().links.clear();
    }

    fn link(&self, from: NodeId, to: NodeId) -> LinkState {
        self.net
            .lock()
            .links
            .get(&(from, to))
            .copied()
            .unwrap_or_default()
    }

    fn lose_answer(&self, state: LinkState) -> bool {
        state.answer_loss_pct > 0
            && self.net.lock().rng.random_range(0..100u8) < state.answer_loss_pct
    }

    /// The delay of one call on a link in `state`.
    fn delay(&self, state: LinkState) -> Duration {
        let jitter = if state.jitter_ms > 0 {
            self.net.lock().rng.random_range(0..=state.jitter_ms)
        } else {
            0
        };
        Duration::from_millis(state.delay_ms + jitter)
    }

    /// Whether a call on a link in `state` is delivered twice.
    fn duplicate(&self, state: LinkState) -> bool {
        state.duplicate_pct > 0 && self.net.lock().rng.random_range(0..100u8) < state.duplicate_pct
    }
}

/// The Raft calls a network may deliver twice (a retransmission): every other path is
/// a client's request forwarded once, which TCP never duplicates.
fn retransmittable(path: &str) -> bool {
    matches!(
        path,
        raft_paths::APPEND | raft_paths::VOTE | raft_paths::SNAPSHOT
    )
}

/// One node's end of the network.
struct SimLink {
    from: NodeId,
    net: SimNet,
}

impl PeerTransport for SimLink {
    fn send(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Vec<u8>, PeerError>> {
        let (from, net, addr, path) = (
            self.from,
            self.net.clone(),
            addr.to_string(),
            path.to_string(),
        );
        Box::pin(async move {
            let target = net.net.lock().nodes.get(&addr).cloned();
            let Some((to, node, span)) = target else {
                return Err(PeerError::Refused {
                    addr,
                    message: "connection refused (the node is down)".into(),
                });
            };
            let link = net.link(from, to);
            if link.cut {
                // A cut link swallows the connection attempt: nothing was delivered.
                tokio::time::sleep(timeout.min(Duration::from_millis(10))).await;
                return Err(PeerError::Refused {
                    addr,
                    message: "no route (partitioned)".into(),
                });
            }
            let delay = net.delay(link);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if retransmittable(&path) && net.duplicate(link) {
                // The copy arrives later, after the original and perhaps after calls
                // sent since; its answer goes nowhere.
                let (node, body, span, later) = (
                    node.clone(),
                    body.clone(),
                    span.clone(),
                    net.delay(link) * 2,
                );
                let path = path.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(later + Duration::from_millis(1)).await;
                    let _ = dispatch(&node, &path, body.as_deref())
                        .instrument(span)
                        .await;
                });
            }
            // Logged as the node that handles it, not the one that asked.
            let handled = dispatch(&node, &path, body.as_deref()).instrument(span);
            let answer =
                tokio::time::timeout(timeout, handled)
                    .await
                    .map_err(|_| PeerError::Timeout {
                        addr: addr.clone(),
                        ms: timeout.as_millis() as u64,
                    })?;
            let back = net.link(to, from);
            if back.cut || net.lose_answer(link) {
                return Err(PeerError::Unreachable {
                    addr,
                    message: "the answer was lost".into(),
                });
            }
            answer.map_err(|(status, message)| PeerError::Protocol {
                addr,
                status: Some(status),
                message,
            })
        })
    }
}

type Answer = Result<Vec<u8>, (u16, String)>;

fn decode<T: DeserializeOwned>(body: Option<&[u8]>) -> Result<T, (u16, String)> {
    rmp_serde::from_slice(body.unwrap_or_default()).map_err(|e| (400, format!("undecodable: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Answer {
    rmp_serde::to_vec_named(value).map_err(|e| (500, format!("cannot encode: {e}")))
}

/// What `src/http/internal.rs` does with each internal path, minus HTTP.
async fn dispatch(node: &RaftNode, path: &str, body: Option<&[u8]>) -> Answer {
    match path {
        raft_paths::APPEND => {
            let request: AppendEntriesRequest<TypeConfig> = decode(body)?;
            node.may_take_entries(&request.vote)
                .map_err(|reason| (503, reason))?;
            encode(&node.append_entries(request).await)
        }
        raft_paths::VOTE => {
            let request: VoteRequest<u64> = decode(body)?;
            node.may_vote(&request).map_err(|reason| (503, reason))?;
            encode(&node.raft.vote(request).await)
        }
        raft_paths::SNAPSHOT => {
            let request: InstallSnapshotRequest<TypeConfig> = decode(body)?;
            node.may_take_entries(&request.vote)
                .map_err(|reason| (503, reason))?;
            encode(&node.install_snapshot(request).await)
        }
        FORWARD_PATH => {
            let request: LeaderRequest = decode(body)?;
            let answer: Result<LeaderAnswer, WriteError> = node.serve_leader(request).await;
            encode(&answer)
        }
        PEER_STATE_PATH => encode(&node.peer_state()),
        "/health" => Ok(Vec::new()),
        _ => match path.strip_prefix(FILES_PATH) {
            Some(file) => {
                let full = node.storage.config().dir.join("parquet").join(file);
                tokio::fs::read(&full)
                    .await
                    .map_err(|e| (404, format!("{file}: {e}")))
            }
            None => Err((404, format!("no route {path}"))),
        },
    }
}
