//! The Gemini API (`generateContent`), the provider behind `use:
//! langchain_google_genai:ChatGoogleGenerativeAI`, as a [`WireFormat`] of the HTTP driver.
//!
//! ```no_run
//! # async fn demo() -> Result<(), antler_models::ModelError> {
//! use antler_models::providers::gemini::{GeminiConfig, GeminiModel};
//! let mut cfg = GeminiConfig::new("gemini-2.5-flash")
//!     .with_api_key(std::env::var("GEMINI_API_KEY").ok());
//! cfg.wire.set("thinking_budget", &serde_json::json!(1024));
//! let model = GeminiModel::new(cfg)?;
//! # let _ = model; Ok(()) }
//! ```
//!
//! One call is one `POST {base_url}/v1beta/models/{model}:generateContent` (streamed:
//! `:streamGenerateContent?alt=sse`, SSE chunks each a partial `GenerateContentResponse`) with
//! the key in `x-goog-api-key`. The body is written from the borrowed history (`request.rs`:
//! LangChain messages → `user`/`model` contents of parts, system text in `systemInstruction`,
//! tool calls as `functionCall` parts replayed with their `thoughtSignature`, tool results as
//! `functionResponse` parts named after their call, tools as `functionDeclarations` with a JSON
//! schema). Answers become LangChain-shaped messages (`response.rs`): text content, thought parts
//! as `additional_kwargs.reasoning_content`, calls in `tool_calls` (ids generated when the API
//! sends none) with their signatures in
//! `additional_kwargs.__gemini_function_call_thought_signatures__`, Gemini's own `finishReason`
//! (`STOP`, `MAX_TOKENS`, `SAFETY`, …, as langchain-google-genai reports it and DeerFlow's
//! finish-reason detectors read it) and `usageMetadata` as usage (thought tokens count as
//! output). A prompt the API blocks answers an empty message whose `finish_reason` is the
//! `blockReason`.
//!
//! Timeouts are the driver's. Gemini ends a stream by closing it after the chunk with the
//! finish reason; SSE comments do not count as progress.

use antler_protocol::{AiMessage, Object};
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;

use super::driver::{secret_header, HttpChatModel, HttpModelConfig, WireFormat};
use crate::{ChatRequest, ModelError};

mod request;
mod response;
mod stream;

/// Google's endpoint root, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";
/// The API version appended when `base_url` names none.
pub const API_VERSION: &str = "v1beta";

const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

/// Where langchain-google-genai keeps each function call's `thoughtSignature`, by tool-call id.
pub const THOUGHT_SIGNATURES_KEY: &str = "__gemini_function_call_thought_signatures__";

/// The Gemini `generateContent` wire format.
#[derive(Clone, Copy, Debug)]
pub struct Gemini;

/// How to reach one Gemini model; requests go to `{base_url}/v1beta/models/{model}:…`.
pub type GeminiConfig = HttpModelConfig<Gemini>;

/// A [`crate::ChatModel`] over the Gemini API.
pub type GeminiModel = HttpChatModel<Gemini>;

/// The configured settings of a Gemini body ([`HttpModelConfig::wire`]), in the API's own
/// (camelCase) keys.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GeminiOptions {
    /// `generationConfig` fields (`temperature`, `maxOutputTokens`, `topP`, …).
    pub generation: Object,
    /// `generationConfig.thinkingConfig` (`thinkingBudget`, `includeThoughts`, `thinkingLevel`).
    pub thinking: Object,
    /// `safetySettings`, as a list of `{category, threshold}`.
    pub safety_settings: Option<Value>,
    /// Other top-level body fields (`cachedContent`, `labels`, …).
    pub extra: Object,
}

/// LangChain (`ChatGoogleGenerativeAI`) keys of `generationConfig`, and the API's names.
const GENERATION_KEYS: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("max_output_tokens", "maxOutputTokens"),
    ("max_tokens", "maxOutputTokens"),
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("n", "candidateCount"),
    ("candidate_count", "candidateCount"),
    ("stop", "stopSequences"),
    ("stop_sequences", "stopSequences"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
    ("seed", "seed"),
    ("response_mime_type", "responseMimeType"),
    ("response_schema", "responseSchema"),
    ("response_json_schema", "responseJsonSchema"),
    ("response_modalities", "responseModalities"),
    ("media_resolution", "mediaResolution"),
    ("response_logprobs", "responseLogprobs"),
    ("logprobs", "logprobs"),
];

