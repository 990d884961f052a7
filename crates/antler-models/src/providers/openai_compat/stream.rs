//! Folding `chat.completion.chunk` events into deltas for the sink and the final message.

use std::collections::BTreeMap;

use antler_protocol::{AiMessage, Content, Object, ToolCallChunk};
use serde::Deserialize;
use serde_json::Value;

use super::response::{error_text, reasoning_text, Parts, WireUsage};
use crate::providers::driver::{SseEvent, StreamFold};
use crate::providers::mapping::{
    append_str, decode_event, delta_chunk, error_mid_stream, has_payload,
};
use crate::{ChunkSink, ModelError};

#[derive(Debug, Deserialize)]
struct WireChunk {
    id: Option<String>,
    model: Option<String>,
    system_fingerprint: Option<String>,
    choices: Option<Vec<WireChunkChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireChunkChoice {
    index: Option<u64>,
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireDelta {
    content: Option<Value>,
    reasoning_content: Option<String>,
    reasoning: Option<Value>,
    tool_calls: Option<Vec<WireToolCallDelta>>,
    refusal: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireToolCallDelta {
    index: Option<i64>,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

/// One tool call being reassembled.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Accumulates a streamed answer.
#[derive(Debug)]
pub struct Fold<'a> {
    message_id: &'a str,
    text: String,
    reasoning: String,
    refusal: Option<String>,
    calls: BTreeMap<i64, PartialCall>,
    /// Index of the call that received the last fragment (for providers that omit `index`).
    last_call: Option<i64>,
    finish_reason: Option<String>,
    model: Option<String>,
    provider_id: Option<String>,
    system_fingerprint: Option<String>,
    usage: Option<WireUsage>,
}

impl<'a> From<&'a str> for Fold<'a> {
    fn from(message_id: &'a str) -> Self {
        Fold {
            message_id,
            text: String::new(),
            reasoning: String::new(),
            refusal: None,
            calls: BTreeMap::new(),
            last_call: None,
            finish_reason: None,
            model: None,
            provider_id: None,
            system_fingerprint: None,
            usage: None,
        }
    }
}

impl Fold<'_> {
    fn on_tool_call(&mut self, call: WireToolCallDelta) -> ToolCallChunk {
        let (name, arguments) = match call.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let index = match call.index {
            Some(i) => i,
            // No index: a new id starts a new call, anything else continues the last one.
            None => match (&call.id, self.last_call) {
                (Some(id), Some(last))
                    if self.calls.get(&last).and_then(|c| c.id.as_ref()) == Some(id) =>
                {
                    last
                }
                (None, Some(last)) => last,
                _ => self.calls.keys().next_back().map_or(0, |k| k + 1),
            },
        };
        self.last_call = Some(index);
        let partial = self.calls.entry(index).or_default();
        if let Some(id) = call.id.as_ref().filter(|id| !id.is_empty()) {
            partial.id.get_or_insert_with(|| id.clone());
        }
        if let Some(n) = name.as_ref().filter(|n| !n.is_empty()) {
            partial.name.get_or_insert_with(|| n.clone());
        }
        if let Some(a) = &arguments {
            partial.arguments.push_str(a);
        }
        ToolCallChunk {
            name,
            args: arguments,
            id: call.id,
            index: Some(index),
            kind: "tool_call_chunk".into(),
        }
    }
}

fn keep_first(slot: &mut Option<String>, value: Option<String>) {
    if slot.is_none() {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            *slot = Some(v);
        }
    }
}

impl StreamFold for Fold<'_> {
    /// Fold one event; a delta worth forwarding (content, reasoning or tool-call fragments) goes
    /// to `emit`. `Ok(true)` on `data: [DONE]`.
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if event.event.as_deref() == Some("error") {
            let msg = serde_json::from_str::<Value>(data)
                .ok()
                .map(|v| error_text(v.get("error").unwrap_or(&v)))
                .unwrap_or_else(|| data.to_owned());
            return Err(ModelError::Stream(format!(
                "provider sent an error event: {msg}"
            )));
        }
        let Some(chunk) =
            decode_event::<WireChunk>(event, "stream event is not a chat completion chunk")?
        else {
            return Ok(false);
        };
        error_mid_stream(chunk.error.as_ref(), error_text)?;
        keep_first(&mut self.provider_id, chunk.id);
        keep_first(&mut self.model, chunk.model);
        keep_first(&mut self.system_fingerprint, chunk.system_fingerprint);
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let mut out = delta_chunk(self.message_id);
        let mut text_delta = String::new();
        for choice in chunk.choices.unwrap_or_default() {
            // `n > 1` is not supported: only the first choice is read.
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            match delta.content {
                Some(Value::String(s)) => text_delta.push_str(&s),
                // Content parts in a delta (rare): their text is the delta.
                Some(Value::Array(parts)) => {
                    for part in &parts {
                        if let Some(t) = part.get("text").and_then(Value::as_str) {
                            text_delta.push_str(t);
                        }
                    }
                }
                None | Some(_) => {}
            }
            if let Some(r) = reasoning_text(delta.reasoning_content, delta.reasoning) {
                if !r.is_empty() {
                    self.reasoning.push_str(&r);
                    append_str(&mut out.additional_kwargs, "reasoning_content", &r);
                }
            }
            if let Some(r) = delta.refusal {
                self.refusal.get_or_insert_with(String::new).push_str(&r);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                out.tool_call_chunks.push(self.on_tool_call(call));
            }
        }
        if !text_delta.is_empty() {
            self.text.push_str(&text_delta);
            out.content = Content::Text(text_delta);
        }
        if has_payload(&out) {
            emit(out);
        }
        Ok(false)
    }

    /// A finish reason means the answer is complete.
    fn finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    fn finish(self, default_model: &str) -> AiMessage {
        let raw_tool_calls = self
            .calls
            .into_values()
            .map(|c| {
                let mut function = Object::new();
                if let Some(name) = c.name {
                    function.insert("name".into(), Value::String(name));
                }
                function.insert("arguments".into(), Value::String(c.arguments));
                let mut entry = Object::new();
                if let Some(id) = c.id {
                    entry.insert("id".into(), Value::String(id));
                }
                entry.insert("type".into(), Value::from("function"));
                entry.insert("function".into(), Value::Object(function));
                Value::Object(entry)
            })
            .collect();
        let parts = Parts {
            content: Content::Text(self.text),
            reasoning: Some(self.reasoning),
            raw_tool_calls,
            refusal: self.refusal,
            finish_reason: self.finish_reason,
            model: self.model,
            provider_id: self.provider_id,
            system_fingerprint: self.system_fingerprint,
            usage: self.usage.map(WireUsage::into_usage),
        };
        parts.into_message(self.message_id, default_model)
    }
}
