//! The ids of the writes a group applied lately, so a client that retries a write
//! (after a 504, or after a write spanning groups answered that some parts were not
//! written) has it stored once. Kept in the replicated settings: every replica adds an
//! id when it applies the write that carries it, and forgets the oldest past
//! [`WRITE_IDS_KEPT`], by count only, so every replica holds the same ids at every log
//! index and snapshots carry them.

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

/// How many write ids a group remembers: a retry is stored once as long as fewer than
/// this many other writes with ids reached the group in between.
pub const WRITE_IDS_KEPT: usize = 100_000;

/// Write ids in the order their writes were applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<String>", into = "Vec<String>")]
pub struct RecentWrites {
    order: VecDeque<String>,
    known: HashSet<String>,
}

impl RecentWrites {
    /// Whether a write with this id was applied within the window.
    pub fn contains(&self, id: &str) -> bool {
        self.known.contains(id)
    }

    /// Records an applied write's id, forgetting the oldest past the window.
    pub fn remember(&mut self, id: &str) {
        if !self.known.insert(id.to_string()) {
            return;
        }
        self.order.push_back(id.to_string());
        while self.order.len() > WRITE_IDS_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.known.remove(&old);
            }
        }
        debug_assert_eq!(self.order.len(), self.known.len());
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

impl From<Vec<String>> for RecentWrites {
    fn from(ids: Vec<String>) -> Self {
        let mut out = RecentWrites::default();
        for id in &ids {
            out.remember(id);
        }
        out
    }
}

impl From<RecentWrites> for Vec<String> {
    fn from(recent: RecentWrites) -> Self {
        recent.order.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_ids_in_order_and_forgets_the_oldest_past_the_window() {
        let mut recent = RecentWrites::default();
        for i in 0..WRITE_IDS_KEPT + 2 {
            recent.remember(&format!("{i:032x}"));
        }
        assert_eq!(recent.len(), WRITE_IDS_KEPT);
        assert!(!recent.contains(&format!("{:032x}", 0)));
        assert!(!recent.contains(&format!("{:032x}", 1)));
        assert!(recent.contains(&format!("{:032x}", 2)));
        assert!(recent.contains(&format!("{:032x}", WRITE_IDS_KEPT + 1)));
        recent.remember(&format!("{:032x}", 5));
        assert_eq!(
            recent.len(),
            WRITE_IDS_KEPT,
            "an id already known is not added twice"
        );
    }

    #[test]
    fn travels_as_a_list_and_comes_back_equal() {
        let mut recent = RecentWrites::default();
        recent.remember("a");
        recent.remember("b");
        let json = serde_json::to_string(&recent).expect("encode");
        assert_eq!(json, r#"["a","b"]"#);
        let back: RecentWrites = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, recent);
    }
}
