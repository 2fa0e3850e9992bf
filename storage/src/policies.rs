//! Cluster-wide settings that change through the log, like rows do: API tokens today,
//! and the data lifecycle's rules (retention, deletes, continuous queries) as they come.
//!
//! Every change is a [`PolicyChange`] committed in the Raft log and applied by every
//! replica at the same index, so each node holds the same [`Policies`] at every index;
//! they travel in snapshots (the memory image) beside the rows. Applying is
//! deterministic: no clocks, no randomness (ids and secrets are chosen by the node that
//! proposed the change, before it entered the log).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{LogIndex, TimestampNs};
use crate::lifecycle::{ContinuousQuery, RetentionRule, Tombstone};

/// What a token may do. `Admin` implies the others on every database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Run queries.
    Read,
    /// Write rows.
    Write,
    /// Everything, including cluster, token and lifecycle management.
    Admin,
}

/// An API token as every replica stores it: never the secret, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Public identifier (for listing and revoking).
    pub id: String,
    /// A label chosen by whoever created it.
    pub name: String,
    /// Hex SHA-256 of the secret.
    pub sha256: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The databases it may read or write; `None`: all of them.
    pub databases: Option<Vec<String>>,
    /// Log index of the entry that created it (orders the list; a stable "when").
    pub created_index: LogIndex,
    /// Creation time in milliseconds since the epoch, as the proposing node saw it.
    pub created_at_ms: i64,
    /// What the Postgres door needs to check the secret by SCRAM-SHA-256 without
    /// holding it; `None` for tokens created before Quiver kept one (they log in with
    /// a cleartext password only). Last, so log entries written before it still read.
    #[serde(default)]
    pub scram: Option<ScramSecret>,
}

/// A SCRAM-SHA-256 verifier (RFC 5802, RFC 7677), as Postgres keeps one per role: the
/// salt and iteration count a client needs to derive its keys, and the two keys the
/// server checks its proof and signs its answer with. Neither key lets anyone log in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramSecret {
    /// The salt, base64.
    pub salt: String,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`, base64.
    pub stored_key: String,
    /// `HMAC(SaltedPassword, "Server Key")`, base64.
    pub server_key: String,
}

/// The replicated settings. New fields are added with `#[serde(default)]`, so images
/// written before they existed still read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policies {
    /// API tokens by id.
    #[serde(default)]
    pub tokens: BTreeMap<String, TokenRecord>,
    /// Retention by database.
    #[serde(default)]
    pub retention: BTreeMap<String, RetentionRule>,
    /// Committed deletes, in log order.
    #[serde(default)]
    pub tombstones: Vec<Tombstone>,
    /// Continuous queries by `database/name`.
    #[serde(default)]
    pub continuous_queries: BTreeMap<String, ContinuousQuery>,
    /// Per `database/measurement`, the end of the latest window any continuous query
    /// wrote into it: a window before it is written again only in place of what is
    /// there (a query dropped and created anew over the same windows).
    #[serde(default)]
    pub cq_written_through: BTreeMap<String, TimestampNs>,
    /// Ids of the writes applied lately (see [`crate::write_ids`]).
    #[serde(default)]
    pub recent_writes: crate::write_ids::RecentWrites,
}

/// A change to [`Policies`], as carried by a log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyChange {
    /// Adds a token (its `created_index` is set when applied).
    CreateToken(TokenRecord),
    /// Removes a token.
    RevokeToken {
        /// The token's id.
        id: String,
    },
    /// Sets how long rows of a database (or of one of its measurements) live.
    SetRetention {
        /// The database.
        database: String,
        /// One measurement's override; none: the database's default.
        measurement: Option<String>,
        /// How long rows live, in nanoseconds.
        duration_ns: i64,
    },
    /// Creates a continuous query (its `created_index` is set when applied).
    CreateContinuousQuery(ContinuousQuery),
    /// Drops a continuous query; what it wrote stays.
    DropContinuousQuery {
        /// The database.
        database: String,
        /// The query's name.
        name: String,
    },
    /// Keeps rows of a database (or one measurement's override) forever again.
    ClearRetention {
        /// The database.
        database: String,
        /// Clears only this measurement's override; none: the whole rule, overrides
        /// included.
        measurement: Option<String>,
    },
}

/// What applying a [`PolicyChange`] did; identical on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyOutcome {
    /// The change took effect.
    Applied,
    /// The change named something that does not exist (e.g. an unknown token id).
    NotFound,
    /// The change conflicts with the current state (e.g. a token id already taken).
    Conflict(String),
}

