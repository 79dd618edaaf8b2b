//! `daemon start|stop|restart|status`: the background lifecycle, driven through the socket
//! and `daemon.lock`. None of it touches running work, except `stop --yes`, which cancels
//! queued and active jobs first, as asked.
//!
//! It knows nothing of service managers: `cli::service` builds on it (its status lines, the
//! drain, the one wait), and `cli` picks which of the two serves a verb.

use super::Printed;
use crate::client::Client;
use crate::daemon::lock;
use crate::store::{jobs, machine, Store};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::Home;
use homebased_shared::ids::OperationId;
use homebased_shared::wire::{CancelRequest, DaemonDown, DaemonStatus, PhaseView};
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const START_BOUND: Duration = Duration::from_secs(30);
const STOP_BOUND: Duration = Duration::from_secs(30);
/// `stop --yes` waits this long for cancelled runs to finish their cleanup.
const DRAIN_BOUND: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(50);
/// How long `start` waits for the lock of a daemon that no longer answers.
const LOCK_RELEASE_BOUND: Duration = Duration::from_secs(2);
/// How long `status`, `start`, `stop` and `restart` wait for the socket's answer before they
/// read the home's files instead: `status` answers within 5 s of a hung daemon (SPEC 2).
const PROBE_BOUND: Duration = Duration::from_secs(2);

/// The background lifecycle verbs: run here, or through an installed service's manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Start,
    Stop { yes: bool },
    Restart,
    Status,
}

/// A lifecycle verb without a service manager: this CLI starts and stops the daemon itself.
pub async fn run(
    verb: Lifecycle,
    home: &Home,
    home_flag: &Option<PathBuf>,
    config_flag: &Option<PathBuf>,
    client: &Client,
) -> ApiResult<Printed> {
    match verb {
        Lifecycle::Status => status(home, client).await,
        Lifecycle::Start => start(home, home_flag, config_flag, client).await,
        Lifecycle::Stop { yes } => stop(home, client, yes).await,
        Lifecycle::Restart => {
            stop_daemon(home, client).await?;
            start(home, home_flag, config_flag, client).await
        }
    }
}

/// `daemon settle` (hidden, for tests): the daemon's passes until nothing changes.
pub async fn settle(client: &Client) -> ApiResult<Printed> {
    let settled = client.settle().await?;
    let human = format!("settled after {} passes", settled.passes);
    Printed::answer(&settled, vec![], human)
}

