//! Serving the router on the optional TCP listener with the same connection limits as the
//! socket ([`super::limits`]): a client that never finishes its headers is dropped after
//! the header timeout, one that never reads its answer after the write-stall timeout, and at
//! most [`limits::MAX_TCP_CONNECTIONS`] are served at once (slots of its own: the socket's
//! are never taken). `axum::serve` offers none of these, so the daemon serves TCP here.

use super::limits;
use axum::Router;
use tokio::net::TcpListener;

/// Binds the web listener with the backlog of [`limits::widen_backlog`].
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    limits::widen_backlog(&listener)?;
    Ok(listener)
}

/// Accepts connections until `shutdown` resolves; connections already accepted finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_with(
        listener,
        router,
        limits::Slots::new(limits::MAX_TCP_CONNECTIONS),
        shutdown,
    )
    .await
}

/// [`serve`] with its slots given (a test gives few).
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    slots: limits::Slots,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let listener = &listener;
    let accept = move || async move { listener.accept().await.map(|(stream, _)| stream) };
    let serve = |stream, slot| limits::spawn_connection(stream, &router, "web", slot);
    limits::accept_loop("web", &slots, accept, serve, shutdown).await
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

    #[tokio::test]
    async fn a_client_past_the_slots_is_served_once_a_slot_frees() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let slots = limits::Slots::new(1);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_with(listener, router, slots.clone(), async {
            let _ = stopped.await;
        }));
        let request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let answered = |mut conn: std::net::TcpStream| {
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let mut buf = [0u8; 256];
            let n = conn.read(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200")
        };
        let served = tokio::task::spawn_blocking(move || {
            // The first client is served and kept alive: it holds the only slot.
            let mut first = std::net::TcpStream::connect(addr).unwrap();
            first.write_all(request).unwrap();
            let first = {
                let clone = first.try_clone().unwrap();
                assert!(answered(clone));
                first
            };
            let mut second = std::net::TcpStream::connect(addr).unwrap();
            second.write_all(request).unwrap();
            (first, second)
        })
        .await
        .unwrap();
        assert_eq!(slots.available(), 0, "the kept-alive client holds the slot");
        let (first, second) = served;
        drop(first);
        let ok = tokio::task::spawn_blocking(move || answered(second))
            .await
            .unwrap();
        assert!(ok, "the waiting client is served once the slot frees");
        let _ = stop.send(());
        server.await.unwrap();
    }
}
