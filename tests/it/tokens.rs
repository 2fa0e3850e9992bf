//! API tokens: created, listed and revoked over `/api/v1/tokens`, with scopes and
//! database limits, replicated to every node, surviving restarts.

use serde_json::{json, Value};

use crate::cluster_support::{leader, specs, start};
use crate::common::{batch_payload, Node, NodeSpec, TOKEN};

async fn create(node: &Node, body: Value) -> (u16, Value) {
    let r = node
        .client
        .post(format!("{}/api/v1/tokens", node.url))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn write_as(node: &Node, token: &str, db: &str) -> u16 {
    node.client
        .post(format!("{}/api/v1/write/msgpack", node.url))
        .bearer_auth(token)
        .header("x-arc-database", db)
        .body(batch_payload("m", 1, 10, 1_700_000_000_000_000_000, 2))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn query_as(node: &Node, token: &str, db: &str, sql: &str) -> (u16, Value) {
    let r = node
        .client
        .post(format!("{}/api/v1/query", node.url))
        .bearer_auth(token)
        .header("x-arc-database", db)
        .json(&json!({ "sql": sql }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_have_scopes_and_databases_and_can_be_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(NodeSpec::new(dir.path())).await;
    for db in ["a", "b"] {
        assert_eq!(write_as(&node, TOKEN, db).await, 204);
    }
    let (status, writer) = create(
        &node,
        json!({"name": "collector", "scopes": ["write"], "databases": ["a"]}),
    )
    .await;
    assert_eq!(status, 201, "{writer}");
    let writer_secret = writer["token"].as_str().unwrap().to_string();
    assert_eq!(write_as(&node, &writer_secret, "a").await, 204);
    assert_eq!(
        write_as(&node, &writer_secret, "b").await,
        403,
        "limited to a"
    );
    let (status, _) = query_as(&node, &writer_secret, "a", "SELECT 1").await;
    assert_eq!(status, 403, "a write token cannot read");

    let (_, reader) = create(&node, json!({"scopes": ["read"], "databases": ["a"]})).await;
    let reader_secret = reader["token"].as_str().unwrap().to_string();
    let (status, body) = query_as(&node, &reader_secret, "a", "SELECT count(*) FROM m").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0][0], json!(20));
    // Another database does not exist for this token, however it is named.
    let (status, _) = query_as(&node, &reader_secret, "b", "SELECT 1").await;
    assert_eq!(status, 403);
    let (status, body) = query_as(&node, &reader_secret, "a", "SELECT count(*) FROM b.m").await;
    assert_ne!(status, 200, "{body}");
    let (_, body) = query_as(
        &node,
        &reader_secret,
        "a",
        "SELECT table_schema FROM information_schema.tables WHERE table_schema = 'b'",
    )
    .await;
    assert_eq!(body["data"], json!([]), "{body}");

    // An admin token limited to databases makes no sense: refused.
    let (status, _) = create(&node, json!({"scopes": ["admin"], "databases": ["a"]})).await;
    assert_eq!(status, 400);

    // Listed without secrets; survives a restart; revoked, it stops working.
    let list: Value = node
        .client
        .get(format!("{}/api/v1/tokens", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = list.to_string();
    assert!(!text.contains(&writer_secret) && !text.contains(&reader_secret));
    assert_eq!(list["tokens"].as_array().unwrap().len(), 2);
    node.restart().await;
    assert_eq!(write_as(&node, &writer_secret, "a").await, 204);
    let id = writer["id"].as_str().unwrap();
    let r = node
        .client
        .delete(format!("{}/api/v1/tokens/{id}", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(write_as(&node, &writer_secret, "a").await, 401);
    let r = node
        .client
        .delete(format!("{}/api/v1/tokens/{id}", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Only admins manage tokens.
    let r = node
        .client
        .get(format!("{}/api/v1/tokens", node.url))
        .bearer_auth(&reader_secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_created_on_one_node_works_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    let follower = (lead + 1) % 3;
    let (status, token) = create(&nodes[follower], json!({"scopes": ["write", "read"]})).await;
    assert_eq!(status, 201, "{token}");
    let secret = token["token"].as_str().unwrap();
    // Applied on the creating node before its 201; the others follow within a beat.
    for (i, node) in nodes.iter().enumerate() {
        node.wait_for(
            "the token to reach every node",
            std::time::Duration::from_secs(10),
            || async { write_as(node, secret, "db").await == 204 },
        )
        .await;
        let (status, _) = query_as(node, secret, "db", "SELECT 1").await;
        assert_eq!(status, 200, "node {}", i + 1);
    }
}

/// Regression (issue 36, item 9): `/metrics` without a token listed every database and
/// measurement name. It still answers without one (a scraper's health metrics), but
/// names only with a valid token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_databases_only_to_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    assert_eq!(write_as(&node, TOKEN, "secret_db").await, 204);
    let scrape = |token: Option<&'static str>| {
        let mut request = node.client.get(format!("{}/metrics", node.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    node.wait_for(
        "the table gauges",
        std::time::Duration::from_secs(30),
        || async { scrape(Some(TOKEN)).await.contains("secret_db") },
    )
    .await;
    let anonymous = scrape(None).await;
    assert!(!anonymous.contains("secret_db"), "{anonymous}");
    assert!(anonymous.contains("quiver_buffer_rows"), "{anonymous}");
    assert!(!scrape(Some("not-a-token")).await.contains("secret_db"));
}

/// Runs `quiver token ARGS` against `node` with the admin token; its exit code, stdout
/// and stderr.
fn token_cli(node: &Node, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("token")
        .args(args)
        .arg("--url")
        .arg(&node.url)
        .env("QUIVER_TOKEN", TOKEN)
        .output()
        .expect("run quiver token");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `quiver token create|list|revoke` (issue 40): the secret printed once on stdout
/// works within its scope and databases, the list shows it without the secret, and a
/// revoked token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_cli_creates_lists_and_revokes() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let (code, secret, said) = token_cli(
        &node,
        &[
            "create",
            "--name",
            "telegraf",
            "--scope",
            "write",
            "--database",
            "metrics",
        ],
    );
    assert_eq!(code, Some(0), "{said}");
    let secret = secret.trim().to_string();
    assert!(!secret.is_empty() && !secret.contains(' '), "{secret:?}");
    assert!(
        said.contains("metrics") && said.contains("shown once"),
        "{said}"
    );
    assert_eq!(write_as(&node, &secret, "metrics").await, 204);
    assert_eq!(write_as(&node, &secret, "other").await, 403);
    let (code, listed, said) = token_cli(&node, &["list"]);
    assert_eq!(code, Some(0), "{said}");
    let line = listed
        .lines()
        .find(|l| l.contains("telegraf"))
        .unwrap_or_else(|| panic!("telegraf not listed: {listed}"));
    assert!(line.contains("write") && line.contains("metrics"), "{line}");
    assert!(
        !listed.contains(&secret),
        "the list shows a secret: {listed}"
    );
    let id = line.split_whitespace().next().unwrap().to_string();
    let (code, out, said) = token_cli(&node, &["revoke", &id]);
    assert_eq!(code, Some(0), "{said}");
    assert!(out.contains("revoked"), "{out}");
    assert_eq!(write_as(&node, &secret, "metrics").await, 401);
    // A scope that does not exist is refused by the tool, naming the choices.
    let (code, _, said) = token_cli(&node, &["create", "--name", "x", "--scope", "root"]);
    assert_ne!(code, Some(0));
    assert!(said.contains("read") && said.contains("admin"), "{said}");
}

/// A path Quiver does not serve is 404 with or without a token: QuestDB's client probes
/// `GET /settings` without one and falls back to line protocol v1 only on a 404 (a 401
/// there failed every QuestDB sender).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_path_is_404_without_a_token_and_a_known_one_401() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let status = |path: &'static str| {
        let (client, url) = (node.client.clone(), node.url.clone());
        async move {
            client
                .get(format!("{url}{path}"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(status("/settings").await, 404);
    assert_eq!(status("/api/v1/tokens").await, 401);
    assert_eq!(status("/health").await, 200);
}
