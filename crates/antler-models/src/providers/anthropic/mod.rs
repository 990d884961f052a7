//! Anthropic's Messages API (Claude), the provider behind `use: langchain_anthropic:ChatAnthropic`
//! and `provider: anthropic`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), antler_models::ModelError> {
//! use antler_models::providers::anthropic::{AnthropicConfig, AnthropicModel};
//! let model = AnthropicModel::new(
//!     AnthropicConfig::new("claude-sonnet-4-5")
//!         .with_api_key(std::env::var("ANTHROPIC_API_KEY").ok())
//!         .with_thinking(serde_json::json!({"type": "enabled", "budget_tokens": 2048})),
//! )?;
//! # let _ = model; Ok(()) }
//! ```
//!
//! One call is one `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version`. The
//! body is written from the borrowed history (`request.rs`: LangChain messages → alternating
//! user/assistant turns, tool results grouped, thinking and `tool_use` replayed); answers become
//! LangChain-shaped messages (`response.rs`: content blocks kept, `tool_calls`, `stop_reason` +
//! mapped `finish_reason`, usage with cache tokens). Streaming (`sse.rs`, `stream.rs`) forwards
//! text, thinking and tool-input deltas and folds them into the message the non-streaming path
//! would return.
//!
//! Timeouts: a non-streaming call has `request_timeout` end to end; a streaming call has
//! `request_timeout` until the response head and then `stream_chunk_timeout` between events
//! (`ping` events and SSE comments keep the connection up but do not count as progress). Either
//! way the whole call ends at `call_timeout`. Dropping the returned future drops the connection
//! (no task is spawned).

use std::fmt;
use std::time::Duration;

use antler_protocol::{AiMessage, Object};
use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use serde_json::Value;

use crate::{ChatModel, ChatRequest, ChunkSink, ModelError, ModelInfo};

mod request;
mod response;
mod stream;

/// Anthropic's endpoint root, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API; this is sent when neither config nor call sets it.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;
/// End-to-end limit of a non-streaming call (and time to the response head of a stream).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence tolerated between two chunks of a stream.
pub const DEFAULT_STREAM_CHUNK_TIMEOUT: Duration = Duration::from_secs(240);
/// Overall limit of one call, streamed or not.
pub use super::DEFAULT_CALL_TIMEOUT;

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");

/// How to reach one Anthropic model.
#[derive(Clone)]
pub struct AnthropicConfig {
    pub info: ModelInfo,
    /// Endpoint root; requests go to `{base_url}/v1/messages` (a root already ending in `/v1`
    /// gets only `/messages`; a trailing `/` is fine).
    pub base_url: String,
    /// Sent as `x-api-key` when set and non-empty. Never logged.
    pub api_key: Option<String>,
    /// Output-token cap; `None` → [`DEFAULT_MAX_TOKENS`].
    pub max_tokens: Option<u64>,
    /// Not sent while thinking is on (the API allows only 1 then).
    pub temperature: Option<f64>,
    /// The `thinking` body field, e.g. `{"type": "enabled", "budget_tokens": 2048}` or
    /// `{"type": "disabled"}`; an enabled budget must be ≥ 1024 and < `max_tokens`.
    pub thinking: Option<Value>,
    /// Other body fields forwarded verbatim (`top_p`, `top_k`, `stop_sequences`, `metadata`, …).
    pub extra: Object,
    /// `None` → [`DEFAULT_REQUEST_TIMEOUT`] (DeerFlow's `default_request_timeout`).
    pub request_timeout: Option<Duration>,
    pub connect_timeout: Duration,
    pub stream_chunk_timeout: Duration,
    /// Overall limit of one call, from sending the request to the last streamed event.
    pub call_timeout: Duration,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        AnthropicConfig {
            info: ModelInfo {
                provider: "anthropic".into(),
                ..ModelInfo::default()
            },
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            max_tokens: None,
            temperature: None,
            thinking: None,
            extra: Object::new(),
            request_timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            stream_chunk_timeout: DEFAULT_STREAM_CHUNK_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }
}

impl AnthropicConfig {
    /// Defaults for provider model id `model` (also used as the entry name).
    pub fn new(model: impl Into<String>) -> Self {
        let model = model.into();
        let mut cfg = Self::default();
        cfg.info.name = model.clone();
        cfg.info.model = model;
        cfg
    }

    /// Defaults around an existing [`ModelInfo`].
    pub fn from_info(info: ModelInfo) -> Self {
        AnthropicConfig {
            info,
            ..Self::default()
        }
    }

    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    pub fn with_api_key(mut self, api_key: Option<String>) -> Self {
        self.api_key = api_key;
        self
    }

    pub fn with_max_tokens(mut self, max_tokens: u64) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    pub fn with_thinking(mut self, thinking: Value) -> Self {
        self.thinking = Some(thinking);
        self
    }

    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    pub fn with_stream_chunk_timeout(mut self, timeout: Duration) -> Self {
        self.stream_chunk_timeout = timeout;
        self
    }

    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The effective end-to-end timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT)
    }

    /// `{base_url}/v1/messages` (or `{base_url}/messages` when `base_url` ends in `/v1`).
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim().trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("info", &self.info)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("thinking", &self.thinking)
            .field("extra", &self.extra)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("stream_chunk_timeout", &self.stream_chunk_timeout)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

