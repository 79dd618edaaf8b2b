//! The dashboard (SPEC section 11): one page at `GET /` of the TCP listener, its script and
//! its style sheet, every byte embedded in the binary (`include_str!`, no build step). The
//! page reads the same `/v1` routes as the CLI; it carries no data itself, so it is served
//! even where `[web] token_reads` closes the reads (it must load to ask for the token).

use super::guard::TokenMode;
use axum::extract::Extension;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("dashboard/index.html");
const APP: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

/// Where the page's files live; nothing else is under `/dashboard/`.
const ASSETS: &str = "/dashboard/";

/// The page allows itself its own files and requests to its own origin, nothing else: no
/// other host is ever fetched, and it cannot be framed by another site.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

/// Whether `path` is one of the page's own files (which carry no data).
pub fn is_page(path: &str) -> bool {
    path == "/" || path.starts_with(ASSETS)
}

pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/dashboard/app.js", get(app))
        .route("/dashboard/style.css", get(style))
}

/// The page, told whether the listener wants a token (so that it asks for one at once).
async fn index(mode: Option<Extension<TokenMode>>) -> Response {
    let mode = mode.map_or(TokenMode::None, |Extension(m)| m);
    page(
        "text/html; charset=utf-8",
        page_html(mode).into_bytes(),
        "no-cache",
    )
}

fn page_html(mode: TokenMode) -> String {
    INDEX.replace("{{TOKEN_MODE}}", mode.as_str())
}

async fn app() -> Response {
    page(
        "text/javascript; charset=utf-8",
        APP.as_bytes().to_vec(),
        "no-cache",
    )
}

async fn style() -> Response {
    page(
        "text/css; charset=utf-8",
        STYLE.as_bytes().to_vec(),
        "no-cache",
    )
}

/// `no-cache` lets the browser keep a copy but ask (cheaply) each time, so a daemon
/// upgraded under an open page serves its new script at the next reload.
fn page(content_type: &'static str, body: Vec<u8>, cache: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, cache),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_its_token_mode_and_only_its_own_files() {
        let html = page_html(TokenMode::Writes);
        assert!(html.contains(r#"<meta name="homebased-token" content="writes">"#));
        assert!(!html.contains("{{"));
        // Every file the page loads is one of ours: nothing from another host.
        for src in ["/dashboard/style.css", "/dashboard/app.js"] {
            assert!(html.contains(src), "{src}");
            assert!(is_page(src));
        }
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!APP.contains("http://") && !APP.contains("https://"));
        assert!(is_page("/"));
        assert!(!is_page("/v1/jobs"));
        assert!(!is_page("/metrics"));
    }
}
