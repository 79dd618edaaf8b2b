//! `homebased daemon serve`: one daemon per state home. It takes `daemon.lock` before it
//! touches anything, checks the store read-only (a damaged one is refused), opens it,
//! detects GPUs, starts the core, and serves the API on the Unix socket (and, when asked, the
//! TCP listener) until SIGTERM, SIGINT or `daemon stop`. Running work never depends on it.
//!
//! # Layout
//! - [`lock`]: `daemon.lock`, held for the daemon's whole life.
//! - [`detect`]: GPU detection at start (the probe; the plan is [`crate::detection`]).
//! - [`sampling`]: the GPU sampler thread (the pure reading is [`crate::sampler`]).
//! - [`disk_usage`]: the walk behind `daemon status`'s disk figure.

pub mod detect;
pub mod disk_usage;
pub mod lock;
pub mod sampling;

use crate::api::{self, Listener};
use crate::clock::Clock;
use crate::core::{Core, CoreHandle, DaemonFacts};
use crate::store::Store;
use crate::supervisor::launcher::{Observer, Supervisor, WorkerEvent};
use homebased_shared::config::{Config, ConfigSource};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::Home;
use std::net::SocketAddr;

pub struct ServeOptions {
    pub home: Home,
    pub config: Config,
    pub config_source: Option<ConfigSource>,
    /// `--web-listen`: an address, `off`, or `None` for the config's `[web] listen`.
    pub web_listen: Option<String>,
    /// `--drain-within`: how long a drain on SIGUSR1 waits for the runs (`core::drain`).
    pub drain_within: std::time::Duration,
}

/// How a daemon's serving ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// SIGTERM, SIGINT: stop at once, running work goes on without the daemon.
    Stop,
    /// SIGUSR1, the signal before an allocation ends: drain (`core::drain`), waiting at most
    /// `within` for the runs to end, then stop.
    Drain { within: std::time::Duration },
}

/// Which TCP address to serve, if any: the flag wins over the config.
pub fn web_address(flag: Option<&str>, config: &Config) -> ApiResult<Option<SocketAddr>> {
    match flag {
        Some("off") => Ok(None),
        Some(addr) => addr.parse().map(Some).map_err(|_| {
            ApiError::usage(format!(
                "--web-listen: {addr:?} is not an address like 127.0.0.1:7677 or off"
            ))
        }),
        None => Ok(config.web.listen),
    }
}

