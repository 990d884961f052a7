//! Turning a Chat Completions answer into an [`AiMessage`].
//!
//! Both paths end in [`Parts::into_message`]: the non-streaming path reads [`Parts`] from one
//! `chat.completion` object, the streaming path accumulates them from `chat.completion.chunk`
//! deltas. So a streamed answer folds into exactly the message the same answer would give
//! unstreamed.

use antler_protocol::{AiMessage, Content, Object, UsageMetadata};
use serde::Deserialize;
use serde_json::Value;

use crate::providers::mapping::{
    answer_message, decode_json, ensure_call_id, error_description, error_in_answer,
    reasoning_kwargs, response_metadata, token_details, Calls,
};
use crate::ModelError;

/// Everything the final message is built from.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub content: Content,
    pub reasoning: Option<String>,
    /// The provider's `tool_calls` entries (OpenAI shape), kept verbatim.
    pub raw_tool_calls: Vec<Value>,
    pub refusal: Option<String>,
    pub finish_reason: Option<String>,
    pub model: Option<String>,
    pub provider_id: Option<String>,
    pub system_fingerprint: Option<String>,
    pub usage: Option<UsageMetadata>,
}

impl Parts {
    /// The LangChain-shaped message: raw calls in `additional_kwargs.tool_calls` (missing ids
    /// filled in), parsed calls in `tool_calls` / `invalid_tool_calls`.
    pub(crate) fn into_message(mut self, message_id: &str, default_model: &str) -> AiMessage {
        ensure_tool_call_ids(&mut self.raw_tool_calls);
        let calls = parse_tool_calls(&self.raw_tool_calls);

        let mut additional_kwargs = reasoning_kwargs(self.reasoning.unwrap_or_default());
        if let Some(r) = self.refusal {
            additional_kwargs.insert("refusal".into(), Value::String(r));
        }
        if !self.raw_tool_calls.is_empty() {
            additional_kwargs.insert("tool_calls".into(), Value::Array(self.raw_tool_calls));
        }

        let mut response_metadata = response_metadata(
            self.finish_reason.as_deref(),
            self.model,
            default_model,
            self.provider_id,
        );
        if let Some(fp) = self.system_fingerprint {
            response_metadata.insert("system_fingerprint".into(), Value::String(fp));
        }

        answer_message(
            message_id,
            self.content,
            additional_kwargs,
            response_metadata,
            calls,
            self.usage,
        )
    }
}

/// Give every raw call without a usable id a generated `call_<uuid>` so its result can be paired.
fn ensure_tool_call_ids(raw: &mut [Value]) {
    for entry in raw {
        if let Value::Object(call) = entry {
            ensure_call_id(call, "call_");
        }
    }
}

/// Parse raw OpenAI tool calls: arguments that are empty mean `{}`; arguments that are not a JSON
/// object become an [`InvalidToolCall`] carrying the raw text and the error.
fn parse_tool_calls(raw: &[Value]) -> Calls {
    let mut calls = Calls::default();
    for entry in raw {
        let id = entry.get("id").and_then(Value::as_str).map(str::to_owned);
        let function = entry.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let arguments = function.and_then(|f| f.get("arguments"));
        let parsed = match arguments {
            None | Some(Value::Null) => Ok(Object::new()),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(Object::new()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(o)) => Ok(o),
                Ok(_) => Err((
                    s.clone(),
                    "tool call arguments are not a JSON object".to_owned(),
                )),
                Err(e) => Err((
                    s.clone(),
                    format!("tool call arguments are not valid JSON: {e}"),
                )),
            },
            // Not OpenAI's shape, but unambiguous.
            Some(Value::Object(o)) => Ok(o.clone()),
            Some(other) => Err((
                other.to_string(),
                "tool call arguments are not a JSON object".to_owned(),
            )),
        };
        match (parsed, name) {
            (Ok(args), Some(name)) => calls.valid(id, name, args),
            (Ok(args), None) => {
                let raw = arguments
                    .and_then(Value::as_str)
                    .map_or_else(|| Value::Object(args).to_string(), str::to_owned);
                calls.invalid(id, None, Some(raw), "tool call has no function name");
            }
            (Err((args, error)), name) => calls.invalid(id, name, Some(args), error),
        }
    }
    calls
}

