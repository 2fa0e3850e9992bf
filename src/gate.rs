//! Who may hold one of a listener's connections: a cap on all of them, a cap per client
//! address, and a reserve only the cluster's own peers may use.
//!
//! Without the last two, anyone who can reach a port takes a node off the air without
//! a token: a thousand connections that send headers and one byte of a promised body
//! and then idle filled the HTTP cap, and `/health`, every write and the peers' own
//! `/internal` traffic timed out behind them. A refused connection is told so where the
//! protocol allows (see the doors), then closed; it never waits in the kernel's accept
//! queue for a slot that a flood keeps taken.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

/// Connections that may wait for a slot, per slot: beyond them a connection is refused
/// at once (each waiting one holds a descriptor).
const WAITING_PER_SLOT_MAX: usize = 4;

/// The limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct GateLimits {
    /// Most connections open at once.
    pub connections_max: usize,
    /// Most connections open at once from one client address (peers excepted).
    pub per_address_max: usize,
    /// Of `connections_max`, how many only peers may take: the cluster keeps talking
    /// while clients fill the rest.
    pub reserved_for_peers: usize,
}

/// Why a connection was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRefusal {
    /// Every slot clients may use is taken.
    Full,
    /// This address holds its share already.
    AddressFull,
}

impl GateRefusal {
    /// A label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            GateRefusal::Full => "full",
            GateRefusal::AddressFull => "per_address",
        }
    }

    /// What the client is told.
    pub fn message(self, setting: &str) -> String {
        match self {
            GateRefusal::Full => format!("too many connections ({setting}); retry later"),
            GateRefusal::AddressFull => format!(
                "too many connections from this address ({setting} per address); retry later"
            ),
        }
    }
}

/// See the module documentation. Cheap to clone.
#[derive(Clone)]
pub struct ConnectionGate {
    limits: GateLimits,
    state: Arc<Mutex<GateState>>,
    peers: Arc<RwLock<HashSet<IpAddr>>>,
    /// Woken when a slot frees, for connections waiting for one.
    freed: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct GateState {
    open: usize,
    by_address: HashMap<IpAddr, usize>,
    /// Connections accepted and waiting for a slot.
    waiting: usize,
}

/// A connection let in; its slot is freed when this drops.
pub struct Ticket {
    state: Arc<Mutex<GateState>>,
    address: IpAddr,
    freed: Arc<tokio::sync::Notify>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        {
            let mut state = self.state.lock();
            state.open -= 1;
            if let Some(n) = state.by_address.get_mut(&self.address) {
                *n -= 1;
                if *n == 0 {
                    state.by_address.remove(&self.address);
                }
            }
        }
        self.freed.notify_waiters();
    }
}

impl ConnectionGate {
    /// A gate with `limits` and no peers known yet.
    pub fn new(limits: GateLimits) -> ConnectionGate {
        debug_assert!(limits.reserved_for_peers < limits.connections_max.max(1));
        ConnectionGate {
            limits,
            state: Arc::default(),
            peers: Arc::default(),
            freed: Arc::default(),
        }
    }

