//! Turning a Responses API `response` into a LangChain-shaped [`AiMessage`].
//!
//! Both paths end in [`Parts::into_message`]: the non-streaming path reads [`Parts`] from one
//! `response` object, the streaming path rebuilds the same output items from the events (or
//! takes them from `response.completed`). So a streamed answer folds into the message the same
//! answer gives unstreamed.

use antler_protocol::{AiMessage, Content, Object, UsageMetadata};
use serde::Deserialize;
use serde_json::Value;

use crate::providers::mapping::{
    answer_message, call_id_or_new, check_kind, decode_json, error_description, error_in_answer,
    reasoning_kwargs, response_metadata, token_details, Calls,
};
use crate::ModelError;

/// The Responses API's `usage`.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
    input_tokens_details: Option<Value>,
    output_tokens_details: Option<Value>,
}

impl WireUsage {
    /// langchain-openai's reading: cached prompt tokens itemised as `cache_read`, reasoning
    /// tokens as `reasoning`.
    pub(crate) fn into_usage(self) -> UsageMetadata {
        let input = self.input_tokens.unwrap_or(0);
        let output = self.output_tokens.unwrap_or(0);
        let mut usage = UsageMetadata::new(input, output);
        if let Some(t) = self.total_tokens {
            usage.total_tokens = t;
        }
        let detail = |d: &Option<Value>, from: &str, to: &str| {
            token_details([(
                to,
                d.as_ref().and_then(|d| d.get(from)).and_then(Value::as_u64),
            )])
        };
        usage.input_token_details =
            detail(&self.input_tokens_details, "cached_tokens", "cache_read");
        usage.output_token_details =
            detail(&self.output_tokens_details, "reasoning_tokens", "reasoning");
        usage
    }
}

/// A `response` object, as much of it as we read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireResponse {
    pub id: Option<String>,
    pub object: Option<String>,
    pub status: Option<String>,
    pub model: Option<String>,
    pub output: Option<Vec<Value>>,
    pub usage: Option<WireUsage>,
    pub incomplete_details: Option<Value>,
    pub error: Option<Value>,
}

/// Everything the final message is built from.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    /// The output items, in order, as the API sent them.
    pub output: Vec<Value>,
    pub status: Option<String>,
    pub incomplete_details: Option<Value>,
    pub model: Option<String>,
    pub provider_id: Option<String>,
    pub usage: Option<WireUsage>,
}

fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or("")
}

/// The text of a reasoning item's summaries, joined with blank lines.
pub(crate) fn summary_text(item: &Value) -> String {
    let mut out = String::new();
    for s in item
        .get("summary")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = s
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(t);
        }
    }
    out
}

impl Parts {
    pub(crate) fn from_response(wire: WireResponse) -> Self {
        Parts {
            output: wire.output.unwrap_or_default(),
            status: wire.status,
            incomplete_details: wire.incomplete_details.filter(|d| !d.is_null()),
            model: wire.model,
            provider_id: wire.id,
            usage: wire.usage,
        }
    }

