//! The stream fold of the APIs whose stream is a series of whole response objects (Gemini's SSE
//! chunks, Ollama's NDJSON lines): each chunk is decoded and folded into the same parts the
//! non-streaming path reads, so a streamed answer ends in the message the unstreamed one gives.

use antler_protocol::{AiMessage, AiMessageChunk};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::driver::{SseEvent, StreamFold};
use super::mapping::{decode_event, delta_chunk, error_mid_stream, has_payload};
use crate::{ChunkSink, ModelError};

/// The parts of an answer built from whole response objects.
pub trait ChunkedAnswer: Default {
    /// One response object of the stream.
    type Chunk: DeserializeOwned;
    /// The decode error of an event that is not a [`Self::Chunk`].
    const NOT_A_CHUNK: &'static str;

    /// The chunk's `error`, when it reports one instead of an answer.
    fn error(chunk: &Self::Chunk) -> Option<&Value>;

    /// The text of a chunk's `error`.
    fn error_text(error: &Value) -> String;

    /// Fold one chunk in, writing what it adds (text, reasoning, whole tool calls) into `out`.
    fn absorb_chunk(&mut self, chunk: Self::Chunk, out: &mut AiMessageChunk);

    /// The provider said the answer is complete.
    fn finished(&self) -> bool;

    /// Whether the stream ends here; by default it ends when the body does.
    fn ends_stream(&self) -> bool {
        false
    }

    /// The final message (`default_model` when the answer named none).
    fn into_message(self, message_id: &str, default_model: &str) -> AiMessage;
}

/// Accumulates a streamed answer of parts `P`.
#[derive(Debug)]
pub struct ChunkFold<'a, P> {
    message_id: &'a str,
    parts: P,
}

impl<'a, P: ChunkedAnswer> From<&'a str> for ChunkFold<'a, P> {
    fn from(message_id: &'a str) -> Self {
        ChunkFold {
            message_id,
            parts: P::default(),
        }
    }
}

impl<P: ChunkedAnswer> StreamFold for ChunkFold<'_, P> {
    fn on_event(&mut self, event: &SseEvent, emit: ChunkSink<'_>) -> Result<bool, ModelError> {
        let Some(chunk) = decode_event::<P::Chunk>(event, P::NOT_A_CHUNK)? else {
            return Ok(false);
        };
        error_mid_stream(P::error(&chunk), P::error_text)?;
        let mut out = delta_chunk(self.message_id);
        self.parts.absorb_chunk(chunk, &mut out);
        if has_payload(&out) {
            emit(out);
        }
        Ok(self.parts.ends_stream())
    }

    fn finished(&self) -> bool {
        self.parts.finished()
    }

    fn finish(self, default_model: &str) -> AiMessage {
        self.parts.into_message(self.message_id, default_model)
    }
}
