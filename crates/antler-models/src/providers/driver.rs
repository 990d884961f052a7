//! The one HTTP chat-model driver: [`HttpChatModel<W>`] implements [`ChatModel`] for every HTTP
//! provider; a [`WireFormat`] `W` supplies only the API's vocabulary.
//!
//! The driver owns what every call has in common: the HTTP client (loopback hosts bypass env
//! proxies), the time limits (`request_timeout` end to end, or to the response head of a stream;
//! `stream_chunk_timeout` between streamed events; `call_timeout` over the whole call — see
//! `read.rs`), typed errors for transport failures and non-2xx answers (status, `Retry-After`,
//! the provider's message and code — see `http.rs`), SSE decoding, and the final chunk of a
//! stream. A wire format owns the request body, the decoding of an answer and of stream events,
//! its endpoint path and its auth headers. Its types live in its own module and stay there:
//! only the marker type, its `Options` and the two aliases are public.
//!
//! Dropping a call's future drops the connection (no task is spawned).
//!
//! # Adding a wire format
//!
//! Each API is one module beside `openai_compat/`, `anthropic/`, `gemini/`, `ollama/` and
//! `openai_responses/`, holding the mapping and nothing else:
//!
//! 1. `mod.rs`: a marker type (`pub struct Gemini;`), its `Options` (the configured settings
//!    that shape the body; `Default` gives a new config's values), `impl WireFormat for Gemini`
//!    with `PROVIDER`, `DEFAULT_BASE_URL`, `endpoint` (may depend on the model and on streaming)
//!    and `headers` (auth and version headers, when not a bearer key; [`secret_header`] marks a
//!    key sensitive), and the aliases `pub type GeminiConfig = HttpModelConfig<Gemini>` and
//!    `pub type GeminiModel = HttpChatModel<Gemini>`;
//! 2. `request.rs`: `Body<'a>`, a `Serialize` view over the borrowed [`ChatRequest`] that writes
//!    the API's shapes straight into the output buffer (never cloning the history);
//! 3. `response.rs`: `decode`, a 2xx body → LangChain-shaped [`AiMessage`];
//! 4. `stream.rs`: `Fold<'a>`, a [`StreamFold`] that forwards deltas and ends in the message
//!    `decode` would give for the same answer. A format whose stream is not SSE names its
//!    framing in [`WireFormat::FRAMING`] (Ollama streams JSON lines).
//!
//! Error bodies need no code when they follow a shape `http.rs` already reads (OpenAI's,
//! Anthropic's, the usual gateway variants). The vendor's test mock goes into
//! `antler-test-support` as a wire module of its mock server, and the shared driver tests of
//! `tests/providers/driver.rs` run against it once it has a `Vendor` impl in `common.rs`.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use antler_protocol::{AiMessage, AiMessageChunk, Content, Object};
use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde::Serialize;

use super::read::{read_stream, CallDeadline};
pub use super::sse::SseEvent;
use crate::{ChatModel, ChatRequest, ChunkSink, ModelError, ModelInfo};

/// End-to-end limit of a non-streaming call (and time to the response head of a stream).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence tolerated between two events of a stream (DeerFlow's 240 s).
pub const DEFAULT_STREAM_CHUNK_TIMEOUT: Duration = Duration::from_secs(240);
/// Overall limit of one call (`call_timeout`): long enough for a long reasoning answer, finite so
/// keep-alives alone cannot hold a run.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(1800);

/// How a streamed body is cut into events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream`: `event:`/`data:` lines, events end at a blank line.
    Sse,
    /// One JSON document per line (NDJSON); each line is an event with no name.
    JsonLines,
}

