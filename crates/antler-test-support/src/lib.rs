//! Dev-only helpers shared by antler's tests: a mock OpenAI-compatible server on `127.0.0.1`
//! with scripted replies, request recording and a tool-call pairing check on every request.
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
pub mod openai;
pub mod sse;

pub use anthropic::{
    anthropic_error, anthropic_sse_frame, tool_use_violations, AnthropicBlock, AnthropicReply,
    MockAnthropic,
};
pub use openai::{
    openai_error, tool_call_violations, MockOpenAi, MockReply, MockRequest, MockToolCall,
};
