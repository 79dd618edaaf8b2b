//! Serving the router on the optional TCP listener with the same connection limits as the
//! socket ([`super::limits`]): a client that never finishes its headers is dropped after
//! the header timeout. `axum::serve` offers no such timeout, so the daemon serves TCP here.

use super::limits;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
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
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let conn = limits::http1_builder()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = conn {
                tracing::debug!(error = %e, "web connection ended with an error");
            }
        });
    }
}