/// LangChain keys of `thinkingConfig`, and the API's names.
const THINKING_KEYS: &[(&str, &str)] = &[
    ("thinking_budget", "thinkingBudget"),
    ("include_thoughts", "includeThoughts"),
    ("thinking_level", "thinkingLevel"),
];

impl GeminiOptions {
    /// Apply one setting named as langchain-google-genai names it (`max_output_tokens`,
    /// `thinking_budget`, `safety_settings`, …; the API's camelCase names work too). `false`
    /// when the key is not a body setting (client options such as `timeout` or an unknown key).
    pub fn set(&mut self, key: &str, value: &Value) -> bool {
        if value.is_null() {
            return true;
        }
        let find = |table: &[(&str, &'static str)]| {
            table
                .iter()
                .find(|(lc, api)| *lc == key || *api == key)
                .map(|(_, api)| *api)
        };
        if let Some(api) = find(GENERATION_KEYS) {
            let value = match (api, value) {
                // One stop string is a list of one for the API.
                ("stopSequences", Value::String(s)) => Value::Array(vec![Value::from(s.as_str())]),
                _ => value.clone(),
            };
            self.generation.insert(api.into(), value);
            return true;
        }
        if let Some(api) = find(THINKING_KEYS) {
            self.thinking.insert(api.into(), value.clone());
            return true;
        }
        match key {
            "safety_settings" | "safetySettings" => {
                self.safety_settings = Some(safety_list(value));
                true
            }
            "thinking_config" | "thinkingConfig" => {
                if let Value::Object(o) = value {
                    for (k, v) in o {
                        self.set(k, v);
                    }
                }
                true
            }
            "cached_content" | "cachedContent" => {
                self.extra.insert("cachedContent".into(), value.clone());
                true
            }
            "labels" => {
                self.extra.insert("labels".into(), value.clone());
                true
            }
            _ => false,
        }
    }
}

/// LangChain's `{category: threshold}` mapping or the API's list → the API's list.
fn safety_list(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Array(
            map.iter()
                .map(|(category, threshold)| {
                    serde_json::json!({"category": category, "threshold": threshold})
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

impl WireFormat for Gemini {
    type Options = GeminiOptions;
    type Body<'a> = request::WireBody<'a>;
    type Fold<'a> = stream::Fold<'a>;

    const PROVIDER: &'static str = "google_genai";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const CALL: &'static str = "gemini generateContent";

    /// `{base_url}/v1beta/models/{model}:generateContent` (`:streamGenerateContent?alt=sse`
    /// streamed); a `base_url` already ending in an API version (`/v1`, `/v1beta`) keeps it.
    fn endpoint(base_url: &str, model: &str, stream: bool) -> String {
        let base = base_url.trim().trim_end_matches('/');
        let model = model.trim().trim_start_matches("models/");
        let method = if stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        let versioned = base
            .rsplit('/')
            .next()
            .is_some_and(|last| last.starts_with("v1"));
        if versioned {
            format!("{base}/models/{model}:{method}")
        } else {
            format!("{base}/{API_VERSION}/models/{model}:{method}")
        }
    }

    fn headers(api_key: Option<&str>, headers: &mut HeaderMap) -> Result<(), ModelError> {
        if let Some(key) = api_key {
            headers.insert(X_GOOG_API_KEY, secret_header(key)?);
        }
        Ok(())
    }

    fn body<'a>(
        options: &'a GeminiOptions,
        _model: &'a str,
        req: ChatRequest<'a>,
        _stream: bool,
    ) -> Result<request::WireBody<'a>, ModelError> {
        Ok(request::body(options, req))
    }

    fn decode(body: &[u8], message_id: &str, model: &str) -> Result<AiMessage, ModelError> {
        response::parse_response(body, message_id, model)
    }
}
