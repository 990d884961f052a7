//! Building `text/event-stream` bodies the way OpenAI frames them.

use serde_json::Value;

/// The stream terminator OpenAI sends.
pub const SSE_DONE: &str = "data: [DONE]\n\n";

/// One `data:` event.
pub fn sse_frame(event: &Value) -> String {
    format!("data: {event}\n\n")
}

/// All `events` as frames followed by `data: [DONE]`.
pub fn sse_body(events: &[Value]) -> String {
    let mut out: String = events.iter().map(sse_frame).collect();
    out.push_str(SSE_DONE);
    out
}