/// One provider API's wire mapping; everything else about a call is [`HttpChatModel`]'s.
pub trait WireFormat: Sized + Send + Sync + 'static {
    /// Configured settings that shape the body (sampling fields, extras, thinking, …), kept in
    /// [`HttpModelConfig::wire`].
    type Options: Clone + fmt::Debug + Default + Send + Sync;
    /// A borrowed view of one request body, serialized straight into the outgoing buffer.
    type Body<'a>: Serialize;
    /// The state of one streamed answer, empty for a message id (its chunks and message carry it).
    type Fold<'a>: StreamFold + Send + From<&'a str>;

    /// `ModelInfo::provider` of a new config (`openai`, `anthropic`; `ls_provider` in metadata).
    const PROVIDER: &'static str;
    /// Endpoint root used when no `base_url` is configured.
    const DEFAULT_BASE_URL: &'static str;
    /// How log lines name one call (`chat completion`, `anthropic messages`).
    const CALL: &'static str;
    /// How the streamed body is cut into events.
    const FRAMING: Framing = Framing::Sse;

    /// The URL one call is posted to.
    fn endpoint(base_url: &str, model: &str, stream: bool) -> String;

    /// Auth and version headers (`Content-Type: application/json` is the driver's). `api_key`
    /// is `None` when unset or empty. By default `Authorization: Bearer <key>`, OpenAI's scheme.
    fn headers(api_key: Option<&str>, headers: &mut HeaderMap) -> Result<(), ModelError> {
        if let Some(key) = api_key {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
        }
        Ok(())
    }

    /// Refuse settings the API would reject, before any request is made.
    fn validate(_options: &Self::Options) -> Result<(), ModelError> {
        Ok(())
    }

    /// The body of one call: the configured settings, then the call's per-request settings.
    fn body<'a>(
        options: &'a Self::Options,
        model: &'a str,
        req: ChatRequest<'a>,
        stream: bool,
    ) -> Result<Self::Body<'a>, ModelError>;

    /// Writes `body` as JSON into `out` (a format whose body keeps parts encoded copies them).
    fn write_body(body: &Self::Body<'_>, out: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(out, body)
    }

    /// A 2xx non-streaming answer → the message (`model` when the answer names none).
    fn decode(body: &[u8], message_id: &str, model: &str) -> Result<AiMessage, ModelError>;
}

/// Folds a stream's events into deltas for the sink and, at the end, the final message.
pub trait StreamFold {
    /// Fold one event, forwarding deltas worth showing to `emit`; `Ok(true)` ends the stream.
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError>;

    /// The provider said the answer is complete; a stall or break-off after this keeps it.
    fn finished(&self) -> bool;

    /// An event that only keeps the connection warm; it does not count as progress.
    fn is_keepalive(&self, _event: &SseEvent) -> bool {
        false
    }

    /// The folded message (`model` when the stream named none).
    fn finish(self, model: &str) -> AiMessage;
}

/// `value` as a header value hidden from `Debug` output (API keys, bearer tokens).
pub fn secret_header(value: &str) -> Result<HeaderValue, ModelError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| {
        ModelError::InvalidRequest("api_key contains characters not allowed in a header".into())
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// How to reach one model over wire format `W`: transport settings shared by every provider,
/// and the format's own settings in [`HttpModelConfig::wire`].
pub struct HttpModelConfig<W: WireFormat> {
    pub info: ModelInfo,
    /// Endpoint root; the wire format appends its path (a trailing `/` is fine).
    pub base_url: String,
    /// Sent the way the wire format authenticates, when set and non-empty. Never logged.
    pub api_key: Option<String>,
    /// `None` → [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Option<Duration>,
    pub connect_timeout: Duration,
    pub stream_chunk_timeout: Duration,
    /// Overall limit of one call, from sending the request to the last streamed event.
    pub call_timeout: Duration,
    /// The settings that shape the request body.
    pub wire: W::Options,
}

impl<W: WireFormat> Default for HttpModelConfig<W> {
    fn default() -> Self {
        HttpModelConfig {
            info: ModelInfo {
                provider: W::PROVIDER.into(),
                ..ModelInfo::default()
            },
            base_url: W::DEFAULT_BASE_URL.into(),
            api_key: None,
            request_timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            stream_chunk_timeout: DEFAULT_STREAM_CHUNK_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            wire: W::Options::default(),
        }
    }
}

impl<W: WireFormat> Clone for HttpModelConfig<W> {
    fn clone(&self) -> Self {
        HttpModelConfig {
            info: self.info.clone(),
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
            stream_chunk_timeout: self.stream_chunk_timeout,
            call_timeout: self.call_timeout,
            wire: self.wire.clone(),
        }
    }
}

impl<W: WireFormat> fmt::Debug for HttpModelConfig<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpModelConfig")
            .field("info", &self.info)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("stream_chunk_timeout", &self.stream_chunk_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("wire", &self.wire)
            .finish()
    }
}

