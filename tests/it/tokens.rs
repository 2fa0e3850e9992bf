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
