//! Ollama's native chat API (`POST /api/chat`), the provider behind `use:
//! langchain_ollama:ChatOllama`, as a [`WireFormat`] of the HTTP driver.
//!
//! ```no_run
//! # async fn demo() -> Result<(), antler_models::ModelError> {
//! use antler_models::providers::ollama::{OllamaConfig, OllamaModel};
//! let mut cfg = OllamaConfig::new("qwen3:32b");
//! cfg.wire.set("reasoning", &serde_json::json!(true)); // `think: true`
//! cfg.wire.set("num_predict", &serde_json::json!(8192));
//! let model = OllamaModel::new(cfg)?;
//! # let _ = model; Ok(()) }
//! ```
//!
//! One call is one `POST {base_url}/api/chat` (default `http://localhost:11434`, no `/v1`),
//! always saying `stream: true|false` (Ollama streams unless told not to). A stream is NDJSON:
//! one response object a line, the last with `done: true`. The body is written from the borrowed
//! history (`request.rs`: `system`/`user`/`assistant`/`tool` messages with string content, images
//! as bare base64, tool calls with object `arguments`, tool results naming their function in
//! `tool_name`); sampling settings go in `options` (`num_predict` is the output cap; `max_tokens`
//! maps to it). Answers become LangChain-shaped messages (`response.rs`): text content, `thinking`
//! (sent when the request says `think: true`, config `reasoning: true`) as
//! `additional_kwargs.reasoning_content`, tool calls (ids generated when Ollama sends none),
//! `prompt_eval_count`/`eval_count` as usage, and `done_reason` as the finish reason
//! (`tool_calls` when the answer calls tools).
//!
//! Ollama has no auth; a configured `api_key` is sent as `Authorization: Bearer` for a proxy in
//! front of it. Errors are `{"error": "…"}`, over HTTP or as a stream line.

use antler_protocol::{AiMessage, Object};
use serde_json::Value;

use super::driver::{Framing, HttpChatModel, HttpModelConfig, WireFormat};
use crate::{ChatRequest, ModelError};

mod request;
mod response;
mod stream;

/// Ollama's default local endpoint, used when no `base_url` is configured.
pub const DEFAULT_BASE_URL: &str = "http://localhost:11434";

/// The `/api/chat` wire format.
#[derive(Clone, Copy, Debug)]
pub struct OllamaChat;

/// How to reach one Ollama model; requests go to `{base_url}/api/chat`.
pub type OllamaConfig = HttpModelConfig<OllamaChat>;

/// A [`crate::ChatModel`] over Ollama's native API.
pub type OllamaModel = HttpChatModel<OllamaChat>;

/// The configured settings of an `/api/chat` body ([`HttpModelConfig::wire`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OllamaOptions {
    /// `think`: `true`/`false`, or a level (`"low"`, `"medium"`, `"high"`) for models that take
    /// one; `None` sends nothing (the model's default).
    pub think: Option<Value>,
    /// The `options` object (`temperature`, `num_predict`, `num_ctx`, `top_p`, `stop`, …).
    pub options: Object,
    /// Other top-level body fields (`keep_alive`, `format`).
    pub extra: Object,
}

/// Keys of Ollama's `options` (langchain-ollama names them the same).
const OPTION_KEYS: &[&str] = &[
    "mirostat",
    "mirostat_eta",
    "mirostat_tau",
    "num_ctx",
    "num_gpu",
    "num_thread",
    "num_predict",
    "num_keep",
    "num_batch",
    "repeat_last_n",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "temperature",
    "seed",
    "stop",
    "tfs_z",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
];

impl OllamaOptions {
    /// Apply one setting named as langchain-ollama names it (`reasoning`, `num_predict`,
    /// `temperature`, `keep_alive`, `format`, …; `max_tokens` means `num_predict`). `false` when
    /// the key is not a body setting (client options or an unknown key).
    pub fn set(&mut self, key: &str, value: &Value) -> bool {
        if value.is_null() {
            return true;
        }
        match key {
            "reasoning" | "think" => {
                self.think = Some(value.clone());
                true
            }
            "max_tokens" => {
                self.options.insert("num_predict".into(), value.clone());
                true
            }
            "keep_alive" | "format" => {
                self.extra.insert(key.into(), value.clone());
                true
            }
            "options" => {
                if let Value::Object(o) = value {
                    for (k, v) in o {
                        self.options.insert(k.clone(), v.clone());
                    }
                }
                true
            }
            k if OPTION_KEYS.contains(&k) => {
                let value = match (k, value) {
                    ("stop", Value::String(s)) => Value::Array(vec![Value::from(s.as_str())]),
                    _ => value.clone(),
                };
                self.options.insert(k.into(), value);
                true
            }
            _ => false,
        }
    }
}

impl WireFormat for OllamaChat {
    type Options = OllamaOptions;
    type Body<'a> = request::WireBody<'a>;
    type Fold<'a> = stream::Fold<'a>;

    const PROVIDER: &'static str = "ollama";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const CALL: &'static str = "ollama chat";
    const FRAMING: Framing = Framing::JsonLines;

    /// `{base_url}/api/chat`; a `base_url` ending in `/v1` (Ollama's OpenAI-compatible root, a
    /// common mix-up) or `/api` is reduced to the server root first.
    fn endpoint(base_url: &str, _model: &str, _stream: bool) -> String {
        let base = base_url.trim().trim_end_matches('/');
        let root = base
            .strip_suffix("/v1")
            .or_else(|| base.strip_suffix("/api"))
            .unwrap_or(base);
        format!("{root}/api/chat")
    }

    fn body<'a>(
        options: &'a OllamaOptions,
        model: &'a str,
        req: ChatRequest<'a>,
        stream: bool,
    ) -> Result<request::WireBody<'a>, ModelError> {
        Ok(request::body(options, model, req, stream))
    }

    fn decode(body: &[u8], message_id: &str, model: &str) -> Result<AiMessage, ModelError> {
        response::parse_chat(body, message_id, model)
    }
}
