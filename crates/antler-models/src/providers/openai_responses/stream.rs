//! Folding Responses API stream events into deltas for the sink and the final message.
//!
//! Output items are rebuilt by `output_index` from `response.output_item.added` plus their
//! deltas (`response.output_text.delta`, `response.function_call_arguments.delta`,
//! `response.reasoning_summary_text.delta`); `response.output_item.done` replaces an item with
//! its final form, and `response.completed` / `response.incomplete` carry the whole response
//! (status, usage, and the output, which wins when present) and end the stream. Forwarded deltas:
//! text as `content`, reasoning summaries as `additional_kwargs.reasoning_content`, function
//! calls as `tool_call_chunks` whose `index` counts calls (0, 1, …). `response.failed` and
//! `error` events are stream errors.

use std::collections::BTreeMap;

use antler_protocol::{AiMessage, Content, Object, ToolCallChunk};
use serde_json::Value;

use super::response::{error_text, Parts, WireResponse};
use crate::providers::driver::{SseEvent, StreamFold};
use crate::providers::mapping::{append_str, decode_event, delta_chunk, event_type, has_payload};
use crate::{ChunkSink, ModelError};

/// One output item being rebuilt.
#[derive(Debug)]
struct Item {
    value: Value,
    /// Ordinal of a `function_call` item among the answer's calls.
    call_index: Option<i64>,
}

/// Accumulates a streamed answer.
#[derive(Debug)]
pub struct Fold<'a> {
    message_id: &'a str,
    items: BTreeMap<u64, Item>,
    calls: i64,
    /// The response from `response.completed` / `response.incomplete`.
    done: Option<WireResponse>,
    provider_id: Option<String>,
    model: Option<String>,
}

impl<'a> From<&'a str> for Fold<'a> {
    fn from(message_id: &'a str) -> Self {
        Fold {
            message_id,
            items: BTreeMap::new(),
            calls: 0,
            done: None,
            provider_id: None,
            model: None,
        }
    }
}

impl Fold<'_> {
    fn item(&mut self, v: &Value) -> Option<&mut Item> {
        let index = v.get("output_index").and_then(Value::as_u64)?;
        self.items.get_mut(&index)
    }
}

/// Append `delta` to the `text` of `list[index]`, creating entries as needed.
fn append_at(list: &mut Value, index: usize, kind: &str, delta: &str) {
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(items) = list {
        while items.len() <= index {
            let mut entry = Object::new();
            entry.insert("type".into(), Value::from(kind));
            entry.insert("text".into(), Value::from(""));
            items.push(Value::Object(entry));
        }
        if let Value::Object(entry) = &mut items[index] {
            append_str(entry, "text", delta);
        }
    }
}

impl StreamFold for Fold<'_> {
    /// `Ok(true)` on `response.completed` / `response.incomplete`.
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError> {
        if event.data.trim() == "[DONE]" {
            return Ok(false);
        }
        let Some(mut v) = decode_event::<Value>(event, "stream event is not JSON")? else {
            return Ok(false);
        };
        let kind = event_type(&v, event);
        let mut out = delta_chunk(self.message_id);
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" => {
                if let Some(r) = v.get("response") {
                    if self.provider_id.is_none() {
                        self.provider_id = r.get("id").and_then(Value::as_str).map(str::to_owned);
                    }
                    if self.model.is_none() {
                        self.model = r.get("model").and_then(Value::as_str).map(str::to_owned);
                    }
                }
            }
            "response.output_item.added" => {
                let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
                let item = v.get_mut("item").map(Value::take).unwrap_or_default();
                let mut call_index = None;
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    let i = self.calls;
                    self.calls += 1;
                    call_index = Some(i);
                    out.tool_call_chunks.push(ToolCallChunk {
                        name: item.get("name").and_then(Value::as_str).map(str::to_owned),
                        args: Some(text(&item, "arguments")),
                        id: item
                            .get("call_id")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        index: Some(i),
                        kind: "tool_call_chunk".into(),
                    });
                }
                self.items.insert(
                    index,
                    Item {
                        value: item,
                        call_index,
                    },
                );
            }
            "response.output_text.delta" => {
                let delta = text(&v, "delta");
                let part = v.get("content_index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let Some(item) = self.item(&v) {
                    let content = match &mut item.value {
                        Value::Object(o) => o.entry("content").or_insert(Value::Null),
                        _ => return Ok(false),
                    };
                    append_at(content, part, "output_text", &delta);
                }
                out.content = Content::Text(delta);
            }
            "response.function_call_arguments.delta" => {
                let delta = text(&v, "delta");
                if let Some(item) = self.item(&v) {
                    if let Value::Object(o) = &mut item.value {
                        append_str(o, "arguments", &delta);
                    }
                    if let (Some(i), false) = (item.call_index, delta.is_empty()) {
                        out.tool_call_chunks.push(ToolCallChunk {
                            name: None,
                            args: Some(delta),
                            id: None,
                            index: Some(i),
                            kind: "tool_call_chunk".into(),
                        });
                    }
                }
            }
            "response.reasoning_summary_text.delta" => {
                let delta = text(&v, "delta");
                let part = v.get("summary_index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let Some(item) = self.item(&v) {
                    if let Value::Object(o) = &mut item.value {
                        let summary = o.entry("summary").or_insert(Value::Null);
                        append_at(summary, part, "summary_text", &delta);
                    }
                }
                if !delta.is_empty() {
                    out.additional_kwargs
                        .insert("reasoning_content".into(), Value::String(delta));
                }
            }
            "response.output_item.done" => {
                let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(done) = v.get_mut("item").map(Value::take) {
                    match self.items.get_mut(&index) {
                        Some(item) => item.value = done,
                        None => {
                            self.items.insert(
                                index,
                                Item {
                                    value: done,
                                    call_index: None,
                                },
                            );
                        }
                    }
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = v.get_mut("response").map(Value::take).unwrap_or_default();
                let wire: WireResponse = serde_json::from_value(response).map_err(|e| {
                    ModelError::Decode(format!("{kind} does not carry a response: {e}"))
                })?;
                self.done = Some(wire);
                return Ok(true);
            }
            "response.failed" => {
                let error = v.pointer("/response/error").filter(|e| !e.is_null());
                let text = error.map_or_else(|| "response failed".to_owned(), error_text);
                return Err(ModelError::Stream(format!(
                    "provider reported a failed response: {text}"
                )));
            }
            "error" => {
                return Err(ModelError::Stream(format!(
                    "provider sent an error event: {}",
                    error_text(v.get("error").unwrap_or(&v))
                )));
            }
            // Part boundaries, `.done` events whose content the deltas already gave, and event
            // types added after this was written.
            _ => {}
        }
        if has_payload(&out) {
            emit(out);
        }
        Ok(false)
    }

    fn finished(&self) -> bool {
        self.done.is_some()
    }

    fn finish(self, default_model: &str) -> AiMessage {
        let built: Vec<Value> = self.items.into_values().map(|i| i.value).collect();
        let parts = match self.done {
            Some(mut wire) => {
                if wire.output.as_ref().is_none_or(Vec::is_empty) {
                    wire.output = Some(built);
                }
                wire.id = wire.id.or(self.provider_id);
                wire.model = wire.model.or(self.model);
                Parts::from_response(wire)
            }
            None => Parts {
                output: built,
                model: self.model,
                provider_id: self.provider_id,
                ..Parts::default()
            },
        };
        parts.into_message(self.message_id, default_model)
    }
}
