//! Fleet peer addresses (SPEC section 13): `http://host[:port]` and nothing else: no
//! path, query, fragment or userinfo, no https (the token protects a trusted network, TLS is
//! the operator's tunnel). The default port is 7677. One normal form, so that one peer is
//! one directory entry however it was written.

/// The port of an address that names none.
pub const DEFAULT_PORT: u16 = 7677;

/// Parses an address into its normal form `http://host:port` (host lowercased).
pub fn normalize(text: &str) -> Result<String, String> {
    let text = text.trim();
    let refuse = |why: &str| {
        Err(format!(
            "{text:?} is not a Fleet address like http://host:7677: {why}"
        ))
    };
    let Some(rest) = text.strip_prefix("http://") else {
        if text.starts_with("https://") {
            return refuse("https is not spoken; use http:// on a trusted network or tunnel");
        }
        return refuse("it must start with http://");
    };
    // One trailing slash is the empty path; anything after it is a path.
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return refuse("an address has no path");
    }
    if rest.contains('?') || rest.contains('#') {
        return refuse("an address has no query or fragment");
    }
    if rest.contains('@') {
        return refuse("an address has no user or password");
    }
    if rest.is_empty() || rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return refuse("it names no host");
    }
    let (host, port) = split_port(rest)
        .map_err(|why| format!("{text:?} is not a Fleet address like http://host:7677: {why}"))?;
    if host.is_empty() {
        return refuse("it names no host");
    }
    let host = host.to_ascii_lowercase();
    if host.starts_with('[') {
        let inner = &host[1..host.len() - 1];
        if inner.parse::<std::net::Ipv6Addr>().is_err() {
            return refuse("the bracketed host is not an IPv6 address");
        }
    } else if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
    {
        return refuse("the host has characters no host name has");
    }
    Ok(format!("http://{host}:{port}"))
}

fn split_port(rest: &str) -> Result<(&str, u16), String> {
    if rest.starts_with('[') {
        let end = rest.find(']').ok_or("an unclosed [")?;
        let host = &rest[..=end];
        return match &rest[end + 1..] {
            "" => Ok((host, DEFAULT_PORT)),
            p => Ok((host, port(p.strip_prefix(':').ok_or("junk after ]")?)?)),
        };
    }
    match rest.rsplit_once(':') {
        None => Ok((rest, DEFAULT_PORT)),
        Some((host, p)) if !host.contains(':') => Ok((host, port(p)?)),
        Some(_) => Err("an IPv6 host goes in brackets".into()),
    }
}

fn port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(p) if p > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(format!("{text:?} is not a port")),
    }
}

/// Whether `text` is a Fleet machine name: the rules of resource names (1 to 63 of
/// `[a-z0-9-]`, not starting or ending with `-`) and never a UUID.
pub fn valid_machine_name(text: &str) -> bool {
    (1..=63).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
        && uuid::Uuid::try_parse(text).is_err()
}

/// A host name made into a machine name: its first label, lowercased, other characters
/// turned into `-`; `localhost` when nothing is left.
pub fn machine_name_from_host(host: &str) -> String {
    let label = host.split('.').next().unwrap_or("").to_ascii_lowercase();
    let mapped: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches('-').to_string();
    if valid_machine_name(&trimmed) {
        trimmed
    } else {
        "localhost".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_one_normal_form() {
        assert_eq!(normalize("http://Main:7677").unwrap(), "http://main:7677");
        assert_eq!(normalize("http://main").unwrap(), "http://main:7677");
        assert_eq!(normalize("http://main/").unwrap(), "http://main:7677");
        assert_eq!(
            normalize(" http://127.0.0.1:9000 ").unwrap(),
            "http://127.0.0.1:9000"
        );
        assert_eq!(normalize("http://[::1]:80").unwrap(), "http://[::1]:80");
        assert_eq!(normalize("http://[::1]").unwrap(), "http://[::1]:7677");
    }

    #[test]
    fn paths_queries_userinfo_and_https_are_refused() {
        for bad in [
            "https://main:7677",
            "main:7677",
            "http://main:7677/v1",
            "http://main:7677/?x=1",
            "http://main?x=1",
            "http://main#frag",
            "http://user:pw@main:7677",
            "http://",
            "http://:7677",
            "http://main:0",
            "http://main:99999",
            "http://main:port",
            "http://ma in",
            "http://::1",
            "http://[nothex]:1",
            "ftp://main",
        ] {
            assert!(normalize(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn machine_names_follow_resource_name_rules() {
        assert!(valid_machine_name("trainer-2"));
        for bad in [
            "",
            "-a",
            "a-",
            "Trainer",
            "a.b",
            "0190a0b0-0000-7000-8000-000000000000",
        ] {
            assert!(!valid_machine_name(bad), "{bad}");
        }
        assert_eq!(machine_name_from_host("Box_1.lan"), "box-1");
        assert_eq!(machine_name_from_host("..."), "localhost");
    }
}
