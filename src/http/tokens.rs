//! `/api/v1/tokens` (admin): create, list and revoke API tokens. Tokens live in the
//! replicated settings, so a token created through any node works on every node; the
//! secret is shown once, at creation, and stored nowhere (only its SHA-256 is, and a
//! SCRAM-SHA-256 verifier for the Postgres door).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use quiver_raft::{CommandResult, LeaderRequest};
use quiver_storage::{PolicyChange, PolicyOutcome, Scope, TokenRecord};
use serde::Deserialize;
use serde_json::json;

use super::body::json_body;
use super::error::ApiError;
use super::write::write_error;
use super::AppState;
use crate::auth::{generate_token, hash, Permission};
use crate::groups::Route;

/// Most databases one token may be limited to.
const TOKEN_DATABASES_MAX: usize = 1_000;
/// Longest token name, in bytes.
const TOKEN_NAME_BYTES_MAX: usize = 256;
/// Most tokens the cluster holds.
const TOKENS_MAX: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewToken {
    #[serde(default)]
    name: Option<String>,
    scopes: Vec<Scope>,
    #[serde(default)]
    databases: Option<Vec<String>>,
}

fn record_json(t: &TokenRecord) -> serde_json::Value {
    json!({
        "id": t.id,
        "name": t.name,
        "scopes": t.scopes,
        "databases": t.databases,
        "created_at": chrono::DateTime::from_timestamp_millis(t.created_at_ms)
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
    })
}

/// `POST /api/v1/tokens`: `{"name"?, "scopes": [...], "databases"?: [...]}` → 201 with
/// the secret (`token`), once.
pub async fn create(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let request: NewToken = json_body(
        &body,
        r#"{"name": "telegraf", "scopes": ["write"], "databases": ["metrics"]}"#,
    )?;
    if request.scopes.is_empty() {
        return Err(ApiError::bad_request(
            "scopes must name at least one of read, write, admin",
        ));
    }
    let name = request.name.unwrap_or_default();
    if name.len() > TOKEN_NAME_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "name is longer than {TOKEN_NAME_BYTES_MAX} bytes"
        )));
    }
    if let Some(databases) = &request.databases {
        if request.scopes.contains(&Scope::Admin) {
            return Err(ApiError::bad_request(
                "an admin token reaches every database; drop `databases` or the admin scope",
            ));
        }
        if databases.is_empty() || databases.len() > TOKEN_DATABASES_MAX {
            return Err(ApiError::bad_request(format!(
                "databases must list 1 to {TOKEN_DATABASES_MAX} names (omit it for all)"
            )));
        }
        for db in databases {
            quiver_storage::validate_database_name(db)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
    }
    if app.storage.with_policies(|p| p.tokens.len()) >= TOKENS_MAX {
        return Err(ApiError::bad_request(format!(
            "the cluster holds {TOKENS_MAX} tokens; revoke some first"
        )));
    }
    let secret = generate_token();
    let id = generate_token()[..16].to_string();
    let mut scopes = request.scopes;
    scopes.sort();
    scopes.dedup();
    let record = TokenRecord {
        id: id.clone(),
        name,
        sha256: hash(&secret),
        scopes,
        databases: request.databases,
        created_index: quiver_storage::LogIndex(0),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        // The Postgres door's SCRAM login (user = the id) checks this, not the secret.
        scram: Some(crate::scram::derive(&secret)),
    };
    match commit(&app, PolicyChange::CreateToken(record)).await? {
        PolicyOutcome::Applied => {}
        other => return Err(ApiError::internal(format!("token not created: {other:?}"))),
    }
    let created = app
        .storage
        .with_policies(|p| p.tokens.get(&id).map(record_json))
        .ok_or_else(|| ApiError::internal("token applied but not found"))?;
    let mut answer = json!({"success": true, "token": secret});
    if let (Some(out), Some(fields)) = (answer.as_object_mut(), created.as_object()) {
        out.extend(fields.clone());
    }
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// `GET /api/v1/tokens`: every token, without secrets.
pub async fn list(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let mut tokens: Vec<TokenRecord> = app
        .storage
        .with_policies(|p| p.tokens.values().cloned().collect());
    tokens.sort_by_key(|t| t.created_index);
    let list: Vec<_> = tokens.iter().map(record_json).collect();
    Ok(Json(json!({"success": true, "tokens": list})))
}

/// `DELETE /api/v1/tokens/{id}`: revoked on every node once committed; 404 if unknown.
pub async fn revoke(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    match commit(&app, PolicyChange::RevokeToken { id: id.clone() }).await? {
        PolicyOutcome::Applied => Ok(StatusCode::NO_CONTENT),
        PolicyOutcome::NotFound => Err(ApiError::with_status(
            StatusCode::NOT_FOUND,
            format!("no token with id {id:?}"),
        )),
        other => Err(ApiError::internal(format!("token not revoked: {other:?}"))),
    }
}

/// Commits a policy change through the first group's log and returns what applying
/// it did. A retention rule is also committed to every data group, whose files and
/// queries it governs: setting a rule is idempotent, so a client that gets an error
/// part-way sends it again and every group ends up with it.
pub async fn commit(app: &AppState, change: PolicyChange) -> Result<PolicyOutcome, ApiError> {
    let outcome = commit_to(&app.node, change.clone()).await?;
    let governs_rows = matches!(
        change,
        PolicyChange::SetRetention { .. } | PolicyChange::ClearRetention { .. }
    );
    if governs_rows && app.groups.is_sharded() {
        for route in app.groups.routes() {
            let id = route.id();
            let committed = match route {
                Route::Local(group) => commit_to(&group.node, change.clone()).await.map(|_| ()),
                Route::Remote(remote) => remote
                    .commit(LeaderRequest::Policy(change.clone()))
                    .await
                    .map(|_| ())
                    .map_err(write_error),
            };
            committed.map_err(|e| ApiError {
                message: format!(
                    "the rule is recorded, but not yet in data group {}: {}; send it again",
                    id, e.message
                ),
                ..e
            })?;
        }
    }
    Ok(outcome)
}

async fn commit_to(
    node: &quiver_raft::RaftNode,
    change: PolicyChange,
) -> Result<PolicyOutcome, ApiError> {
    match node.change_policy(change).await {
        Ok(CommandResult::Policy(outcome)) => Ok(outcome),
        Ok(other) => Err(ApiError::internal(format!("unexpected result {other:?}"))),
        Err(e) => Err(super::write::write_error(e)),
    }
}
