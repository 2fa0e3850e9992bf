//! Token authentication (API.md, Authentication).
//!
//! Two sources of tokens, both kept only as SHA-256 hashes:
//! - node-local: the first admin token, from `QUIVER_BOOTSTRAP_TOKEN`, or (with none
//!   set and none stored yet) generated and written to `<data-dir>/auth/bootstrap-token`
//!   (mode 0600), never only to a log; kept in `<data-dir>/auth/tokens.json`;
//! - replicated: tokens created over the API (`/api/v1/tokens`), committed through the
//!   Raft log, so every node of the cluster knows them (quiver-storage's `Policies`).
//!   They carry scopes (`read`, `write`, `admin`) and optionally a list of databases.
//!
//! Accepted forms: `Authorization: Bearer|Token <t>`, `x-api-key: <t>`, HTTP Basic (the
//! password is the token) and `?p=<t>` for InfluxDB 1.x clients. The query string is
//! never logged (no request logging prints URIs), so `?p=` leaks nowhere.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use std::sync::Arc;

use anyhow::{Context, Result};
use axum::http::HeaderMap;
use quiver_query::QueryAccess;
use quiver_storage::{ScramSecret, Storage};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a token may do; `Admin` implies the others (quiver-storage's `Scope`).
pub use quiver_storage::Scope as Permission;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredToken {
    name: String,
    sha256: String,
    permissions: Vec<Permission>,
    /// The SCRAM verifier, derived when the secret was known in clear (absent in
    /// tables written before Quiver kept one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scram: Option<ScramSecret>,
}

/// The Postgres user name that logs in with the bootstrap token by SCRAM (replicated
/// tokens use their id, which is hex and never this).
pub const BOOTSTRAP_USER: &str = "bootstrap";

/// What the Postgres door needs to check a SCRAM login: the verifier, and the token's
/// hash to check its permissions with once the proof holds.
#[derive(Debug, Clone)]
pub struct ScramLogin {
    /// The token's SCRAM verifier.
    pub secret: ScramSecret,
    /// The token's SHA-256 (hex), as [`Auth::check_hash`] takes it.
    pub token_sha256: String,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No token or an unknown one: 401.
    Unauthenticated,
    /// A valid token without the permission: 403.
    Forbidden,
}

/// The node's token tables, or nothing when authentication is off.
#[derive(Clone)]
pub struct Auth {
    enabled: bool,
    tokens: HashMap<String, Vec<Permission>>,
    replicated: Option<Arc<Storage>>,
    /// The bootstrap token's SCRAM login (user [`BOOTSTRAP_USER`]), when known.
    bootstrap_scram: Option<ScramLogin>,
}

/// What a checked request may touch: all databases, or a token's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    databases: Option<Vec<String>>,
}

impl Grant {
    fn everything() -> Grant {
        Grant { databases: None }
    }

    /// Refuses (403) a database outside the token's list.
    pub fn database(&self, database: &str) -> Result<(), AuthError> {
        match &self.databases {
            Some(list) if !list.iter().any(|d| d == database) => Err(AuthError::Forbidden),
            _ => Ok(()),
        }
    }

    /// Whether the grant reaches every database (node-wide details such as file paths
    /// are shown only then).
    pub fn all_databases(&self) -> bool {
        self.databases.is_none()
    }

    /// The databases a query with this grant may read.
    pub fn query_access(&self) -> QueryAccess {
        match &self.databases {
            None => QueryAccess::all(),
            Some(list) => QueryAccess::only(list.clone()),
        }
    }
}

