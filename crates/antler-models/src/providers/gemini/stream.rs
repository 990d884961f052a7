//! Folding `streamGenerateContent?alt=sse` chunks into deltas for the sink and the final message.
//!
//! Each SSE `data:` is a partial `GenerateContentResponse`: text and thought parts are deltas,
//! function calls arrive whole (forwarded as one complete `tool_call_chunk` each, indexed by
//! call), the last chunk carries `finishReason` and the full `usageMetadata`. The stream has no
//! end marker: it ends when the body does.

use antler_protocol::{AiMessage, AiMessageChunk, Content};
use serde_json::Value;

use super::response::{error_text, PartEvent, Parts, WireResponse};
use crate::providers::chunked::{ChunkFold, ChunkedAnswer};
use crate::providers::mapping::{append_str, whole_call_chunk};

/// Accumulates a streamed answer.
pub type Fold<'a> = ChunkFold<'a, Parts>;

impl ChunkedAnswer for Parts {
    type Chunk = WireResponse;
    const NOT_A_CHUNK: &'static str = "stream chunk is not a GenerateContentResponse";

    fn error(chunk: &WireResponse) -> Option<&Value> {
        chunk.error.as_ref()
    }

    fn error_text(error: &Value) -> String {
        error_text(error)
    }

    fn absorb_chunk(&mut self, chunk: WireResponse, out: &mut AiMessageChunk) {
        let mut text = String::new();
        self.absorb(chunk, |part| match part {
            PartEvent::Text(t) => text.push_str(t),
            PartEvent::Thought(t) => append_str(&mut out.additional_kwargs, "reasoning_content", t),
            PartEvent::Call(call, index) => {
                let args = match &call.args {
                    None | Some(Value::Null) => "{}".to_owned(),
                    Some(args) => args.to_string(),
                };
                out.tool_call_chunks.push(whole_call_chunk(
                    &call.id,
                    call.name.clone(),
                    args,
                    index,
                ));
            }
        });
        if !text.is_empty() {
            out.content = Content::Text(text);
        }
        if let Some(Value::String(r)) = out.additional_kwargs.get("reasoning_content") {
            if r.is_empty() {
                out.additional_kwargs.remove("reasoning_content");
            }
        }
    }

    fn finished(&self) -> bool {
        Parts::finished(self)
    }

    fn into_message(self, message_id: &str, default_model: &str) -> AiMessage {
        Parts::into_message(self, message_id, default_model)
    }
}