pub fn serve(opts: ServeOptions) -> ApiResult<()> {
    // Before any thread exists: a daemon started from inside a run must not carry that run's
    // marker, or the run's cleanup would take the daemon and its workers for the run's own.
    for name in homebased_shared::rundir::PER_RUN_VARIABLES {
        std::env::remove_var(name);
    }
    init_logging();
    // Both listeners' connection slots need more descriptors than many systems' default.
    match api::limits::raise_open_files() {
        Ok(n) if n < api::limits::WANTED_OPEN_FILES => {
            tracing::warn!(
                limit = n,
                "the open-files limit is low; connections may be refused"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-files limit"),
    }
    let web = web_address(opts.web_listen.as_deref(), &opts.config)?;
    fleet_needs_listener(&opts.config, web)?;
    open_listener_needs_token(&opts.config, web)?;
    opts.home.create().map_err(|e| {
        ApiError::internal(format!("cannot create {}: {e}", opts.home.root().display()))
    })?;
    // First the lock: a second daemon leaves everything exactly as it found it.
    let mut daemon_lock = lock::DaemonLock::acquire(&opts.home)?;
    // Then the check, before anything writes: a damaged store is refused as it was found.
    let database = opts.home.database();
    if crate::store::integrity::sealed_and_unchanged(&database) {
        tracing::info!("store unchanged since its daemon closed it cleanly: full check skipped");
    } else if let Some(checked) = crate::store::integrity::check(&database)? {
        tracing::info!(
            bytes = checked.bytes,
            elapsed_ms = checked.elapsed.as_secs_f64() * 1000.0,
            "store checked"
        );
    }
    daemon_lock.record_pid();
    crate::store::integrity::break_seal(&database)?;
    // The one clock of the store, the core and everything else the daemon starts.
    let clock = Clock::system();
    let mut store = Store::open(&opts.home.database(), clock.clone())?;
    let lanes_from = detect::detect(&mut store)?;
    let facts = DaemonFacts {
        pid: std::process::id(),
        web: web.map(|w| w.to_string()),
        lanes_from: Some(lanes_from),
    };
    let core = Core::new(
        store,
        opts.home.clone(),
        opts.config.clone(),
        facts,
        |core| Box::new(Supervisor::start(&opts.home, clock.clone(), observer(core))),
    )?;
    if cfg!(target_os = "linux") {
        sampling::spawn(
            core.handle(),
            clock.clone(),
            opts.home.clone(),
            detect::probe_program(),
            core.resources_read_at(),
        );
    }
    disk_usage::spawn(opts.home.clone(), clock, core.run_dir_usage());
    tracing::info!(
        home = %opts.home.root().display(),
        machine = %core.machine(),
        config = ?opts.config_source.as_ref().map(|s| &s.path),
        "daemon starting"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ApiError::internal)?;
    let result = runtime.block_on(async move {
        let listeners = Listeners::bind(&opts.home, web).await?;
        run(core, listeners, signals(opts.drain_within)).await
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    // The core thread has closed the store: a clean close is sealed, so that the next start
    // need not read every page again (store::integrity).
    if result.is_ok() {
        crate::store::integrity::seal(&database);
    }
    tracing::info!("daemon stopped; running work continues on its own");
    result
}

/// The supervisor's observer, wired to the core: a worker gone, or the cleanup after a lost
/// one done, has the core observe the run again, its worker gone. Posted, never waited on:
/// the watcher and cleanup threads must not block on the core.
fn observer(core: CoreHandle) -> Observer {
    std::sync::Arc::new(move |event| {
        let (WorkerEvent::WorkerGone { task } | WorkerEvent::LostCleanupDone { task }) = event;
        core.observe(task, true);
    })
}

/// Fleet is reached through the TCP listener: enabled without one is `config_invalid`.
pub fn fleet_needs_listener(config: &Config, web: Option<SocketAddr>) -> ApiResult<()> {
    if config.fleet.enabled && web.is_none() {
        return Err(ApiError::new(
            ErrorCode::ConfigInvalid,
            "fleet.enabled needs a TCP listener: set [web] listen (or --web-listen)",
        ));
    }
    Ok(())
}

/// A listener that other machines can reach serves move, cancel and release: it needs a
/// token to guard them (SPEC 11), the web token or the Fleet token.
pub fn open_listener_needs_token(config: &Config, web: Option<SocketAddr>) -> ApiResult<()> {
    match web {
        Some(addr)
            if !addr.ip().is_loopback()
                && config.web.token.is_none()
                && config.fleet.token.is_none() =>
        {
            Err(ApiError::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "the web listener {addr} is reachable from other machines and has no \
                     token to guard its writes: set [web] token (or [fleet] token), or \
                     listen on 127.0.0.1"
                ),
            )
            .with_input(serde_json::json!({ "listen": addr.to_string() })))
        }
        _ => Ok(()),
    }
}

/// What a daemon serves on, bound before it starts.
pub struct Listeners {
    /// `<home>/homebased.sock`: every route, same-uid peers only.
    pub socket: tokio::net::UnixListener,
    /// The optional TCP listener with its Host and same-origin guards.
    pub web: Option<tokio::net::TcpListener>,
    /// `<home>/poke.sock`: workers' hints that a run directory changed.
    pub pokes: tokio::net::UnixDatagram,
}

impl Listeners {
    pub async fn bind(home: &Home, web: Option<SocketAddr>) -> ApiResult<Listeners> {
        let socket = api::unix::bind(&home.socket()).map_err(|e| {
            ApiError::internal(format!("cannot bind {}: {e}", home.socket().display()))
        })?;
        let path = home.poke_socket();
        api::unix::remove_stale_socket(&path)
            .map_err(|e| ApiError::internal(format!("cannot bind {}: {e}", path.display())))?;
        let pokes = tokio::net::UnixDatagram::bind(&path)
            .map_err(|e| ApiError::internal(format!("cannot bind {}: {e}", path.display())))?;
        let web = match web {
            None => None,
            Some(addr) => Some(
                api::tcp::bind(addr)
                    .await
                    .map_err(|e| ApiError::internal(format!("cannot listen on {addr}: {e}")))?,
            ),
        };
        Ok(Listeners { socket, web, pokes })
    }
}

/// SIGTERM or SIGINT: stop; SIGUSR1: drain, waiting at most `drain_within`.
async fn signals(drain_within: std::time::Duration) -> Ending {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut usr1) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::user_defined1()),
    ) {
        (Ok(term), Ok(usr1)) => (term, usr1),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot watch SIGTERM and SIGUSR1");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {
            tracing::info!("SIGTERM: shutting down");
            Ending::Stop
        }
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("SIGINT: shutting down");
            Ending::Stop
        }
        _ = usr1.recv() => {
            tracing::warn!(within = ?drain_within, "SIGUSR1: draining before the allocation ends");
            Ending::Drain { within: drain_within }
        }
    }
}

