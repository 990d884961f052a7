//! [`MockOllama`]: the mock server speaking Ollama's native API (`POST /api/chat`, `GET
//! /api/tags`, `GET /api/version`): one JSON object, or NDJSON (one object a line,
//! `application/x-ndjson`) — Ollama streams unless the body says `"stream": false`. Errors are
//! Ollama's `{"error": "…"}`; [`ollama_violations`] is checked on every chat request. Ollama has
//! no auth of its own; `require_api_key` checks `Authorization: Bearer` as a proxy in front of
//! it would.
//!
//! ```no_run
//! # async fn demo() {
//! use antler_test_support::{MockOllama, OllamaReply};
//! let mock = MockOllama::start().await.with_replies([
//!     OllamaReply::tool_call("ls", serde_json::json!({"path": "/"})),
//!     OllamaReply::text("done").usage(10, 2),
//! ]);
//! // point a model at mock.base_url() …
//! mock.assert_no_violations();
//! # }
//! ```

use axum::http::Method;
use serde_json::{json, Value};

mod invariants;
mod reply;

pub use invariants::ollama_violations;
pub use reply::{ollama_error, OllamaAnswer, OllamaToolCall};

use crate::mock::{prompt_bytes, request_model, Failure, MockRequest, MockWire, Route};
use reply::Render;

crate::mock::mock_wire!(OllamaWire, MockOllama, OllamaReply, "Ollama", "Ollama");

impl MockWire for OllamaWire {
    type Answer = OllamaAnswer;

    const NAME: &'static str = "Ollama";
    // A blank line: NDJSON has no comments, and readers skip blank lines.
    const KEEPALIVE: &'static str = "\n";
    const STREAM_CONTENT_TYPE: &'static str = "application/x-ndjson";

    /// Ollama streams unless told not to.
    fn is_stream(_path: &str, body: &Value) -> bool {
        body.get("stream").and_then(Value::as_bool).unwrap_or(true)
    }

    fn route(method: &Method, path: &str) -> Route {
        match (method.as_str(), path) {
            ("POST", "/api/chat") => Route::Chat,
            ("GET", "/api/tags") => Route::Answer(
                200,
                json!({"models": [{"name": "mock-model:latest", "model": "mock-model:latest"}]}),
            ),
            ("GET", "/api/version") => Route::Answer(200, json!({"version": "0.12.0"})),
            _ => Route::NotFound,
        }
    }

    fn failure(failure: Failure<'_>) -> (u16, Value) {
        match failure {
            Failure::Unauthorized => (401, ollama_error("unauthorized")),
            Failure::NotFound { .. } => (404, ollama_error("404 page not found")),
            Failure::BadJson => (400, ollama_error("invalid character in request body")),
            Failure::Invalid(message) => (400, ollama_error(message)),
            Failure::ShuttingDown => (503, ollama_error("server shutting down")),
        }
    }

    fn reject(req: &MockRequest) -> Option<(u16, Value)> {
        match req.body.get("model").and_then(Value::as_str) {
            None | Some("") => Some((400, ollama_error("model is required"))),
            Some(_) => None,
        }
    }

    fn violations(body: &Value, _strict: bool) -> Vec<String> {
        ollama_violations(body)
    }

    fn render(_n: u64, request: &Value) -> Render {
        Render {
            model: request_model(request),
            prompt_bytes: prompt_bytes(request, &["messages"]),
        }
    }

    fn frame(event: &Value) -> String {
        format!("{event}\n")
    }

    /// Ollama reports a failure mid-stream as a line `{"error": "…"}`.
    fn error_event(error: &Value) -> Value {
        match error {
            Value::String(_) => json!({ "error": error }),
            other => json!({ "error": other.to_string() }),
        }
    }
}
