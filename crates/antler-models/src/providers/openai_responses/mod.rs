//! The OpenAI Responses API (`POST /v1/responses`), used when an OpenAI model entry sets
//! `use_responses_api: true`, as a [`WireFormat`] of the HTTP driver.
//!
//! ```no_run
//! # async fn demo() -> Result<(), antler_models::ModelError> {
//! use antler_models::providers::openai_responses::{ResponsesConfig, ResponsesModel};
//! let mut cfg = ResponsesConfig::new("gpt-5").with_api_key(std::env::var("OPENAI_API_KEY").ok());
//! cfg.wire.reasoning_effort = Some("medium".into());
//! let model = ResponsesModel::new(cfg)?;
//! # let _ = model; Ok(()) }
//! ```
//!
//! One call is one `POST {base_url}/responses` with `Authorization: Bearer …`. The history
//! becomes `input` items (`request.rs`): messages by role, an assistant's reasoning items
//! replayed (with `encrypted_content` when the API gave it; an item with only an id is replayed
//! only while the API stores responses, i.e. not under `store: false`), its calls as
//! `function_call` items and tool results as `function_call_output` items paired by `call_id`;
//! tools are flat `{type: function, name, parameters}`; `max_tokens` becomes
//! `max_output_tokens` and `reasoning_effort` becomes `reasoning.effort`. Answers
//! (`response.rs`) become LangChain-shaped messages: plain text content, or — when the answer
//! has reasoning — content blocks as langchain-openai's `responses/v1` output (`reasoning`
//! blocks with `summary` and `encrypted_content`, `text` blocks), the summaries also as
//! `additional_kwargs.reasoning_content`; `function_call` items as `tool_calls` (id = `call_id`);
//! `status` and `incomplete_details` kept, and a `finish_reason` in OpenAI's vocabulary
//! (`stop`, `tool_calls`, `length` for `max_output_tokens`, `content_filter`). Streaming
//! (`stream.rs`) reads the typed events (`response.output_text.delta`,
//! `response.function_call_arguments.delta`, `response.reasoning_summary_text.delta`, …,
//! `response.completed`) and folds them into the message the non-streaming path returns.

use antler_protocol::{AiMessage, Object};

use super::driver::{HttpChatModel, HttpModelConfig, WireFormat};
use crate::{ChatRequest, ModelError};

mod request;
mod response;
mod stream;

/// OpenAI's endpoint, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The Responses API wire format.
#[derive(Clone, Copy, Debug)]
pub struct Responses;

/// How to reach one model over the Responses API; requests go to `{base_url}/responses`.
pub type ResponsesConfig = HttpModelConfig<Responses>;

/// A [`crate::ChatModel`] over the OpenAI Responses API.
pub type ResponsesModel = HttpChatModel<Responses>;

/// The configured settings of a Responses body ([`HttpModelConfig::wire`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResponsesOptions {
    pub temperature: Option<f64>,
    /// Output-token cap (`max_output_tokens`).
    pub max_output_tokens: Option<u64>,
    /// `reasoning.effort`.
    pub reasoning_effort: Option<String>,
    /// Other body fields forwarded verbatim (`reasoning`, `store`, `include`, `top_p`,
    /// `truncation`, `text`, `service_tier`, `metadata`, …; the OpenAI SDK's `extra_body` too).
    pub extra: Object,
}

impl WireFormat for Responses {
    type Options = ResponsesOptions;
    type Body<'a> = request::WireBody<'a>;
    type Fold<'a> = stream::Fold<'a>;

    const PROVIDER: &'static str = "openai";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const CALL: &'static str = "openai responses";

    /// `{base_url}/responses`.
    fn endpoint(base_url: &str, _model: &str, _stream: bool) -> String {
        format!("{}/responses", base_url.trim().trim_end_matches('/'))
    }

    fn body<'a>(
        options: &'a ResponsesOptions,
        model: &'a str,
        req: ChatRequest<'a>,
        stream: bool,
    ) -> Result<request::WireBody<'a>, ModelError> {
        Ok(request::body(options, model, req, stream))
    }

    fn decode(body: &[u8], message_id: &str, model: &str) -> Result<AiMessage, ModelError> {
        response::parse_response(body, message_id, model)
    }
}