    /// [`ConnectionGate::admit`], but a connection that finds every slot it may use
    /// taken waits up to `wait` for one to free (as it would have waited in the accept
    /// queue, except that a peer still gets the reserve and the client is told, at the
    /// end, that it was refused). At most [`WAITING_PER_SLOT_MAX`] per slot wait at once;
    /// an address over its share is refused at once.
    pub async fn admit_waiting(
        &self,
        address: IpAddr,
        wait: std::time::Duration,
    ) -> Result<Ticket, GateRefusal> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut waiting = false;
        let outcome = loop {
            let freed = self.freed.notified();
            match self.admit(address) {
                Err(GateRefusal::Full) if tokio::time::Instant::now() < deadline => {
                    if !waiting {
                        let mut state = self.state.lock();
                        if state.waiting
                            >= self
                                .limits
                                .connections_max
                                .saturating_mul(WAITING_PER_SLOT_MAX)
                        {
                            break Err(GateRefusal::Full);
                        }
                        state.waiting += 1;
                        waiting = true;
                    }
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        break self.admit(address);
                    }
                }
                other => break other,
            }
        };
        if waiting {
            self.state.lock().waiting -= 1;
        }
        outcome
    }

    /// The addresses of the cluster's peers (they may use the reserve and are not held
    /// to the per-address cap).
    pub fn set_peers(&self, peers: HashSet<IpAddr>) {
        *self.peers.write() = peers;
    }

    /// Lets a connection from `address` in, or says why not.
    pub fn admit(&self, address: IpAddr) -> Result<Ticket, GateRefusal> {
        let peer = self.peers.read().contains(&address);
        let mut state = self.state.lock();
        let clients_max = self
            .limits
            .connections_max
            .saturating_sub(self.limits.reserved_for_peers);
        if state.open >= self.limits.connections_max || (!peer && state.open >= clients_max) {
            return Err(GateRefusal::Full);
        }
        let held = state.by_address.get(&address).copied().unwrap_or(0);
        if !peer && held >= self.limits.per_address_max {
            return Err(GateRefusal::AddressFull);
        }
        state.open += 1;
        *state.by_address.entry(address).or_default() += 1;
        debug_assert!(state.open <= self.limits.connections_max);
        Ok(Ticket {
            state: self.state.clone(),
            address,
            freed: self.freed.clone(),
        })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.state.lock().open
    }
}

/// The addresses `hosts` (URLs or `host:port`) resolve to, for [`ConnectionGate::set_peers`].
pub async fn resolve_peers<'a>(hosts: impl IntoIterator<Item = &'a str>) -> HashSet<IpAddr> {
    let mut out = HashSet::new();
    for host in hosts {
        let authority = host
            .split("://")
            .last()
            .unwrap_or(host)
            .split('/')
            .next()
            .unwrap_or_default();
        let with_port = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let resolved = tokio::net::lookup_host(with_port.as_str()).await;
        match resolved {
            Ok(addresses) => out.extend(addresses.map(|a| a.ip())),
            Err(e) => tracing::debug!(%host, error = %e, "cannot resolve a peer's address"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn a_connection_waits_for_a_slot_until_its_deadline() {
        let gate = ConnectionGate::new(GateLimits {
            connections_max: 1,
            per_address_max: 10,
            reserved_for_peers: 0,
        });
        let held = gate.admit(ip(1)).unwrap();
        let short = gate
            .admit_waiting(ip(2), std::time::Duration::from_millis(20))
            .await;
        assert_eq!(short.err(), Some(GateRefusal::Full));
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move {
                gate.admit_waiting(ip(2), std::time::Duration::from_secs(10))
                    .await
                    .is_ok()
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        drop(held);
        assert!(waiter.await.unwrap(), "let in once the slot freed");
    }

    #[test]
    fn one_address_cannot_take_every_slot_and_peers_keep_a_reserve() {
        let gate = ConnectionGate::new(GateLimits {
            connections_max: 10,
            per_address_max: 4,
            reserved_for_peers: 2,
        });
        gate.set_peers(HashSet::from([ip(9)]));
        let flood: Vec<Ticket> = (0..4).map(|_| gate.admit(ip(1)).unwrap()).collect();
        assert_eq!(gate.admit(ip(1)).err(), Some(GateRefusal::AddressFull));
        let others: Vec<Ticket> = (0..4).map(|i| gate.admit(ip(2 + i)).unwrap()).collect();
        // 8 of 10 open: clients are at their share, the peer still gets in, twice.
        assert_eq!(gate.admit(ip(7)).err(), Some(GateRefusal::Full));
        let peer = [gate.admit(ip(9)).unwrap(), gate.admit(ip(9)).unwrap()];
        assert_eq!(gate.admit(ip(9)).err(), Some(GateRefusal::Full));
        drop(peer);
        drop(flood);
        assert_eq!(gate.open(), 4);
        let again = gate.admit(ip(1)).unwrap();
        drop((again, others));
        assert_eq!(gate.open(), 0);
    }
}
