//! OpenAI Chat Completions — and every endpoint that speaks it (DeepSeek, Kimi, Doubao, vLLM,
//! Ollama's `/v1`, OpenRouter, …) — as a [`WireFormat`] of the HTTP driver.
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
//! One call is one `POST {base_url}/chat/completions` with `Authorization: Bearer …`. The body is
//! written straight from the borrowed history (`request.rs`); answers become LangChain-shaped
//! messages (`response.rs`): the raw provider `tool_calls` stay in `additional_kwargs.tool_calls`,
//! parsed ones in `tool_calls`, unparseable ones in `invalid_tool_calls`, reasoning text in
//! `additional_kwargs.reasoning_content`. Streaming (`stream.rs`) forwards every delta and folds
//! them into the same message the non-streaming path would return.
//!
//! Timeouts are the driver's: a non-streaming call has `request_timeout` end to end; a streaming
//! call has `request_timeout` until the response head and then `stream_chunk_timeout` between
//! events (SSE comments do not count). Either way the whole call ends at `call_timeout`.

use antler_protocol::{AiMessage, Object};

use super::driver::{HttpChatModel, HttpModelConfig, WireFormat};
use crate::{ChatRequest, ModelError};

mod request;
mod response;
mod stream;

pub use super::driver::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STREAM_CHUNK_TIMEOUT,
};

/// OpenAI's endpoint, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The Chat Completions wire format.
#[derive(Clone, Copy, Debug)]
pub struct ChatCompletions;

/// How to reach one OpenAI-compatible model; requests go to `{base_url}/chat/completions`.
pub type OpenAiCompatConfig = HttpModelConfig<ChatCompletions>;

/// A [`crate::ChatModel`] over an OpenAI-compatible Chat Completions endpoint.
pub type OpenAiCompatModel = HttpChatModel<ChatCompletions>;

/// The configured settings of a Chat Completions body ([`HttpModelConfig::wire`]).
#[derive(Clone, Debug, PartialEq)]
pub struct OpenAiCompatOptions {
    pub temperature: Option<f64>,
    /// Output-token cap (`max_tokens`).
    pub max_tokens: Option<u64>,
    pub reasoning_effort: Option<String>,
    /// Merged into the top level of the body (the OpenAI SDK's `extra_body`).
    pub extra_body: Object,
    /// Other provider fields forwarded verbatim as body fields (`top_p`, `seed`, …).
    pub extra: Object,
    /// Ask for a final usage chunk on streams (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Replay each historical assistant message's `additional_kwargs.reasoning_content` as
    /// `reasoning_content` (thinking APIs such as DeepSeek reject history without it).
    pub replay_reasoning_content: bool,
}

impl Default for OpenAiCompatOptions {
    fn default() -> Self {
        OpenAiCompatOptions {
            temperature: None,
            max_tokens: None,
            reasoning_effort: None,
            extra_body: Object::new(),
            extra: Object::new(),
            stream_usage: true,
            replay_reasoning_content: false,
        }
    }
}

impl WireFormat for ChatCompletions {
    type Options = OpenAiCompatOptions;
    type Body<'a> = request::WireBody<'a>;
    type Fold<'a> = stream::Fold<'a>;

    const PROVIDER: &'static str = "openai";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const CALL: &'static str = "chat completion";

    /// `{base_url}/chat/completions`.
    fn endpoint(base_url: &str, _model: &str, _stream: bool) -> String {
        format!("{}/chat/completions", base_url.trim_end_matches('/'))
    }

    fn body<'a>(
        options: &'a OpenAiCompatOptions,
        model: &'a str,
        req: ChatRequest<'a>,
        stream: bool,
    ) -> Result<request::WireBody<'a>, ModelError> {
        Ok(request::body(options, model, req, stream))
    }

    fn write_body(body: &request::WireBody<'_>, out: &mut Vec<u8>) -> serde_json::Result<()> {
        request::write_body(body, out)
    }

    fn decode(body: &[u8], message_id: &str, model: &str) -> Result<AiMessage, ModelError> {
        response::parse_completion(body, message_id, model)
    }
}
