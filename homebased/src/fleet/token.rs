//! The Fleet token on the receiving side: a daemon with `[fleet] token` answers 401
//! `permission` to every TCP request for `/v1/fleet/*`, and every request a peer forwarded
//! (it carries the origin header), unless it brings `Authorization: Bearer <the token>`.
//! The comparison takes the same time wherever the two differ.

use super::Fleet;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use homebased_shared::error::{ApiError, ErrorCode};
use homebased_shared::wire::ORIGIN_HEADER;

/// Whether two secrets are equal, in time independent of where they differ and of their
/// lengths: both are hashed first, then every byte of the digests is compared.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a), Sha256::digest(b));
    let diff = x
        .iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q));
    std::hint::black_box(diff) == 0
}

/// Whether a request is machine-to-machine: a Fleet route, or forwarded by a peer.
pub fn is_fleet_request(path: &str, headers: &axum::http::HeaderMap) -> bool {
    path.starts_with("/v1/fleet/") || headers.contains_key(ORIGIN_HEADER)
}

/// The bearer token a request carries, or "" (which matches no configured token). The
/// scheme is case-insensitive (RFC 9110 section 11.1): `bearer` and `Bearer` are one.
pub fn bearer(headers: &axum::http::HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim())
}

/// The TCP middleware. The refusal never echoes what was sent.
pub async fn guard(State(fleet): State<Fleet>, request: Request, next: Next) -> Response {
    if let Some(token) = fleet.token() {
        if is_fleet_request(request.uri().path(), request.headers()) {
            let sent = bearer(request.headers());
            if !same_secret(sent.as_bytes(), token.expose().as_bytes()) {
                let e = ApiError::new(
                    ErrorCode::Permission,
                    "this machine's Fleet requests need its token: set the same fleet.token \
                     on both machines",
                );
                return (StatusCode::UNAUTHORIZED, axum::Json(e.envelope())).into_response();
            }
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_identical() {
        let t = b"0123456789abcdef0123456789abcdef";
        assert!(same_secret(t, t));
        assert!(!same_secret(t, b"0123456789abcdef0123456789abcdeX"));
        assert!(!same_secret(t, b""));
        assert!(!same_secret(t, &t[..31]));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_nothing_else_is_a_token() {
        let with = |value: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert(header::AUTHORIZATION, value.parse().unwrap());
            h
        };
        assert_eq!(bearer(&with("Bearer abc")), "abc");
        assert_eq!(bearer(&with("bearer abc")), "abc");
        assert_eq!(bearer(&with("BEARER  abc")), "abc");
        assert_eq!(bearer(&with("Basic abc")), "");
        assert_eq!(bearer(&with("abc")), "");
        assert_eq!(bearer(&axum::http::HeaderMap::new()), "");
    }

    #[test]
    fn fleet_routes_and_forwarded_requests_are_machine_to_machine() {
        let mut headers = axum::http::HeaderMap::new();
        assert!(is_fleet_request("/v1/fleet/identity", &headers));
        assert!(!is_fleet_request("/v1/jobs", &headers));
        headers.insert(ORIGIN_HEADER, "x".parse().unwrap());
        assert!(is_fleet_request("/v1/jobs", &headers));
    }
}
