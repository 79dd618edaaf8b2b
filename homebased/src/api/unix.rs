//! Serving the router on the Unix socket: mode 0600, and connections from another uid never
//! reach the router: they are answered `permission` (403) and closed. At most
//! [`limits::MAX_SOCKET_CONNECTIONS`] are served at once, in slots of the socket's own.

use super::limits;
use axum::Router;
use homebased_shared::error::{ApiError, ErrorCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use tokio::net::UnixListener;

/// Binds the socket (replacing a stale socket; the caller holds `daemon.lock`, so no live
/// daemon owns it) with mode 0600.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    remove_stale_socket(path)?;
    // Create it private from the start: no window in which another user could connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let listener = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = listener?;
    limits::widen_backlog(&listener)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Removes what a daemon before us left at `path`, if it is a socket. Anything else there
/// (a regular file, a directory, a link) is not ours to delete: refused, left as it is.
pub fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "something that is not a socket is there; it was left as it is: move it away",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Accepts connections until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let me = nix::unistd::getuid().as_raw();
    let slots = limits::Slots::new(limits::MAX_SOCKET_CONNECTIONS);
    let listener = &listener;
    let accept = move || async move { listener.accept().await.map(|(stream, _)| stream) };
    let serve = |stream: tokio::net::UnixStream, slot| match stream.peer_cred() {
        Ok(cred) if cred.uid() == me => limits::spawn_connection(stream, &router, "socket", slot),
        Ok(cred) => {
            tracing::warn!(
                uid = cred.uid(),
                "refused a socket connection from another user"
            );
            tokio::spawn(async move {
                let _slot = slot;
                refuse_other_user(stream).await;
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot read socket peer credentials"),
    };
    limits::accept_loop("socket", &slots, accept, serve, shutdown).await
}

/// Another user reached the socket (its mode was loosened, or a root client): it is told
/// `permission` in the envelope, so its CLI says so (exit 4) instead of "connection broke".
/// Only the request head is read, under the header timeout; the body never is.
async fn refuse_other_user(stream: tokio::net::UnixStream) {
    let service = hyper::service::service_fn(|_request| async {
        let error = ApiError::new(
            ErrorCode::Permission,
            "this daemon's socket serves only the user who runs it",
        );
        let body = Full::new(Bytes::from(error.envelope().to_string()));
        hyper::Response::builder()
            .status(hyper::StatusCode::FORBIDDEN)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::CONNECTION, "close")
            .body(body)
    });
    let _ = limits::http1_builder()
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