/// Asks `check` every [`POLL`] until it answers `Some`, or `bound` has passed since the first
/// ask (`None`): the one wait of start, stop and the service manager's verbs.
pub(super) async fn poll<T, F, Fut>(bound: Duration, mut check: F) -> ApiResult<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ApiResult<Option<T>>>,
{
    let started = Instant::now();
    loop {
        if let Some(found) = check().await? {
            return Ok(Some(found));
        }
        if started.elapsed() > bound {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits up to `bound` for the daemon to release the home's lock; false when it still holds it.
pub(super) async fn released(home: &Home, bound: Duration) -> ApiResult<bool> {
    let free = poll(bound, || async { Ok((!lock::is_held(home)).then_some(())) }).await?;
    Ok(free.is_some())
}

pub(super) fn printed(status: DaemonStatus, headline: &str) -> ApiResult<Printed> {
    let human = format!(
        "{headline}\nsocket {}  pid {}  home {}  web {}  jobs queued or active {}  version {}",
        status.socket,
        status.pid.map_or_else(|| "-".into(), |p| p.to_string()),
        status.home,
        status.web.as_deref().unwrap_or("off"),
        status.in_flight,
        status.version
    );
    let human = match &status.run_dirs {
        None => human,
        Some(u) => format!(
            "{human}\n{}",
            run_dirs_line(u, homebased_shared::time::now_ms())
        ),
    };
    let human = match &status.storage {
        Some(s) if !s.available => format!(
            "{human}\nstorage unavailable{}: launches wait: {}",
            s.since.map_or_else(String::new, |since| format!(
                " for {}",
                super::render::age(homebased_shared::time::now_ms() - since)
            )),
            s.error
                .as_deref()
                .unwrap_or("a run directory could not be made")
        ),
        _ => human,
    };
    let ids = status.pid.map(|p| p.to_string()).into_iter().collect();
    Printed::answer(&status, ids, human)
}

/// The disk used by run and job directories, and how old that measure is.
fn run_dirs_line(
    u: &homebased_shared::wire::RunDirUsage,
    now: homebased_shared::time::Millis,
) -> String {
    let age =
        std::time::Duration::from_secs(u64::try_from((now - u.measured_at) / 1000).unwrap_or(0));
    format!(
        "run directories {:.1} MiB in {} directories (measured {} ago)",
        u.bytes as f64 / (1024.0 * 1024.0),
        u.dirs,
        humantime::format_duration(age)
    )
}

/// The daemon's own status, or `None` when it does not answer within [`PROBE_BOUND`].
pub(super) async fn live_status(client: &Client) -> ApiResult<Option<DaemonStatus>> {
    match client.clone().with_deadline(PROBE_BOUND).status().await {
        Ok(status) => Ok(Some(status)),
        Err(e) if e.code == ErrorCode::DaemonUnavailable => Ok(None),
        Err(e) => Err(e),
    }
}

/// Why no daemon answered: read from `daemon.lock` and the socket path, never by waiting.
fn why_silent(home: &Home) -> (DaemonDown, Option<u32>) {
    use std::os::unix::fs::FileTypeExt;
    if !lock::is_held(home) {
        return (DaemonDown::Stopped, None);
    }
    let socket = std::fs::symlink_metadata(home.socket());
    let why = match socket {
        Ok(meta) if meta.file_type().is_socket() => DaemonDown::Unresponsive,
        _ => DaemonDown::SocketMissing,
    };
    (why, lock::recorded_pid(home))
}

/// The headline and the status of a daemon that did not answer.
fn silent_status(home: &Home) -> ApiResult<(DaemonStatus, String)> {
    let (why, pid) = why_silent(home);
    let mut status = offline_status(home)?;
    status.pid = pid;
    status.daemon = Some(why);
    Ok((status, silent_headline(home, why, pid)))
}

fn silent_headline(home: &Home, why: DaemonDown, pid: Option<u32>) -> String {
    let who = pid.map_or_else(|| "a daemon".into(), |p| format!("a daemon (pid {p})"));
    match why {
        DaemonDown::Stopped => "daemon is not running".into(),
        DaemonDown::Unresponsive => format!(
            "{who} holds {} but does not answer on its socket within {}s: it may be stopped \
             (SIGSTOP) or hung; `homebased daemon restart` replaces it (running work is not \
             touched)",
            home.daemon_lock().display(),
            PROBE_BOUND.as_secs()
        ),
        DaemonDown::SocketMissing => format!(
            "{who} is running but its socket {} is gone; `homebased daemon restart` brings it \
             back (running work is not touched)",
            home.socket().display()
        ),
    }
}

/// The status read from the database while no daemon answers.
pub(super) fn offline_status(home: &Home) -> ApiResult<DaemonStatus> {
    let (in_flight, machine) = match Store::open_read_only(&home.database())? {
        None => (0, None),
        Some(store) => (
            jobs::count_in_flight(store.db())?,
            machine::get(store.db())?,
        ),
    };
    Ok(DaemonStatus {
        socket: "down".into(),
        pid: None,
        home: home.root().display().to_string(),
        web: None,
        in_flight,
        version: env!("CARGO_PKG_VERSION").into(),
        machine,
        name: None,
        run_dirs: None,
        daemon: Some(DaemonDown::Stopped),
        storage: None,
    })
}

async fn status(home: &Home, client: &Client) -> ApiResult<Printed> {
    match live_status(client).await? {
        Some(s) => printed(s, "daemon is running"),
        None => {
            let (status, headline) = silent_status(home)?;
            printed(status, &headline)
        }
    }
}

async fn start(
    home: &Home,
    home_flag: &Option<PathBuf>,
    config_flag: &Option<PathBuf>,
    client: &Client,
) -> ApiResult<Printed> {
    if lock::is_held(home) {
        if live_status(client).await?.is_some() {
            return Err(crate::daemon::already_running(home));
        }
        // A daemon killed a moment ago holds its lock until its last thread is gone: wait
        // that out. One that still holds it runs without answering: say so.
        if !released(home, LOCK_RELEASE_BOUND).await? {
            let (why, pid) = why_silent(home);
            let mut refusal = crate::daemon::already_running(home);
            refusal.message = silent_headline(home, why, pid);
            return Err(refusal);
        }
    }
    home.create()
        .map_err(|e| ApiError::internal(format!("cannot create the home: {e}")))?;
    let log = home.open_daemon_log().map_err(|e| {
        ApiError::internal(format!("cannot open {}: {e}", home.daemon_log().display()))
    })?;
    let log_err = log.try_clone().map_err(ApiError::internal)?;
    let exe = std::env::current_exe().map_err(ApiError::internal)?;
    let mut cmd = Command::new(exe);
    cmd.arg("--home").arg(
        home_flag
            .clone()
            .unwrap_or_else(|| home.root().to_path_buf()),
    );
    if let Some(c) = config_flag {
        cmd.arg("--config").arg(c);
    }
    cmd.args(["daemon", "serve"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    // SAFETY: setsid is async-signal-safe; the daemon leaves the caller's session so that
    // closing the terminal does not signal it.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ApiError::internal(format!("cannot start the daemon: {e}")))?;
    let started = Instant::now();
    while started.elapsed() < START_BOUND {
        if let Some(exit) = child.try_wait().map_err(ApiError::internal)? {
            if exit.code() == Some(ErrorCode::DaemonAlreadyRunning.exit_code()) {
                return Err(crate::daemon::already_running(home));
            }
            return Err(ApiError::internal(format!(
                "the daemon exited with {exit} during start; see {}",
                home.daemon_log().display()
            )));
        }
        if let Some(s) = live_status(client).await? {
            return printed(s, "daemon started");
        }
        tokio::time::sleep(POLL).await;
    }
    Err(ApiError::internal(format!(
        "the daemon did not answer within {START_BOUND:?}; see {}",
        home.daemon_log().display()
    )))
}

/// `1 job is queued or active`, `3 jobs are queued or active`.
fn jobs_in_flight(n: u64) -> String {
    match n {
        1 => "1 job is queued or active".into(),
        n => format!("{n} jobs are queued or active"),
    }
}

async fn stop(home: &Home, client: &Client, yes: bool) -> ApiResult<Printed> {
    let Some(status) = live_status(client).await? else {
        let (status, headline) = silent_status(home)?;
        if status.daemon == Some(DaemonDown::Stopped) {
            return printed(status, &headline);
        }
        // It runs without answering: the same rule from the store, then SIGTERM to the pid
        // of `daemon.lock` (a daemon's clean exit; running work goes on).
        if status.in_flight > 0 {
            if !yes {
                return Err(in_flight_refusal(status.in_flight));
            }
            return Err(ApiError::new(
                ErrorCode::DaemonUnavailable,
                format!(
                    "{headline}; --yes cannot cancel jobs through a daemon that does not \
                     answer: restart it first"
                ),
            )
            .with_input(json!({ "pid": status.pid })));
        }
        stop_daemon(home, client).await?;
        return printed(offline_status(home)?, "daemon stopped");
    };
    if status.in_flight > 0 {
        if !yes {
            return Err(in_flight_refusal(status.in_flight));
        }
        cancel_all_and_drain(client).await?;
    }
    stop_daemon(home, client).await?;
    printed(offline_status(home)?, "daemon stopped")
}

/// `jobs_in_flight`: what `stop` and `uninstall` answer without `--yes`.
pub(super) fn in_flight_refusal(in_flight: u64) -> ApiError {
    let them = if in_flight == 1 { "it" } else { "them" };
    ApiError::new(
        ErrorCode::JobsInFlight,
        format!(
            "{}; let {them} finish, or pass --yes to cancel {them} and wait for the cleanup",
            jobs_in_flight(in_flight),
        ),
    )
    .with_input(json!({ "in_flight": in_flight }))
}

pub(super) async fn cancel_all_and_drain(client: &Client) -> ApiResult<()> {
    let list = client.job_list(None).await?.decode()?;
    for job in list.jobs {
        let req = CancelRequest {
            operation_id: OperationId::new(),
        };
        match client.job_cancel(job.id, None, &req).await {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::JobNotFound => {}
            Err(e) => return Err(e),
        }
    }
    let started = Instant::now();
    loop {
        let resources = client.resource_list(None).await?.decode()?;
        let busy = resources.resources.iter().any(|r| {
            r.run
                .as_ref()
                .is_some_and(|run| !matches!(run.phase, PhaseView::Attention { .. }))
        });
        if !busy {
            return Ok(());
        }
        if started.elapsed() > DRAIN_BOUND {
            return Err(ApiError::internal(
                "cancelled runs did not finish their cleanup in time",
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asks the daemon to exit and waits until it released the home. Running work goes on. A
/// daemon that does not answer on its socket (gone, stopped, hung) gets SIGTERM at the pid
/// of `daemon.lock` instead, which it handles as `daemon stop`.
pub(super) async fn stop_daemon(home: &Home, client: &Client) -> ApiResult<()> {
    let asked = match client.clone().with_deadline(PROBE_BOUND).shutdown().await {
        Ok(_) => true,
        Err(e) if e.code == ErrorCode::DaemonUnavailable => false,
        Err(e) => return Err(e),
    };
    if !asked && lock::is_held(home) {
        // The holder of the lock wrote its pid; a pid that is gone by now is fine. Never 0 or
        // 1: kill(0) would signal our own process group.
        let pid = lock::recorded_pid(home)
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 1);
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    if !released(home, STOP_BOUND).await? {
        let pid = lock::recorded_pid(home);
        return Err(ApiError::new(
            ErrorCode::DaemonUnavailable,
            format!(
                "the daemon (pid {}) did not exit within {}s: if it is stopped, `kill \
                 -CONT` it; killing it does not touch running work",
                pid.map_or_else(|| "?".into(), |p| p.to_string()),
                STOP_BOUND.as_secs()
            ),
        )
        .with_input(json!({ "pid": pid })));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_job_in_flight_is_one_job() {
        assert_eq!(super::jobs_in_flight(1), "1 job is queued or active");
        assert_eq!(super::jobs_in_flight(2), "2 jobs are queued or active");
    }
}
