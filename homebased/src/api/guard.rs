//! The TCP listener's guards (SPEC section 11): a DNS-rebinding guard on the `Host` header,
//! and same-origin JSON for writes; then the optional web token (`[web] token`) on writes,
//! and on reads with `token_reads`. The Unix socket needs none of them: only its owner
//! connects.

use crate::fleet::token::{bearer, same_secret};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use homebased_shared::config::FleetToken;
use homebased_shared::error::{ApiError, ErrorCode};
use std::net::{IpAddr, SocketAddr};

/// The names and addresses a `Host` header may carry on one TCP listener (SPEC 11). A DNS
/// rebinding attack points a name the attacker controls at this machine, so a name is
/// accepted only when it is one the operator uses: `localhost` on a loopback listener; on
/// any other, also the names of `[web] hosts` (default: the host name and `<host>.local`).
/// An IP literal cannot be rebound, but a loopback listener still takes only loopback ones.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    loopback: bool,
    bind: IpAddr,
    /// Lower case, exact: `sub.localhost` or `localhost.` are other names.
    names: Vec<String>,
    /// This machine's own addresses, for a listener bound to `0.0.0.0` or `::`.
    own: Vec<IpAddr>,
}

impl HostPolicy {
    /// `configured` is `[web] hosts`; `host_name` this machine's, for the default.
    pub fn new(bind: SocketAddr, configured: Option<&[String]>, host_name: Option<&str>) -> Self {
        let loopback = bind.ip().is_loopback();
        let mut names = vec!["localhost".to_string()];
        if !loopback {
            match configured {
                Some(list) => names.extend(list.iter().map(|n| n.to_ascii_lowercase())),
                None => names.extend(default_names(host_name)),
            }
        }
        let own = if bind.ip().is_unspecified() {
            own_addresses()
        } else {
            Vec::new()
        };
        HostPolicy {
            loopback,
            bind: bind.ip(),
            names,
            own,
        }
    }

    /// Whether `host` (the `Host` header, port included or not) may reach this listener.
    pub fn allows(&self, host: &str) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        if name.is_empty() {
            return false;
        }
        if let Some(bare) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            return bare.parse::<IpAddr>().is_ok_and(|ip| self.allows_ip(ip));
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            // A bare v6 literal is not a Host header; only `[v6]` is.
            return ip.is_ipv4() && self.allows_ip(ip);
        }
        self.names.contains(&name)
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        if self.loopback {
            return ip.is_loopback();
        }
        ip == self.bind || self.own.contains(&ip) || is_local_ip(ip)
    }
}

