//! Folding `/api/chat` NDJSON lines into deltas for the sink and the final message.
//!
//! Every line is a response object: `message.content` and `message.thinking` are deltas,
//! `message.tool_calls` arrive whole (forwarded as complete `tool_call_chunk`s, indexed by call),
//! and the line with `done: true` carries `done_reason` and the eval counts and ends the stream.
//! A line `{"error": "…"}` is a failure mid-stream.

use antler_protocol::{AiMessage, Content, ToolCallChunk};
use serde_json::Value;

use super::response::{error_text, Parts, WireChat};
use crate::providers::driver::{SseEvent, StreamFold};
use crate::providers::mapping::{decode_event, delta_chunk, error_mid_stream, has_payload};
use crate::{ChunkSink, ModelError};

/// Accumulates a streamed answer.
#[derive(Debug)]
pub struct Fold<'a> {
    message_id: &'a str,
    parts: Parts,
}

impl<'a> Fold<'a> {
    pub(crate) fn new(message_id: &'a str) -> Self {
        Fold {
            message_id,
            parts: Parts::default(),
        }
    }
}

impl StreamFold for Fold<'_> {
    /// `Ok(true)` on the `done` line.
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError> {
        let Some(wire) =
            decode_event::<WireChat>(event, "stream line is not an Ollama chat response")?
        else {
            return Ok(false);
        };
        error_mid_stream(wire.error.as_ref(), error_text)?;
        let (text, thinking, first_new) = self.parts.absorb(wire);
        let mut out = delta_chunk(self.message_id);
        if !text.is_empty() {
            out.content = Content::Text(text);
        }
        if !thinking.is_empty() {
            out.additional_kwargs
                .insert("reasoning_content".into(), Value::String(thinking));
        }
        for (index, call) in self.parts.calls.iter().enumerate().skip(first_new) {
            out.tool_call_chunks.push(ToolCallChunk {
                name: call.name.clone(),
                args: Some(match &call.arguments {
                    None | Some(Value::Null) => "{}".to_owned(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                }),
                id: Some(call.id.clone()),
                index: Some(index as i64),
                kind: "tool_call_chunk".into(),
            });
        }
        if has_payload(&out) {
            emit(out);
        }
        Ok(self.parts.done)
    }

    fn finished(&self) -> bool {
        self.parts.done
    }

    fn finish(self, default_model: &str) -> AiMessage {
        self.parts.into_message(self.message_id, default_model)
    }
}