impl<W: WireFormat> HttpModelConfig<W> {
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
        HttpModelConfig {
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

    /// Where a non-streaming call is posted.
    pub fn endpoint(&self) -> String {
        W::endpoint(&self.base_url, &self.info.model, false)
    }
}

/// A [`ChatModel`] over wire format `W`.
pub struct HttpChatModel<W: WireFormat> {
    cfg: HttpModelConfig<W>,
    client: reqwest::Client,
    /// Parsed once: reqwest would parse a `&str` URL (IDNA included) on every call.
    endpoint: reqwest::Url,
    stream_endpoint: reqwest::Url,
    headers: HeaderMap,
    /// Size of the last request body of any call: the buffer size of a call whose run has no
    /// body size of its own yet (see [`with_room`]).
    body_hint: AtomicUsize,
}

impl<W: WireFormat> fmt::Debug for HttpChatModel<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpChatModel")
            .field("cfg", &self.cfg)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl<W: WireFormat> HttpChatModel<W> {
    /// Validate the configuration and build the HTTP client.
    pub fn new(cfg: HttpModelConfig<W>) -> Result<Self, ModelError> {
        let base = cfg.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ModelError::InvalidRequest(format!(
                "base_url must be an http(s) URL, got '{base}'"
            )));
        }
        let parse = |stream: bool| {
            reqwest::Url::parse(&W::endpoint(&cfg.base_url, &cfg.info.model, stream))
                .map_err(|e| ModelError::InvalidRequest(format!("bad base_url '{base}': {e}")))
        };
        let endpoint = parse(false)?;
        let stream_endpoint = parse(true)?;
        let loopback = is_loopback(&endpoint) && is_loopback(&stream_endpoint);
        W::validate(&cfg.wire)?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        W::headers(
            cfg.api_key.as_deref().filter(|k| !k.is_empty()),
            &mut headers,
        )?;
        let mut client = crate::tls::client_builder().connect_timeout(cfg.connect_timeout);
        if loopback {
            // A local server (Ollama, vLLM, a proxy, a test mock) is never reached through an
            // env proxy.
            client = client.no_proxy();
        }
        let client = client
            .build()
            .map_err(|e| ModelError::InvalidRequest(format!("cannot build HTTP client: {e}")))?;
        Ok(HttpChatModel {
            cfg,
            client,
            endpoint,
            stream_endpoint,
            headers,
            body_hint: AtomicUsize::new(0),
        })
    }

    pub fn config(&self) -> &HttpModelConfig<W> {
        &self.cfg
    }

    fn model(&self) -> &str {
        &self.cfg.info.model
    }

    /// Serialize the body of one call straight from the borrowed request.
    fn encode(&self, req: ChatRequest<'_>, stream: bool) -> Result<Vec<u8>, ModelError> {
        let body = W::body(&self.cfg.wire, self.model(), req, stream)?;
        let run = req.encodings.map(|e| &e.last_body);
        // Without a size of the run's own (its first call, side calls), the last size of any
        // call: slack on a size from another conversation would be held by every request in
        // flight.
        let capacity = match run.map(|r| r.load(Ordering::Relaxed)).filter(|&n| n > 0) {
            Some(last) => with_room(last),
            None => self.body_hint.load(Ordering::Relaxed),
        };
        let mut out = Vec::with_capacity(capacity);
        W::write_body(&body, &mut out).map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        self.body_hint.store(out.len(), Ordering::Relaxed);
        if let Some(run) = run {
            run.store(out.len(), Ordering::Relaxed);
        }
        tracing::debug!(
            model = %self.model(),
            endpoint = %if stream { &self.stream_endpoint } else { &self.endpoint },
            messages = req.messages.len(),
            bytes = out.len(),
            stream,
            "{} request",
            W::CALL
        );
        Ok(out)
    }

    /// Post `body` and wait for a 2xx response head. Unstreamed, `request_timeout` also bounds
    /// reading the body; streamed, it bounds only the wait for the head.
    async fn open(&self, body: Vec<u8>, stream: bool) -> Result<reqwest::Response, ModelError> {
        let timeout = self.cfg.request_timeout();
        let url = if stream {
            &self.stream_endpoint
        } else {
            &self.endpoint
        };
        let post = self
            .client
            .post(url.clone())
            .headers(self.headers.clone())
            .body(body);
        let resp = if stream {
            match tokio::time::timeout(timeout, post.send()).await {
                Err(_) => return Err(ModelError::Timeout(timeout)),
                Ok(r) => r.map_err(|e| self.transport_error(&e))?,
            }
        } else {
            post.timeout(timeout)
                .send()
                .await
                .map_err(|e| self.transport_error(&e))?
        };
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.unwrap_or_default();
        let err = super::http::http_error(status, &headers, &body);
        tracing::debug!(model = %self.model(), status, error = %err, "model request failed");
        Err(err)
    }

    fn transport_error(&self, e: &reqwest::Error) -> ModelError {
        super::http::from_reqwest(e, self.cfg.request_timeout(), self.cfg.connect_timeout)
    }

    fn done(&self, msg: &AiMessage, stream: bool) {
        tracing::debug!(
            model = %self.model(),
            finish_reason = msg.finish_reason().unwrap_or(""),
            tool_calls = msg.tool_calls.len(),
            stream,
            "{} done",
            W::CALL
        );
    }
}

