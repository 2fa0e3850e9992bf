//! Cancelling a Flight SQL query by its `FlightInfo` (`CancelFlightInfo`, and the
//! older `CancelQuery` action): every `DoGet` running a ticket of that `FlightInfo`
//! ends with `CANCELLED` (its query stops: the engine's stream is dropped), and a
//! `DoGet` of it that starts later is refused the same way.
//!
//! A ticket is named by the run id a statement handle carries (random, made at
//! `GetFlightInfo`), or by a prepared statement's handle: knowing it is what allows
//! cancelling, as knowing a ticket is what allows running it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Cancelled names remembered for `DoGet`s that have not started yet.
const CANCELLED_REMEMBERED: usize = 4_096;

/// The runs of one ticket: each run's id and the switch that cancels it.
type Runs = Vec<(u64, watch::Sender<bool>)>;

/// The `DoGet`s running now, by the name of their ticket.
#[derive(Default)]
pub struct Running {
    runs: Mutex<HashMap<String, Runs>>,
    cancelled: Mutex<VecDeque<String>>,
    next: AtomicU64,
}

/// One running `DoGet`: unregistered when dropped (the stream ended or went away).
pub struct RunGuard {
    running: Arc<Running>,
    name: String,
    id: u64,
    /// Turns `true` when the run is cancelled.
    pub cancelled: watch::Receiver<bool>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut runs = self.running.runs.lock();
        if let Some(list) = runs.get_mut(&self.name) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                runs.remove(&self.name);
            }
        }
    }
}

impl Running {
    /// Registers a run of the ticket `name`; `None` if that ticket was cancelled.
    pub fn start(self: &Arc<Self>, name: &str) -> Option<RunGuard> {
        if self.cancelled.lock().iter().any(|c| c == name) {
            return None;
        }
        let (sender, receiver) = watch::channel(false);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.runs
            .lock()
            .entry(name.to_string())
            .or_default()
            .push((id, sender));
        Some(RunGuard {
            running: self.clone(),
            name: name.to_string(),
            id,
            cancelled: receiver,
        })
    }

    /// Cancels every run of the ticket `name` and refuses later ones; whether one was
    /// running.
    pub fn cancel(&self, name: &str) -> bool {
        {
            let mut cancelled = self.cancelled.lock();
            if !cancelled.iter().any(|c| c == name) {
                if cancelled.len() >= CANCELLED_REMEMBERED {
                    cancelled.pop_front();
                }
                cancelled.push_back(name.to_string());
            }
        }
        let runs = self.runs.lock();
        let list = runs.get(name).map(Vec::as_slice).unwrap_or_default();
        for (_, sender) in list {
            let _ = sender.send(true);
        }
        !list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_reaches_every_run_of_the_ticket_and_refuses_later_ones() {
        let running = Arc::new(Running::default());
        let a = running.start("t1").unwrap();
        let b = running.start("t1").unwrap();
        let other = running.start("t2").unwrap();
        assert!(running.cancel("t1"));
        assert!(*a.cancelled.borrow() && *b.cancelled.borrow());
        assert!(!*other.cancelled.borrow());
        assert!(
            running.start("t1").is_none(),
            "a cancelled ticket runs no more"
        );
        drop((a, b));
        assert!(running.runs.lock().get("t1").is_none());
        assert!(!running.cancel("t3"), "nothing ran");
    }
}
