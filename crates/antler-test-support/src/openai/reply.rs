//! Scripted answers and their rendering in OpenAI's wire format.

use std::time::Duration;

use serde_json::{json, Map, Value};

/// One tool call of a scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub struct MockToolCall {
    /// `None` leaves the `id` out of the wire answer (providers that forget it).
    pub id: Option<String>,
    pub name: String,
    /// The `function.arguments` JSON text, sent verbatim (may be malformed on purpose).
    pub arguments: String,
}

impl MockToolCall {
    /// `args` is serialized, except a JSON string which is used verbatim as the arguments text
    /// (so `json!("{\"broken")` sends broken JSON).
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        MockToolCall {
            id: Some(id.into()),
            name: name.into(),
            arguments: arguments_text(args),
        }
    }

    /// A call whose wire form has no `id`.
    pub fn without_id(name: impl Into<String>, args: Value) -> Self {
        MockToolCall {
            id: None,
            name: name.into(),
            arguments: arguments_text(args),
        }
    }
}

fn arguments_text(args: Value) -> String {
    match args {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ReplyBody {
    Message {
        content: Option<String>,
        reasoning: Option<String>,
        tool_calls: Vec<MockToolCall>,
    },
    Error {
        status: u16,
        body: Value,
    },
    Raw {
        status: u16,
        body: String,
    },
    Hang,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MockUsage {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub reasoning: u64,
}

/// One scripted answer of [`crate::MockOpenAi`]; answered as JSON or SSE depending on the
/// request's `stream` flag.
#[derive(Clone, Debug, PartialEq)]
pub struct MockReply {
    pub(crate) body: ReplyBody,
    pub(crate) usage: Option<MockUsage>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) delay: Duration,
    pub(crate) chunk_delay: Duration,
    pub(crate) stall_after: Option<usize>,
    pub(crate) keepalive: Option<Duration>,
    pub(crate) drop_after: Option<usize>,
    pub(crate) error_after: Option<(usize, Value)>,
    pub(crate) fragment_size: Option<usize>,
}

impl MockReply {
    fn new(body: ReplyBody) -> Self {
        MockReply {
            body,
            usage: None,
            finish_reason: None,
            headers: Vec::new(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            stall_after: None,
            keepalive: None,
            drop_after: None,
            error_after: None,
            fragment_size: None,
        }
    }

    fn message(
        content: Option<String>,
        reasoning: Option<String>,
        tool_calls: Vec<MockToolCall>,
    ) -> Self {
        Self::new(ReplyBody::Message {
            content,
            reasoning,
            tool_calls,
        })
    }

    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::message(Some(text.into()), None, Vec::new())
    }

    /// One tool call (`args`: see [`MockToolCall::new`]).
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        Self::tool_calls([MockToolCall::new(id, name, args)])
    }

    /// Parallel tool calls, indexed 0, 1, … in order.
    pub fn tool_calls(calls: impl IntoIterator<Item = MockToolCall>) -> Self {
        Self::message(None, None, calls.into_iter().collect())
    }

    pub fn text_and_tool_calls(
        text: impl Into<String>,
        calls: impl IntoIterator<Item = MockToolCall>,
    ) -> Self {
        Self::message(Some(text.into()), None, calls.into_iter().collect())
    }

    /// Reasoning (`reasoning_content`, DeepSeek style) followed by a text answer.
    pub fn reasoning(reasoning: impl Into<String>, text: impl Into<String>) -> Self {
        Self::message(Some(text.into()), Some(reasoning.into()), Vec::new())
    }

    /// An HTTP error with a JSON body (see [`openai_error`]).
    pub fn error(status: u16, body: Value) -> Self {
        Self::new(ReplyBody::Error { status, body })
    }

    /// `body` sent verbatim with `status` (as `application/json`, or `text/event-stream` when the
    /// request streams): invalid JSON, odd shapes, hand-written SSE.
    pub fn raw_body(status: u16, body: &str) -> Self {
        Self::new(ReplyBody::Raw {
            status,
            body: body.to_owned(),
        })
    }

    /// Never answers (until the server is dropped).
    pub fn hang() -> Self {
        Self::new(ReplyBody::Hang)
    }

    /// Token usage to report (otherwise estimated as bytes / 4 of request and answer).
    pub fn usage(mut self, input: u64, output: u64) -> Self {
        let u = self.usage.get_or_insert_with(MockUsage::default);
        u.input = input;
        u.output = output;
        self
    }

    /// `prompt_tokens_details.cached_tokens`.
    pub fn cached_tokens(mut self, n: u64) -> Self {
        self.usage.get_or_insert_with(MockUsage::default).cached = n;
        self
    }

    /// `completion_tokens_details.reasoning_tokens`.
    pub fn reasoning_tokens(mut self, n: u64) -> Self {
        self.usage.get_or_insert_with(MockUsage::default).reasoning = n;
        self
    }

    /// Override the finish reason (default `stop`, or `tool_calls` when calling tools).
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// An extra response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// `Retry-After: <secs>`.
    pub fn retry_after(self, secs: u64) -> Self {
        self.header("retry-after", secs.to_string())
    }

    /// Wait this long before answering at all.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Streams: wait this long before every event after the first.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Streams: send `n` events, then go silent (connection kept open).
    pub fn stall_after_chunks(mut self, n: usize) -> Self {
        self.stall_after = Some(n);
        self
    }

    /// Streams: while stalled (see [`MockReply::stall_after_chunks`]), send the SSE comment
    /// `: ping` every `every` instead of silence — a server that keeps the connection warm
    /// without answering.
    pub fn keepalive_while_stalled(mut self, every: Duration) -> Self {
        self.keepalive = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// Streams: send `n` events, then end the body without `[DONE]`.
    pub fn drop_after_chunks(mut self, n: usize) -> Self {
        self.drop_after = Some(n);
        self
    }

    /// Streams: send `n` events, then `data: {"error": <error>}` and end the body.
    pub fn error_after_chunks(mut self, n: usize, error: Value) -> Self {
        self.error_after = Some((n, error));
        self
    }

    /// Streams: re-cut the SSE bytes into pieces of `n` bytes, so lines split across writes.
    pub fn sse_fragment_size(mut self, n: usize) -> Self {
        self.fragment_size = Some(n.max(1));
        self
    }

    /// The answer as a `chat.completion` object (`None` for errors, raw bodies and hangs).
    pub fn chat_completion(&self, model: &str) -> Option<Value> {
        self.completion_json(&Render::standalone(model))
    }

    /// The answer as `chat.completion.chunk` objects, with the trailing usage chunk when
    /// `include_usage` (`None` for errors, raw bodies and hangs).
    pub fn chunks(&self, model: &str, include_usage: bool) -> Option<Vec<Value>> {
        self.chunks_json(&Render::standalone(model), include_usage)
    }

    fn usage_json(&self, r: &Render) -> Value {
        let u = self.usage.unwrap_or_else(|| {
            let answer = match &self.body {
                ReplyBody::Message {
                    content,
                    reasoning,
                    tool_calls,
                } => {
                    content.as_deref().map_or(0, str::len)
                        + reasoning.as_deref().map_or(0, str::len)
                        + tool_calls
                            .iter()
                            .map(|c| c.name.len() + c.arguments.len())
                            .sum::<usize>()
                }
                _ => 0,
            };
            MockUsage {
                input: (r.prompt_bytes as u64 / 4).max(1),
                output: (answer as u64 / 4).max(1),
                ..MockUsage::default()
            }
        });
        json!({
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input + u.output,
            "prompt_tokens_details": {"cached_tokens": u.cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": u.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        })
    }

    fn finish(&self, has_calls: bool) -> &str {
        match &self.finish_reason {
            Some(r) => r,
            None if has_calls => "tool_calls",
            None => "stop",
        }
    }

    pub(crate) fn completion_json(&self, r: &Render) -> Option<Value> {
        let ReplyBody::Message {
            content,
            reasoning,
            tool_calls,
        } = &self.body
        else {
            return None;
        };
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(content));
        message.insert("refusal".into(), Value::Null);
        if let Some(r) = reasoning {
            message.insert("reasoning_content".into(), json!(r));
        }
        if !tool_calls.is_empty() {
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    let mut call = Map::new();
                    if let Some(id) = &c.id {
                        call.insert("id".into(), json!(id));
                    }
                    call.insert("type".into(), json!("function"));
                    call.insert(
                        "function".into(),
                        json!({"name": c.name, "arguments": c.arguments}),
                    );
                    Value::Object(call)
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        Some(json!({
            "id": r.id,
            "object": "chat.completion",
            "created": r.created,
            "model": r.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish(!tool_calls.is_empty()),
            }],
            "usage": self.usage_json(r),
            "system_fingerprint": "fp_mock",
        }))
    }

    pub(crate) fn chunks_json(&self, r: &Render, include_usage: bool) -> Option<Vec<Value>> {
        let ReplyBody::Message {
            content,
            reasoning,
            tool_calls,
        } = &self.body
        else {
            return None;
        };
        let chunk = |delta: Value, finish: Value| {
            let mut c = json!({
                "id": r.id,
                "object": "chat.completion.chunk",
                "created": r.created,
                "model": r.model,
                "system_fingerprint": "fp_mock",
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            if include_usage {
                c["usage"] = Value::Null;
            }
            c
        };
        let mut out = vec![chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        )];
        for piece in reasoning.as_deref().map(split_text).unwrap_or_default() {
            out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
        }
        for piece in content.as_deref().map(split_text).unwrap_or_default() {
            out.push(chunk(json!({"content": piece}), Value::Null));
        }
        for (index, call) in tool_calls.iter().enumerate() {
            let mut first = Map::new();
            first.insert("index".into(), json!(index));
            if let Some(id) = &call.id {
                first.insert("id".into(), json!(id));
            }
            first.insert("type".into(), json!("function"));
            first.insert(
                "function".into(),
                json!({"name": call.name, "arguments": ""}),
            );
            out.push(chunk(json!({"tool_calls": [first]}), Value::Null));
            for piece in split_even(&call.arguments, 3) {
                out.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        out.push(chunk(json!({}), json!(self.finish(!tool_calls.is_empty()))));
        if include_usage {
            out.push(json!({
                "id": r.id,
                "object": "chat.completion.chunk",
                "created": r.created,
                "model": r.model,
                "system_fingerprint": "fp_mock",
                "choices": [],
                "usage": self.usage_json(r),
            }));
        }
        Some(out)
    }
}

/// Per-answer values of the wire objects.
pub(crate) struct Render {
    pub id: String,
    pub model: String,
    pub created: u64,
    /// Size of the request's `messages`, for the usage estimate.
    pub prompt_bytes: usize,
}

impl Render {
    fn standalone(model: &str) -> Self {
        Render {
            id: "chatcmpl-mock".into(),
            model: model.into(),
            created: 1_700_000_000,
            prompt_bytes: 0,
        }
    }
}

/// Text as streamed deltas: word by word, or in three pieces for a single word.
fn split_text(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    if words.len() > 1 {
        words.into_iter().map(str::to_owned).collect()
    } else {
        split_even(text, 3)
    }
}

/// `text` in up to `n` non-empty pieces of about equal length (on char boundaries).
fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// OpenAI's error body: `{"error": {"message", "type", "param": null, "code"}}`.
pub fn openai_error(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn split_helpers_keep_all_text() {
        assert_eq!(split_text("a bc d"), vec!["a ", "bc ", "d"]);
        assert_eq!(split_text("héllo!"), vec!["hé", "ll", "o!"]);
        assert_eq!(split_even("ab", 3), vec!["a", "b"]);
        assert!(split_even("", 3).is_empty());
    }

    #[test]
    fn stream_fragments_rebuild_the_arguments() {
        let reply = MockReply::tool_calls([
            MockToolCall::new("c1", "a", json!({"x": 1})),
            MockToolCall::without_id("b", json!("{bad")),
        ]);
        let chunks = reply.chunks("m", true).unwrap();
        let mut args = [String::new(), String::new()];
        for c in &chunks {
            for tc in c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let i = tc["index"].as_u64().unwrap() as usize;
                args[i].push_str(tc["function"]["arguments"].as_str().unwrap());
            }
        }
        assert_eq!(args, ["{\"x\":1}".to_owned(), "{bad".to_owned()]);
        assert_eq!(chunks.last().unwrap()["choices"], json!([]));
        assert_eq!(
            chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
            "tool_calls"
        );
    }
}