    pub(crate) fn into_message(self, message_id: &str, default_model: &str) -> AiMessage {
        let mut text = String::new();
        let mut blocks: Vec<Value> = Vec::new();
        let mut reasoning = String::new();
        let mut refusal: Option<String> = None;
        let mut has_reasoning = false;
        let mut calls = Calls::default();
        for item in self.output {
            match item_type(&item) {
                "message" => {
                    let id = item.get("id").cloned();
                    for part in item
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        match item_type(part) {
                            "output_text" => {
                                let t = part.get("text").and_then(Value::as_str).unwrap_or("");
                                text.push_str(t);
                                let mut block = Object::new();
                                block.insert("type".into(), Value::from("text"));
                                block.insert("text".into(), Value::from(t));
                                if let Some(a) = part.get("annotations") {
                                    block.insert("annotations".into(), a.clone());
                                }
                                if let Some(id) = &id {
                                    block.insert("id".into(), id.clone());
                                }
                                blocks.push(Value::Object(block));
                            }
                            "refusal" => {
                                if let Some(r) = part.get("refusal").and_then(Value::as_str) {
                                    refusal.get_or_insert_with(String::new).push_str(r);
                                }
                            }
                            _ => {}
                        }
                    }
                }
                "reasoning" => {
                    has_reasoning = true;
                    let summary = summary_text(&item);
                    if !summary.is_empty() {
                        if !reasoning.is_empty() {
                            reasoning.push_str("\n\n");
                        }
                        reasoning.push_str(&summary);
                    }
                    let mut block = Object::new();
                    block.insert("type".into(), Value::from("reasoning"));
                    for key in ["id", "summary", "encrypted_content"] {
                        if let Some(v) = item.get(key).filter(|v| !v.is_null()) {
                            block.insert(key.into(), v.clone());
                        }
                    }
                    blocks.push(Value::Object(block));
                }
                "function_call" => {
                    let call_id = call_id_or_new(
                        item.get("call_id")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    );
                    let name = item
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                        .map(str::to_owned);
                    let raw = item.get("arguments").and_then(Value::as_str).unwrap_or("");
                    let parsed = if raw.trim().is_empty() {
                        Ok(Object::new())
                    } else {
                        match serde_json::from_str::<Value>(raw) {
                            Ok(Value::Object(o)) => Ok(o),
                            Ok(_) => {
                                Err("function call arguments are not a JSON object".to_owned())
                            }
                            Err(e) => {
                                Err(format!("function call arguments are not valid JSON: {e}"))
                            }
                        }
                    };
                    match (parsed, name) {
                        (Ok(args), Some(name)) => calls.valid(Some(call_id), name, args),
                        (parsed, name) => {
                            let error = parsed
                                .err()
                                .unwrap_or_else(|| "function call has no name".into());
                            calls.invalid(Some(call_id), name, Some(raw.to_owned()), error);
                        }
                    }
                }
                other => tracing::debug!(kind = other, "ignoring a Responses output item"),
            }
        }
        let content = if has_reasoning {
            Content::Blocks(blocks)
        } else {
            Content::Text(text)
        };
        let mut additional_kwargs = reasoning_kwargs(reasoning);
        if let Some(r) = refusal {
            additional_kwargs.insert("refusal".into(), Value::String(r));
        }
        let incomplete_reason = self
            .incomplete_details
            .as_ref()
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str);
        let finish_reason = match (self.status.as_deref(), incomplete_reason) {
            (Some("incomplete"), Some("max_output_tokens")) => Some("length"),
            (Some("incomplete"), Some(reason)) => Some(reason),
            (Some("incomplete"), None) => Some("length"),
            _ if !calls.is_empty() => Some("tool_calls"),
            (Some("completed"), _) => Some("stop"),
            (other, _) => other,
        };
        let mut meta =
            response_metadata(finish_reason, self.model, default_model, self.provider_id);
        if let Some(s) = self.status {
            meta.insert("status".into(), Value::String(s));
        }
        if let Some(d) = self.incomplete_details {
            meta.insert("incomplete_details".into(), d);
        }
        let usage = self.usage.map(WireUsage::into_usage);
        answer_message(message_id, content, additional_kwargs, meta, calls, usage)
    }
}

/// The text of an `error` object (`"<code>: <message>"`).
pub(crate) fn error_text(error: &Value) -> String {
    error_description(error, Some("code"))
}

/// Parse a 2xx non-streaming body.
pub(crate) fn parse_response(
    body: &[u8],
    message_id: &str,
    default_model: &str,
) -> Result<AiMessage, ModelError> {
    let wire: WireResponse = decode_json(body, "response is not a Responses API response")?;
    error_in_answer(wire.error.as_ref(), error_text)?;
    check_kind("object", wire.object.as_deref(), "response")?;
    if wire.output.is_none() {
        return Err(ModelError::Decode("response has no output".into()));
    }
    if wire.status.as_deref() == Some("failed") {
        return Err(ModelError::Decode(
            "response failed without an error".into(),
        ));
    }
    Ok(Parts::from_response(wire).into_message(message_id, default_model))
}
