//! OpenAI Chat Completions — and every endpoint that speaks it (DeepSeek, Kimi, Doubao, vLLM,
//! Ollama's `/v1`, OpenRouter, …).
//!
//! ```no_run
//! # async fn demo() -> Result<(), antler_models::ModelError> {
//! use antler_models::providers::openai_compat::{OpenAiCompatConfig, OpenAiCompatModel};
//! let model = OpenAiCompatModel::new(
//!     OpenAiCompatConfig::new("gpt-4o-mini").with_api_key(std::env::var("OPENAI_API_KEY").ok()),
//! )?;
//! # let _ = model; Ok(()) }
//! ```
//!
//! One call is one `POST {base_url}/chat/completions`. The body is written straight from the
//! borrowed history (`request.rs`); answers become LangChain-shaped messages (`response.rs`):
//! the raw provider `tool_calls` stay in `additional_kwargs.tool_calls`, parsed ones in
//! `tool_calls`, unparseable ones in `invalid_tool_calls`, reasoning text in
//! `additional_kwargs.reasoning_content`. Streaming (`sse.rs`, `stream.rs`) forwards every delta
//! and folds them into the same message the non-streaming path would return.
//!
//! Timeouts: a non-streaming call has `request_timeout` end to end; a streaming call has
//! `request_timeout` until the response head and then `stream_chunk_timeout` between events
//! (SSE comments do not count). Either way the whole call ends at `call_timeout`.
//! Dropping the returned future drops the connection (no task is spawned).

use std::fmt;
use std::time::Duration;

use antler_protocol::{AiMessage, Object};
use async_trait::async_trait;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};

use crate::{ChatModel, ChatRequest, ChunkSink, ModelError, ModelInfo};

mod request;
mod response;
mod stream;

/// OpenAI's endpoint, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// End-to-end limit of a non-streaming call (and time to the response head of a stream).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence tolerated between two chunks of a stream (DeerFlow's 240 s).
pub const DEFAULT_STREAM_CHUNK_TIMEOUT: Duration = Duration::from_secs(240);
/// Overall limit of one call, streamed or not.
pub use super::DEFAULT_CALL_TIMEOUT;

/// How to reach one OpenAI-compatible model.
#[derive(Clone)]
pub struct OpenAiCompatConfig {
    pub info: ModelInfo,
    /// Endpoint root; requests go to `{base_url}/chat/completions` (a trailing `/` is fine).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set and non-empty. Never logged.
    pub api_key: Option<String>,
    pub temperature: Option<f64>,
    /// Output-token cap (`max_tokens`).
    pub max_tokens: Option<u64>,
    pub reasoning_effort: Option<String>,
    /// Merged into the top level of the body (the OpenAI SDK's `extra_body`).
    pub extra_body: Object,
    /// Other provider fields forwarded verbatim as body fields (`top_p`, `seed`, …).
    pub extra: Object,
    /// `None` → [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Option<Duration>,
    pub connect_timeout: Duration,
    pub stream_chunk_timeout: Duration,
    /// Overall limit of one call, from sending the request to the last streamed event.
    pub call_timeout: Duration,
    /// Ask for a final usage chunk on streams (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Replay each historical assistant message's `additional_kwargs.reasoning_content` as
    /// `reasoning_content` (thinking APIs such as DeepSeek reject history without it).
    pub replay_reasoning_content: bool,
}

impl Default for OpenAiCompatConfig {
    fn default() -> Self {
        OpenAiCompatConfig {
            info: ModelInfo {
                provider: "openai".into(),
                ..ModelInfo::default()
            },
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            temperature: None,
            max_tokens: None,
            reasoning_effort: None,
            extra_body: Object::new(),
            extra: Object::new(),
            request_timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            stream_chunk_timeout: DEFAULT_STREAM_CHUNK_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            stream_usage: true,
            replay_reasoning_content: false,
        }
    }
}

impl OpenAiCompatConfig {
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
        OpenAiCompatConfig {
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

    /// `{base_url}/chat/completions`.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

impl fmt::Debug for OpenAiCompatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiCompatConfig")
            .field("info", &self.info)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("temperature", &self.temperature)
            .field("max_tokens", &self.max_tokens)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("extra_body", &self.extra_body)
            .field("extra", &self.extra)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("stream_chunk_timeout", &self.stream_chunk_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("stream_usage", &self.stream_usage)
            .field("replay_reasoning_content", &self.replay_reasoning_content)
            .finish()
    }
}

/// A [`ChatModel`] over an OpenAI-compatible Chat Completions endpoint.
pub struct OpenAiCompatModel {
    cfg: OpenAiCompatConfig,
    client: reqwest::Client,
    endpoint: String,
    auth: Option<HeaderValue>,
}

impl fmt::Debug for OpenAiCompatModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiCompatModel")
            .field("cfg", &self.cfg)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl OpenAiCompatModel {
    /// Validate the configuration and build the HTTP client.
    pub fn new(cfg: OpenAiCompatConfig) -> Result<Self, ModelError> {
        let base = cfg.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ModelError::InvalidRequest(format!(
                "base_url must be an http(s) URL, got '{base}'"
            )));
        }
        let endpoint = cfg.endpoint();
        let url = reqwest::Url::parse(&endpoint)
            .map_err(|e| ModelError::InvalidRequest(format!("bad base_url '{base}': {e}")))?;
        let auth = match cfg.api_key.as_deref().filter(|k| !k.is_empty()) {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
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
            // A local server (Ollama, vLLM, a test mock) is never reached through an env proxy.
            client = client.no_proxy();
        }
        let client = client
            .build()
            .map_err(|e| ModelError::InvalidRequest(format!("cannot build HTTP client: {e}")))?;
        Ok(OpenAiCompatModel {
            cfg,
            client,
            endpoint,
            auth,
        })
    }

    pub fn config(&self) -> &OpenAiCompatConfig {
        &self.cfg
    }

    fn post(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        let mut builder = self
            .client
            .post(&self.endpoint)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(auth) = &self.auth {
            builder = builder.header(AUTHORIZATION, auth.clone());
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
impl ChatModel for OpenAiCompatModel {
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
            "chat completion request"
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
        let msg = response::parse_completion(&bytes, req.message_id, &self.cfg.info.model)?;
        tracing::debug!(
            model = %self.cfg.info.model,
            finish_reason = msg.finish_reason().unwrap_or(""),
            tool_calls = msg.tool_calls.len(),
            "chat completion done"
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
            "chat completion stream request"
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
            "chat completion stream done"
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
