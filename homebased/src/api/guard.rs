//! The TCP listener's guards (SPEC section 11): a DNS-rebinding guard on the `Host` header,
//! and same-origin JSON for writes; then the optional web token (`[web] token`) on writes,
//! and on reads with `token_reads`. The Unix socket needs none of them: only its owner
//! connects.

use crate::fleet::token::same_secret;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use homebased_shared::config::FleetToken;
use homebased_shared::error::{ApiError, ErrorCode};
use std::net::{IpAddr, SocketAddr};

/// Whether `host` (the `Host` header, port included or not) names this machine in a way a
/// rebinding attack cannot forge into a public name.
pub fn host_allowed(host: &str, bind: SocketAddr) -> bool {
    let name = strip_port(host).trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() {
        return false;
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return ip == bind.ip() || is_local_ip(ip);
    }
    name == "localhost"
        || name.ends_with(".localhost")
        || name.ends_with(".local")
        || name.ends_with(".ts.net")
        || !name.contains('.')
}

fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

fn is_local_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || (v6.segments()[0] & 0xfe00) == 0xfc00 // unique local
                || (v6.segments()[0] & 0xffc0) == 0xfe80 // link local
        }
    }
}

/// Writes must be JSON from the same origin: a browser page elsewhere cannot drive them.
pub fn write_allowed(headers: &HeaderMap, host: &str) -> Result<(), &'static str> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !is_json_media_type(content_type) {
        return Err("writes must send Content-Type: application/json");
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return Err("cross-site writes are refused");
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if !origin_host.eq_ignore_ascii_case(host) {
            return Err("the Origin differs from the Host: cross-site writes are refused");
        }
    }
    Ok(())
}

/// Exactly `application/json`, with optional parameters (`; charset=utf-8`): not
/// `application/jsonx` nor `application/json-seq`.
fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// The middleware applied to every TCP route.
pub async fn guard(State(bind): State<SocketAddr>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !host_allowed(&host, bind) {
        return forbidden(
            ErrorCode::Permission,
            format!("Host {host:?} is not a local name"),
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        if let Err(why) = write_allowed(request.headers(), &host) {
            return forbidden(ErrorCode::Permission, why.to_string());
        }
    }
    next.run(request).await
}

/// The web listener's own token (`[web] token`), as the token middleware applies it. The
/// Fleet token is kept beside it because a peer's forwarded request carries that one.
#[derive(Clone, Default)]
pub struct WebToken {
    pub token: Option<FleetToken>,
    pub reads: bool,
    pub fleet: Option<FleetToken>,
}

/// What the dashboard tells the person about the token: whether it must ask for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMode {
    None,
    Writes,
    Reads,
}

impl TokenMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenMode::None => "none",
            TokenMode::Writes => "writes",
            TokenMode::Reads => "reads",
        }
    }
}

impl WebToken {
    pub fn from_config(config: &homebased_shared::config::Config) -> WebToken {
        WebToken {
            token: config.web.token.clone(),
            reads: config.web.token_reads,
            fleet: config.fleet.token.clone(),
        }
    }

    pub fn mode(&self) -> TokenMode {
        match (&self.token, self.reads) {
            (None, _) => TokenMode::None,
            (Some(_), false) => TokenMode::Writes,
            (Some(_), true) => TokenMode::Reads,
        }
    }

    /// Whether a request may pass. The page's own files carry no data and are always served
    /// (the page must load to ask for the token). A request a Fleet peer forwarded (or a
    /// Fleet route) may bring the Fleet token instead: the peer holds that one, not this
    /// listener's, and `fleet::token::guard` checks it right after this.
    pub fn admits(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let read = method == Method::GET || method == Method::HEAD;
        if read && (!self.reads || super::dashboard::is_page(path)) {
            return true;
        }
        let sent = bearer(headers);
        if same_secret(sent.as_bytes(), token.expose().as_bytes()) {
            return true;
        }
        match &self.fleet {
            Some(fleet) if crate::fleet::token::is_fleet_request(path, headers) => {
                same_secret(sent.as_bytes(), fleet.expose().as_bytes())
            }
            _ => false,
        }
    }
}

/// The bearer token a request carries, or "" (which matches no configured token).
fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// The web token's middleware, inside the Host and origin guard. It also tells the
/// dashboard, through a request extension, whether the page should ask for the token.
/// The refusal never echoes what was sent.
pub async fn token(State(web): State<WebToken>, mut request: Request, next: Next) -> Response {
    if !web.admits(request.method(), request.uri().path(), request.headers()) {
        let what = if request.method() == Method::GET || request.method() == Method::HEAD {
            "reads"
        } else {
            "writes"
        };
        let e = ApiError::new(
            ErrorCode::Permission,
            format!(
                "this listener's {what} need its web token: send Authorization: Bearer \
                 <web.token> (the dashboard asks for it once)"
            ),
        );
        return (StatusCode::UNAUTHORIZED, axum::Json(e.envelope())).into_response();
    }
    request.extensions_mut().insert(web.mode());
    next.run(request).await
}