#[async_trait]
impl<W: WireFormat> ChatModel for HttpChatModel<W> {
    fn info(&self) -> &ModelInfo {
        &self.cfg.info
    }

    async fn invoke(&self, req: ChatRequest<'_>) -> Result<AiMessage, ModelError> {
        let body = self.encode(req, false)?;
        let deadline = CallDeadline::start(self.cfg.call_timeout);
        let bytes = deadline
            .bound(self.model(), async {
                let resp = self.open(body, false).await?;
                resp.bytes().await.map_err(|e| self.transport_error(&e))
            })
            .await?;
        let msg = W::decode(&bytes, req.message_id, self.model())?;
        self.done(&msg, false);
        Ok(msg)
    }

    async fn stream(
        &self,
        req: ChatRequest<'_>,
        on_chunk: ChunkSink<'_>,
    ) -> Result<AiMessage, ModelError> {
        let body = self.encode(req, true)?;
        let deadline = CallDeadline::start(self.cfg.call_timeout);
        let mut resp = deadline.bound(self.model(), self.open(body, true)).await?;
        let mut fold = W::Fold::from(req.message_id);
        read_stream(
            &mut resp,
            W::FRAMING,
            &mut fold,
            &mut *on_chunk,
            self.cfg.stream_chunk_timeout,
            &deadline,
            self.model(),
        )
        .await?;
        let msg = fold.finish(self.model());
        on_chunk(last_chunk(&msg));
        self.done(&msg, true);
        Ok(msg)
    }
}

/// The chunk that closes a stream: usage and response metadata, `chunk_position: "last"`.
fn last_chunk(msg: &AiMessage) -> AiMessageChunk {
    AiMessageChunk {
        content: Content::Text(String::new()),
        additional_kwargs: Object::new(),
        response_metadata: (*msg.response_metadata).clone(),
        name: None,
        id: msg.id.clone(),
        tool_call_chunks: Vec::new(),
        usage_metadata: msg.usage_metadata.clone(),
        chunk_position: Some("last".into()),
    }
}

/// The buffer for a run's next body: its last body plus room for what the history gained since
/// (a few messages). A buffer of exactly the last size was outgrown by nearly every call and
/// reallocated, copying the whole body once more (~300 KB at 1,000 messages).
const fn with_room(last_body: usize) -> usize {
    last_body + last_body / 8 + 4096
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::providers::openai_compat::ChatCompletions;
    use crate::EncodingCache;
    use antler_protocol::Message;
    use serde_json::Value;
    use std::sync::Arc;

    fn request<'a>(
        messages: &'a [Arc<Message>],
        settings: &'a Object,
        encodings: Option<&'a EncodingCache>,
    ) -> ChatRequest<'a> {
        ChatRequest {
            system: Some("You are a test."),
            messages,
            tools: &[],
            tool_choice: None,
            settings,
            message_id: "m",
            encodings,
        }
    }

    /// A run's growing history is encoded into a buffer sized from the run's last body, so
    /// a step's few new messages fit without reallocating (and copying) the whole body.
    #[test]
    fn a_growing_history_fits_the_buffer_sized_from_the_runs_last_body() {
        let model = HttpChatModel::<ChatCompletions>::new(HttpModelConfig {
            base_url: "http://127.0.0.1:9/v1".into(),
            ..HttpModelConfig::default()
        })
        .unwrap();
        let settings = Object::new();
        let cache = EncodingCache::default();
        let mut history: Vec<Arc<Message>> = Vec::new();
        let mut last = 0;
        for step in 0..200 {
            history.push(Arc::new(Message::human(format!(
                "question {step}: {}",
                "x".repeat(600)
            ))));
            history.push(Arc::new(Message::ai(format!("answer {step}"))));
            let body = model
                .encode(request(&history, &settings, Some(&cache)), false)
                .unwrap();
            if last > 0 {
                // What was reserved, never grown.
                assert_eq!(body.capacity(), with_room(last), "step {step}");
            }
            last = body.len();
            let sent: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                sent["messages"].as_array().unwrap().len(),
                history.len() + 1
            );
        }
        // Without the run's cache, the last size of any call is the hint, as before.
        let body = model
            .encode(request(&history, &settings, None), false)
            .unwrap();
        assert_eq!(body.len(), last);
    }
}