/// A drain (`core::drain`): no run starts, every run is asked to yield or stop; returns once
/// none is left, or after `within`, or when the core stops answering.
async fn drain(handle: &crate::core::CoreHandle, within: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + within;
    let mut left = match handle.drain().await {
        Ok(left) => left,
        Err(e) => {
            tracing::error!(error = %e, "cannot drain: shutting down");
            return;
        }
    };
    while left > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = match handle.runs_left().await {
            Ok(left) => left,
            Err(e) => {
                tracing::error!(error = %e, "cannot count the runs left to drain: shutting down");
                return;
            }
        };
    }
    if left == 0 {
        tracing::info!("drained: every run ended, the queue is kept; shutting down");
    } else {
        tracing::warn!(left, within = ?within, "drain: runs still going after the time given; shutting down, they end with the allocation");
    }
}

/// Runs a daemon around `core` on `listeners` until `shutdown` resolves, `daemon stop` is
/// asked for, or the core thread ends (a daemon whose core is gone must not keep its lock
/// and answer "shutting down" forever: it exits, and running work goes on without it).
/// Everything process-wide (the lock, logging, signals, the runtime) is the caller's, so
/// tests start a real daemon in-process on a temporary home.
pub async fn run(
    core: Core,
    listeners: Listeners,
    shutdown: impl std::future::Future<Output = Ending>,
) -> ApiResult<()> {
    let home = core.home().clone();
    let config = core.config().clone();
    let web = listeners.web.as_ref().and_then(|l| l.local_addr().ok());
    fleet_needs_listener(&config, web)?;
    open_listener_needs_token(&config, web)?;
    let delivery_wake = core.delivery_wake();
    let clock = core.clock().clone();
    let crate::core::CoreThread {
        handle,
        stop: core_stop,
        thread: core_thread,
        ended: core_gone,
    } = core.spawn().map_err(ApiError::internal)?;
    let (stop_tx, mut stop_rx) = tokio::sync::mpsc::unbounded_channel();
    let draining = handle.clone();
    let shutdown = async move {
        tokio::select! {
            ending = shutdown => {
                if let Ending::Drain { within } = ending {
                    drain(&draining, within).await;
                }
            }
            _ = stop_rx.recv() => tracing::info!("daemon stop requested"),
            _ = core_gone => tracing::error!("the core thread ended: shutting down"),
        }
    };
    let pokes = tokio::spawn(forward_pokes(listeners.pokes, handle.clone()));
    let fleet = crate::fleet::Fleet::load(
        handle.clone(),
        &config.fleet,
        web.map(|w| format!("http://{w}")),
    )
    .await?;
    // Probing is a task of its own: a slow peer never holds up the core or a request.
    let probes = tokio::spawn(fleet.clone().probe_forever());
    // Events of this machine's remote jobs come back from their authorities on its own task.
    let pulls = tokio::spawn(crate::fleet::pull::pull_forever(
        fleet.clone(),
        handle.clone(),
    ));
    let sink = crate::delivery::sink::Sink::from_config(config.events.command.as_deref());
    let delivery = crate::delivery::spawn(handle.clone(), clock, home.clone(), sink, delivery_wake);
    let (shut_tx, shut_rx) = tokio::sync::watch::channel(false);
    let tcp = match (listeners.web, web) {
        (Some(listener), Some(addr)) => {
            let router = api::router(
                Listener::Tcp,
                handle.clone(),
                stop_tx.clone(),
                fleet.clone(),
            )
            .layer(axum::middleware::from_fn(api::dashboard::conditional))
            .layer(axum::middleware::from_fn_with_state(
                fleet.clone(),
                api::fleet::forwarded,
            ))
            .layer(axum::middleware::from_fn_with_state(
                fleet.clone(),
                crate::fleet::token::guard,
            ))
            .layer(axum::middleware::from_fn_with_state(
                api::guard::WebToken::from_config(&config),
                api::guard::token,
            ))
            .layer(axum::middleware::from_fn_with_state(
                std::sync::Arc::new(api::guard::HostPolicy::new(
                    addr,
                    config.web.hosts.as_deref(),
                    nix::unistd::gethostname()
                        .ok()
                        .and_then(|h| h.into_string().ok())
                        .as_deref(),
                )),
                api::guard::guard,
            ));
            let mut rx = shut_rx.clone();
            tracing::info!(%addr, "web listener up");
            Some(tokio::spawn(api::tcp::serve(
                listener,
                router,
                async move {
                    let _ = rx.wait_for(|s| *s).await;
                },
            )))
        }
        _ => None,
    };
    let router = api::router(Listener::Socket, handle.clone(), stop_tx, fleet);
    tracing::info!(socket = %home.socket().display(), "listening");
    api::unix::serve(listeners.socket, router, shutdown).await;
    let _ = shut_tx.send(true);
    if let Some(tcp) = tcp {
        let _ = tcp.await;
    }
    pokes.abort();
    probes.abort();
    pulls.abort();
    delivery.abort();
    let _ = std::fs::remove_file(home.socket());
    let _ = std::fs::remove_file(home.poke_socket());
    core_stop.raise();
    // Wake the core thread from its wait so it sees the flag now rather than at its tick;
    // it finishes its current call and stops.
    handle.nudge();
    let _ = tokio::task::spawn_blocking(move || core_thread.join()).await;
    Ok(())
}

