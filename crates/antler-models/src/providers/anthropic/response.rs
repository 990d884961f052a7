//! Turning a Messages answer into a LangChain-shaped [`AiMessage`].
//!
//! Both paths end in [`Parts::into_message`]: the non-streaming path reads [`Parts`] from one
//! `message` object, the streaming path rebuilds the same content blocks from SSE deltas. So a
//! streamed answer folds into exactly the message the same answer gives unstreamed.
//!
//! As langchain-anthropic does: content is the text when the answer is plain text, else the list
//! of blocks as sent (thinking with its signature, `tool_use`, …, kept untouched so they can be
//! replayed); `tool_use` blocks also become `tool_calls`; usage counts cached prompt tokens as
//! input. antler adds `additional_kwargs.reasoning_content` (the thinking text, which the UI
//! shows) and a `finish_reason` mapped to OpenAI's vocabulary next to Anthropic's `stop_reason`.

use antler_protocol::{AiMessage, Content, Object, UsageMetadata};
use serde::Deserialize;
use serde_json::Value;

use crate::providers::mapping::{
    answer_message, check_kind, decode_json, ensure_call_id, error_description, error_in_answer,
    reasoning_kwargs, response_metadata, token_details, Calls,
};
use crate::ModelError;

/// Anthropic's `usage` object. Every field is optional: stream events carry partial copies.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Overlay the fields `later` carries (a `message_delta` updates what `message_start` said).
    pub(crate) fn update(&mut self, later: WireUsage) {
        let keep = |slot: &mut Option<u64>, v: Option<u64>| {
            if v.is_some() {
                *slot = v;
            }
        };
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(
            &mut self.cache_creation_input_tokens,
            later.cache_creation_input_tokens,
        );
        keep(
            &mut self.cache_read_input_tokens,
            later.cache_read_input_tokens,
        );
    }

    /// LangChain's reading: `input_tokens` includes cache reads and writes, which are also
    /// itemised in `input_token_details`.
    pub(crate) fn into_usage(self) -> UsageMetadata {
        let read = self.cache_read_input_tokens;
        let creation = self.cache_creation_input_tokens;
        let input = self.input_tokens.unwrap_or(0) + read.unwrap_or(0) + creation.unwrap_or(0);
        let output = self.output_tokens.unwrap_or(0);
        UsageMetadata {
            input_token_details: token_details([
                ("cache_read", read),
                ("cache_creation", creation),
            ]),
            ..UsageMetadata::new(input, output)
        }
    }
}

/// A `tool_use` block whose input was not a JSON object (streamed input that failed to parse).
#[derive(Debug)]
pub(crate) struct BadInput {
    /// Position of the block in [`Parts::blocks`].
    pub block: usize,
    pub raw: String,
    pub error: String,
}

/// Everything the final message is built from.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    /// The content blocks, in order, as the provider sent them.
    pub blocks: Vec<Value>,
    pub bad_inputs: Vec<BadInput>,
    pub stop_reason: Option<String>,
    pub stop_sequence: Option<String>,
    pub model: Option<String>,
    pub provider_id: Option<String>,
    pub usage: Option<WireUsage>,
}

/// Anthropic's `stop_reason` in the OpenAI vocabulary the runtime and middlewares read.
/// `refusal` stays `refusal` (the safety middleware looks for it); unknown values pass through.
fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" | "model_context_window_exceeded" => "length",
        other => other,
    }
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

impl Parts {
    pub(crate) fn into_message(mut self, message_id: &str, default_model: &str) -> AiMessage {
        let mut calls = Calls::default();
        let mut reasoning = String::new();
        let mut plain_text = true;
        for (pos, block) in self.blocks.iter_mut().enumerate() {
            match block_type(block) {
                Some("text") if block.get("citations").is_none_or(Value::is_null) => {}
                Some("thinking") => {
                    plain_text = false;
                    if let Some(t) = block.get("thinking").and_then(Value::as_str) {
                        reasoning.push_str(t);
                    }
                }
                Some("tool_use") => {
                    plain_text = false;
                    let Value::Object(obj) = block else { continue };
                    ensure_call_id(obj, "toolu_");
                    let id = obj.get("id").and_then(Value::as_str).map(str::to_owned);
                    let name = obj
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                        .map(str::to_owned);
                    let bad = self.bad_inputs.iter().find(|b| b.block == pos);
                    match (obj.get("input"), name, bad) {
                        (_, name, Some(bad)) => {
                            calls.invalid(id, name, Some(bad.raw.clone()), bad.error.clone())
                        }
                        (Some(Value::Object(args)), Some(name), None) => {
                            calls.valid(id, name, args.clone())
                        }
                        (None | Some(Value::Null), Some(name), None) => {
                            calls.valid(id, name, Object::new())
                        }
                        (input, name, None) => {
                            let error = if name.is_none() {
                                "tool_use has no name"
                            } else {
                                "tool_use input is not a JSON object"
                            };
                            let raw = input.map(|i| match i {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            });
                            calls.invalid(id, name, raw, error);
                        }
                    }
                }
                _ => plain_text = false,
            }
        }

        let content = if plain_text {
            let text: String = self
                .blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            Content::Text(text)
        } else {
            Content::Blocks(self.blocks)
        };

        let mut response_metadata = response_metadata(
            self.stop_reason.as_deref().map(finish_reason),
            self.model,
            default_model,
            self.provider_id,
        );
        response_metadata.insert(
            "stop_reason".into(),
            self.stop_reason.map_or(Value::Null, Value::String),
        );
        response_metadata.insert(
            "stop_sequence".into(),
            self.stop_sequence.map_or(Value::Null, Value::String),
        );

        let usage = self.usage.map(WireUsage::into_usage);
        let kwargs = reasoning_kwargs(reasoning);
        answer_message(message_id, content, kwargs, response_metadata, calls, usage)
    }
}

/// A `message` object, as much of it as we read.
#[derive(Debug, Deserialize)]
struct WireMessage {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    model: Option<String>,
    content: Option<Vec<Value>>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

/// The provider's description of an `error` object (`"<type>: <message>"`).
pub(crate) fn error_text(error: &Value) -> String {
    error_description(error, Some("type"))
}

/// Parse a 2xx non-streaming body.
pub(crate) fn parse_message(
    body: &[u8],
    message_id: &str,
    default_model: &str,
) -> Result<AiMessage, ModelError> {
    let wire: WireMessage = decode_json(body, "response is not a Messages API message")?;
    error_in_answer(wire.error.as_ref(), error_text)?;
    check_kind("type", wire.kind.as_deref(), "message")?;
    let Some(blocks) = wire.content else {
        return Err(ModelError::Decode("response has no content".into()));
    };
    let parts = Parts {
        blocks,
        bad_inputs: Vec::new(),
        stop_reason: wire.stop_reason,
        stop_sequence: wire.stop_sequence,
        model: wire.model,
        provider_id: wire.id,
        usage: wire.usage,
    };
    Ok(parts.into_message(message_id, default_model))
}
