//! The accept loop of `antler serve`: HTTP/1.1 connections bounded in number and in how long a
//! client may take to send its request headers, with graceful shutdown.
//!
//! - **Connection cap.** A connection holds one slot of a semaphore from accept to close; with
//!   every slot taken the loop stops accepting, so further clients wait in the kernel backlog
//!   instead of costing a task and buffers each.
//! - **Header-read deadline.** hyper's `header_read_timeout` closes a connection whose request
//!   headers are not complete in time (a slow-loris client), and an idle keep-alive connection
//!   waiting for its next request. It only runs while a request head is being read, so a
//!   long-lived response such as an SSE stream is never cut by it.
//! - **Shutdown.** When `shutdown` resolves the listener closes, every connection is asked to
//!   finish its in-flight request and close, and the loop returns once all have.
//!
//! HTTP/1.1 only: HTTP/2 over cleartext (prior knowledge) would bypass the header deadline, and
//! the clients antler serves (browsers over `http://`, the LangGraph SDK) speak HTTP/1.1.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Connection limits of the accept loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: u32,
}

/// Serve `router` on `listener` until `shutdown` resolves and every connection has closed.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max as usize));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut full = false;
    loop {
        let now_full = slots.available_permits() == 0;
        if now_full && !full {
            tracing::warn!(
                max_connections = max,
                "connection limit reached; new clients wait until one closes"
            );
        }
        full = now_full;
        let slot = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                // The semaphore is never closed; stop serving if it somehow were.
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    drop(slot);
                    if !is_per_connection_error(&e) {
                        // Out of file descriptors or similar: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed; retrying shortly");
                        tokio::select! {
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        }
                    }
                    continue;
                }
            },
        };
        let conn =
            http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router.clone()));
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            // Released when the connection ends, however it ends.
            let _slot = slot;
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stopping(stop) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(?peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it closes: all slots back means all are closed.
    let _ = slots.acquire_many(max).await;
}

/// Resolves once shutdown is signalled (or the loop is gone).
async fn stopping(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Errors that concern only the connection being accepted (the listener itself is fine).
fn is_per_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