/// OpenAI's `usage` object.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
    prompt_tokens_details: Option<WireTokenDetails>,
    completion_tokens_details: Option<WireTokenDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct WireTokenDetails {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    audio_tokens: Option<u64>,
}

impl WireUsage {
    pub(crate) fn into_usage(self) -> UsageMetadata {
        let input = self.prompt_tokens.unwrap_or(0);
        let output = self.completion_tokens.unwrap_or(0);
        let mut usage = UsageMetadata {
            input_tokens: input,
            output_tokens: output,
            total_tokens: self.total_tokens.unwrap_or(input + output),
            input_token_details: None,
            output_token_details: None,
        };
        if let Some(d) = self.prompt_tokens_details {
            usage.input_token_details =
                token_details([("audio", d.audio_tokens), ("cache_read", d.cached_tokens)]);
        }
        if let Some(d) = self.completion_tokens_details {
            usage.output_token_details =
                token_details([("audio", d.audio_tokens), ("reasoning", d.reasoning_tokens)]);
        }
        usage
    }
}

/// Reasoning text: DeepSeek-style `reasoning_content`, else a string `reasoning` (vLLM, OpenRouter).
pub(crate) fn reasoning_text(
    reasoning_content: Option<String>,
    reasoning: Option<Value>,
) -> Option<String> {
    reasoning_content.or(match reasoning {
        Some(Value::String(s)) => Some(s),
        _ => None,
    })
}

/// A `chat.completion` object, as much of it as we read.
#[derive(Debug, Deserialize)]
struct WireCompletion {
    id: Option<String>,
    model: Option<String>,
    system_fingerprint: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireChoice {
    message: Option<WireMessage>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    content: Option<Value>,
    reasoning_content: Option<String>,
    reasoning: Option<Value>,
    tool_calls: Option<Vec<Value>>,
    refusal: Option<String>,
}

/// Message content as the provider sent it: `null` → `""`, a string, or content parts.
pub(crate) fn content_of(value: Option<Value>) -> Content {
    match value {
        None | Some(Value::Null) => Content::Text(String::new()),
        Some(Value::String(s)) => Content::Text(s),
        Some(Value::Array(parts)) => Content::Blocks(parts),
        Some(other) => Content::Text(other.to_string()),
    }
}

/// The provider's error description from an `{"error": …}` object or string.
pub(crate) fn error_text(error: &Value) -> String {
    error_description(error, None)
}

/// Parse a 2xx non-streaming body.
pub(crate) fn parse_completion(
    body: &[u8],
    message_id: &str,
    default_model: &str,
) -> Result<AiMessage, ModelError> {
    let wire: WireCompletion = decode_json(body, "response is not a chat completion")?;
    error_in_answer(wire.error.as_ref(), error_text)?;
    let Some(choice) = wire.choices.and_then(|c| c.into_iter().next()) else {
        return Err(ModelError::Decode("response has no choices".into()));
    };
    let Some(message) = choice.message else {
        return Err(ModelError::Decode("response choice has no message".into()));
    };
    let parts = Parts {
        content: content_of(message.content),
        reasoning: reasoning_text(message.reasoning_content, message.reasoning),
        raw_tool_calls: message.tool_calls.unwrap_or_default(),
        refusal: message.refusal,
        finish_reason: choice.finish_reason,
        model: wire.model,
        provider_id: wire.id,
        system_fingerprint: wire.system_fingerprint,
        usage: wire.usage.map(WireUsage::into_usage),
    };
    Ok(parts.into_message(message_id, default_model))
}
