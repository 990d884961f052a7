//! [`MockResponses`]: the mock server speaking the OpenAI Responses API (`POST /v1/responses`):
//! one `response` object, or its SSE event sequence (`event: <type>` + `data:`, from
//! `response.created` to `response.completed`), `Authorization: Bearer` auth, OpenAI's error
//! bodies, and [`responses_violations`] checked on every request (each `function_call` answered
//! by one `function_call_output`, reasoning items whole and followed by their item, …).
//!
//! ```no_run
//! # async fn demo() {
//! use antler_test_support::{MockResponses, ResponsesReply};
//! let mock = MockResponses::start().await.with_replies([
//!     ResponsesReply::function_call("call_1", "ls", serde_json::json!({"path": "/"})),
//!     ResponsesReply::text("done").usage(10, 2),
//! ]);
//! // point a model at mock.base_url() …
//! mock.assert_no_violations();
//! # }
//! ```

use axum::http::Method;
use serde_json::{json, Value};

mod invariants;
mod reply;

pub use invariants::responses_violations;
pub use reply::{ResponsesAnswer, ResponsesItem};

use crate::mock::{
    array_items, prompt_bytes, request_model, Failure, MockRequest, MockWire, Route,
};
use crate::openai::{openai_error, openai_failure};
use reply::Render;

crate::mock::mock_wire!(
    ResponsesWire,
    MockResponses,
    ResponsesReply,
    "Responses API",
    "OpenAI Responses API"
);

impl MockWire for ResponsesWire {
    type Answer = ResponsesAnswer;

    const NAME: &'static str = "OpenAI Responses";
    const BASE_PATH: &'static str = "/v1";

    fn route(method: &Method, path: &str) -> Route {
        if method == Method::POST && path.ends_with("/responses") {
            Route::Chat
        } else {
            Route::NotFound
        }
    }

    fn failure(failure: Failure<'_>) -> (u16, Value) {
        openai_failure(failure, "Incorrect API key provided.")
    }

    /// Fields the API requires or refuses before it looks at the input items.
    fn reject(req: &MockRequest) -> Option<(u16, Value)> {
        let invalid =
            |message: String| Some((400, openai_error(&message, "invalid_request_error", None)));
        let body = &req.body;
        if body.get("model").and_then(Value::as_str).is_none() {
            return invalid("Missing required parameter: 'model'.".into());
        }
        if body.get("messages").is_some() {
            return invalid("Unsupported parameter: 'messages'. In the Responses API, this parameter has moved to 'input'.".into());
        }
        if body.get("max_tokens").is_some() {
            return invalid("Unsupported parameter: 'max_tokens'. In the Responses API, this parameter has moved to 'max_output_tokens'.".into());
        }
        for (i, tool) in array_items(body, "tools").enumerate() {
            if tool.get("type").and_then(Value::as_str) == Some("function")
                && tool.get("name").and_then(Value::as_str).is_none()
            {
                return invalid(format!("Missing required parameter: 'tools[{i}].name'."));
            }
        }
        None
    }

    fn violations(body: &Value, _strict: bool) -> Vec<String> {
        responses_violations(body)
    }

    fn render(n: u64, request: &Value) -> Render {
        Render {
            id: format!("resp_mock_{n}"),
            model: request_model(request),
            prompt_bytes: prompt_bytes(request, &["input", "instructions"]),
        }
    }

    fn frame(event: &Value) -> String {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        format!("event: {kind}\ndata: {event}\n\n")
    }

    /// `{"type": "error", "code", "message", "param"}` with the fields of `error`.
    fn error_event(error: &Value) -> Value {
        let mut event = json!({"type": "error", "code": null, "message": "", "param": null});
        if let (Some(e), Some(fields)) = (event.as_object_mut(), error.as_object()) {
            for (k, v) in fields {
                e.insert(k.clone(), v.clone());
            }
        }
        event
    }
}
