//! The [`ChatModel`] trait and its providers.
//!
//! Provider wire types never leave their module under `providers/`; the runtime sees only
//! LangChain-shaped [`AiMessage`]s and [`AiMessageChunk`]s and typed [`ModelError`]s.

use std::sync::Arc;
use std::time::Duration;

use antler_protocol::{AiMessage, AiMessageChunk, Message, Object, ToolSpec};
use async_trait::async_trait;
use serde_json::Value;

pub mod providers;
pub mod scripted;
pub mod tls;
pub mod tokens;

pub use providers::mapping::EncodingCache;
pub use scripted::{RecordedRequest, ScriptedModel, ScriptedReply};
pub use tokens::TokenCounter;

/// What the runtime knows about a configured model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelInfo {
    /// The config entry's `name`.
    pub name: String,
    /// The provider's model id (the `model:` key), sent in requests.
    pub model: String,
    /// `openai`, `anthropic`, `scripted`, … (used as `ls_provider` in stream metadata).
    pub provider: String,
    pub supports_vision: bool,
    pub supports_thinking: bool,
    pub context_window: Option<u64>,
    /// `streaming:` from config: `Some(true)` always stream, `Some(false)` never, `None` when a
    /// consumer wants tokens.
    pub streaming: Option<bool>,
}

/// One model call, borrowed from the runtime's request so nothing is copied on the hot path.
#[derive(Clone, Copy, Debug)]
pub struct ChatRequest<'a> {
    /// The static system prompt, sent first.
    pub system: Option<&'a str>,
    pub messages: &'a [Arc<Message>],
    pub tools: &'a [Arc<ToolSpec>],
    /// Provider-neutral tool choice (`"auto"`, `"none"`, `"required"` or `{"name": …}`).
    pub tool_choice: Option<&'a Value>,
    /// Per-call overrides merged over the model's configured settings (`temperature`,
    /// `max_tokens`, …).
    pub settings: &'a Object,
    /// Id to give the resulting AI message and every chunk of it.
    pub message_id: &'a str,
    /// Encodings kept across the calls of this conversation (the run's); `None` encodes the
    /// whole history each call.
    pub encodings: Option<&'a EncodingCache>,
}

/// Receives streamed deltas as they arrive.
pub type ChunkSink<'a> = &'a mut (dyn FnMut(AiMessageChunk) + Send);

/// A chat model. Implementations must be cheap to share (`Arc<dyn ChatModel>`).
#[async_trait]
pub trait ChatModel: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// One non-streaming call.
    async fn invoke(&self, req: ChatRequest<'_>) -> Result<AiMessage, ModelError>;

    /// A streaming call: every delta goes to `on_chunk`; the folded message is returned.
    /// The default implementation invokes and emits the whole answer as one chunk.
    async fn stream(
        &self,
        req: ChatRequest<'_>,
        on_chunk: ChunkSink<'_>,
    ) -> Result<AiMessage, ModelError> {
        let msg = self.invoke(req).await?;
        on_chunk(chunk_of_message(&msg));
        Ok(msg)
    }
}

/// The whole of `msg` as a single final chunk (tool calls as complete chunks).
pub fn chunk_of_message(msg: &AiMessage) -> AiMessageChunk {
    AiMessageChunk {
        content: msg.content.clone(),
        additional_kwargs: (*msg.additional_kwargs).clone(),
        response_metadata: (*msg.response_metadata).clone(),
        name: msg.name.clone(),
        id: msg.id.clone(),
        tool_call_chunks: msg
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| antler_protocol::ToolCallChunk {
                name: Some(c.name.clone()),
                args: Some(Value::Object(c.args.clone()).to_string()),
                id: c.id.clone(),
                index: Some(i as i64),
                kind: "tool_call_chunk".into(),
            })
            .collect(),
        usage_metadata: msg.usage_metadata.clone(),
        chunk_position: Some("last".into()),
    }
}

/// A failed model call. Variants say whether a retry can help; the retry and circuit-breaker
/// policy lives in the LLM error-handling middleware.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// The provider answered with a non-success status. Retriable for 408/409/429/5xx.
    #[error("provider returned HTTP {status}: {message}")]
    Http {
        status: u16,
        /// Parsed `Retry-After` (seconds or HTTP date) or `retry-after-ms`.
        retry_after: Option<Duration>,
        /// The provider's error message (from its JSON error body when present).
        message: String,
        /// The provider's error code/type (`insufficient_quota`, `rate_limit_exceeded`, …).
        code: Option<String>,
        /// The raw response body.
        body: String,
    },
    /// No response (or no stream chunk) within the configured timeout. Transient.
    #[error("model request timed out after {0:?}")]
    Timeout(Duration),
    /// Connection refused/reset, DNS failure. Transient.
    #[error("could not reach the model provider: {0}")]
    Connect(String),
    /// The stream broke off or carried an error event mid-way. Transient.
    #[error("model stream failed: {0}")]
    Stream(String),
    /// The provider answered 2xx with a body we cannot read. Not retriable.
    #[error("malformed provider response: {0}")]
    Decode(String),
    /// The request could not be built (bad settings). Not retriable.
    #[error("invalid model request: {0}")]
    InvalidRequest(String),
    /// A scripted model ran out of replies (tests only).
    #[error("scripted model has no reply left for request #{0}")]
    ScriptExhausted(usize),
}

impl ModelError {
    /// HTTP status, when the provider answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ModelError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether repeating the same request may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ModelError::Http { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429) || *status >= 500
            }
            ModelError::Timeout(_) | ModelError::Connect(_) | ModelError::Stream(_) => true,
            ModelError::Decode(_)
            | ModelError::InvalidRequest(_)
            | ModelError::ScriptExhausted(_) => false,
        }
    }
}
