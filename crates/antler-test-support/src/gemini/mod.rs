//! [`MockGemini`]: the mock server speaking the Gemini API (`POST
//! /v1beta/models/{model}:generateContent`, and `:streamGenerateContent?alt=sse` for streams),
//! with the key in `x-goog-api-key` (or `?key=`), Google's error bodies (`{"error": {code,
//! message, status}}`), and [`gemini_violations`] checked on every request.
//!
//! ```no_run
//! # async fn demo() {
//! use antler_test_support::{GeminiReply, MockGemini};
//! let mock = MockGemini::start().await.with_replies([
//!     GeminiReply::function_call("ls", serde_json::json!({"path": "/"})),
//!     GeminiReply::text("done").usage(10, 2),
//! ]);
//! // point a model at mock.base_url() …
//! mock.assert_no_violations();
//! # }
//! ```

use axum::http::Method;
use serde_json::{json, Value};

mod invariants;
mod reply;

pub use invariants::gemini_violations;
pub use reply::{gemini_error, GeminiAnswer, GeminiPart};

use crate::mock::{prompt_bytes, Failure, MockRequest, MockServer, MockWire, Route};
use reply::Render;

crate::mock::mock_wire!(
    GeminiWire,
    MockGemini,
    GeminiReply,
    "Gemini API",
    "Gemini API"
);

impl MockServer<GeminiWire> {
    /// Also require every `functionCall` part of the history to carry its `thoughtSignature`
    /// (Gemini 3 refuses a function call replayed without it).
    pub fn require_thought_signatures(self) -> Self {
        self.strict_order()
    }
}

/// `models/{model}:{method}` of a request path, when it is one.
fn model_method(path: &str) -> Option<(&str, &str)> {
    let rest = path.split('?').next()?.rsplit_once("/models/")?.1;
    rest.split_once(':')
}

impl MockWire for GeminiWire {
    type Answer = GeminiAnswer;

    const NAME: &'static str = "Gemini";

    fn is_stream(path: &str, _body: &Value) -> bool {
        model_method(path).is_some_and(|(_, m)| m == "streamGenerateContent")
    }

    fn authorized(req: &MockRequest, key: &str) -> bool {
        let in_query = req
            .path
            .split_once('?')
            .is_some_and(|(_, q)| q.split('&').any(|kv| kv == format!("key={key}")));
        req.header("x-goog-api-key") == Some(key) || in_query
    }

    fn route(method: &Method, path: &str) -> Route {
        match model_method(path) {
            Some((_, "generateContent" | "streamGenerateContent")) if method == Method::POST => {
                Route::Chat
            }
            _ if method == Method::GET && path.ends_with("/models") => Route::Answer(
                200,
                json!({"models": [{"name": "models/gemini-mock", "supportedGenerationMethods": ["generateContent"]}]}),
            ),
            _ => Route::NotFound,
        }
    }

    fn failure(failure: Failure<'_>) -> (u16, Value) {
        match failure {
            // What the real API answers for a key it does not accept.
            Failure::Unauthorized => (
                400,
                gemini_error(
                    400,
                    "API key not valid. Please pass a valid API key.",
                    "INVALID_ARGUMENT",
                ),
            ),
            Failure::NotFound { method, path } => (
                404,
                gemini_error(
                    404,
                    &format!("Method not found: {method} {path}"),
                    "NOT_FOUND",
                ),
            ),
            Failure::BadJson => (
                400,
                gemini_error(400, "Invalid JSON payload received.", "INVALID_ARGUMENT"),
            ),
            Failure::Invalid(message) => (400, gemini_error(400, message, "INVALID_ARGUMENT")),
            Failure::ShuttingDown => (
                503,
                gemini_error(503, "The model is overloaded.", "UNAVAILABLE"),
            ),
        }
    }

    fn reject(req: &MockRequest) -> Option<(u16, Value)> {
        let invalid = |message: &str| Some((400, gemini_error(400, message, "INVALID_ARGUMENT")));
        if req.stream && !req.path.contains("alt=sse") {
            // Without `alt=sse` the real API streams one JSON array, which antler does not read.
            return invalid("antler's mock serves streamGenerateContent only with alt=sse");
        }
        if req.body.get("contents").is_none() {
            return invalid("* GenerateContentRequest.contents: contents is not specified");
        }
        if let Some(model) = model_method(&req.path).map(|(m, _)| m) {
            if model.is_empty() {
                return invalid("* GenerateContentRequest.model: unexpected model name format");
            }
        }
        None
    }

    fn violations(body: &Value, strict: bool) -> Vec<String> {
        gemini_violations(body, strict)
    }

    fn render(n: u64, request: &Value) -> Render {
        Render {
            id: format!("resp-mock-{n}"),
            prompt_bytes: prompt_bytes(request, &["contents", "systemInstruction"]),
        }
    }
}
