//! Folding Messages SSE events into deltas for the sink and the final message.
//!
//! Content blocks are rebuilt by their wire `index` from `content_block_start` plus deltas
//! (`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`, `citations_delta`);
//! the finished blocks go through the same [`Parts::into_message`] as a non-streamed answer.
//! Forwarded deltas: text as `content`, thinking as `additional_kwargs.reasoning_content`, tool
//! input as `tool_call_chunks` whose `index` counts tool calls (0, 1, …) like OpenAI's.

use std::collections::BTreeMap;

use antler_protocol::{AiMessage, Content, Object, ToolCallChunk};
use serde_json::Value;

use super::response::{error_text, BadInput, Parts, WireUsage};
use crate::providers::driver::{SseEvent, StreamFold};
use crate::providers::mapping::{append_str, decode_event, delta_chunk, event_type, has_payload};
use crate::{ChunkSink, ModelError};

/// One content block being rebuilt.
#[derive(Debug)]
struct Block {
    /// The block from `content_block_start`, deltas applied.
    value: Object,
    /// Accumulated `input_json_delta` fragments, for blocks that carry an `input`.
    json: Option<String>,
    /// Ordinal of a `tool_use` block among the answer's tool calls.
    tool_index: Option<i64>,
}

/// Accumulates a streamed answer.
#[derive(Debug)]
pub struct Fold<'a> {
    message_id: &'a str,
    blocks: BTreeMap<u64, Block>,
    tool_calls: i64,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
    model: Option<String>,
    provider_id: Option<String>,
    usage: Option<WireUsage>,
}

impl<'a> From<&'a str> for Fold<'a> {
    fn from(message_id: &'a str) -> Self {
        Fold {
            message_id,
            blocks: BTreeMap::new(),
            tool_calls: 0,
            stop_reason: None,
            stop_sequence: None,
            model: None,
            provider_id: None,
            usage: None,
        }
    }
}

impl Fold<'_> {
    fn on_usage(&mut self, usage: Value) {
        match serde_json::from_value::<WireUsage>(usage) {
            Ok(u) => match &mut self.usage {
                Some(prev) => prev.update(u),
                None => self.usage = Some(u),
            },
            Err(e) => tracing::debug!(error = %e, "ignoring an unreadable usage object"),
        }
    }

    fn on_block_start(&mut self, index: u64, value: Object, emit: ChunkSink<'_>) {
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        let mut out = delta_chunk(self.message_id);
        let mut tool_index = None;
        match kind {
            "text" => {
                if let Some(t) = value.get("text").and_then(Value::as_str) {
                    out.content = Content::Text(t.to_owned());
                }
            }
            "thinking" => {
                if let Some(t) = value.get("thinking").and_then(Value::as_str) {
                    if !t.is_empty() {
                        out.additional_kwargs
                            .insert("reasoning_content".into(), Value::from(t));
                    }
                }
            }
            "tool_use" => {
                let i = self.tool_calls;
                self.tool_calls += 1;
                tool_index = Some(i);
                out.tool_call_chunks.push(ToolCallChunk {
                    name: value.get("name").and_then(Value::as_str).map(str::to_owned),
                    args: Some(String::new()),
                    id: value.get("id").and_then(Value::as_str).map(str::to_owned),
                    index: Some(i),
                    kind: "tool_call_chunk".into(),
                });
            }
            _ => {}
        }
        // The start block's `input` is a placeholder (`{}`) that the JSON deltas replace.
        let json = value.contains_key("input").then(String::new);
        if self
            .blocks
            .insert(
                index,
                Block {
                    value,
                    json,
                    tool_index,
                },
            )
            .is_some()
        {
            tracing::debug!(index, "content block index reused; the later block wins");
        }
        if has_payload(&out) {
            emit(out);
        }
    }

    fn on_delta(&mut self, index: u64, delta: Value, emit: ChunkSink<'_>) {
        let mut out = delta_chunk(self.message_id);
        let Some(block) = self.blocks.get_mut(&index) else {
            tracing::debug!(
                index,
                "delta for a content block that never started; ignored"
            );
            return;
        };
        let text = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or("");
        match delta.get("type").and_then(Value::as_str).unwrap_or("") {
            "text_delta" => {
                let t = text("text");
                append_str(&mut block.value, "text", t);
                out.content = Content::Text(t.to_owned());
            }
            "thinking_delta" => {
                let t = text("thinking");
                append_str(&mut block.value, "thinking", t);
                if !t.is_empty() {
                    out.additional_kwargs
                        .insert("reasoning_content".into(), Value::from(t));
                }
            }
            "signature_delta" => append_str(&mut block.value, "signature", text("signature")),
            "input_json_delta" => {
                let t = text("partial_json");
                block.json.get_or_insert_with(String::new).push_str(t);
                if let (Some(i), false) = (block.tool_index, t.is_empty()) {
                    out.tool_call_chunks.push(ToolCallChunk {
                        name: None,
                        args: Some(t.to_owned()),
                        id: None,
                        index: Some(i),
                        kind: "tool_call_chunk".into(),
                    });
                }
            }
            "citations_delta" => {
                if let Some(c) = delta.get("citation") {
                    match block.value.get_mut("citations") {
                        Some(Value::Array(list)) => list.push(c.clone()),
                        _ => {
                            block
                                .value
                                .insert("citations".into(), Value::Array(vec![c.clone()]));
                        }
                    }
                }
            }
            other => tracing::debug!(delta = other, "ignoring an unknown delta type"),
        }
        if has_payload(&out) {
            emit(out);
        }
    }
}

