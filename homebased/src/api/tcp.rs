//! Serving the router on the optional TCP listener with the same connection limits as the
//! socket ([`super::limits`]): a client that never finishes its headers is dropped after
//! the header timeout. `axum::serve` offers no such timeout, so the daemon serves TCP here.

use super::limits;
use axum::Router;
use tokio::net::TcpListener;

/// Accepts connections until `shutdown` resolves; connections already accepted finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "web accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        limits::spawn_connection(stream, &router, "web");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_dropped_after_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, router, async {
            let _ = stopped.await;
        }));
        let took = tokio::task::spawn_blocking(move || {
            let mut conn = std::net::TcpStream::connect(addr).unwrap();
            conn.set_read_timeout(Some(limits::HEADER_READ_TIMEOUT * 3))
                .unwrap();
            conn.write_all(b"GET / HTTP/1.1\r\nHost: loc").unwrap();
            let started = Instant::now();
            let mut buf = [0u8; 64];
            // EOF (or a reset) once the header timeout passes; a read timeout would fail.
            match conn.read(&mut buf) {
                Ok(0) | Err(_) if started.elapsed() < limits::HEADER_READ_TIMEOUT * 2 => {}
                other => panic!("still open or answered: {other:?}"),
            }
            started.elapsed()
        })
        .await
        .unwrap();
        assert!(took >= limits::HEADER_READ_TIMEOUT - Duration::from_secs(1));
        let _ = stop.send(());
        server.await.unwrap();
    }
}