fn forbidden(code: ErrorCode, message: String) -> Response {
    (
        axum::http::StatusCode::FORBIDDEN,
        axum::Json(ApiError::new(code, message).envelope()),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind() -> SocketAddr {
        "0.0.0.0:7677".parse().unwrap()
    }

    #[test]
    fn local_names_pass_and_public_names_do_not() {
        for ok in [
            "localhost",
            "localhost:7677",
            "127.0.0.1:7677",
            "[::1]:7677",
            "10.1.2.3",
            "192.168.0.9:80",
            "169.254.1.1",
            "trainer",
            "trainer.local",
            "box.tail1234.ts.net",
            "0.0.0.0:7677",
        ] {
            assert!(host_allowed(ok, bind()), "{ok}");
        }
        for bad in [
            "",
            "evil.com",
            "evil.com:7677",
            "8.8.8.8",
            "localhost.evil.com",
            "[2001:db8::1]",
        ] {
            assert!(!host_allowed(bad, bind()), "{bad}");
        }
    }

    fn secret(text: &str) -> Option<FleetToken> {
        Some(FleetToken::new(text.to_string(), "test").unwrap())
    }

    fn with_bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn the_web_token_guards_writes_and_optionally_reads_but_never_the_page() {
        let web = "web-token-web-token-web-token-web-token";
        let fleet = "fleet-token-fleet-token-fleet-token-fleet";
        let mut t = WebToken {
            token: secret(web),
            reads: false,
            fleet: secret(fleet),
        };
        let none = HeaderMap::new();
        assert!(t.admits(&Method::GET, "/v1/jobs", &none));
        assert!(!t.admits(&Method::POST, "/v1/release", &none));
        assert!(!t.admits(&Method::POST, "/v1/release", &with_bearer("wrong")));
        assert!(t.admits(&Method::POST, "/v1/release", &with_bearer(web)));
        // The Fleet token opens only what a peer sends: forwarded requests, Fleet routes.
        assert!(!t.admits(&Method::POST, "/v1/release", &with_bearer(fleet)));
        let mut forwarded = with_bearer(fleet);
        forwarded.insert(crate::fleet::ORIGIN_HEADER, "x".parse().unwrap());
        assert!(t.admits(&Method::POST, "/v1/release", &forwarded));
        t.reads = true;
        assert!(!t.admits(&Method::GET, "/v1/jobs", &none));
        assert!(t.admits(&Method::GET, "/v1/jobs", &with_bearer(web)));
        assert!(t.admits(&Method::GET, "/v1/fleet/identity", &with_bearer(fleet)));
        assert!(t.admits(&Method::GET, "/", &none));
        assert!(t.admits(&Method::GET, "/dashboard/app.js", &none));
        assert_eq!(t.mode(), TokenMode::Reads);
        // Without a web token, nothing is asked (the Fleet guard still does its own part).
        let open = WebToken {
            fleet: secret(fleet),
            ..WebToken::default()
        };
        assert!(open.admits(&Method::POST, "/v1/release", &none));
        assert_eq!(open.mode(), TokenMode::None);
    }

    #[test]
    fn writes_need_same_origin_json() {
        let mut h = HeaderMap::new();
        assert!(write_allowed(&h, "localhost:7677").is_err());
        for bad in [
            "application/jsonx",
            "application/json-seq",
            "text/plain",
            "json",
        ] {
            h.insert(header::CONTENT_TYPE, bad.parse().unwrap());
            assert!(write_allowed(&h, "localhost:7677").is_err(), "{bad}");
        }
        for good in ["application/json; charset=utf-8", "Application/JSON"] {
            h.insert(header::CONTENT_TYPE, good.parse().unwrap());
            assert!(write_allowed(&h, "localhost:7677").is_ok(), "{good}");
        }
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert!(write_allowed(&h, "localhost:7677").is_ok());
        h.insert(header::ORIGIN, "http://localhost:7677".parse().unwrap());
        assert!(write_allowed(&h, "localhost:7677").is_ok());
        h.insert(header::ORIGIN, "http://evil.com".parse().unwrap());
        assert!(write_allowed(&h, "localhost:7677").is_err());
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(write_allowed(&h, "localhost:7677").is_err());
    }
}
