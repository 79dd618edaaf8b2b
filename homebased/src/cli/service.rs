//! `daemon install|uninstall` (SPEC section 14), and `daemon start|stop|restart|status` while
//! a user service is installed for this home: they then act through the service manager
//! (`systemctl --user`, or `launchctl` on macOS), so that it never restarts the daemon
//! behind the user's back, and say so.
//!
//! - [`unit`]: the pure renderers of the systemd unit and the launchd agent.

pub mod unit;

use super::daemon_ctl::{
    cancel_all_and_drain, in_flight_refusal, live_status, offline_status, poll, printed, released,
    stop_daemon, Lifecycle,
};
use super::Printed;
use crate::client::Client;
use crate::daemon::lock;
use homebased_shared::config::ConfigSource;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::Home;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use unit::ServiceSpec;

/// How long start and restart wait for the service's daemon to answer, and stop for it to
/// release the home.
const BOUND: Duration = Duration::from_secs(30);

/// The user service manager of this platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    pub fn here() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    fn name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }

    /// The unit's name as its manager knows it.
    fn unit_name(self) -> &'static str {
        match self {
            Manager::Systemd => unit::SYSTEMD_UNIT,
            Manager::Launchd => unit::LAUNCHD_LABEL,
        }
    }

    /// `$XDG_CONFIG_HOME/systemd/user/homebased.service` or
    /// `~/Library/LaunchAgents/homebased.daemon.plist`.
    fn unit_path(self) -> ApiResult<PathBuf> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let user_home =
            || var("HOME").ok_or_else(|| ApiError::usage("cannot find the user's home: set HOME"));
        Ok(match self {
            Manager::Systemd => var("XDG_CONFIG_HOME")
                .map_or_else(|| user_home().map(|h| h.join(".config")), Ok)?
                .join("systemd/user")
                .join(unit::SYSTEMD_UNIT),
            Manager::Launchd => user_home()?
                .join("Library/LaunchAgents")
                .join(format!("{}.plist", unit::LAUNCHD_LABEL)),
        })
    }

    fn render(self, spec: &ServiceSpec, home: &Home) -> String {
        match self {
            Manager::Systemd => unit::systemd_unit(spec),
            Manager::Launchd => unit::launchd_plist(spec, &home.daemon_log()),
        }
    }

    fn home_of(self, text: &str) -> Option<PathBuf> {
        match self {
            Manager::Systemd => unit::systemd_unit_home(text),
            Manager::Launchd => unit::launchd_plist_home(text),
        }
    }

    /// The commands of one verb, as argv lists.
    fn commands(self, verb: Verb, unit_path: &Path) -> Vec<Vec<String>> {
        let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let u = self.unit_name();
        match self {
            Manager::Systemd => {
                let ctl = |words: &[&str]| {
                    let mut all = vec!["systemctl", "--user"];
                    all.extend_from_slice(words);
                    argv(&all)
                };
                match verb {
                    Verb::Install => vec![ctl(&["daemon-reload"]), ctl(&["enable", "--now", u])],
                    Verb::Start => vec![ctl(&["start", u])],
                    Verb::Stop => vec![ctl(&["stop", u])],
                    Verb::Restart => vec![ctl(&["restart", u])],
                    Verb::Disable => vec![ctl(&["disable", "--now", u])],
                    Verb::Forget => vec![ctl(&["daemon-reload"])],
                    Verb::State => vec![ctl(&["is-active", u])],
                }
            }
            Manager::Launchd => {
                let domain = format!("gui/{}", nix::unistd::getuid());
                let target = format!("{domain}/{u}");
                let plist = unit_path.display().to_string();
                match verb {
                    Verb::Install | Verb::Start => {
                        vec![argv(&["launchctl", "bootstrap", &domain, &plist])]
                    }
                    Verb::Stop | Verb::Disable => vec![argv(&["launchctl", "bootout", &target])],
                    Verb::Restart => vec![argv(&["launchctl", "kickstart", "-k", &target])],
                    Verb::Forget => vec![],
                    Verb::State => vec![argv(&["launchctl", "print", &target])],
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Verb {
    Install,
    Start,
    Stop,
    Restart,
    Disable,
    /// After the unit file is removed.
    Forget,
    State,
}

/// A unit file that exists, and the home it serves (`None`: it names none).
#[derive(Debug)]
pub struct Installed {
    manager: Manager,
    path: PathBuf,
    home: Option<PathBuf>,
}

impl Installed {
    /// The unit file of this user, if there is one.
    fn find() -> ApiResult<Option<Installed>> {
        let manager = Manager::here();
        let path = manager.unit_path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(Installed {
                manager,
                home: manager.home_of(&text),
                path,
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ApiError::internal(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// The unit installed for this very home, if any: the one `daemon start|stop|restart`
    /// then go through.
    pub fn for_home(home: &Home) -> ApiResult<Option<Installed>> {
        Ok(Installed::find()?.filter(|u| u.home.as_deref() == Some(home.root())))
    }

    fn serves(&self, home: &Home) -> bool {
        self.home.as_deref() == Some(home.root())
    }

    /// `resource_conflict` for a unit that serves another home (or names none).
    fn conflict(&self) -> ApiError {
        let other = self
            .home
            .as_ref()
            .map_or_else(|| "no homebased home".into(), |h| h.display().to_string());
        ApiError::new(
            ErrorCode::ResourceConflict,
            format!(
                "{} is installed for {other}; uninstall it from that home first",
                self.path.display()
            ),
        )
        .with_input(json!({ "unit_path": self.path, "installed_home": self.home }))
    }

    /// `active`, `inactive`, `failed`, ... as the manager says.
    fn state(&self) -> String {
        let Some(argv) = self
            .manager
            .commands(Verb::State, &self.path)
            .into_iter()
            .next()
        else {
            return "unknown".into();
        };
        let Ok(out) = Command::new(&argv[0]).args(&argv[1..]).output() else {
            return "unknown".into();
        };
        match self.manager {
            Manager::Systemd => {
                let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if state.is_empty() {
                    "unknown".into()
                } else {
                    state
                }
            }
            Manager::Launchd if out.status.success() => "loaded".into(),
            Manager::Launchd => "not loaded".into(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} unit {} ({})",
            self.manager.name(),
            self.manager.unit_name(),
            self.path.display()
        )
    }
}

/// Runs one service-manager command; a failure is an `internal` error naming it.
fn run_command(argv: &[String]) -> ApiResult<()> {
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| ApiError::internal(format!("cannot run {}: {e}", argv[0])))?;
    if out.status.success() {
        return Ok(());
    }
    Err(ApiError::internal(format!(
        "`{}` failed ({}): {}",
        argv.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

fn run_all(commands: &[Vec<String>]) -> ApiResult<()> {
    commands.iter().try_for_each(|argv| run_command(argv))
}

fn shown(commands: &[Vec<String>]) -> String {
    commands
        .iter()
        .map(|c| format!("\nran: {}", c.join(" ")))
        .collect()
}

/// What the service will run, from this invocation: the running binary, the absolute home,
/// the config only when one was named (`--config` or `HOMEBASED_CONFIG`), and `PATH`.
fn service_spec(
    home: &Home,
    config: Option<&ConfigSource>,
    web_listen: Option<String>,
) -> ApiResult<ServiceSpec> {
    let exe = std::env::current_exe().map_err(ApiError::internal)?;
    let config = config
        .filter(|c| c.explicit)
        .map(|c| std::path::absolute(&c.path))
        .transpose()
        .map_err(ApiError::internal)?;
    let spec = ServiceSpec {
        exe,
        home: home.root().to_path_buf(),
        config,
        web_listen,
        path_env: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
    };
    if spec.argv().iter().any(|a| a.contains('\n')) || spec.path_env.contains('\n') {
        return Err(ApiError::usage(
            "a path with a newline cannot be written into a service unit",
        ));
    }
    Ok(spec)
}

/// `daemon install [--dry-run] [--web-listen ADDR]`.
pub async fn install(
    home: &Home,
    config: Option<&ConfigSource>,
    dry_run: bool,
    web_listen: Option<String>,
    client: &Client,
) -> ApiResult<Printed> {
    let manager = Manager::here();
    let unit_path = manager.unit_path()?;
    let spec = service_spec(home, config, web_listen)?;
    let text = manager.render(&spec, home);
    if let Some(existing) = Installed::find()? {
        if !existing.serves(home) {
            return Err(existing.conflict());
        }
    }
    let commands = manager.commands(Verb::Install, &unit_path);
    if dry_run {
        let json = super::versioned(json!({
            "unit_path": unit_path,
            "unit": text,
            "commands": commands,
        }));
        let human = format!(
            "would write {}:\n{text}\nwould run:\n{}",
            unit_path.display(),
            commands
                .iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return Ok(Printed::new(json, vec![], human));
    }
    let mut notes = String::new();
    if live_status(client).await?.is_some() {
        // The service starts its own daemon; a second one for this home would exit at once.
        stop_daemon(home, client).await?;
        notes.push_str("\nstopped the daemon started outside the service (runs go on)");
    }
    write_unit(&unit_path, &text)?;
    run_all(&commands)?;
    let status = wait_up(client, None).await?;
    let warnings = linger_warnings(manager);
    let installed = Installed {
        manager,
        path: unit_path.clone(),
        home: Some(home.root().to_path_buf()),
    };
    let mut human = format!(
        "installed {}{notes}{}",
        installed.describe(),
        shown(&commands)
    );
    for w in &warnings {
        human.push_str(&format!("\nwarning: {w}"));
    }
    let mut out = with_service(printed(status, &human)?, &installed);
    out.json["unit_path"] = json!(unit_path);
    out.json["unit"] = json!(text);
    out.json["commands"] = json!(commands);
    out.json["warnings"] = json!(warnings);
    Ok(out)
}

/// Writes the unit beside its final path, then renames it there.
fn write_unit(path: &Path, text: &str) -> ApiResult<()> {
    let fail =
        |e: std::io::Error| ApiError::internal(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let staging = path.with_extension("homebased-new");
    std::fs::write(&staging, text).map_err(fail)?;
    std::fs::rename(&staging, path).map_err(fail)
}

/// Without lingering, systemd stops the user's services, the daemon included, at logout.
fn linger_warnings(manager: Manager) -> Vec<String> {
    if manager != Manager::Systemd {
        return vec![];
    }
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_default();
    let out = Command::new("loginctl")
        .args(["show-user", &user, "-p", "Linger"])
        .output();
    let enable = format!("`loginctl enable-linger {user}`");
    match out {
        Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "Linger=yes" => vec![],
        Ok(o) if o.status.success() => vec![format!(
            "lingering is off for {user}: the service stops at logout; run {enable}"
        )],
        _ => vec![format!(
            "cannot tell whether lingering is on for {user}; without it the service stops at \
             logout ({enable} turns it on)"
        )],
    }
}

/// `daemon uninstall [--yes]`: refuses with work in flight like `daemon stop`, then disables
/// and removes the unit.
pub async fn uninstall(home: &Home, yes: bool, client: &Client) -> ApiResult<Printed> {
    let Some(installed) = Installed::find()? else {
        let status = offline_or_live(home, client).await?;
        return printed(status, "no user service is installed");
    };
    if !installed.serves(home) {
        return Err(installed.conflict());
    }
    drain_or_refuse(home, client, yes).await?;
    let mut commands = installed.manager.commands(Verb::Disable, &installed.path);
    run_all(&commands)?;
    wait_released(home).await?;
    std::fs::remove_file(&installed.path).map_err(|e| {
        ApiError::internal(format!("cannot remove {}: {e}", installed.path.display()))
    })?;
    let forget = installed.manager.commands(Verb::Forget, &installed.path);
    run_all(&forget)?;
    commands.extend(forget);
    let human = format!(
        "uninstalled {}{}\nthe daemon is stopped; `homebased daemon start` starts it by hand",
        installed.describe(),
        shown(&commands)
    );
    let mut out = printed(offline_status(home)?, &human)?;
    out.json["unit_path"] = json!(installed.path);
    out.json["commands"] = json!(commands);
    Ok(out)
}

/// `jobs_in_flight` unless `yes`, which cancels the jobs and waits for their cleanup.
async fn drain_or_refuse(home: &Home, client: &Client, yes: bool) -> ApiResult<()> {
    let in_flight = match live_status(client).await? {
        Some(s) => s.in_flight,
        None => offline_status(home)?.in_flight,
    };
    if in_flight == 0 {
        return Ok(());
    }
    if !yes {
        return Err(in_flight_refusal(in_flight));
    }
    if live_status(client).await?.is_some() {
        cancel_all_and_drain(client).await?;
    }
    Ok(())
}

async fn offline_or_live(
    home: &Home,
    client: &Client,
) -> ApiResult<homebased_shared::wire::DaemonStatus> {
    match live_status(client).await? {
        Some(s) => Ok(s),
        None => offline_status(home),
    }
}

/// `daemon start|stop|restart|status` through the service manager of `installed`.
pub async fn lifecycle(
    verb: Lifecycle,
    installed: &Installed,
    home: &Home,
    client: &Client,
) -> ApiResult<Printed> {
    let via = format!("through {}", installed.describe());
    let act = |verb| {
        let commands = installed.manager.commands(verb, &installed.path);
        run_all(&commands).map(|()| shown(&commands))
    };
    let out = match verb {
        Lifecycle::Start => {
            let ran = act(Verb::Start)?;
            let status = wait_up(client, None).await?;
            printed(status, &format!("daemon started {via}{ran}"))?
        }
        Lifecycle::Stop { yes } => {
            drain_or_refuse(home, client, yes).await?;
            let ran = act(Verb::Stop)?;
            wait_released(home).await?;
            printed(offline_status(home)?, &format!("daemon stopped {via}{ran}"))?
        }
        Lifecycle::Restart => {
            let old = live_status(client).await?.and_then(|s| s.pid);
            let ran = act(Verb::Restart)?;
            let status = wait_up(client, old).await?;
            printed(status, &format!("daemon restarted {via}{ran}"))?
        }
        Lifecycle::Status => match live_status(client).await? {
            Some(s) => printed(s, "daemon is running")?,
            None => printed(offline_status(home)?, "daemon is not running")?,
        },
    };
    Ok(with_service(out, installed))
}

/// Adds the unit and its state to a status (`"service"` in JSON, a line for a person).
fn with_service(mut out: Printed, installed: &Installed) -> Printed {
    let state = installed.state();
    out.human.push_str(&format!(
        "\nservice {} {}: {state} ({})",
        installed.manager.name(),
        installed.manager.unit_name(),
        installed.path.display()
    ));
    let service: Value = json!({
        "manager": installed.manager.name(),
        "unit": installed.manager.unit_name(),
        "unit_path": installed.path,
        "state": state,
    });
    out.json["service"] = service;
    out
}

/// Waits until a daemon answers (one whose pid is not `old`, when given).
async fn wait_up(
    client: &Client,
    old: Option<u32>,
) -> ApiResult<homebased_shared::wire::DaemonStatus> {
    let new = || async move {
        let up = live_status(client).await?;
        Ok(up.filter(|s| old.is_none() || s.pid != old))
    };
    poll(BOUND, new).await?.ok_or_else(|| {
        ApiError::internal(format!(
            "the service's daemon did not answer within {BOUND:?}; see the service \
             manager's log (journalctl --user -u {})",
            unit::SYSTEMD_UNIT
        ))
    })
}

async fn wait_released(home: &Home) -> ApiResult<()> {
    if released(home, BOUND).await? {
        return Ok(());
    }
    Err(ApiError::internal(format!(
        "the daemon (pid {:?}) did not exit within {BOUND:?}",
        lock::recorded_pid(home)
    )))
}
