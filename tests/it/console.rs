//! The console at `/ui`, over HTTP: the page and its files come from the node without a
//! token, with their content types, a Content-Security-Policy that allows only the
//! node, cache headers, and no URL of another origin in any file; the data the page
//! shows still needs the token. (The page in a real browser: tests/compat/test_console.py.)

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::cluster_support::{leader, specs, start};
use crate::common::{batch_payload, Node, NodeSpec, TOKEN};
use crate::lifecycle::admin;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// GET without a token: status, headers, body.
async fn get_open(node: &Node, path: &str) -> (u16, HeaderMap, String) {
    let r = node
        .client
        .get(format!("{}{path}", node.url))
        .send()
        .await
        .expect("request sent");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap_or_default())
}

/// The `/ui/assets/...` URLs a page or script names.
fn asset_urls(text: &str, base: &str) -> BTreeSet<String> {
    let mut urls = BTreeSet::new();
    for (i, _) in text.match_indices("\"/ui/assets/") {
        let rest = &text[i + 1..];
        if let Some(end) = rest.find('"') {
            urls.insert(rest[..end].to_string());
        }
    }
    // ES module imports, relative to the importing file's directory.
    for line in text.lines().filter(|l| l.starts_with("import ")) {
        if let Some(i) = line.find("\"./") {
            let rest = &line[i + 3..];
            if let Some(end) = rest.find('"') {
                urls.insert(format!("{base}/{}", &rest[..end]));
            }
        }
    }
    urls
}