/// SHA-256 of a token, hex: the only form tokens are stored in.
pub fn hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Auth {
    /// Authentication switched off (local development).
    pub fn disabled() -> Auth {
        Auth {
            enabled: false,
            tokens: HashMap::new(),
            replicated: None,
            bootstrap_scram: None,
        }
    }

    /// Also accepts the tokens replicated through the log (held by `storage`).
    pub fn with_replicated(mut self, storage: Arc<Storage>) -> Auth {
        self.replicated = Some(storage);
        self
    }

    /// Loads the token table from `data_dir/auth`, adding the bootstrap admin token.
    /// Whenever the bootstrap secret is known in clear (given, or generated now) and
    /// its entry has no SCRAM verifier yet, one is derived and stored: a table written
    /// before verifiers existed gains one at the next start with the token set.
    pub fn open(data_dir: &Path, bootstrap: Option<String>) -> Result<Auth> {
        let dir = data_dir.join("auth");
        std::fs::create_dir_all(&dir).with_context(|| format!("auth dir {}", dir.display()))?;
        let file = dir.join("tokens.json");
        let mut stored: Vec<StoredToken> = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a token table", file.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
        };
        let mut changed = false;
        match bootstrap.filter(|t| !t.is_empty()) {
            Some(token) => {
                let h = hash(&token);
                match stored.iter_mut().find(|t| t.sha256 == h) {
                    Some(entry) if entry.scram.is_some() => {}
                    Some(entry) => {
                        entry.scram = Some(crate::scram::derive(&token));
                        changed = true;
                    }
                    None => {
                        stored.push(StoredToken {
                            name: BOOTSTRAP_USER.into(),
                            sha256: h.clone(),
                            permissions: vec![Permission::Admin],
                            scram: Some(crate::scram::derive(&token)),
                        });
                        changed = true;
                    }
                }
                // The given token is the one `bootstrap` logs in with, whatever
                // older bootstrap tokens the table still holds.
                if let Some(i) = stored.iter().position(|t| t.sha256 == h) {
                    let entry = stored.remove(i);
                    stored.push(entry);
                }
            }
            None if stored.is_empty() => {
                let token = generate_token();
                let path = dir.join("bootstrap-token");
                write_private(&path, token.as_bytes())?;
                tracing::warn!(path = %path.display(), "generated the first admin token; read it from this file");
                stored.push(StoredToken {
                    name: BOOTSTRAP_USER.into(),
                    sha256: hash(&token),
                    permissions: vec![Permission::Admin],
                    scram: Some(crate::scram::derive(&token)),
                });
                changed = true;
            }
            None => {}
        }
        if changed {
            write_private(&file, &serde_json::to_vec_pretty(&stored)?)?;
        }
        // The newest bootstrap entry with a verifier: the given token (moved last
        // above), else the generated one.
        let bootstrap_scram = stored.iter().rev().find_map(|t| {
            t.scram.clone().map(|secret| ScramLogin {
                secret,
                token_sha256: t.sha256.clone(),
            })
        });
        let tokens = stored
            .into_iter()
            .map(|t| (t.sha256, t.permissions))
            .collect();
        Ok(Auth {
            enabled: true,
            tokens,
            replicated: None,
            bootstrap_scram,
        })
    }

    /// Checks a request for `needed`, taking the token from its headers or, as
    /// InfluxDB 1.x clients send it, from the `p` query parameter. The grant tells which
    /// databases the request may then touch.
    pub fn check_request(
        &self,
        headers: &HeaderMap,
        params: &std::collections::HashMap<String, String>,
        needed: Permission,
    ) -> Result<Grant, AuthError> {
        self.check(headers, params.get("p").map(String::as_str), needed)
    }

    /// Checks a request for `needed`.
    pub fn check(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
        needed: Permission,
    ) -> Result<Grant, AuthError> {
        let token = token_from(headers).or(query_token.map(Cow::Borrowed));
        self.check_token(token.as_deref(), needed)
    }

    /// Whether the request carries a token this node knows, whatever its scopes (the
    /// check made before a body is read; each handler then checks the scope it needs).
    pub fn authenticates(&self, headers: &HeaderMap, query_token: Option<&str>) -> bool {
        let token = token_from(headers).or(query_token.map(Cow::Borrowed));
        match self.check_token(token.as_deref(), Permission::Read) {
            Ok(_) | Err(AuthError::Forbidden) => true,
            Err(AuthError::Unauthenticated) => false,
        }
    }

    /// Whether authentication is on (off only with `--auth none`).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Checks a token given outside HTTP (the Postgres door's password) for `needed`.
    pub fn check_token(&self, token: Option<&str>, needed: Permission) -> Result<Grant, AuthError> {
        if !self.enabled {
            return Ok(Grant::everything());
        }
        let token = token.ok_or(AuthError::Unauthenticated)?;
        self.check_hash(&hash(token), needed)
    }

    /// The SCRAM login of Postgres user `user`: a replicated token's id, or
    /// [`BOOTSTRAP_USER`]; `None` when that names no token with a verifier (the door
    /// then asks for a cleartext password).
    pub fn scram_login(&self, user: &str) -> Option<ScramLogin> {
        if !self.enabled {
            return None;
        }
        if user == BOOTSTRAP_USER {
            return self.bootstrap_scram.clone();
        }
        let storage = self.replicated.as_ref()?;
        storage.with_policies(|p| {
            let token = p.tokens.get(user)?;
            Some(ScramLogin {
                secret: token.scram.clone()?,
                token_sha256: token.sha256.clone(),
            })
        })
    }

    /// Checks a token known by its SHA-256 (a SCRAM login, a session checked again)
    /// for `needed`.
    pub fn check_hash(&self, hashed: &str, needed: Permission) -> Result<Grant, AuthError> {
        if !self.enabled {
            return Ok(Grant::everything());
        }
        let allows = |scopes: &[Permission]| {
            scopes
                .iter()
                .any(|p| *p == Permission::Admin || *p == needed)
        };
        if let Some(scopes) = self.tokens.get(hashed) {
            return if allows(scopes) {
                Ok(Grant::everything())
            } else {
                Err(AuthError::Forbidden)
            };
        }
        let Some(storage) = &self.replicated else {
            return Err(AuthError::Unauthenticated);
        };
        storage.with_policies(|p| match p.token_by_hash(hashed) {
            None => Err(AuthError::Unauthenticated),
            Some(t) if !allows(&t.scopes) => Err(AuthError::Forbidden),
            Some(t) if t.scopes.contains(&Permission::Admin) => Ok(Grant::everything()),
            Some(t) => Ok(Grant {
                databases: t.databases.clone(),
            }),
        })
    }
}

