//! [`MockAnthropic`]: the mock server speaking Anthropic's Messages API (`POST /v1/messages`).
//!
//! Answers are one JSON `message` or Anthropic's SSE event sequence depending on the request's
//! `stream` flag. Like the real API it answers `401` without the expected `x-api-key`, `400`
//! without `anthropic-version` or `max_tokens`, and `400` when [`tool_use_violations`] finds a
//! broken history (recorded either way; `allow_violations` answers normally instead).
//!
//! ```no_run
//! # async fn demo() {
//! use antler_test_support::{AnthropicReply, MockAnthropic};
//! let mock = MockAnthropic::start().await.with_replies([
//!     AnthropicReply::tool_use("toolu_1", "bash", serde_json::json!({"command": "ls"})),
//!     AnthropicReply::text("done").usage(10, 2),
//! ]);
//! // point a model at mock.base_url() …
//! mock.assert_no_violations();
//! # }
//! ```

use axum::http::Method;
use serde_json::{json, Value};

mod invariants;
mod reply;

pub use invariants::tool_use_violations;
pub use reply::{anthropic_error, anthropic_sse_frame, AnthropicAnswer, AnthropicBlock};

use crate::mock::{prompt_bytes, request_model, Failure, MockRequest, MockWire, Route};
use reply::Render;

crate::mock::mock_wire!(
    AnthropicWire,
    MockAnthropic,
    AnthropicReply,
    "Messages API",
    "Anthropic Messages"
);

impl MockWire for AnthropicWire {
    type Answer = AnthropicAnswer;

    const NAME: &'static str = "Anthropic";
    const KEEPALIVE: &'static str = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    const RESPONSE_HEADERS: &'static [(&'static str, &'static str)] = &[("request-id", "req_mock")];

    fn authorized(req: &MockRequest, key: &str) -> bool {
        req.header("x-api-key") == Some(key)
    }

    fn route(method: &Method, path: &str) -> Route {
        if method == Method::POST && path == "/v1/messages" {
            Route::Chat
        } else {
            Route::NotFound
        }
    }

    fn failure(failure: Failure<'_>) -> (u16, Value) {
        match failure {
            Failure::Unauthorized => (
                401,
                anthropic_error("authentication_error", "invalid x-api-key"),
            ),
            Failure::NotFound { method, path } => (
                404,
                anthropic_error("not_found_error", &format!("Not found: {method} {path}")),
            ),
            Failure::BadJson => (
                400,
                anthropic_error(
                    "invalid_request_error",
                    "There was an error parsing the body of your request.",
                ),
            ),
            Failure::Invalid(message) => (400, anthropic_error("invalid_request_error", message)),
            Failure::ShuttingDown => (
                529,
                anthropic_error("overloaded_error", "server shutting down"),
            ),
        }
    }

    fn reject(req: &MockRequest) -> Option<(u16, Value)> {
        let invalid =
            |message: &str| Some((400, anthropic_error("invalid_request_error", message)));
        if req.header("anthropic-version").is_none() {
            return invalid("anthropic-version: header is required");
        }
        if req
            .body
            .get("max_tokens")
            .and_then(Value::as_u64)
            .is_none_or(|m| m == 0)
        {
            return invalid("max_tokens: Field required");
        }
        None
    }

    /// The Messages API's rules are always strict: results in the very next message.
    fn violations(body: &Value, _strict_order: bool) -> Vec<String> {
        tool_use_violations(body)
    }

    fn render(n: u64, request: &Value) -> Render {
        Render {
            id: format!("msg_mock_{n}"),
            model: request_model(request),
            prompt_bytes: prompt_bytes(request, &["messages", "system"]),
        }
    }

    fn frame(event: &Value) -> String {
        anthropic_sse_frame(event)
    }

    fn error_event(error: &Value) -> Value {
        json!({"type": "error", "error": error})
    }
}
