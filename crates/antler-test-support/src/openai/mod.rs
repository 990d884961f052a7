//! [`MockOpenAi`]: the mock server speaking OpenAI's Chat Completions (`POST …/chat/completions`,
//! `GET …/models`), with `Authorization: Bearer` auth, OpenAI's error bodies, and
//! [`tool_call_violations`] checked on every chat request.

use axum::http::Method;
use serde_json::{json, Value};

mod invariants;
mod reply;

pub use invariants::tool_call_violations;
pub use reply::{openai_error, MockToolCall, OpenAiAnswer};

use crate::mock::{prompt_bytes, request_model, Failure, MockServer, MockWire, Route};
use crate::sse::SSE_DONE;
use reply::Render;

/// OpenAI's answers to the mock's failures (shared by Chat Completions and the Responses API,
/// which differ only in the wrong-key message).
pub(crate) fn openai_failure(failure: Failure<'_>, unauthorized: &str) -> (u16, Value) {
    let invalid = |message: &str| openai_error(message, "invalid_request_error", None);
    match failure {
        Failure::Unauthorized => (
            401,
            openai_error(
                unauthorized,
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
        ),
        Failure::NotFound { method, path } => {
            (404, invalid(&format!("Invalid URL ({method} {path})")))
        }
        Failure::BadJson => (
            400,
            invalid("We could not parse the JSON body of your request."),
        ),
        Failure::Invalid(message) => (400, invalid(message)),
        Failure::ShuttingDown => (
            503,
            openai_error("server shutting down", "server_error", None),
        ),
    }
}

crate::mock::mock_wire!(
    OpenAiWire,
    MockOpenAi,
    MockReply,
    "Chat Completions",
    "OpenAI-compatible"
);

impl MockServer<OpenAiWire> {
    /// Also require tool results to directly follow their assistant message (OpenAI's rule).
    pub fn strict_tool_message_order(self) -> Self {
        self.strict_order()
    }
}

impl MockWire for OpenAiWire {
    type Answer = OpenAiAnswer;

    const NAME: &'static str = "OpenAI";
    const BASE_PATH: &'static str = "/v1";
    const KEEPALIVE: &'static str = ": ping\n\n";
    const DONE: Option<&'static str> = Some(SSE_DONE);

    fn route(method: &Method, path: &str) -> Route {
        if method == Method::GET && path.ends_with("/models") {
            Route::Answer(
                200,
                json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "created": 1_700_000_000, "owned_by": "antler"}]}),
            )
        } else if method == Method::POST && path.ends_with("/chat/completions") {
            Route::Chat
        } else {
            Route::NotFound
        }
    }

    fn failure(failure: Failure<'_>) -> (u16, Value) {
        openai_failure(
            failure,
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
        )
    }

    fn violations(body: &Value, strict_order: bool) -> Vec<String> {
        tool_call_violations(body, strict_order)
    }

    fn render(n: u64, request: &Value) -> Render {
        Render {
            id: format!("chatcmpl-mock-{n}"),
            model: request_model(request),
            created: 1_700_000_000,
            prompt_bytes: prompt_bytes(request, &["messages"]),
            include_usage: request
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }
}
