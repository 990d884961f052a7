//! Scripted answers of [`super::MockOpenAi`] ([`MockReply`] constructors in OpenAI's terms) and
//! their rendering in the Chat Completions wire format: one `chat.completion` object, or
//! `chat.completion.chunk` events (role, reasoning and content deltas word by word, tool-call
//! arguments in pieces, the finish chunk, then the usage chunk when asked for).

use serde_json::{json, Map, Value};

use super::MockReply;
use crate::mock::{split_even, split_text, MockAnswer, MockUsage};

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

/// A scripted assistant message in OpenAI's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenAiAnswer {
    content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Vec<MockToolCall>,
    usage: Option<MockUsage>,
    finish_reason: Option<String>,
}

impl OpenAiAnswer {
    pub(crate) fn new(
        content: Option<String>,
        reasoning: Option<String>,
        tool_calls: Vec<MockToolCall>,
    ) -> Self {
        OpenAiAnswer {
            content,
            reasoning,
            tool_calls,
            usage: None,
            finish_reason: None,
        }
    }

    fn usage_json(&self, r: &Render) -> Value {
        let u = MockUsage::or_estimate(self.usage, r.prompt_bytes, || {
            self.content.as_deref().map_or(0, str::len)
                + self.reasoning.as_deref().map_or(0, str::len)
                + self
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
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

    fn finish(&self) -> &str {
        match &self.finish_reason {
            Some(r) => r,
            None if !self.tool_calls.is_empty() => "tool_calls",
            None => "stop",
        }
    }
}

impl MockAnswer for OpenAiAnswer {
    type Render = Render;

    fn message(&self, r: &Render) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.content));
        message.insert("refusal".into(), Value::Null);
        if let Some(r) = &self.reasoning {
            message.insert("reasoning_content".into(), json!(r));
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
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
        json!({
            "id": r.id,
            "object": "chat.completion",
            "created": r.created,
            "model": r.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish(),
            }],
            "usage": self.usage_json(r),
            "system_fingerprint": "fp_mock",
        })
    }

    fn events(&self, r: &Render) -> Vec<Value> {
        let chunk = |delta: Value, finish: Value| {
            let mut c = json!({
                "id": r.id,
                "object": "chat.completion.chunk",
                "created": r.created,
                "model": r.model,
                "system_fingerprint": "fp_mock",
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            if r.include_usage {
                c["usage"] = Value::Null;
            }
            c
        };
        let mut out = vec![chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        )];
        for piece in self
            .reasoning
            .as_deref()
            .map(split_text)
            .unwrap_or_default()
        {
            out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
        }
        for piece in self.content.as_deref().map(split_text).unwrap_or_default() {
            out.push(chunk(json!({"content": piece}), Value::Null));
        }
        for (index, call) in self.tool_calls.iter().enumerate() {
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
        out.push(chunk(json!({}), json!(self.finish())));
        if r.include_usage {
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
        out
    }

    fn text(text: &str) -> Self {
        Self::new(Some(text.to_owned()), None, Vec::new())
    }

    fn scripted_usage(&mut self) -> &mut Option<MockUsage> {
        &mut self.usage
    }
}

/// Constructors and builders in OpenAI's terms (the vendor-neutral ones are [`crate::Reply`]'s).
impl MockReply {
    fn message(
        content: Option<String>,
        reasoning: Option<String>,
        tool_calls: Vec<MockToolCall>,
    ) -> Self {
        Self::answer(OpenAiAnswer::new(content, reasoning, tool_calls))
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

    /// `prompt_tokens_details.cached_tokens`.
    pub fn cached_tokens(self, n: u64) -> Self {
        self.with_usage(|u| u.cached = n)
    }

    /// `completion_tokens_details.reasoning_tokens`.
    pub fn reasoning_tokens(self, n: u64) -> Self {
        self.with_usage(|u| u.reasoning = n)
    }

    /// Override the finish reason (default `stop`, or `tool_calls` when calling tools).
    pub fn finish_reason(self, reason: impl Into<String>) -> Self {
        self.with_answer(|a| a.finish_reason = Some(reason.into()))
    }

    /// Streams: send `n` chunks, then go silent ([`crate::Reply::stall_after_events`]).
    pub fn stall_after_chunks(self, n: usize) -> Self {
        self.stall_after_events(n)
    }

    /// Streams: send `n` chunks, then end the body without `[DONE]`
    /// ([`crate::Reply::drop_after_events`]).
    pub fn drop_after_chunks(self, n: usize) -> Self {
        self.drop_after_events(n)
    }

    /// Streams: send `n` chunks, then `data: {"error": <error>}` and end the body
    /// ([`crate::Reply::error_after_events`]).
    pub fn error_after_chunks(self, n: usize, error: Value) -> Self {
        self.error_after_events(n, error)
    }

    /// The answer as a `chat.completion` object (`None` for errors, raw bodies and hangs).
    pub fn chat_completion(&self, model: &str) -> Option<Value> {
        self.answer_ref()
            .map(|a| a.message(&Render::standalone(model, false)))
    }

    /// The answer as `chat.completion.chunk` objects, with the trailing usage chunk when
    /// `include_usage` (`None` for errors, raw bodies and hangs).
    pub fn chunks(&self, model: &str, include_usage: bool) -> Option<Vec<Value>> {
        self.answer_ref()
            .map(|a| a.events(&Render::standalone(model, include_usage)))
    }
}

/// Per-answer values of the wire objects.
pub struct Render {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) created: u64,
    /// Size of the request's `messages`, for the usage estimate.
    pub(crate) prompt_bytes: usize,
    /// The request asked for a final usage chunk (`stream_options.include_usage`).
    pub(crate) include_usage: bool,
}

impl Render {
    fn standalone(model: &str, include_usage: bool) -> Self {
        Render {
            id: "chatcmpl-mock".into(),
            model: model.into(),
            created: 1_700_000_000,
            prompt_bytes: 0,
            include_usage,
        }
    }
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
