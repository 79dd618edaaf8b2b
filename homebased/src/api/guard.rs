//! The TCP listener's guards (SPEC section 11): a DNS-rebinding guard on the `Host` header,
//! and same-origin JSON for writes. The Unix socket needs neither: only its owner connects.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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
