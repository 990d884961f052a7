//! The legacy HTTP+SSE client transport (MCP 2024-11-05), DeerFlow's `type: "sse"`, which rmcp
//! no longer ships: GET the server's URL as an event stream, wait for its `endpoint` event (the
//! URL to POST to, relative to the stream's), then POST each JSON-RPC message there and read
//! replies as `message` events on the stream.
//!
//! Only the wire is implemented here; JSON-RPC, initialization and request matching are rmcp's,
//! through its [`Transport`] seam.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use url::Url;

/// Why the SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("HTTP error: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the server answered {0}")]
    Status(reqwest::StatusCode),
    #[error("the event stream ended before the server named its endpoint")]
    NoEndpoint,
    #[error("the endpoint '{0}' is not a URL on the server's origin")]
    BadEndpoint(String),
    #[error("could not encode the message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("the transport is closed")]
    Closed,
}

/// A connected legacy SSE session.
pub struct SseClientTransport {
    client: reqwest::Client,
    endpoint: Arc<Url>,
    headers: Arc<HeaderMap>,
    rx: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
}

impl SseClientTransport {
    /// Open the event stream and wait for the `endpoint` event.
    pub async fn connect(
        client: reqwest::Client,
        url: &str,
        headers: HeaderMap,
    ) -> Result<Self, SseError> {
        let base = Url::parse(url).map_err(|_| SseError::BadEndpoint(url.to_owned()))?;
        let resp = client
            .get(base.clone())
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await?;
        if !resp.status().is_success() {
            return Err(SseError::Status(resp.status()));
        }
        let mut events = sse_stream::SseStream::from_bytes_stream(resp.bytes_stream());
        let endpoint = loop {
            match events.next().await {
                Some(Ok(ev)) if ev.event.as_deref() == Some("endpoint") => {
                    let data = ev.data.unwrap_or_default();
                    let url = base
                        .join(data.trim())
                        .map_err(|_| SseError::BadEndpoint(data.clone()))?;
                    // The endpoint must stay on the server's origin: a hostile stream must not
                    // redirect our (possibly authorized) POSTs elsewhere.
                    if url.origin() != base.origin() {
                        return Err(SseError::BadEndpoint(data));
                    }
                    break url;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "SSE stream error before the endpoint event");
                    return Err(SseError::NoEndpoint);
                }
                None => return Err(SseError::NoEndpoint),
            }
        };
        let (tx, rx) = mpsc::channel(64);
        let reader = tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        tracing::debug!(error = %e, "SSE stream ended with an error");
                        break;
                    }
                };
                if !matches!(ev.event.as_deref(), None | Some("message")) {
                    continue;
                }
                let Some(data) = ev.data.filter(|d| !d.trim().is_empty()) else {
                    continue;
                };
                match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(msg) => {
                        if tx.send(msg).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "ignoring an SSE message that is not JSON-RPC")
                    }
                }
            }
        });
        Ok(SseClientTransport {
            client,
            endpoint: Arc::new(endpoint),
            headers: Arc::new(headers),
            rx,
            reader,
        })
    }
}

impl Drop for SseClientTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "sse".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let client = self.client.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        let closed = self.reader.is_finished();
        async move {
            if closed {
                return Err(SseError::Closed);
            }
            let body = serde_json::to_vec(&item)?;
            let resp = client
                .post(endpoint.as_ref().clone())
                .headers(headers.as_ref().clone())
                .header(CONTENT_TYPE, "application/json")
                .timeout(Duration::from_secs(60))
                .body(body)
                .send()
                .await?;
            if !resp.status().is_success() {
                return Err(SseError::Status(resp.status()));
            }
            Ok(())
        }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.rx.close();
        Ok(())
    }
}
