//! Configuration (SPEC section 12): a TOML file read at daemon start. Unknown keys are refused
//! and every duration must be positive.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the configuration comes from and whether it was named explicitly (an explicit file
/// must exist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigSource {
    pub path: PathBuf,
    pub explicit: bool,
}

impl ConfigSource {
    /// `--config`, then `HOMEBASED_CONFIG`, then `~/.config/homebased/config.toml`.
    pub fn resolve(
        flag: Option<&Path>,
        env_config: Option<&str>,
        user_home: Option<&str>,
    ) -> Option<Self> {
        if let Some(p) = flag {
            return Some(ConfigSource {
                path: p.to_path_buf(),
                explicit: true,
            });
        }
        if let Some(p) = env_config.filter(|p| !p.is_empty()) {
            return Some(ConfigSource {
                path: PathBuf::from(p),
                explicit: true,
            });
        }
        let home = user_home.filter(|h| !h.is_empty())?;
        Some(ConfigSource {
            path: Path::new(home).join(".config/homebased/config.toml"),
            explicit: false,
        })
    }

    pub fn from_process(flag: Option<&Path>) -> Option<Self> {
        Self::resolve(
            flag,
            std::env::var("HOMEBASED_CONFIG").ok().as_deref(),
            std::env::var("HOME").ok().as_deref(),
        )
    }