/// Workers send the task UUID as a datagram after each record they write: a hint to
/// re-read that run directory now rather than at the next tick.
async fn forward_pokes(socket: tokio::net::UnixDatagram, core: CoreHandle) {
    let mut buf = [0u8; 128];
    loop {
        let Ok(n) = socket.recv(&mut buf).await else {
            continue;
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        if let Ok(task) = text.trim().parse() {
            core.observe(task, false);
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOMEBASED_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        .with_ansi(false)
        .try_init();
}

/// The daemon's log (stderr, which `daemon start` points at `daemon.log`) when it cannot be
/// written (a full disk, `/dev/full`): the line is dropped, never the queue. The standard
/// writer's fallback would print to that same stderr and panic.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// `daemon_already_running`: another daemon holds this home.
pub fn already_running(home: &Home) -> ApiError {
    ApiError::new(
        ErrorCode::DaemonAlreadyRunning,
        format!("a daemon already runs for {}", home.root().display()),
    )
    .with_input(serde_json::json!({ "home": home.root() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::{open_core, FakeLauncher};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_in_process_daemon_serves_its_socket_until_shut_down() {
        let dir = tempfile::tempdir().unwrap();
        let core = open_core(&dir, Config::default(), FakeLauncher::default());
        let home = core.home().clone();
        runtime().block_on(async {
            let listeners = Listeners::bind(&home, None).await.unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let daemon = tokio::spawn(run(core, listeners, async move {
                let _ = stopped.await;
                Ending::Stop
            }));
            let client = crate::client::Client::socket(home.socket());
            let status = client.status().await.unwrap();
            assert_eq!(status.socket, "up");
            assert_eq!(status.home, home.root().display().to_string());
            stop.send(()).unwrap();
            daemon.await.unwrap().unwrap();
        });
        assert!(
            !home.socket().exists(),
            "the socket is removed on the way out"
        );
    }

    #[test]
    fn a_daemon_whose_core_thread_died_exits_instead_of_answering_shutting_down() {
        let dir = tempfile::tempdir().unwrap();
        let core = open_core(&dir, Config::default(), FakeLauncher::default());
        let home = core.home().clone();
        let handle = core.handle();
        runtime().block_on(async {
            let listeners = Listeners::bind(&home, None).await.unwrap();
            let daemon = tokio::spawn(run(core, listeners, std::future::pending::<Ending>()));
            let client = crate::client::Client::socket(home.socket());
            client.status().await.unwrap();
            // A call that panics takes the core thread down, as a bug would.
            handle.crash();
            daemon.await.unwrap().unwrap();
        });
        assert!(!home.socket().exists());
    }

    #[test]
    fn the_supervisors_observer_has_the_core_clean_up_after_a_lost_worker_then_free_its_lane() {
        use crate::core::testing::{plain_submitter, Asked};
        use homebased_shared::ids::{JobId, ThreadId};
        use homebased_shared::rundir::{
            write_json_atomic, ChildRecord, CleanupOutcome, CleanupRecord, ProcessIdentity, RunDir,
            WorkerRecord,
        };
        use homebased_shared::wire::{RegisterRequest, SubmitRequest};

        let dir = tempfile::tempdir().unwrap();
        let workers = FakeLauncher::default();
        let core = open_core(&dir, Config::default(), workers.clone());
        let home = core.home().clone();
        let thread = core.spawn().unwrap();
        let told = observer(thread.handle.clone());
        // Calls are served in order: once this one is answered, whatever was posted before it
        // (the observer's news) has been observed, and a pass has run.
        let settled = || thread.handle.settle();
        runtime().block_on(async {
            let register = RegisterRequest {
                name: "gpu0".into(),
                device: None,
            };
            thread.handle.register(None, register).await.unwrap();
            for _ in 0..2 {
                let spec = serde_json::json!({
                    "api_version": 1, "thread": ThreadId::new(), "name": "observed", "cwd": "/",
                    "priority": "medium", "preempt": {"mode": "restart"},
                    "workload": {"type": "task", "command": ["/bin/sh", "-c", "true"]},
                });
                let submit = SubmitRequest {
                    job: JobId::new(),
                    spec,
                    submitter: plain_submitter(),
                    allow_other_thread: false,
                    machine: None,
                };
                thread.handle.submit(submit).await.unwrap();
            }
        });
        runtime().block_on(async {
            settled().await.unwrap();
            let [Asked::Start(task)] = workers.asked()[..] else {
                panic!("one job starts on the one lane: {:?}", workers.asked());
            };
            // The worker confirms (its poke), then vanishes without an exit record.
            let run = RunDir::new(home.task_dir(task));
            let workload = ProcessIdentity {
                pid: 4243,
                start_ticks: 8,
            };
            let record = WorkerRecord {
                worker: ProcessIdentity {
                    pid: 4242,
                    start_ticks: 7,
                },
                child: Some(ChildRecord {
                    process: workload,
                    pgid: workload.pid,
                    started_at: homebased_shared::time::now_ms(),
                }),
                stamps: None,
            };
            write_json_atomic(&run.worker_json(), &record).unwrap();
            thread.handle.observe(task, false);
            workers.end(task);
            told(WorkerEvent::WorkerGone { task });
            settled().await.unwrap();
            let lost = Asked::CleanUpLost {
                task,
                attempt: 2,
                container_step: false,
            };
            assert_eq!(workers.asked().last(), Some(&lost));

            let cleaned = CleanupRecord {
                attempt: 2,
                outcome: CleanupOutcome::Clean,
                finished_at: homebased_shared::time::now_ms(),
            };
            write_json_atomic(&run.cleanup_json(), &cleaned).unwrap();
            told(WorkerEvent::LostCleanupDone { task });
            settled().await.unwrap();
            match workers.asked()[..] {
                [Asked::Start(first), Asked::CleanUpLost { .. }, Asked::Start(next)] => {
                    assert_eq!(first, task);
                    assert_ne!(next, task, "the freed lane serves the other job");
                }
                ref asked => panic!("the lane was not freed: {asked:?}"),
            }
        });
        thread.stop.raise();
        // Wakes the core thread to see the raised flag.
        thread.handle.nudge();
        thread.thread.join().unwrap();
    }
}
