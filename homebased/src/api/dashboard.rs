//! The dashboard (SPEC section 11): one page at `GET /` of the TCP listener, its script and
//! its style sheet, every byte embedded in the binary (`include_str!`, no build step). The
//! page reads the same `/v1` routes as the CLI; it carries no data itself, so it is served
//! even where `[web] token_reads` closes the reads (it must load to ask for the token).

use super::guard::{TokenKey, TokenMode};
use axum::body::Body;
use axum::extract::{Extension, Request};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
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
async fn index(mode: Option<Extension<TokenMode>>, key: Option<Extension<TokenKey>>) -> Response {
    let mode = mode.map_or(TokenMode::None, |Extension(m)| m);
    let key = key.map_or(TokenKey("[web] token"), |Extension(k)| k);
    page(
        "text/html; charset=utf-8",
        page_html(mode, key).into_bytes(),
        "no-cache",
    )
}

fn page_html(mode: TokenMode, key: TokenKey) -> String {
    INDEX
        .replace("{{TOKEN_MODE}}", mode.as_str())
        .replace("{{TOKEN_KEY}}", key.0)
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

/// Conditional GETs on the TCP listener, for the page's polling: a `200` answer to a `GET`
/// carries a weak `ETag` (a hash of its bytes), and a request whose `If-None-Match` names the
/// current one is answered `304` with no body. The daemon still builds the answer (that is
/// what the hash is of), but an unchanged queue of 2,000 jobs (megabytes of JSON) is neither
/// sent nor parsed again by the browser, which revalidates each read (`cache: "no-cache"`).
pub async fn conditional(request: Request, next: Next) -> Response {
    if request.method() != Method::GET {
        return next.run(request).await;
    }
    let asked = request
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let response = next.run(request).await;
    if response.status() != StatusCode::OK || response.headers().contains_key(header::ETAG) {
        return response;
    }
    // Only an answer already whole in memory (every JSON answer and the page's files: their
    // size is exact) or a finite one marked to be read whole (the job listing) is hashed; any
    // other streamed one (a followed log) passes as it is.
    let size = match axum::body::HttpBody::size_hint(response.body()).exact() {
        Some(size) => usize::try_from(size).unwrap_or(usize::MAX),
        None if response
            .extensions()
            .get::<super::listing::WholeAnswer>()
            .is_some() =>
        {
            usize::MAX
        }
        None => return response,
    };
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, size).await else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(
                homebased_shared::error::ApiError::internal("the answer could not be read")
                    .envelope(),
            ),
        )
            .into_response();
    };
    let tag = etag_of(&bytes);
    if asked.as_deref().is_some_and(|a| if_none_match(a, &tag)) {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::CONTENT_TYPE);
        if let Ok(v) = HeaderValue::from_str(&tag) {
            parts.headers.insert(header::ETAG, v);
        }
        return Response::from_parts(parts, Body::empty());
    }
    if let Ok(v) = HeaderValue::from_str(&tag) {
        parts.headers.insert(header::ETAG, v);
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// A weak validator of `bytes`: 128 bits of SHA-256 are plenty to tell two answers apart.
fn etag_of(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("W/\"{hex}\"")
}

/// Whether an `If-None-Match` list names `tag` (weak comparison, `*` included).
fn if_none_match(header: &str, tag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    header
        .split(',')
        .any(|t| t.trim() == "*" || bare(t) == bare(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_its_token_mode_and_only_its_own_files() {
        let html = page_html(TokenMode::Writes, TokenKey("[fleet] token"));
        assert!(html.contains("<code>[fleet] token</code>"));
        assert!(html.contains(r#"<meta name="homebased-token" content="writes">"#));
        assert!(html.contains(r#"<meta name="homebased-token-key" content="[fleet] token">"#));
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

    #[test]
    fn an_if_none_match_names_the_answer_only_when_its_bytes_are_the_same() {
        let tag = etag_of(b"{\"jobs\":[]}");
        assert!(tag.starts_with("W/\"") && tag.len() == 36, "{tag}");
        assert_eq!(tag, etag_of(b"{\"jobs\":[]}"));
        assert_ne!(tag, etag_of(b"{\"jobs\":[1]}"));
        assert!(if_none_match(&tag, &tag));
        assert!(if_none_match(
            &format!("\"x\", {}", tag.trim_start_matches("W/")),
            &tag
        ));
        assert!(if_none_match("*", &tag));
        assert!(!if_none_match("W/\"0000\"", &tag));
    }
}