/// What in a file would make the browser reach another origin.
fn external_references(text: &str) -> Vec<String> {
    // The SVG namespace is an identifier createElementNS needs, never fetched.
    let text = text.replace("\"http://www.w3.org/2000/svg\"", "");
    [
        "http:", "https:", "\"//", "'//", "(//", "@import", "ws:", "wss:",
    ]
    .into_iter()
    .filter(|needle| text.contains(needle))
    .map(str::to_string)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_is_served_without_a_token_from_the_node_only() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;

    let (status, headers, page) = get_open(&node, "/ui").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&headers, "cache-control"), "no-cache");
    assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
    let csp = header(&headers, "content-security-policy");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("http") && !csp.contains('*'), "{csp}");
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(external_references(&page), Vec::<String>::new(), "{page}");
    for script in page.match_indices("<script").map(|(i, _)| &page[i..]) {
        let tag = &script[..script.find('>').unwrap_or(script.len())];
        assert!(tag.contains(" src=\"/ui/assets/"), "inline script: {tag}");
    }
    let (status, _, slash) = get_open(&node, "/ui/").await;
    assert_eq!((status, slash.as_str()), (200, page.as_str()));

    // Every file the page names, and every module those import, transitively.
    let mut todo: Vec<String> = asset_urls(&page, "").into_iter().collect();
    let base = todo
        .first()
        .and_then(|u| u.rsplit_once('/'))
        .map(|(dir, _)| dir.to_string())
        .expect("the page names its files");
    let mut seen = BTreeSet::new();
    while let Some(url) = todo.pop() {
        if !seen.insert(url.clone()) {
            continue;
        }
        let (status, headers, body) = get_open(&node, &url).await;
        assert_eq!(status, 200, "{url}: {body}");
        let expected = if url.ends_with(".js") {
            "text/javascript; charset=utf-8"
        } else if url.ends_with(".css") {
            "text/css; charset=utf-8"
        } else {
            panic!("unexpected file {url}");
        };
        assert_eq!(header(&headers, "content-type"), expected, "{url}");
        assert_eq!(
            header(&headers, "cache-control"),
            "public, max-age=31536000, immutable",
            "{url}"
        );
        assert_eq!(header(&headers, "content-security-policy"), csp, "{url}");
        assert_eq!(
            external_references(&body),
            Vec::<String>::new(),
            "{url} names another origin"
        );
        todo.extend(asset_urls(&body, &base));
    }
    assert!(seen.len() >= 8, "{seen:?}");
    assert!(seen.contains(&format!("{base}/chart.js")), "{seen:?}");

    // A page of an older build (another id) still gets the files, never cached.
    let (status, headers, _) = get_open(&node, "/ui/assets/0000000000000000/app.js").await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "cache-control"), "no-store");
    let (status, _, _) = get_open(&node, &format!("{base}/secrets.js")).await;
    assert_eq!(status, 404);
    // Only the console's own paths are open.
    let (status, _, _) = get_open(&node, "/uix").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_data_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let (s, t) = node
        .write_msgpack("db", batch_payload("cpu", 1, 10, now_ns(), 2))
        .await;
    assert_eq!(s, 204, "{t}");

    let client = &node.client;
    let query = || {
        client
            .post(format!("{}/api/v1/query", node.url))
            .json(&json!({"sql": "SELECT count(*) FROM cpu", "database": "db"}))
    };
    let gets = [
        "/api/v1/storage",
        "/api/v1/cluster/status",
        "/api/v1/retention",
    ];
    for token in [None, Some("not-a-token")] {
        let with = |r: reqwest::RequestBuilder| match token {
            Some(t) => r.bearer_auth(t),
            None => r,
        };
        let status = with(query()).send().await.unwrap().status().as_u16();
        assert_eq!(status, 401, "query with {token:?}");
        for path in gets {
            let r = with(client.get(format!("{}{path}", node.url)));
            assert_eq!(r.send().await.unwrap().status().as_u16(), 401, "{path}");
        }
        let metrics = with(client.get(format!("{}/metrics", node.url)))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!metrics.contains("database=\"db\""), "{token:?}");
    }

    let r = query().bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["data"][0][0], 10, "{body}");
    for path in gets {
        let r = client
            .get(format!("{}{path}", node.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    // The rates the console shows come from these counters.
    let metrics = client
        .get(format!("{}/metrics", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in ["quiver_rows_applied_total", "quiver_query_seconds_count"] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_storage_listing_shows_the_retention_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    for (db, m) in [("kept", "cpu"), ("kept", "mem"), ("forever", "cpu")] {
        let (s, t) = node
            .write_msgpack(db, batch_payload(m, 1, 10, now_ns(), 2))
            .await;
        assert_eq!(s, 204, "{t}");
    }
    for body in [
        json!({"duration": "30d"}),
        json!({"duration": "7d", "measurement": "cpu"}),
    ] {
        let (s, b) = admin(
            &node,
            reqwest::Method::PUT,
            "/api/v1/retention/kept",
            Some(body),
        )
        .await;
        assert_eq!(s, 200, "{b}");
    }
    let (s, doc) = admin(&node, reqwest::Method::GET, "/api/v1/storage", None).await;
    assert_eq!(s, 200, "{doc}");
    let db = |name: &str| -> Value {
        doc["databases"]
            .as_array()
            .and_then(|dbs| dbs.iter().find(|d| d["database"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} not listed: {doc}"))
    };
    let measurement = |db: &Value, name: &str| -> Value {
        db["measurements"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["measurement"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} not listed: {db}"))
    };
    let kept = db("kept");
    assert_eq!(kept["retention"], "30d", "{kept}");
    // As `/api/v1/retention` writes durations: 7d is a week.
    assert_eq!(measurement(&kept, "cpu")["retention"], "1w", "{kept}");
    assert_eq!(measurement(&kept, "mem")["retention"], "30d", "{kept}");
    let forever = db("forever");
    assert_eq!(forever["retention"], Value::Null, "{forever}");
    assert_eq!(measurement(&forever, "cpu")["retention"], Value::Null);
}

/// The cluster page reads these fields of `/api/v1/cluster/status`: every member on
/// every node, and on the leader each follower's matched index, lag and attachment; a
/// follower names the leader's address for its link.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_cluster_page_fields_on_three_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start(specs(dir.path(), 3, &[])).await;
    let l = leader(&nodes, &[0, 1, 2]).await;
    let (s, t) = nodes[l]
        .write_msgpack("db", batch_payload("cpu", 1, 10, now_ns(), 2))
        .await;
    assert_eq!(s, 204, "{t}");
    let caught_up = |status: &Value| -> bool {
        status["followers"].as_array().is_some_and(|f| {
            f.len() == 2
                && f.iter()
                    .all(|f| f["attached"] == true && f["lag_entries"] == 0)
        })
    };
    nodes[l]
        .wait_for(
            "both followers attached with no lag",
            Duration::from_secs(30),
            || async { caught_up(&nodes[l].status().await) },
        )
        .await;
    let status = nodes[l].status().await;
    assert_eq!(status["role"], "leader", "{status}");
    for f in status["followers"].as_array().into_iter().flatten() {
        for key in [
            "node_id",
            "addr",
            "voter",
            "matched_index",
            "lag_bytes_estimate",
        ] {
            assert!(!f[key].is_null(), "{key} in {f}");
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        let status = node.status().await;
        let members = status["members"].as_array().cloned().unwrap_or_default();
        assert_eq!(members.len(), 3, "{status}");
        assert!(members
            .iter()
            .all(|m| m["voter"] == true && m["addr"].is_string()));
        assert_eq!(status["leader"], (l + 1) as u64, "{status}");
        if i != l {
            assert_eq!(status["role"], "follower", "{status}");
            assert_eq!(status["followers"], json!([]), "{status}");
            assert!(status["leader_addr"].is_string(), "{status}");
        }
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
