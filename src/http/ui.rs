//! `GET /ui`: the console, a few static files compiled into the binary (`src/http/ui/`),
//! so a node serves it with nothing else installed and the browser fetches nothing from
//! anywhere but the node.
//!
//! The page and its files are open (no token): they hold no data. Everything the page
//! shows comes from the ordinary API with the token the operator typed, which the page
//! keeps in `sessionStorage` only.
//!
//! Caching: the page itself is revalidated on every load (`no-cache`); it names its
//! files under `/ui/assets/<id>/`, where `<id>` is a digest of all of them, so those are
//! cached for good (`immutable`) and a new build changes every URL at once. A request for
//! another id (a page from an older build behind a load balancer) is answered with the
//! current file, marked `no-store`.

use std::hash::{DefaultHasher, Hasher};
use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Nothing from another origin: scripts, styles and requests go to the node only, no
/// inline script, no framing by other sites. `data:` images for the empty favicon.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// One file of the console.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file `/ui/assets/` serves; the page (`index.html`) is served at `/ui`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("ui/console.css"),
    },
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_bytes!("ui/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: JS,
        body: include_bytes!("ui/api.js"),
    },
    Asset {
        name: "dom.js",
        content_type: JS,
        body: include_bytes!("ui/dom.js"),
    },
    Asset {
        name: "query.js",
        content_type: JS,
        body: include_bytes!("ui/query.js"),
    },
    Asset {
        name: "table.js",
        content_type: JS,
        body: include_bytes!("ui/table.js"),
    },
    Asset {
        name: "chart.js",
        content_type: JS,
        body: include_bytes!("ui/chart.js"),
    },
    Asset {
        name: "series.js",
        content_type: JS,
        body: include_bytes!("ui/series.js"),
    },
    Asset {
        name: "cluster.js",
        content_type: JS,
        body: include_bytes!("ui/cluster.js"),
    },
    Asset {
        name: "storage.js",
        content_type: JS,
        body: include_bytes!("ui/storage.js"),
    },
    Asset {
        name: "rates.js",
        content_type: JS,
        body: include_bytes!("ui/rates.js"),
    },
];

const INDEX: &str = include_str!("ui/index.html");

/// Where `index.html` names the asset directory; replaced by `/ui/assets/<id>`.
const ASSETS_PLACEHOLDER: &str = "{{assets}}";

/// A digest of every asset: the cache key in their URLs.
fn assets_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut hasher = DefaultHasher::new();
        for asset in ASSETS {
            hasher.write(asset.name.as_bytes());
            hasher.write(asset.body);
        }
        format!("{:016x}", hasher.finish())
    })
}

/// The page, with its asset URLs filled in.
fn index_html() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| INDEX.replace(ASSETS_PLACEHOLDER, &format!("/ui/assets/{}", assets_id())))
}

/// The headers every console response carries.
fn with_headers(
    mut response: Response,
    content_type: &'static str,
    cache: &'static str,
) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /ui` (and `/ui/`): the console's page.
pub async fn page() -> Response {
    with_headers(
        index_html().into_response(),
        "text/html; charset=utf-8",
        "no-cache",
    )
}

/// `GET /ui/assets/{id}/{name}`: one of the console's files.
pub async fn asset(Path((id, name)): Path<(String, String)>) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let cache = if id == assets_id() {
        "public, max-age=31536000, immutable"
    } else {
        "no-store"
    };
    with_headers(asset.body.into_response(), asset.content_type, cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_asset_it_loads_under_the_current_id() {
        let page = index_html();
        assert!(!page.contains(ASSETS_PLACEHOLDER), "{page}");
        assert!(page.contains(&format!("/ui/assets/{}/app.js", assets_id())));
        assert!(page.contains(&format!("/ui/assets/{}/console.css", assets_id())));
    }

    #[test]
    fn every_module_a_script_imports_is_served() {
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(asset.body).unwrap_or_default();
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let Some(start) = line.find("\"./") else {
                    panic!("{}: import not relative: {line}", asset.name);
                };
                let rest = &line[start + 3..];
                let name = &rest[..rest.find('"').unwrap_or(rest.len())];
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "{} imports {name}, which is not served",
                    asset.name
                );
            }
        }
    }
}