fn index_of(v: &Value) -> Result<u64, ModelError> {
    v.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| ModelError::Decode(format!("stream event without an index: {v}")))
}

/// The accumulated tool input: `None` when no fragment arrived, an error text when it is not a
/// JSON object.
fn parse_input(json: &str) -> Result<Option<Object>, String> {
    if json.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(o)) => Ok(Some(o)),
        Ok(_) => Err("tool_use input is not a JSON object".into()),
        Err(e) => Err(format!("tool_use input is not valid JSON: {e}")),
    }
}

impl StreamFold for Fold<'_> {
    /// `Ok(true)` on `message_stop`.
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError> {
        let Some(mut v) = decode_event::<Value>(event, "stream event is not JSON")? else {
            return Ok(false);
        };
        let kind = event_type(&v, event);
        match kind.as_str() {
            "message_start" => {
                let Some(Value::Object(mut message)) = v.get_mut("message").map(Value::take) else {
                    return Ok(false);
                };
                if let Some(Value::String(id)) = message.remove("id") {
                    self.provider_id = Some(id);
                }
                if let Some(Value::String(model)) = message.remove("model") {
                    self.model = Some(model);
                }
                if let Some(usage) = message.remove("usage") {
                    self.on_usage(usage);
                }
            }
            "content_block_start" => {
                let index = index_of(&v)?;
                let Some(Value::Object(value)) = v.get_mut("content_block").map(Value::take) else {
                    return Err(ModelError::Decode(
                        "content_block_start without a content_block".into(),
                    ));
                };
                self.on_block_start(index, value, emit);
            }
            "content_block_delta" => {
                let index = index_of(&v)?;
                let delta = v.get_mut("delta").map(Value::take).unwrap_or_default();
                self.on_delta(index, delta, emit);
            }
            "message_delta" => {
                if let Some(delta) = v.get("delta") {
                    if let Some(r) = delta.get("stop_reason").and_then(Value::as_str) {
                        self.stop_reason = Some(r.to_owned());
                    }
                    if let Some(s) = delta.get("stop_sequence").and_then(Value::as_str) {
                        self.stop_sequence = Some(s.to_owned());
                    }
                }
                if let Some(usage) = v.get_mut("usage").map(Value::take) {
                    self.on_usage(usage);
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let text = v
                    .get("error")
                    .map_or_else(|| event.data.trim().to_owned(), error_text);
                return Err(ModelError::Stream(format!(
                    "provider sent an error event: {text}"
                )));
            }
            // `ping`, `content_block_stop` and event types added after this was written.
            _ => {}
        }
        Ok(false)
    }

    /// A stop reason means the answer is complete.
    fn finished(&self) -> bool {
        self.stop_reason.is_some()
    }

    /// The API's `ping` events keep an idle stream open; they say nothing about the answer.
    fn is_keepalive(&self, event: &SseEvent) -> bool {
        match event.event.as_deref() {
            Some(name) => name == "ping",
            // Pings are tiny; never parse a real event twice just to ask.
            None => {
                event.data.len() < 64
                    && serde_json::from_str::<Value>(&event.data)
                        .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("ping"))
            }
        }
    }

    fn finish(self, default_model: &str) -> AiMessage {
        let mut blocks = Vec::with_capacity(self.blocks.len());
        let mut bad_inputs = Vec::new();
        for (pos, (_, block)) in self.blocks.into_iter().enumerate() {
            let mut value = block.value;
            if let Some(json) = block.json {
                match parse_input(&json) {
                    Ok(Some(input)) => {
                        value.insert("input".into(), Value::Object(input));
                    }
                    // No fragments: the start block's `input` stands.
                    Ok(None) => {}
                    Err(error) => {
                        value.insert("input".into(), Value::Object(Object::new()));
                        bad_inputs.push(BadInput {
                            block: pos,
                            raw: json,
                            error,
                        });
                    }
                }
            }
            blocks.push(Value::Object(value));
        }
        let parts = Parts {
            blocks,
            bad_inputs,
            stop_reason: self.stop_reason,
            stop_sequence: self.stop_sequence,
            model: self.model,
            provider_id: self.provider_id,
            usage: self.usage,
        };
        parts.into_message(self.message_id, default_model)
    }
}
