//! Anthropic's Messages API (Claude), the provider behind `use: langchain_anthropic:ChatAnthropic`
//! and `provider: anthropic`, as a [`WireFormat`] of the HTTP driver.
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
//! mapped `finish_reason`, usage with cache tokens). Streaming (`stream.rs`) forwards text,
//! thinking and tool-input deltas and folds them into the message the non-streaming path would
//! return.
//!
//! Timeouts are the driver's: a non-streaming call has `request_timeout` end to end; a streaming
//! call has `request_timeout` until the response head and then `stream_chunk_timeout` between
//! events (`ping` events and SSE comments keep the connection up but do not count as progress).
//! Either way the whole call ends at `call_timeout`.

use antler_protocol::{AiMessage, Object};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::driver::{secret_header, HttpChatModel, HttpModelConfig, WireFormat};
use crate::{ChatRequest, ModelError};

mod request;
mod response;
mod stream;

pub use super::driver::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STREAM_CHUNK_TIMEOUT,
};

/// Anthropic's endpoint root, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API; this is sent when neither config nor call sets it.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");

/// The Messages API wire format.
#[derive(Clone, Copy, Debug)]
pub struct Messages;

/// How to reach one Anthropic model; requests go to `{base_url}/v1/messages` (a root already
/// ending in `/v1` gets only `/messages`).
pub type AnthropicConfig = HttpModelConfig<Messages>;

/// A [`crate::ChatModel`] over the Anthropic Messages API.
pub type AnthropicModel = HttpChatModel<Messages>;

/// The configured settings of a Messages body ([`HttpModelConfig::wire`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnthropicOptions {
    /// Output-token cap; `None` → [`DEFAULT_MAX_TOKENS`].
    pub max_tokens: Option<u64>,
    /// Not sent while thinking is on (the API allows only 1 then).
    pub temperature: Option<f64>,
    /// The `thinking` body field, e.g. `{"type": "enabled", "budget_tokens": 2048}` or
    /// `{"type": "disabled"}`; an enabled budget must be ≥ 1024 and < `max_tokens`.
    pub thinking: Option<Value>,
    /// Other body fields forwarded verbatim (`top_p`, `top_k`, `stop_sequences`, `metadata`, …).
    pub extra: Object,
}

impl HttpModelConfig<Messages> {
    pub fn with_max_tokens(mut self, max_tokens: u64) -> Self {
        self.wire.max_tokens = Some(max_tokens);
        self
    }

    pub fn with_thinking(mut self, thinking: Value) -> Self {
        self.wire.thinking = Some(thinking);
        self
    }
}

impl WireFormat for Messages {
    type Options = AnthropicOptions;
    type Body<'a> = request::WireBody<'a>;
    type Fold<'a> = stream::Fold<'a>;

    const PROVIDER: &'static str = "anthropic";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const CALL: &'static str = "anthropic messages";

    /// `{base_url}/v1/messages` (or `{base_url}/messages` when `base_url` ends in `/v1`).
    fn endpoint(base_url: &str, _model: &str, _stream: bool) -> String {
        let base = base_url.trim().trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }

    fn headers(api_key: Option<&str>, headers: &mut HeaderMap) -> Result<(), ModelError> {
        headers.insert(
            ANTHROPIC_VERSION_HEADER,
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = api_key {
            headers.insert(X_API_KEY, secret_header(key)?);
        }
        Ok(())
    }

    /// The thinking budget against `max_tokens`, and a positive `max_tokens`.
    fn validate(options: &AnthropicOptions) -> Result<(), ModelError> {
        if let Some(thinking) = options.thinking.as_ref().filter(|t| !t.is_null()) {
            request::check_thinking(thinking, options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS))?;
        }
        if options.max_tokens == Some(0) {
            return Err(ModelError::InvalidRequest(
                "max_tokens must be a positive integer".into(),
            ));
        }
        Ok(())
    }

    fn body<'a>(
        options: &'a AnthropicOptions,
        model: &'a str,
        req: ChatRequest<'a>,
        stream: bool,
    ) -> Result<request::WireBody<'a>, ModelError> {
        request::body(options, model, req, stream)
    }

    fn decode(body: &[u8], message_id: &str, model: &str) -> Result<AiMessage, ModelError> {
        response::parse_message(body, message_id, model)
    }
}