/// A [`ChatModel`] over the Anthropic Messages API.
pub struct AnthropicModel {
    cfg: AnthropicConfig,
    client: reqwest::Client,
    endpoint: String,
    api_key: Option<HeaderValue>,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("cfg", &self.cfg)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// Validate the configuration (URL, key, thinking budget) and build the HTTP client.
    pub fn new(cfg: AnthropicConfig) -> Result<Self, ModelError> {
        let base = cfg.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ModelError::InvalidRequest(format!(
                "base_url must be an http(s) URL, got '{base}'"
            )));
        }
        let endpoint = cfg.endpoint();
        let url = reqwest::Url::parse(&endpoint)
            .map_err(|e| ModelError::InvalidRequest(format!("bad base_url '{base}': {e}")))?;
        if let Some(thinking) = cfg.thinking.as_ref().filter(|t| !t.is_null()) {
            request::check_thinking(thinking, cfg.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS))?;
        }
        if cfg.max_tokens == Some(0) {
            return Err(ModelError::InvalidRequest(
                "max_tokens must be a positive integer".into(),
            ));
        }
        let api_key = match cfg.api_key.as_deref().filter(|k| !k.is_empty()) {
            Some(key) => {
                let mut value = HeaderValue::from_str(key).map_err(|_| {
                    ModelError::InvalidRequest(
                        "api_key contains characters not allowed in a header".into(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut client = reqwest::Client::builder().connect_timeout(cfg.connect_timeout);
        if is_loopback(&url) {
            // A local proxy or test mock is never reached through an env proxy.
            client = client.no_proxy();
        }
        let client = client
            .build()
            .map_err(|e| ModelError::InvalidRequest(format!("cannot build HTTP client: {e}")))?;
        Ok(AnthropicModel {
            cfg,
            client,
            endpoint,
            api_key,
        })
    }

    pub fn config(&self) -> &AnthropicConfig {
        &self.cfg
    }

    fn post(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        let mut builder = self
            .client
            .post(&self.endpoint)
            .header(CONTENT_TYPE, "application/json")
            .header(
                ANTHROPIC_VERSION_HEADER,
                HeaderValue::from_static(ANTHROPIC_VERSION),
            )
            .body(body);
        if let Some(key) = &self.api_key {
            builder = builder.header(X_API_KEY, key.clone());
        }
        builder
    }

    fn transport_error(&self, e: &reqwest::Error) -> ModelError {
        super::http::from_reqwest(e, self.cfg.request_timeout(), self.cfg.connect_timeout)
    }

    /// Read a non-2xx answer into [`ModelError::Http`].
    async fn http_error(&self, resp: reqwest::Response) -> ModelError {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.unwrap_or_default();
        let err = super::http::http_error(status, &headers, &body);
        tracing::debug!(model = %self.cfg.info.model, status, error = %err, "model request failed");
        err
    }
}

#[async_trait]
impl ChatModel for AnthropicModel {
    fn info(&self) -> &ModelInfo {
        &self.cfg.info
    }

    async fn invoke(&self, req: ChatRequest<'_>) -> Result<AiMessage, ModelError> {
        let body = request::encode(&self.cfg, &req, false)?;
        tracing::debug!(
            model = %self.cfg.info.model,
            endpoint = %self.endpoint,
            messages = req.messages.len(),
            bytes = body.len(),
            "anthropic messages request"
        );
        let deadline = super::read::CallDeadline::start(self.cfg.call_timeout);
        let bytes = deadline
            .bound(&self.cfg.info.model, async {
                let resp = self
                    .post(body)
                    .timeout(self.cfg.request_timeout())
                    .send()
                    .await
                    .map_err(|e| self.transport_error(&e))?;
                if !resp.status().is_success() {
                    return Err(self.http_error(resp).await);
                }
                resp.bytes().await.map_err(|e| self.transport_error(&e))
            })
            .await?;
        let msg = response::parse_message(&bytes, req.message_id, &self.cfg.info.model)?;
        tracing::debug!(
            model = %self.cfg.info.model,
            finish_reason = msg.finish_reason().unwrap_or(""),
            tool_calls = msg.tool_calls.len(),
            "anthropic messages done"
        );
        Ok(msg)
    }

    async fn stream(
        &self,
        req: ChatRequest<'_>,
        on_chunk: ChunkSink<'_>,
    ) -> Result<AiMessage, ModelError> {
        let body = request::encode(&self.cfg, &req, true)?;
        tracing::debug!(
            model = %self.cfg.info.model,
            endpoint = %self.endpoint,
            messages = req.messages.len(),
            bytes = body.len(),
            "anthropic messages stream request"
        );
        let deadline = super::read::CallDeadline::start(self.cfg.call_timeout);
        let head_timeout = self.cfg.request_timeout();
        let mut resp = deadline
            .bound(&self.cfg.info.model, async {
                let resp = match tokio::time::timeout(head_timeout, self.post(body).send()).await {
                    Err(_) => return Err(ModelError::Timeout(head_timeout)),
                    Ok(r) => r.map_err(|e| self.transport_error(&e))?,
                };
                if !resp.status().is_success() {
                    return Err(self.http_error(resp).await);
                }
                Ok(resp)
            })
            .await?;

        let mut fold = stream::StreamFold::new(req.message_id);
        super::read::read_sse(
            &mut resp,
            &mut fold,
            &mut *on_chunk,
            self.cfg.stream_chunk_timeout,
            &deadline,
            &self.cfg.info.model,
        )
        .await?;
        let (last, msg) = fold.finish(&self.cfg.info.model);
        on_chunk(last);
        tracing::debug!(
            model = %self.cfg.info.model,
            finish_reason = msg.finish_reason().unwrap_or(""),
            tool_calls = msg.tool_calls.len(),
            "anthropic messages stream done"
        );
        Ok(msg)
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
