//! Scripted answers of [`crate::MockAnthropic`] ([`AnthropicReply`] constructors in Anthropic's
//! terms) and their rendering in the Messages wire format: one `message` object, or the SSE event
//! sequence `message_start`, `ping`, `content_block_start` / `content_block_delta`… /
//! `content_block_stop` per block, `message_delta`, `message_stop`.

use serde_json::{json, Value};

use super::AnthropicReply;
pub(crate) use crate::mock::IdRender as Render;
use crate::mock::{split_even, split_text, MockAnswer, MockUsage};

/// One content block of a scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum AnthropicBlock {
    Text(String),
    /// Extended thinking with its signature (streamed as `thinking_delta`s then one
    /// `signature_delta`).
    Thinking {
        thinking: String,
        signature: String,
    },
    /// Encrypted thinking (`data` is opaque).
    RedactedThinking(String),
    /// A tool call; `input` is the JSON text of the arguments, sent verbatim (may be malformed on
    /// purpose, which in a JSON answer becomes a JSON string `input`).
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
}

impl AnthropicBlock {
    pub fn text(text: impl Into<String>) -> Self {
        AnthropicBlock::Text(text.into())
    }

    pub fn thinking(thinking: impl Into<String>, signature: impl Into<String>) -> Self {
        AnthropicBlock::Thinking {
            thinking: thinking.into(),
            signature: signature.into(),
        }
    }

    pub fn redacted_thinking(data: impl Into<String>) -> Self {
        AnthropicBlock::RedactedThinking(data.into())
    }

    /// `input` is serialized, except a JSON string which is used verbatim as the input text (so
    /// `json!("{\"broken")` streams broken JSON).
    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        AnthropicBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input: match input {
                Value::String(s) => s,
                other => other.to_string(),
            },
        }
    }

    fn len(&self) -> usize {
        match self {
            AnthropicBlock::Text(t) => t.len(),
            AnthropicBlock::Thinking { thinking, .. } => thinking.len(),
            AnthropicBlock::RedactedThinking(d) => d.len(),
            AnthropicBlock::ToolUse { name, input, .. } => name.len() + input.len(),
        }
    }

    /// The block as it appears in a complete `message`.
    fn complete_json(&self) -> Value {
        match self {
            AnthropicBlock::Text(text) => json!({"type": "text", "text": text}),
            AnthropicBlock::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            AnthropicBlock::RedactedThinking(data) => {
                json!({"type": "redacted_thinking", "data": data})
            }
            AnthropicBlock::ToolUse { id, name, input } => {
                let input = serde_json::from_str::<Value>(input)
                    .unwrap_or_else(|_| Value::String(input.clone()));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        }
    }
}

/// A scripted assistant message in Anthropic's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct AnthropicAnswer {
    blocks: Vec<AnthropicBlock>,
    usage: Option<MockUsage>,
    stop_reason: Option<String>,
}

impl AnthropicAnswer {
    pub(crate) fn new(blocks: Vec<AnthropicBlock>) -> Self {
        AnthropicAnswer {
            blocks,
            usage: None,
            stop_reason: None,
        }
    }

    fn mock_usage(&self, r: &Render) -> MockUsage {
        MockUsage::or_estimate(self.usage, r.prompt_bytes, || {
            self.blocks.iter().map(AnthropicBlock::len).sum()
        })
    }

    fn stop(&self) -> String {
        match &self.stop_reason {
            Some(r) => r.clone(),
            None => {
                let calls = self
                    .blocks
                    .iter()
                    .any(|b| matches!(b, AnthropicBlock::ToolUse { .. }));
                if calls { "tool_use" } else { "end_turn" }.to_owned()
            }
        }
    }
}

impl MockAnswer for AnthropicAnswer {
    type Render = Render;

    fn message(&self, r: &Render) -> Value {
        let u = self.mock_usage(r);
        json!({
            "id": r.id,
            "type": "message",
            "role": "assistant",
            "model": r.model,
            "content": self.blocks.iter().map(AnthropicBlock::complete_json).collect::<Vec<_>>(),
            "stop_reason": self.stop(),
            "stop_sequence": null,
            "usage": {
                "input_tokens": u.input,
                "cache_creation_input_tokens": u.cache_creation,
                "cache_read_input_tokens": u.cached,
                "output_tokens": u.output,
            },
        })
    }