    /// Reads and validates the file. A missing default file gives the defaults; a missing
    /// explicit file is an error.
    pub fn load(&self) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Config::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !self.explicit => {
                Ok(Config::default())
            }
            Err(e) => Err(ConfigError(format!(
                "cannot read {}: {e}",
                self.path.display()
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The effective settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Config {
    pub resource: ResourceConfig,
    pub events: EventsConfig,
    pub web: WebConfig,
    pub fleet: FleetConfig,
    pub history: HistoryConfig,
}

/// `[history]`: retention of finished jobs. Off by default: nothing is ever deleted unless
/// `keep` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct HistoryConfig {
    /// Terminal jobs that ended longer ago than this are removed with their runs, run
    /// directories and delivered events, a small batch at a time.
    #[serde(with = "opt_duration_text")]
    pub keep: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceConfig {
    pub notify_blocked_after: NotifyBlockedAfter,
    pub cleanup: CleanupConfig,
    /// A run's `output.log` at most, in bytes (SPEC section 5); shown as a size (`16g`).
    #[serde(serialize_with = "size_text")]
    pub output_limit: u64,
    /// Whether the first multi-lane job that cannot start holds lanes against the jobs
    /// behind it (SPEC section 4); off, it is passed over like any other and may starve.
    pub reservations: bool,
}

impl Default for ResourceConfig {
    fn default() -> Self {
        ResourceConfig {
            notify_blocked_after: NotifyBlockedAfter::default(),
            cleanup: CleanupConfig::default(),
            output_limit: crate::output_cap::DEFAULT_LIMIT,
            reservations: true,
        }
    }
}

fn size_text<S: serde::Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_size(*bytes))
}

/// How long the first blocked job waits before its one `JOB_BLOCKED` notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NotifyBlockedAfter {
    #[serde(with = "duration_text")]
    pub r#yield: Duration,
    #[serde(with = "duration_text")]
    pub wait: Duration,
}

impl Default for NotifyBlockedAfter {
    fn default() -> Self {
        NotifyBlockedAfter {
            r#yield: Duration::from_secs(15 * 60),
            wait: Duration::from_secs(30 * 60),
        }
    }
}

/// Bounds of the cleanup sweep (SPEC section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupConfig {
    #[serde(with = "duration_text")]
    pub term_grace: Duration,
    #[serde(with = "duration_text")]
    pub kill_grace: Duration,
    #[serde(with = "duration_text")]
    pub rescan: Duration,
    #[serde(with = "duration_text")]
    pub bound: Duration,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        CleanupConfig {
            term_grace: Duration::from_secs(10),
            kill_grace: Duration::from_secs(2),
            rescan: Duration::from_millis(50),
            bound: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct EventsConfig {
    /// A program run once per event; `None` means the thread inbox.
    pub command: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct WebConfig {
    pub listen: Option<SocketAddr>,
    /// TCP writes (and reads with `token_reads`) need it as a bearer token. Never shown:
    /// `config validate` and the logs leave it out.
    #[serde(skip_serializing)]
    pub token: Option<FleetToken>,
    /// Whether TCP reads need the token too.
    pub token_reads: bool,
    /// Names accepted in `Host` by a listener bound to a non-loopback address (SPEC 11);
    /// `None`: this machine's host name and `<host>.local`, resolved at daemon start.
    pub hosts: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct FleetConfig {
    pub enabled: bool,
    pub machine_name: Option<String>,
    /// Never shown: `config validate` and the logs leave it out.
    #[serde(skip_serializing)]
    pub token: Option<FleetToken>,
    /// Peer addresses in their normal form ([`crate::peer_address::normalize`]).
    pub machines: Vec<String>,
}

/// The shortest Fleet token accepted.
pub const MIN_TOKEN_CHARS: usize = 32;

/// A bearer secret: the shared secret of a fleet, or the web listener's write token. Its
/// `Debug` is redacted, so no log line or error built from the configuration can show it.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetToken(String);

impl FleetToken {
    /// Checks the length; `source` names the key or file in the refusal (never the value).
    pub fn new(text: String, source: &str) -> Result<FleetToken, ConfigError> {
        if text.chars().count() < MIN_TOKEN_CHARS {
            return Err(ConfigError(format!(
                "{source}: a token has at least {MIN_TOKEN_CHARS} characters"
            )));
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(ConfigError(format!(
                "{source}: a token has no spaces or control characters"
            )));
        }
        Ok(FleetToken(text))
    }

    /// The secret itself, for the `Authorization` header and the comparison only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for FleetToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetToken(<redacted>)")
    }
}

/// Reads `token_file`: it must be a regular file of mode 0600 (or stricter) owned by us, one
/// line; its trailing newline is not part of the token.
fn read_token_file(table: &str, path: &Path) -> Result<FleetToken, ConfigError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let key = format!("{table}.token_file {}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| ConfigError(format!("{key}: {e}")))?;
    if !meta.is_file() {
        return Err(ConfigError(format!("{key}: not a regular file")));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ConfigError(format!(
            "{key}: mode {mode:04o} lets others read the token; chmod 600 it"
        )));
    }
    if meta.uid() != nix_euid() {
        return Err(ConfigError(format!("{key}: belongs to another user")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{key}: {e}")))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    FleetToken::new(text.to_string(), &key)
}

fn nix_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

// The file's shape: every table refuses unknown keys; values are checked after parsing.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    resource: RawResource,
    #[serde(default)]
    events: RawEvents,
    #[serde(default)]
    web: RawWeb,
    #[serde(default)]
    fleet: RawFleet,
    #[serde(default)]
    history: RawHistory,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHistory {
    keep: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawResource {
    notify_blocked_after: Option<RawNotify>,
    cleanup: Option<RawCleanup>,
    output_limit: Option<String>,
    reservations: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    r#yield: Option<String>,
    wait: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCleanup {
    term_grace: Option<String>,
    kill_grace: Option<String>,
    rescan: Option<String>,
    bound: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    command: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWeb {
    listen: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    token_reads: bool,
    hosts: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    #[serde(default)]
    enabled: bool,
    machine_name: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    machines: Vec<RawPeer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    address: String,
}

/// Parses a positive humantime duration (`90s`, `15m`, `1h`).
pub fn parse_positive_duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| ConfigError(format!("{key}: {text:?} is not a duration ({e})")))?;
    if d.is_zero() {
        return Err(ConfigError(format!(
            "{key}: must be a positive duration, not {text:?}"
        )));
    }
    Ok(d)
}

const SIZE_UNITS: [(char, u64); 4] = [
    ('t', 1 << 40),
    ('g', 1 << 30),
    ('m', 1 << 20),
    ('k', 1 << 10),
];

/// Parses a positive size: bytes, or a whole number of `k`, `m`, `g` or `t` (powers of 1024,
/// either case): `16g`, `512m`, `64k`.
pub fn parse_positive_size(key: &str, text: &str) -> Result<u64, ConfigError> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, unit) = match SIZE_UNITS.iter().find(|(c, _)| t.ends_with(*c)) {
        Some(&(c, unit)) => (t.trim_end_matches(c), unit),
        None => (t.as_str(), 1),
    };
    let bad = || {
        ConfigError(format!(
            "{key}: {text:?} is not a size like 16g, 512m or 64k"
        ))
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(unit).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(ConfigError(format!(
            "{key}: must be a positive size, not {text:?}"
        )));
    }
    Ok(bytes)
}

/// A size in the largest unit that divides it (`16g`, `1536m`, `12345`).
pub fn format_size(bytes: u64) -> String {
    match SIZE_UNITS
        .iter()
        .find(|(_, unit)| bytes > 0 && bytes.is_multiple_of(*unit))
    {
        Some((c, unit)) => format!("{}{c}", bytes / unit),
        None => bytes.to_string(),
    }
}

fn duration_or(
    key: &str,
    value: Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    value.map_or(Ok(default), |v| parse_positive_duration(key, &v))
}

impl Config {
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        let defaults = Config::default();
        let notify = match raw.resource.notify_blocked_after {
            None => defaults.resource.notify_blocked_after,
            Some(n) => NotifyBlockedAfter {
                r#yield: duration_or(
                    "resource.notify_blocked_after.yield",
                    n.r#yield,
                    defaults.resource.notify_blocked_after.r#yield,
                )?,
                wait: duration_or(
                    "resource.notify_blocked_after.wait",
                    n.wait,
                    defaults.resource.notify_blocked_after.wait,
                )?,
            },
        };
        let d = defaults.resource.cleanup;
        let cleanup = match raw.resource.cleanup {
            None => d,
            Some(c) => CleanupConfig {
                term_grace: duration_or("resource.cleanup.term_grace", c.term_grace, d.term_grace)?,
                kill_grace: duration_or("resource.cleanup.kill_grace", c.kill_grace, d.kill_grace)?,
                rescan: duration_or("resource.cleanup.rescan", c.rescan, d.rescan)?,
                bound: duration_or("resource.cleanup.bound", c.bound, d.bound)?,
            },
        };
        if let Some(cmd) = &raw.events.command {
            if cmd.is_empty() || cmd[0].is_empty() {
                return Err(ConfigError("events.command: must name a program".into()));
            }
            if cmd.iter().any(|a| a.contains('\0')) {
                return Err(ConfigError(
                    "events.command: NUL bytes are not allowed".into(),
                ));
            }
        }
        let listen = raw
            .web
            .listen
            .map(|l| {
                l.parse::<SocketAddr>().map_err(|_| {
                    ConfigError(format!(
                        "web.listen: {l:?} is not an address like 127.0.0.1:7677"
                    ))
                })
            })
            .transpose()?;
        if let Some(name) = &raw.fleet.machine_name {
            if !crate::peer_address::valid_machine_name(name) {
                return Err(ConfigError(format!(
                    "fleet.machine_name: {name:?} must be 1 to 63 of a-z, 0-9 and -, \
                     not starting or ending with -, and not a UUID"
                )));
            }
        }
        let token = token_of("fleet", raw.fleet.token, raw.fleet.token_file)?;
        let web_token = token_of("web", raw.web.token, raw.web.token_file)?;
        if raw.web.token_reads && web_token.is_none() {
            return Err(ConfigError(
                "web.token_reads: set web.token (or web.token_file) too".into(),
            ));
        }
        let hosts = raw.web.hosts.map(web_hosts).transpose()?;
        let mut machines = Vec::new();
        for peer in raw.fleet.machines {
            let a = crate::peer_address::normalize(&peer.address)
                .map_err(|why| ConfigError(format!("fleet.machines.address: {why}")))?;
            if !machines.contains(&a) {
                machines.push(a);
            }
        }
        let output_limit = match raw.resource.output_limit {
            None => defaults.resource.output_limit,
            Some(text) => {
                let limit = parse_positive_size("resource.output_limit", &text)?;
                // Below it the kept head, the marker and the newest output do not fit in the
                // whole 64 KiB units a cut works in.
                if limit < crate::output_cap::MIN_LIMIT {
                    return Err(ConfigError(format!(
                        "resource.output_limit: must be at least {}, not {text:?}",
                        format_size(crate::output_cap::MIN_LIMIT)
                    )));
                }
                limit
            }
        };
        let keep = raw
            .history
            .keep
            .map(|k| parse_positive_duration("history.keep", &k))
            .transpose()?;
        Ok(Config {
            history: HistoryConfig { keep },
            resource: ResourceConfig {
                notify_blocked_after: notify,
                cleanup,
                output_limit,
                reservations: raw
                    .resource
                    .reservations
                    .unwrap_or(defaults.resource.reservations),
            },
            events: EventsConfig {
                command: raw.events.command,
            },
            web: WebConfig {
                listen,
                token: web_token,
                token_reads: raw.web.token_reads,
                hosts,
            },
            fleet: FleetConfig {
                enabled: raw.fleet.enabled,
                machine_name: raw.fleet.machine_name,
                token,
                machines,
            },
        })
    }
}

/// `[web] hosts`: DNS names as a browser sends them in `Host` (no port, no trailing dot),
/// kept in lower case for the guard's exact comparison.
fn web_hosts(names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    names
        .into_iter()
        .map(|name| {
            let lower = name.to_ascii_lowercase();
            if valid_host_name(&lower) {
                Ok(lower)
            } else {
                Err(ConfigError(format!(
                    "web.hosts: {name:?} is not a host name (labels of a-z, 0-9 and -, \
                     separated by dots, no port)"
                )))
            }
        })
        .collect()
}

/// A DNS name of 1 to 253 characters in labels of 1 to 63 of `a-z`, `0-9` and `-` (not at
/// either end of a label). An IP literal is not a name: the guard handles those itself.
pub fn valid_host_name(name: &str) -> bool {
    name.len() <= 253
        && name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// A table's `token` or `token_file` (one of them at most).
fn token_of(
    table: &str,
    token: Option<String>,
    file: Option<PathBuf>,
) -> Result<Option<FleetToken>, ConfigError> {
    match (token, file) {
        (Some(_), Some(_)) => Err(ConfigError(format!(
            "{table}: set token or token_file, not both"
        ))),
        (Some(t), None) => FleetToken::new(t, &format!("{table}.token")).map(Some),
        (None, Some(path)) => read_token_file(table, &path).map(Some),
        (None, None) => Ok(None),
    }
}

/// An optional duration shown as a humantime string, or null when unset.
mod opt_duration_text {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration_text::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}

/// Durations shown as humantime strings.
mod duration_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_the_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(
            c.resource.notify_blocked_after.r#yield,
            Duration::from_secs(900)
        );
        assert_eq!(c.resource.cleanup.bound, Duration::from_secs(60));
    }

    #[test]
    fn every_documented_key_parses() {
        let text = r#"
[resource.notify_blocked_after]
yield = "2s"
wait = "3s"

[resource.cleanup]
term_grace = "1s"
kill_grace = "500ms"
rescan = "20ms"
bound = "5s"

[events]
command = ["notify-agent", "--thread-from-env"]

[web]
listen = "127.0.0.1:7677"

[fleet]
enabled = true
machine_name = "trainer"
token = "0123456789abcdef0123456789abcdef"
[[fleet.machines]]
address = "http://main:7677"
"#;
        let c = Config::parse(text).unwrap();
        assert_eq!(c.resource.notify_blocked_after.wait, Duration::from_secs(3));
        assert_eq!(c.resource.cleanup.kill_grace, Duration::from_millis(500));
        assert_eq!(c.events.command.as_deref().unwrap()[0], "notify-agent");
        assert_eq!(c.web.listen.unwrap().port(), 7677);
        assert_eq!(c.fleet.machines, vec!["http://main:7677".to_string()]);
        assert_eq!(
            c.fleet.token.as_ref().unwrap().expose(),
            "0123456789abcdef0123456789abcdef"
        );
    }

    #[test]
    fn output_limit_is_a_positive_size_of_at_least_one_mebibyte() {
        assert_eq!(Config::default().resource.output_limit, 16 << 30);
        let limit = |v: &str| {
            Config::parse(&format!("[resource]\noutput_limit = \"{v}\""))
                .map(|c| c.resource.output_limit)
        };
        assert_eq!(limit("16g"), Ok(16 << 30));
        assert_eq!(limit("512M"), Ok(512 << 20));
        assert_eq!(limit("1m"), Ok(1 << 20));
        assert_eq!(limit("2097152"), Ok(2 << 20));
        for bad in [
            "0",
            "0g",
            "-1g",
            "1.5g",
            "g",
            "",
            "16gb",
            "1 0m",
            "99999999999t",
        ] {
            assert!(limit(bad).is_err(), "{bad:?} refused");
        }
        let small = limit("64k").unwrap_err();
        assert!(small.0.contains("at least 1m"), "{small}");
        let shown = serde_json::to_value(Config::parse("").unwrap()).unwrap();
        assert_eq!(shown["resource"]["output_limit"], "16g");
    }

    #[test]
    fn reservations_are_on_unless_turned_off() {
        assert!(Config::parse("").unwrap().resource.reservations);
        let off = Config::parse("[resource]\nreservations = false").unwrap();
        assert!(!off.resource.reservations);
        assert!(Config::parse("[resource]\nreservations = \"no\"").is_err());
        assert_eq!(
            serde_json::to_value(&off).unwrap()["resource"]["reservations"],
            false
        );
    }

    #[test]
    fn sizes_parse_and_show_in_their_largest_unit() {
        assert_eq!(parse_positive_size("k", "64k"), Ok(64 << 10));
        assert_eq!(parse_positive_size("k", " 3T "), Ok(3 << 40));
        assert_eq!(format_size(16 << 30), "16g");
        assert_eq!(format_size(1536 << 20), "1536m");
        assert_eq!(format_size(12345), "12345");
        assert_eq!(format_size(0), "0");
    }

    #[test]
    fn fleet_tokens_are_long_private_and_never_shown() {
        let short = Config::parse("[fleet]\ntoken = \"tiny-secret\"").unwrap_err();
        assert!(!short.0.contains("tiny-secret"), "{short}");
        let long = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t";
        let c = Config::parse(&format!("[fleet]\ntoken = \"{long}\"")).unwrap();
        assert!(!format!("{c:?}").contains(long));
        assert!(!serde_json::to_string(&c).unwrap().contains(long));
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("token");
        std::fs::write(&file, format!("{long}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = format!("[fleet]\ntoken_file = {:?}", file.display().to_string());
        let loose = Config::parse(&text).unwrap_err();
        assert!(
            loose.0.contains("chmod 600") && !loose.0.contains(long),
            "{loose}"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = Config::parse(&text).unwrap();
        assert_eq!(c.fleet.token.unwrap().expose(), long);
        let both = format!("{text}\ntoken = \"{long}\"");
        assert!(Config::parse(&both).is_err());
    }

    #[test]
    fn web_hosts_are_plain_host_names() {
        let c = Config::parse("[web]\nhosts = [\"Trainer\", \"trainer.lan\"]").unwrap();
        assert_eq!(
            c.web.hosts,
            Some(vec!["trainer".to_string(), "trainer.lan".to_string()])
        );
        assert_eq!(Config::parse("").unwrap().web.hosts, None);
        for bad in [
            "trainer:7677",
            "10.0.0.1",
            "-x",
            "a..b",
            "trainer.",
            "",
            "a b",
        ] {
            let text = format!("[web]\nhosts = [{bad:?}]");
            let e = Config::parse(&text).unwrap_err();
            assert!(e.0.contains("web.hosts"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_web_token_is_long_private_and_never_shown() {
        let long = "w3b-w3b-w3b-w3b-w3b-w3b-w3b-w3b-w3b";
        let c = Config::parse(&format!("[web]\ntoken = \"{long}\"\ntoken_reads = true")).unwrap();
        assert_eq!(c.web.token.as_ref().unwrap().expose(), long);
        assert!(c.web.token_reads);
        assert!(!format!("{c:?}").contains(long));
        assert!(!serde_json::to_string(&c).unwrap().contains(long));
        let short = Config::parse("[web]\ntoken = \"hunter2\"").unwrap_err();
        assert!(
            short.0.starts_with("web.token:") && !short.0.contains("hunter2"),
            "{short}"
        );
        // token_reads without a token would protect nothing: refused rather than ignored.
        assert!(Config::parse("[web]\ntoken_reads = true").is_err());
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("web-token");
        std::fs::write(&file, format!("{long}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let text = format!("[web]\ntoken_file = {:?}", file.display().to_string());
        let loose = Config::parse(&text).unwrap_err();
        assert!(loose.0.starts_with("web.token_file"), "{loose}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            Config::parse(&text).unwrap().web.token.unwrap().expose(),
            long
        );
        assert!(Config::parse(&format!("{text}\ntoken = \"{long}\"")).is_err());
    }

    #[test]
    fn peer_addresses_are_normalized_and_bad_ones_refused() {
        let c = Config::parse(
            "[[fleet.machines]]\naddress = \"http://Main\"\n[[fleet.machines]]\naddress = \"http://main:7677/\"",
        )
        .unwrap();
        assert_eq!(c.fleet.machines, vec!["http://main:7677".to_string()]);
        for bad in ["http://main/v1", "https://main", "http://u@main"] {
            let text = format!("[[fleet.machines]]\naddress = \"{bad}\"");
            assert!(Config::parse(&text).is_err(), "{bad}");
        }
        assert!(Config::parse("[fleet]\nmachine_name = \"Not OK\"").is_err());
    }

    #[test]
    fn refuses_unknown_keys_bad_and_non_positive_durations() {
        assert!(Config::parse("[resource]\nbogus = 1").is_err());
        assert!(Config::parse("surprise = true").is_err());
        assert!(Config::parse("[resource.notify_blocked_after]\nyield = \"0s\"").is_err());
        assert!(Config::parse("[resource.notify_blocked_after]\nwait = \"soon\"").is_err());
        assert!(Config::parse("[resource.cleanup]\nbound = \"-1s\"").is_err());
        assert!(Config::parse("[web]\nlisten = \"nowhere\"").is_err());
        assert!(Config::parse("[events]\ncommand = []").is_err());
        assert!(Config::parse("[[fleet.machines]]\naddress = \"ftp://x\"").is_err());
        assert!(Config::parse("not toml at all [").is_err());
    }

    #[test]
    fn history_keep_is_off_by_default_and_a_positive_duration() {
        assert_eq!(Config::parse("").unwrap().history.keep, None);
        let c = Config::parse("[history]\nkeep = \"90d\"").unwrap();
        assert_eq!(c.history.keep, Some(Duration::from_secs(90 * 86_400)));
        for bad in ["\"0s\"", "\"forever\"", "90"] {
            let err = Config::parse(&format!("[history]\nkeep = {bad}")).unwrap_err();
            assert!(err.0.contains("keep"), "{bad}: {err}");
        }
        assert!(Config::parse("[history]\nkept = \"1d\"").is_err());
    }

    #[test]
    fn explicit_missing_file_is_an_error_but_default_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope.toml");
        let explicit = ConfigSource {
            path: missing.clone(),
            explicit: true,
        };
        assert!(explicit.load().is_err());
        let implicit = ConfigSource {
            path: missing,
            explicit: false,
        };
        assert_eq!(implicit.load().unwrap(), Config::default());
    }

    #[test]
    fn source_resolution_order() {
        let s =
            ConfigSource::resolve(Some(Path::new("/f.toml")), Some("/e.toml"), Some("/u")).unwrap();
        assert_eq!(
            s,
            ConfigSource {
                path: "/f.toml".into(),
                explicit: true
            }
        );
        let s = ConfigSource::resolve(None, Some("/e.toml"), Some("/u")).unwrap();
        assert_eq!(s.path, PathBuf::from("/e.toml"));
        let s = ConfigSource::resolve(None, None, Some("/u")).unwrap();
        assert_eq!(
            s,
            ConfigSource {
                path: "/u/.config/homebased/config.toml".into(),
                explicit: false
            }
        );
    }
}
