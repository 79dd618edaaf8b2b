//! `daemon start|stop|restart|status`: the background lifecycle, driven through the socket
//! and `daemon.lock`. None of it touches running work, except `stop --yes`, which cancels
//! queued and active jobs first, as asked.

use super::args::DaemonCommand;
use super::Printed;
use crate::client::Client;
use crate::daemon::lock;
use crate::store::{jobs, machine, Store};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::Home;
use homebased_shared::ids::OperationId;
use homebased_shared::wire::{CancelRequest, DaemonStatus, PhaseView};
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

pub fn run(
    cmd: DaemonCommand,
    home: &Home,
    home_flag: &Option<PathBuf>,
    config_flag: &Option<PathBuf>,
) -> ApiResult<Printed> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ApiError::internal)?;
    let client = Client::socket(home.socket());
    rt.block_on(async {
        // While a user service serves this home, its manager starts and stops the daemon.
        if matches!(
            cmd,
            DaemonCommand::Start
                | DaemonCommand::Stop { .. }
                | DaemonCommand::Restart
                | DaemonCommand::Status
        ) {
            if let Some(installed) = super::service::Installed::for_home(home)? {
                return super::service::lifecycle(&cmd, &installed, home, &client).await;
            }
        }
        match cmd {
            DaemonCommand::Serve { .. }
            | DaemonCommand::Install { .. }
            | DaemonCommand::Uninstall { .. } => {
                Err(ApiError::internal("not a background lifecycle verb"))
            }
            DaemonCommand::Status => status(home, &client).await,
            DaemonCommand::Settle => {
                let settled = client.settle().await?;
                let human = format!("settled after {} passes", settled.passes);
                Printed::answer(&settled, vec![], human)
            }
            DaemonCommand::Start => start(home, home_flag, config_flag, &client).await,
            DaemonCommand::Stop { yes } => stop(home, &client, yes).await,
            DaemonCommand::Restart => {
                stop_daemon(home, &client).await?;
                start(home, home_flag, config_flag, &client).await
            }
        }
    })
}

pub(super) fn printed(status: DaemonStatus, headline: &str) -> ApiResult<Printed> {
    let human = format!(
        "{headline}\nsocket {}  pid {}  home {}  web {}  in flight {}  version {}",
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

pub(super) async fn live_status(client: &Client) -> ApiResult<Option<DaemonStatus>> {
    match client.status().await {
        Ok(status) => Ok(Some(status)),
        Err(e) if e.code == ErrorCode::DaemonUnavailable => Ok(None),
        Err(e) => Err(e),
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
        run_dirs: None,
        storage: None,
    })
}

async fn status(home: &Home, client: &Client) -> ApiResult<Printed> {
    match live_status(client).await? {
        Some(s) => printed(s, "daemon is running"),
        None => printed(offline_status(home)?, "daemon is not running"),
    }
}

async fn start(
    home: &Home,
    home_flag: &Option<PathBuf>,
    config_flag: &Option<PathBuf>,
    client: &Client,
) -> ApiResult<Printed> {
    if lock::is_held(home) {
        // A daemon killed a moment ago holds its lock until its last thread is gone: wait
        // that out; a daemon that answers is really running.
        let since = Instant::now();
        while lock::is_held(home) {
            if live_status(client).await?.is_some() || since.elapsed() > LOCK_RELEASE_BOUND {
                return Err(crate::daemon::already_running(home));
            }
            tokio::time::sleep(POLL).await;
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
        return printed(offline_status(home)?, "daemon is not running");
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

/// Asks the daemon to exit and waits until it released the home. Running work goes on.
pub(super) async fn stop_daemon(home: &Home, client: &Client) -> ApiResult<()> {
    match client.shutdown().await {
        Ok(_) => {}
        Err(e) if e.code == ErrorCode::DaemonUnavailable => {}
        Err(e) => return Err(e),
    }
    let started = Instant::now();
    while lock::is_held(home) {
        if started.elapsed() > STOP_BOUND {
            return Err(ApiError::internal(format!(
                "the daemon (pid {:?}) did not exit within {STOP_BOUND:?}",
                lock::recorded_pid(home)
            )));
        }
        tokio::time::sleep(POLL).await;
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
