//! Provider adapters: one HTTP driver ([`driver`]) and one wire module per API
//! ([`openai_compat`], [`anthropic`], [`gemini`], [`ollama`], [`openai_responses`]). Each wire module keeps its wire types private; how to add
//! one is in the [`driver`] docs.

pub mod anthropic;
pub(crate) mod chunked;
pub mod driver;
pub mod gemini;
pub(crate) mod http;
pub(crate) mod mapping;
pub mod ollama;
pub mod openai_compat;
pub mod openai_responses;
pub(crate) mod read;
pub(crate) mod sse;

pub use driver::{
    Framing, HttpChatModel, HttpModelConfig, SseEvent, StreamFold, WireFormat, DEFAULT_CALL_TIMEOUT,
};
