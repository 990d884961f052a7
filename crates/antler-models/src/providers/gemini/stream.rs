//! Folding `streamGenerateContent?alt=sse` chunks into deltas for the sink and the final message.
//!
//! Each SSE `data:` is a partial `GenerateContentResponse`: text and thought parts are deltas,
//! function calls arrive whole (forwarded as one complete `tool_call_chunk` each, indexed by
//! call), the last chunk carries `finishReason` and the full `usageMetadata`. The stream has no
//! end marker: it ends when the body does.

use antler_protocol::{AiMessage, Content, ToolCallChunk};
use serde_json::Value;

use super::response::{error_text, PartEvent, Parts, WireResponse};
use crate::providers::driver::{SseEvent, StreamFold};
use crate::providers::mapping::{
    append_str, decode_event, delta_chunk, error_mid_stream, has_payload,
};
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
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError> {
        let Some(wire) =
            decode_event::<WireResponse>(event, "stream chunk is not a GenerateContentResponse")?
        else {
            return Ok(false);
        };
        error_mid_stream(wire.error.as_ref(), error_text)?;
        let mut out = delta_chunk(self.message_id);
        let mut text = String::new();
        self.parts.absorb(wire, |part| match part {
            PartEvent::Text(t) => text.push_str(t),
            PartEvent::Thought(t) => append_str(&mut out.additional_kwargs, "reasoning_content", t),
            PartEvent::Call(call, index) => out.tool_call_chunks.push(ToolCallChunk {
                name: call.name.clone(),
                args: Some(match &call.args {
                    None | Some(Value::Null) => "{}".to_owned(),
                    Some(args) => args.to_string(),
                }),
                id: Some(call.id.clone()),
                index: Some(index as i64),
                kind: "tool_call_chunk".into(),
            }),
        });
        if !text.is_empty() {
            out.content = Content::Text(text);
        }
        if let Some(Value::String(r)) = out.additional_kwargs.get("reasoning_content") {
            if r.is_empty() {
                out.additional_kwargs.remove("reasoning_content");
            }
        }
        if has_payload(&out) {
            emit(out);
        }
        Ok(false)
    }

    fn finished(&self) -> bool {
        self.parts.finished()
    }

    fn finish(self, default_model: &str) -> AiMessage {
        self.parts.into_message(self.message_id, default_model)
    }
}
