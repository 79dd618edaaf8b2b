//! `homebased daemon serve`: one daemon per state home. It takes `daemon.lock` before it
//! touches anything, opens the store, detects GPUs, starts the core, and serves the API on
//! the Unix socket (and, when asked, the TCP listener) until SIGTERM, SIGINT or
//! `daemon stop`. Running work never depends on it.

pub mod detect;
pub mod lock;

use crate::api::{self, Listener};
use crate::core::{Core, DaemonFacts};
use crate::store::Store;
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
    let web = web_address(opts.web_listen.as_deref(), &opts.config)?;
    opts.home.create().map_err(|e| {
        ApiError::internal(format!("cannot create {}: {e}", opts.home.root().display()))
    })?;
    // First the lock: a second daemon leaves everything exactly as it found it.
    let _lock = lock::DaemonLock::acquire(&opts.home)?;
    let mut store = Store::open(&opts.home.database())?;
    detect::detect(&mut store)?;
    let facts = DaemonFacts {
        pid: std::process::id(),
        web: web.map(|w| w.to_string()),
    };
    let core = Core::new(
        store,
        opts.home.clone(),
        opts.config.clone(),
        facts,
        Box::new(crate::core::launcher::Supervisor),
    )?;
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
    let delivery_wake = core.delivery_wake();
    let (handle, core_stop, core_thread) = core.spawn().map_err(ApiError::internal)?;
    let result = runtime.block_on(async move {
        let (stop_tx, mut stop_rx) = tokio::sync::mpsc::unbounded_channel();
        let socket = api::unix::bind(&opts.home.socket()).map_err(|e| {
            ApiError::internal(format!("cannot bind {}: {e}", opts.home.socket().display()))
        })?;
        let shutdown = async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot watch SIGTERM");
                        return;
                    }
                };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
                _ = stop_rx.recv() => tracing::info!("daemon stop requested"),
            }
        };
        let pokes = listen_for_pokes(&opts.home, handle.clone())?;
        let sink = crate::delivery::sink::Sink::from_config(opts.config.events.command.as_deref());
        let delivery =
            crate::delivery::spawn(handle.clone(), opts.home.clone(), sink, delivery_wake);
        let (shut_tx, shut_rx) = tokio::sync::watch::channel(false);
        let tcp = match web {
            None => None,
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| ApiError::internal(format!("cannot listen on {addr}: {e}")))?;
                let router = api::router(Listener::Tcp, handle.clone(), stop_tx.clone()).layer(
                    axum::middleware::from_fn_with_state(addr, api::guard::guard),
                );
                let mut rx = shut_rx.clone();
                tracing::info!(%addr, "web listener up");
                Some(tokio::spawn(async move {
                    let _ = axum::serve(listener, router)
                        .with_graceful_shutdown(async move {
                            let _ = rx.wait_for(|s| *s).await;
                        })
                        .await;
                }))
            }
        };
        let router = api::router(Listener::Socket, handle.clone(), stop_tx);
        tracing::info!(socket = %opts.home.socket().display(), "listening");
        api::unix::serve(socket, router, shutdown).await;
        let _ = shut_tx.send(true);
        if let Some(tcp) = tcp {
            let _ = tcp.await;
        }
        pokes.abort();
        delivery.abort();
        let _ = std::fs::remove_file(opts.home.socket());
        let _ = std::fs::remove_file(opts.home.poke_socket());
        Ok::<(), ApiError>(())
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    core_stop.raise();
    let _ = core_thread.join();
    tracing::info!("daemon stopped; running work continues on its own");
    result
}

/// Workers send the task UUID as a datagram after each record they write: a hint to
/// re-read that run directory now rather than at the next tick.
fn listen_for_pokes(
    home: &Home,
    core: crate::core::CoreHandle,
) -> ApiResult<tokio::task::JoinHandle<()>> {
    let path = home.poke_socket();
    let _ = std::fs::remove_file(&path);
    let socket = tokio::net::UnixDatagram::bind(&path)
        .map_err(|e| ApiError::internal(format!("cannot bind {}: {e}", path.display())))?;
    Ok(tokio::spawn(async move {
        let mut buf = [0u8; 128];
        loop {
            let Ok(n) = socket.recv(&mut buf).await else {
                continue;
            };
            let text = String::from_utf8_lossy(&buf[..n]);
            if let Ok(task) = text.trim().parse() {
                core.post(move |core| core.observe(task, false));
            }
        }
    }))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOMEBASED_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// `daemon_already_running`: another daemon holds this home.
pub fn already_running(home: &Home) -> ApiError {
    ApiError::new(
        ErrorCode::DaemonAlreadyRunning,
        format!("a daemon already runs for {}", home.root().display()),
    )
    .with_input(serde_json::json!({ "home": home.root() }))
}
