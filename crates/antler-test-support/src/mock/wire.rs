//! [`MockWire`]: what a vendor module tells the mock server core — how its API authenticates,
//! routes and fails, what it checks on every request, and how answers look on its wire.

use std::fmt;

use axum::http::Method;
use serde_json::{json, Value};

use super::{MockRequest, MockUsage};
use crate::sse::sse_frame;

/// What to do with a request, by method and path.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// A chat call: checked, then answered from the script.
    Chat,
    /// Answered as is (e.g. a model list).
    Answer(u16, Value),
    /// Not an endpoint of this API.
    NotFound,
}

/// A failure the server core answers in the vendor's error shape.
#[derive(Clone, Copy, Debug)]
pub enum Failure<'a> {
    /// The request lacks the required API key (`401`).
    Unauthorized,
    /// No such endpoint (`404`).
    NotFound { method: &'a Method, path: &'a str },
    /// The body is not a JSON object (`400`).
    BadJson,
    /// The request breaks an invariant of the API, e.g. tool-call pairing (`400`).
    Invalid(&'a str),
    /// The server is being dropped while a reply waits.
    ShuttingDown,
}

/// A scripted successful answer in its vendor's terms (text, tool calls, usage, …), and how it
/// looks on the vendor's wire.
pub trait MockAnswer: Clone + fmt::Debug + PartialEq + Send + Sync + 'static {
    /// Per-answer values of the wire objects (id, model, usage estimate, …).
    type Render;

    /// The answer as one JSON response body.
    fn message(&self, render: &Self::Render) -> Value;

    /// The answer as stream events, in order.
    fn events(&self, render: &Self::Render) -> Vec<Value>;

    /// A plain text answer (the default reply is `text("ok")`).
    fn text(text: &str) -> Self;

    /// The scripted token counts (`None`: estimated from the sizes of prompt and answer).
    fn scripted_usage(&mut self) -> &mut Option<MockUsage>;

    /// The scripted token counts, zeros until set.
    fn usage_mut(&mut self) -> &mut MockUsage {
        self.scripted_usage().get_or_insert_with(MockUsage::default)
    }

    /// Report `input` prompt and `output` completion tokens (instead of the size estimate).
    fn set_usage(&mut self, input: u64, output: u64) {
        self.usage_mut().set(input, output);
    }
}

/// One vendor's API as the mock server speaks it. Implemented by the marker types of the vendor
/// modules ([`crate::openai::OpenAiWire`], [`crate::anthropic::AnthropicWire`]); a new vendor
/// is one more module with one more impl.
pub trait MockWire: Clone + fmt::Debug + PartialEq + Send + Sync + 'static {
    /// A scripted successful answer in the vendor's terms.
    type Answer: MockAnswer;

    /// The vendor's name in messages (`OpenAI`).
    const NAME: &'static str;
    /// What [`super::MockServer::base_url`] appends to `http://127.0.0.1:PORT` (`/v1`); most
    /// vendors' roots have none.
    const BASE_PATH: &'static str = "";
    /// What a stalled stream sends while kept warm (an SSE comment, a `ping` event); by default
    /// the plain SSE keep-alive comment.
    const KEEPALIVE: &'static str = ": keep-alive\n\n";
    /// The frame that ends a complete stream, for vendors that send one (`data: [DONE]`).
    const DONE: Option<&'static str> = None;
    /// Headers added to every response (`request-id`).
    const RESPONSE_HEADERS: &'static [(&'static str, &'static str)] = &[];
    /// The `Content-Type` of a streamed answer (`application/x-ndjson` for Ollama).
    const STREAM_CONTENT_TYPE: &'static str = "text/event-stream";

    /// Whether a request (path with query, JSON body) asks for a stream; by default the body's
    /// `stream` flag.
    fn is_stream(_path: &str, body: &Value) -> bool {
        body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }

    /// A plain text answer (the default reply is `text("ok")`).
    fn text(text: &str) -> Self::Answer {
        Self::Answer::text(text)
    }

    /// Whether `req` carries `key` the way the vendor expects it; by default as
    /// `Authorization: Bearer <key>`, OpenAI's scheme.
    fn authorized(req: &MockRequest, key: &str) -> bool {
        req.has_bearer(key)
    }

    fn route(method: &Method, path: &str) -> Route;

    /// Status and body for `failure`.
    fn failure(failure: Failure<'_>) -> (u16, Value);

    /// A chat request the API refuses before looking at the history (a missing header or
    /// required field): its answer. The body is known to be a JSON object.
    fn reject(_req: &MockRequest) -> Option<(u16, Value)> {
        None
    }

    /// Every problem a strict provider finds in the request's history (empty when well-formed).
    /// `strict_order` asks for the vendor's strictest message-order rules where it has a choice.
    fn violations(body: &Value, strict_order: bool) -> Vec<String>;

    /// The values of the `n`-th answer served for `request`.
    fn render(n: u64, request: &Value) -> <Self::Answer as MockAnswer>::Render;

    /// One event as a frame of the stream (SSE, or a JSON line); by default a `data:` event.
    fn frame(event: &Value) -> String {
        sse_frame(event)
    }

    /// The event that carries a mid-stream error (`error_after_events`); by default
    /// `{"error": error}`.
    fn error_event(error: &Value) -> Value {
        json!({ "error": error })
    }
}