fn token_from(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    if let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let value = value.trim();
        for scheme in ["Bearer ", "Token ", "bearer ", "token "] {
            if let Some(t) = value.strip_prefix(scheme) {
                return Some(Cow::Borrowed(t.trim()));
            }
        }
        // InfluxDB 1.x clients given a username and password send HTTP Basic: the
        // password is the token, the username is ignored.
        if let Some(encoded) = value
            .strip_prefix("Basic ")
            .or_else(|| value.strip_prefix("basic "))
        {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (_, password) = text.split_once(':')?;
            return Some(Cow::Owned(password.to_string()));
        }
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(|t| Cow::Borrowed(t.trim()))
}

/// A new random secret (256 bits, hex).
pub fn generate_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_token_is_stored_hashed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::open(dir.path(), Some("s3cret".into())).unwrap();
        let stored = std::fs::read_to_string(dir.path().join("auth/tokens.json")).unwrap();
        assert!(!stored.contains("s3cret"));
        let mut h = HeaderMap::new();
        assert_eq!(
            auth.check(&h, None, Permission::Read),
            Err(AuthError::Unauthenticated)
        );
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        assert_eq!(
            auth.check(&h, None, Permission::Write),
            Ok(Grant::everything())
        );
        assert_eq!(
            auth.check(&HeaderMap::new(), Some("s3cret"), Permission::Admin),
            Ok(Grant::everything())
        );
        assert_eq!(
            auth.check(&HeaderMap::new(), Some("wrong"), Permission::Read),
            Err(AuthError::Unauthenticated)
        );
        // Basic "user:s3cret" (InfluxDB 1.x clients with username and password).
        let mut basic = HeaderMap::new();
        basic.insert("authorization", "Basic dXNlcjpzM2NyZXQ=".parse().unwrap());
        assert_eq!(
            auth.check(&basic, None, Permission::Write),
            Ok(Grant::everything())
        );
        basic.insert("authorization", "Basic dXNlcjp3cm9uZw==".parse().unwrap());
        assert_eq!(
            auth.check(&basic, None, Permission::Write),
            Err(AuthError::Unauthenticated)
        );
    }

    /// A table written before SCRAM verifiers existed: the bootstrap token keeps
    /// working, and gains its verifier at the first start that is given it.
    #[test]
    fn a_bootstrap_token_stored_without_a_verifier_gains_one_when_given() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("auth")).unwrap();
        let old = format!(
            r#"[{{"name": "bootstrap", "sha256": "{}", "permissions": ["admin"]}}]"#,
            hash("s3cret")
        );
        std::fs::write(dir.path().join("auth/tokens.json"), old).unwrap();

        let without = Auth::open(dir.path(), None).unwrap();
        assert!(without.scram_login(BOOTSTRAP_USER).is_none());
        assert!(without
            .check_token(Some("s3cret"), Permission::Admin)
            .is_ok());

        let with = Auth::open(dir.path(), Some("s3cret".into())).unwrap();
        let login = with.scram_login(BOOTSTRAP_USER).expect("a verifier");
        assert_eq!(login.token_sha256, hash("s3cret"));
        assert_eq!(login.secret.iterations, crate::scram::SCRAM_ITERATIONS);
        assert!(with.scram_login("quiver").is_none());
        let stored = std::fs::read_to_string(dir.path().join("auth/tokens.json")).unwrap();
        assert!(stored.contains("stored_key") && !stored.contains("s3cret"));

        // Kept: a later start without the token still offers SCRAM.
        let later = Auth::open(dir.path(), None).unwrap();
        assert_eq!(
            later.scram_login(BOOTSTRAP_USER).map(|l| l.secret),
            Some(login.secret)
        );
        assert!(Auth::disabled().scram_login(BOOTSTRAP_USER).is_none());
    }

    #[test]
    fn a_generated_token_is_written_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::open(dir.path(), None).unwrap();
        let path = dir.path().join("auth/bootstrap-token");
        let token = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let mut h = HeaderMap::new();
        h.insert("x-api-key", token.parse().unwrap());
        assert_eq!(
            auth.check(&h, None, Permission::Read),
            Ok(Grant::everything())
        );
    }
}
