//! Dev-only helpers shared by antler's tests: mock model servers on `127.0.0.1` with scripted
//! replies, request recording and the vendor's request checks (tool-call pairing, …) on every
//! request — one server core ([`mock::MockServer`]) with a wire module per vendor
//! ([`openai`]: [`MockOpenAi`], [`anthropic`]: [`MockAnthropic`], [`gemini`]: [`MockGemini`],
//! [`ollama`]: [`MockOllama`], [`responses`]: [`MockResponses`]).
//!
//! ```no_run
//! # async fn demo() {
//! use antler_test_support::{MockOpenAi, MockReply};
//! let mock = MockOpenAi::start().await.with_replies(vec![
//!     MockReply::tool_call("call_1", "bash", serde_json::json!({"command": "ls"})),
//!     MockReply::text("done").usage(10, 2),
//! ]);
//! // point a model at mock.base_url() …
//! mock.assert_no_violations();
//! # }
//! ```

pub mod anthropic;
pub mod dd_mw_support;
pub mod gemini;
pub mod mcp_peers;
pub mod mock;
pub mod ollama;
pub mod openai;
pub mod redact;
pub mod responses;
pub mod sse;

pub use anthropic::{
    anthropic_error, anthropic_sse_frame, tool_use_violations, AnthropicBlock, AnthropicReply,
    AnthropicWire, MockAnthropic,
};
pub use gemini::{
    gemini_error, gemini_violations, GeminiPart, GeminiReply, GeminiWire, MockGemini,
};
pub use mock::{MockRequest, MockServer, MockWire, Reply};
pub use ollama::{
    ollama_error, ollama_violations, MockOllama, OllamaReply, OllamaToolCall, OllamaWire,
};
pub use openai::{
    openai_error, tool_call_violations, MockOpenAi, MockReply, MockToolCall, OpenAiWire,
};
pub use responses::{
    responses_violations, MockResponses, ResponsesItem, ResponsesReply, ResponsesWire,
};
