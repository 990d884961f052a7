//! Folding `/api/chat` NDJSON lines into deltas for the sink and the final message.
//!
//! Every line is a response object: `message.content` and `message.thinking` are deltas,
//! `message.tool_calls` arrive whole (forwarded as complete `tool_call_chunk`s, indexed by call),
//! and the line with `done: true` carries `done_reason` and the eval counts and ends the stream.
//! A line `{"error": "…"}` is a failure mid-stream.

use antler_protocol::{AiMessage, AiMessageChunk, Content};
use serde_json::Value;

use super::response::{error_text, Parts, WireChat};
use crate::providers::chunked::{ChunkFold, ChunkedAnswer};
use crate::providers::mapping::whole_call_chunk;

/// Accumulates a streamed answer.
pub type Fold<'a> = ChunkFold<'a, Parts>;

impl ChunkedAnswer for Parts {
    type Chunk = WireChat;
    const NOT_A_CHUNK: &'static str = "stream line is not an Ollama chat response";

    fn error(chunk: &WireChat) -> Option<&Value> {
        chunk.error.as_ref()
    }

    fn error_text(error: &Value) -> String {
        error_text(error)
    }

    fn absorb_chunk(&mut self, chunk: WireChat, out: &mut AiMessageChunk) {
        let (text, thinking, first_new) = self.absorb(chunk);
        if !text.is_empty() {
            out.content = Content::Text(text);
        }
        if !thinking.is_empty() {
            out.additional_kwargs
                .insert("reasoning_content".into(), Value::String(thinking));
        }
        for (index, call) in self.calls.iter().enumerate().skip(first_new) {
            let args = match &call.arguments {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            out.tool_call_chunks
                .push(whole_call_chunk(&call.id, call.name.clone(), args, index));
        }
    }

    fn finished(&self) -> bool {
        self.done
    }

    /// The `done` line ends the stream.
    fn ends_stream(&self) -> bool {
        self.done
    }

    fn into_message(self, message_id: &str, default_model: &str) -> AiMessage {
        Parts::into_message(self, message_id, default_model)
    }
}