/// The host name and `<host>.local` (mDNS), and for a dotted host name its first label too.
fn default_names(host_name: Option<&str>) -> Vec<String> {
    let Some(full) = host_name.map(str::to_ascii_lowercase) else {
        return Vec::new();
    };
    let short = full.split('.').next().unwrap_or("").to_string();
    let mut names = Vec::new();
    for name in [full.clone(), short.clone(), format!("{short}.local")] {
        if homebased_shared::config::valid_host_name(&name) && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The addresses of this machine's interfaces (a listener on `0.0.0.0` is reached at any of
/// them). None when they cannot be read: only the literals [`is_local_ip`] takes then.
fn own_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| a.address)
        .filter_map(|a| {
            if let Some(v4) = a.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
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
pub async fn guard(
    State(policy): State<std::sync::Arc<HostPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !policy.allows(&host) {
        return forbidden(
            ErrorCode::Permission,
            format!(
                "Host {host:?} is not a name of this listener: use localhost, an address of \
                 this machine, or a name listed in [web] hosts"
            ),
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
        match (&self.token, self.reads, &self.fleet) {
            (None, _, None) => TokenMode::None,
            (None, _, Some(_)) | (Some(_), false, _) => TokenMode::Writes,
            (Some(_), true, _) => TokenMode::Reads,
        }
    }

    /// The configuration key of the token a person must give the page: the web token, or
    /// the Fleet token where that one guards the writes.
    pub fn key(&self) -> &'static str {
        match (&self.token, &self.fleet) {
            (None, Some(_)) => "[fleet] token",
            _ => "[web] token",
        }
    }

    /// The token in words, for a refusal.
    pub fn name(&self) -> &'static str {
        match (&self.token, &self.fleet) {
            (None, Some(_)) => "Fleet token",
            _ => "web token",
        }
    }

    /// Whether a request may pass. The page's own files carry no data and are always served
    /// (the page must load to ask for the token). A request a Fleet peer forwarded (or a
    /// Fleet route) may bring the Fleet token instead: the peer holds that one, not this
    /// listener's, and `fleet::token::guard` checks it right after this. Without a web
    /// token, the Fleet token guards every TCP write (SPEC 11): a Fleet machine listens
    /// beyond loopback, and a write there must not be open to anyone who can reach it.
    pub fn admits(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        let read = method == Method::GET || method == Method::HEAD;
        let sent = bearer(headers).as_bytes();
        let Some(token) = &self.token else {
            return match &self.fleet {
                Some(fleet) => read || same_secret(sent, fleet.expose().as_bytes()),
                None => true,
            };
        };
        if read && (!self.reads || super::dashboard::is_page(path)) {
            return true;
        }
        if same_secret(sent, token.expose().as_bytes()) {
            return true;
        }
        match &self.fleet {
            Some(fleet) if crate::fleet::token::is_fleet_request(path, headers) => {
                same_secret(sent, fleet.expose().as_bytes())
            }
            _ => false,
        }
    }
}

/// The key of the token the dashboard asks for, beside [`TokenMode`] in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenKey(pub &'static str);

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
                "this listener's {what} need its {} ({}): send Authorization: Bearer \
                 <token> (the dashboard asks for it once)",
                web.name(),
                web.key()
            ),
        );
        return (StatusCode::UNAUTHORIZED, axum::Json(e.envelope())).into_response();
    }
    request.extensions_mut().insert(web.mode());
    request.extensions_mut().insert(TokenKey(web.key()));
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

    fn policy(bind: &str, hosts: Option<&[String]>) -> HostPolicy {
        HostPolicy::new(bind.parse().unwrap(), hosts, Some("trainer"))
    }

    #[test]
    fn a_loopback_listener_takes_only_localhost_and_loopback_literals() {
        let p = policy("127.0.0.1:7677", None);
        for ok in [
            "localhost",
            "LOCALHOST:7677",
            "127.0.0.1:7677",
            "127.0.0.2",
            "[::1]:7677",
        ] {
            assert!(p.allows(ok), "{ok}");
        }
        // The names a rebinding page can use, and every other name.
        for bad in [
            "",
            "attacker.local",
            "foo.ts.net",
            "intranet",
            "trainer",
            "sub.localhost",
            "localhost.",
            "localhost.evil.com",
            "evil.com:7677",
            "10.1.2.3",
            "192.168.0.9:80",
            "8.8.8.8",
            "[2001:db8::1]",
            "::1",
        ] {
            assert!(!p.allows(bad), "{bad}");
        }
    }

    #[test]
    fn another_listener_also_takes_its_address_private_literals_and_its_names() {
        let p = policy("10.1.2.3:7677", None);
        for ok in [
            "localhost",
            "10.1.2.3:7677",
            "192.168.0.9",
            "169.254.1.1",
            "[fd00::1]",
            "trainer",
            "trainer.local:7677",
        ] {
            assert!(p.allows(ok), "{ok}");
        }
        for bad in [
            "attacker.local",
            "foo.ts.net",
            "intranet",
            "trainer.",
            "sub.localhost",
            "8.8.8.8",
            "evil.com",
        ] {
            assert!(!p.allows(bad), "{bad}");
        }
        // `[web] hosts` replaces the default names.
        let listed = ["box.tail1234.ts.net".to_string()];
        let p = policy("10.1.2.3:7677", Some(&listed));
        assert!(p.allows("box.tail1234.ts.net:7677"));
        assert!(!p.allows("trainer"));
        assert!(!p.allows("other.tail1234.ts.net"));
    }

    #[test]
    fn the_default_names_are_the_host_name_and_its_mdns_name() {
        assert_eq!(
            default_names(Some("Trainer.lab.example")),
            ["trainer.lab.example", "trainer", "trainer.local"]
        );
        assert_eq!(default_names(None), Vec::<String>::new());
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
        forwarded.insert(homebased_shared::wire::ORIGIN_HEADER, "x".parse().unwrap());
        assert!(t.admits(&Method::POST, "/v1/release", &forwarded));
        t.reads = true;
        assert!(!t.admits(&Method::GET, "/v1/jobs", &none));
        assert!(t.admits(&Method::GET, "/v1/jobs", &with_bearer(web)));
        assert!(t.admits(&Method::GET, "/v1/fleet/identity", &with_bearer(fleet)));
        assert!(t.admits(&Method::GET, "/", &none));
        assert!(t.admits(&Method::GET, "/dashboard/app.js", &none));
        assert_eq!(t.mode(), TokenMode::Reads);
        assert_eq!(t.key(), "[web] token");
        // Without a web token, the Fleet token guards every write; reads stay open.
        let fleet_only = WebToken {
            fleet: secret(fleet),
            ..WebToken::default()
        };
        assert!(!fleet_only.admits(&Method::POST, "/v1/jobs/j/cancel", &none));
        assert!(!fleet_only.admits(&Method::POST, "/v1/release", &with_bearer("wrong")));
        assert!(fleet_only.admits(&Method::POST, "/v1/release", &with_bearer(fleet)));
        assert!(fleet_only.admits(&Method::GET, "/v1/jobs", &none));
        assert_eq!(fleet_only.mode(), TokenMode::Writes);
        assert_eq!(fleet_only.key(), "[fleet] token");
        // With neither, nothing is asked.
        let open = WebToken::default();
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