impl Policies {
    /// Applies `change` at log index `index`.
    pub fn apply(&mut self, index: LogIndex, change: PolicyChange) -> PolicyOutcome {
        match change {
            PolicyChange::CreateToken(mut token) => {
                if self.tokens.contains_key(&token.id) {
                    return PolicyOutcome::Conflict(format!("token id {} exists", token.id));
                }
                token.created_index = index;
                self.tokens.insert(token.id.clone(), token);
                PolicyOutcome::Applied
            }
            PolicyChange::RevokeToken { id } => match self.tokens.remove(&id) {
                Some(_) => PolicyOutcome::Applied,
                None => PolicyOutcome::NotFound,
            },
            PolicyChange::SetRetention {
                database,
                measurement,
                duration_ns,
            } => {
                if duration_ns <= 0 {
                    return PolicyOutcome::Conflict("a retention must be positive".into());
                }
                let rule = self.retention.entry(database).or_default();
                match measurement {
                    Some(m) => {
                        rule.measurements.insert(m, duration_ns);
                    }
                    None => rule.duration_ns = Some(duration_ns),
                }
                PolicyOutcome::Applied
            }
            PolicyChange::CreateContinuousQuery(mut cq) => {
                let key = cq.key();
                if self.continuous_queries.contains_key(&key) {
                    return PolicyOutcome::Conflict(format!(
                        "continuous query {} exists in {}",
                        cq.name, cq.database
                    ));
                }
                if cq.every_ns <= 0 || cq.lag_ns < 0 {
                    return PolicyOutcome::Conflict(
                        "every must be positive, lag not negative".into(),
                    );
                }
                cq.created_index = index;
                self.continuous_queries.insert(key, cq);
                PolicyOutcome::Applied
            }
            PolicyChange::DropContinuousQuery { database, name } => {
                match self
                    .continuous_queries
                    .remove(&crate::lifecycle::cq_key(&database, &name))
                {
                    Some(_) => PolicyOutcome::Applied,
                    None => PolicyOutcome::NotFound,
                }
            }
            PolicyChange::ClearRetention {
                database,
                measurement,
            } => {
                let Some(rule) = self.retention.get_mut(&database) else {
                    return PolicyOutcome::NotFound;
                };
                let found = match measurement {
                    Some(m) => rule.measurements.remove(&m).is_some(),
                    None => {
                        self.retention.remove(&database);
                        return PolicyOutcome::Applied;
                    }
                };
                if rule.is_empty() {
                    self.retention.remove(&database);
                }
                if found {
                    PolicyOutcome::Applied
                } else {
                    PolicyOutcome::NotFound
                }
            }
        }
    }

    /// Whether any database has a retention rule.
    pub fn has_retention(&self) -> bool {
        !self.retention.is_empty()
    }

    /// How long rows of `database.measurement` live, if not forever.
    pub fn retention_ns(&self, database: &str, measurement: &str) -> Option<i64> {
        self.retention
            .get(database)
            .and_then(|r| r.for_measurement(measurement))
    }

    /// The oldest visible time of `database.measurement` at `now`, if rows expire.
    pub fn visible_from(
        &self,
        database: &str,
        measurement: &str,
        now: TimestampNs,
    ) -> Option<TimestampNs> {
        self.retention_ns(database, measurement)
            .map(|d| crate::lifecycle::retention_cutoff(now, d))
    }

    /// The tombstones of one table, oldest first.
    pub fn tombstones_of<'a>(
        &'a self,
        database: &'a str,
        measurement: &'a str,
    ) -> impl Iterator<Item = &'a Tombstone> + 'a {
        self.tombstones
            .iter()
            .filter(move |t| t.table.database == database && t.table.measurement == measurement)
    }

    /// The token whose secret hashes to `sha256`, if any.
    pub fn token_by_hash(&self, sha256: &str) -> Option<&TokenRecord> {
        self.tokens.values().find(|t| t.sha256 == sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str) -> TokenRecord {
        TokenRecord {
            id: id.into(),
            name: "ci".into(),
            sha256: format!("hash-{id}"),
            scopes: vec![Scope::Write],
            databases: Some(vec!["db".into()]),
            created_index: LogIndex(0),
            created_at_ms: 0,
            scram: None,
        }
    }

    #[test]
    fn tokens_are_created_once_and_revoked_once() {
        let mut p = Policies::default();
        assert_eq!(
            p.apply(LogIndex(5), PolicyChange::CreateToken(token("a"))),
            PolicyOutcome::Applied
        );
        assert_eq!(p.tokens["a"].created_index, LogIndex(5));
        assert!(matches!(
            p.apply(LogIndex(6), PolicyChange::CreateToken(token("a"))),
            PolicyOutcome::Conflict(_)
        ));
        assert_eq!(p.token_by_hash("hash-a").map(|t| t.id.as_str()), Some("a"));
        let revoke = PolicyChange::RevokeToken { id: "a".into() };
        assert_eq!(p.apply(LogIndex(7), revoke.clone()), PolicyOutcome::Applied);
        assert_eq!(p.apply(LogIndex(8), revoke), PolicyOutcome::NotFound);
        assert!(p.token_by_hash("hash-a").is_none());
    }

    /// Log entries are MessagePack arrays (`rmp_serde::to_vec`): a token created
    /// before `scram` existed has one element fewer, and must still apply.
    #[test]
    fn a_token_entry_written_before_scram_existed_still_reads() {
        #[derive(Serialize)]
        struct OldTokenRecord {
            id: String,
            name: String,
            sha256: String,
            scopes: Vec<Scope>,
            databases: Option<Vec<String>>,
            created_index: LogIndex,
            created_at_ms: i64,
        }
        let old = OldTokenRecord {
            id: "a".into(),
            name: "ci".into(),
            sha256: "hash-a".into(),
            scopes: vec![Scope::Write],
            databases: Some(vec!["db".into()]),
            created_index: LogIndex(0),
            created_at_ms: 0,
        };
        let bytes = rmp_serde::to_vec(&old).unwrap();
        let back: TokenRecord = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, token("a"));
    }

    #[test]
    fn an_image_without_policies_reads_as_empty() {
        let p: Policies = serde_json::from_str("{}").unwrap();
        assert_eq!(p, Policies::default());
    }
}