    fn events(&self, r: &Render) -> Vec<Value> {
        let u = self.mock_usage(r);
        let mut out = vec![
            json!({"type": "message_start", "message": {
                "id": r.id,
                "type": "message",
                "role": "assistant",
                "model": r.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": u.input,
                    "cache_creation_input_tokens": u.cache_creation,
                    "cache_read_input_tokens": u.cached,
                    "output_tokens": 1,
                },
            }}),
            json!({"type": "ping"}),
        ];
        for (index, block) in self.blocks.iter().enumerate() {
            let start = |b: Value| json!({"type": "content_block_start", "index": index, "content_block": b});
            let delta =
                |d: Value| json!({"type": "content_block_delta", "index": index, "delta": d});
            match block {
                AnthropicBlock::Text(text) => {
                    out.push(start(json!({"type": "text", "text": ""})));
                    for piece in split_text(text) {
                        out.push(delta(json!({"type": "text_delta", "text": piece})));
                    }
                }
                AnthropicBlock::Thinking {
                    thinking,
                    signature,
                } => {
                    out.push(start(
                        json!({"type": "thinking", "thinking": "", "signature": ""}),
                    ));
                    for piece in split_text(thinking) {
                        out.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                    }
                    out.push(delta(
                        json!({"type": "signature_delta", "signature": signature}),
                    ));
                }
                AnthropicBlock::RedactedThinking(_) => out.push(start(block.complete_json())),
                AnthropicBlock::ToolUse { id, name, input } => {
                    out.push(start(
                        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    ));
                    // Anthropic opens every tool input with an empty fragment.
                    out.push(delta(
                        json!({"type": "input_json_delta", "partial_json": ""}),
                    ));
                    for piece in split_even(input, 3) {
                        out.push(delta(
                            json!({"type": "input_json_delta", "partial_json": piece}),
                        ));
                    }
                }
            }
            out.push(json!({"type": "content_block_stop", "index": index}));
        }
        out.push(json!({
            "type": "message_delta",
            "delta": {"stop_reason": self.stop(), "stop_sequence": null},
            "usage": {"output_tokens": u.output},
        }));
        out.push(json!({"type": "message_stop"}));
        out
    }

    fn text(text: &str) -> Self {
        Self::new(vec![AnthropicBlock::text(text)])
    }

    fn scripted_usage(&mut self) -> &mut Option<MockUsage> {
        &mut self.usage
    }
}

/// Constructors and builders in Anthropic's terms (the vendor-neutral ones are
/// [`crate::Reply`]'s).
impl AnthropicReply {
    /// An answer made of `blocks`, in order.
    pub fn blocks(blocks: impl IntoIterator<Item = AnthropicBlock>) -> Self {
        Self::answer(AnthropicAnswer::new(blocks.into_iter().collect()))
    }

    /// One tool call (`input`: see [`AnthropicBlock::tool_use`]).
    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self::blocks([AnthropicBlock::tool_use(id, name, input)])
    }

    /// A thinking block (with signature) followed by a text answer.
    pub fn thinking(
        thinking: impl Into<String>,
        signature: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::blocks([
            AnthropicBlock::thinking(thinking, signature),
            AnthropicBlock::text(text),
        ])
    }

    /// `429 rate_limit_error` with `retry-after: secs`.
    pub fn rate_limited(secs: u64) -> Self {
        Self::error(
            429,
            anthropic_error(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        )
        .retry_after(secs)
    }

    /// `529 overloaded_error` (Anthropic's "try again later").
    pub fn overloaded() -> Self {
        Self::error(529, anthropic_error("overloaded_error", "Overloaded"))
    }

    /// `cache_read_input_tokens` and `cache_creation_input_tokens`.
    pub fn cache_tokens(self, read: u64, creation: u64) -> Self {
        self.with_usage(|u| {
            u.cached = read;
            u.cache_creation = creation;
        })
    }

    /// Override the stop reason (default `end_turn`, or `tool_use` when calling tools).
    pub fn stop_reason(self, reason: impl Into<String>) -> Self {
        self.with_answer(|a| a.stop_reason = Some(reason.into()))
    }

    /// The answer as a complete `message` object (`None` for errors, raw bodies and hangs).
    pub fn message(&self, model: &str) -> Option<Value> {
        self.answer_ref()
            .map(|a| a.message(&Render::standalone("msg_mock", model)))
    }

    /// The answer as stream events, `ping` included (`None` for errors, raw bodies and hangs).
    pub fn events(&self, model: &str) -> Option<Vec<Value>> {
        self.answer_ref()
            .map(|a| a.events(&Render::standalone("msg_mock", model)))
    }
}

/// One SSE frame the way Anthropic sends it: `event: <type>` then `data: <json>`.
pub fn anthropic_sse_frame(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`.
pub fn anthropic_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn stream_events_rebuild_the_message() {
        let reply = AnthropicReply::blocks([
            AnthropicBlock::thinking("let me see", "sig-1"),
            AnthropicBlock::text("two calls"),
            AnthropicBlock::tool_use("toolu_a", "ls", json!({"path": "/"})),
            AnthropicBlock::tool_use("toolu_b", "bash", json!("{bad")),
        ]);
        let events = reply.events("m").unwrap();
        let mut inputs = [String::new(), String::new()];
        let mut thinking = String::new();
        let mut signature = String::new();
        for e in &events {
            let d = &e["delta"];
            match d["type"].as_str() {
                Some("input_json_delta") => {
                    let slot = e["index"].as_u64().unwrap() as usize - 2;
                    inputs[slot].push_str(d["partial_json"].as_str().unwrap());
                }
                Some("thinking_delta") => thinking.push_str(d["thinking"].as_str().unwrap()),
                Some("signature_delta") => signature.push_str(d["signature"].as_str().unwrap()),
                _ => {}
            }
        }
        assert_eq!(inputs, ["{\"path\":\"/\"}".to_owned(), "{bad".to_owned()]);
        assert_eq!(
            (thinking.as_str(), signature.as_str()),
            ("let me see", "sig-1")
        );
        assert_eq!(events[0]["type"], "message_start");
        assert_eq!(events[1]["type"], "ping");
        let n = events.len();
        assert_eq!(events[n - 2]["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[n - 1]["type"], "message_stop");

        let message = reply.message("m").unwrap();
        assert_eq!(message["content"][2]["input"], json!({"path": "/"}));
        assert_eq!(message["content"][3]["input"], json!("{bad"));
        assert_eq!(message["stop_reason"], "tool_use");
    }

    #[test]
    fn frames_name_their_event() {
        assert_eq!(
            anthropic_sse_frame(&json!({"type": "ping"})),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
    }
}
