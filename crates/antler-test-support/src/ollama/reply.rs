//! Scripted answers of [`crate::MockOllama`] ([`OllamaReply`] constructors in Ollama's terms) and
//! their rendering in Ollama's wire format: one `/api/chat` response object, or NDJSON lines
//! (thinking and content piece by piece, tool calls whole in one line, then the `done` line with
//! `done_reason` and the eval counts).

use serde_json::{json, Map, Value};

use super::OllamaReply;
use crate::mock::{split_text, MockAnswer, MockUsage};

/// One tool call of a scripted answer; Ollama sends `arguments` as an object.
#[derive(Clone, Debug, PartialEq)]
pub struct OllamaToolCall {
    /// Newer Ollama versions send an id; older ones none.
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
}

impl OllamaToolCall {
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        OllamaToolCall {
            id: None,
            name: name.into(),
            arguments,
        }
    }

    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

/// A scripted assistant message in Ollama's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct OllamaAnswer {
    content: String,
    thinking: Option<String>,
    tool_calls: Vec<OllamaToolCall>,
    /// `(prompt_eval_count, eval_count)`.
    pub(crate) usage: Option<MockUsage>,
    done_reason: Option<String>,
}

const CREATED_AT: &str = "2025-01-01T00:00:00.000000Z";

impl OllamaAnswer {
    pub(crate) fn new(
        content: &str,
        thinking: Option<String>,
        tool_calls: Vec<OllamaToolCall>,
    ) -> Self {
        OllamaAnswer {
            content: content.to_owned(),
            thinking,
            tool_calls,
            usage: None,
            done_reason: None,
        }
    }

    fn counts(&self, r: &Render) -> (u64, u64) {
        let u = MockUsage::or_estimate(self.usage, r.prompt_bytes, || {
            self.content.len()
                + self.thinking.as_deref().map_or(0, str::len)
                + self
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>()
        });
        (u.input, u.output)
    }

    fn calls_json(&self) -> Value {
        self.tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut call = Map::new();
                if let Some(id) = &c.id {
                    call.insert("id".into(), json!(id));
                }
                call.insert(
                    "function".into(),
                    json!({"index": i, "name": c.name, "arguments": c.arguments}),
                );
                Value::Object(call)
            })
            .collect()
    }

    fn line(&self, r: &Render, message: Value) -> Value {
        json!({"model": r.model, "created_at": CREATED_AT, "message": message, "done": false})
    }

    fn done(&self, r: &Render, message: Value) -> Value {
        let (prompt, eval) = self.counts(r);
        json!({
            "model": r.model,
            "created_at": CREATED_AT,
            "message": message,
            "done": true,
            "done_reason": self.done_reason.as_deref().unwrap_or("stop"),
            "total_duration": 1_000_000u64,
            "load_duration": 100_000u64,
            "prompt_eval_count": prompt,
            "prompt_eval_duration": 200_000u64,
            "eval_count": eval,
            "eval_duration": 700_000u64,
        })
    }
}

impl MockAnswer for OllamaAnswer {
    type Render = Render;

    fn message(&self, r: &Render) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if let Some(t) = &self.thinking {
            message["thinking"] = json!(t);
        }
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self.calls_json();
        }
        self.done(r, message)
    }

    fn events(&self, r: &Render) -> Vec<Value> {
        let mut out = Vec::new();
        for piece in self.thinking.as_deref().map(split_text).unwrap_or_default() {
            out.push(self.line(
                r,
                json!({"role": "assistant", "content": "", "thinking": piece}),
            ));
        }
        for piece in split_text(&self.content) {
            out.push(self.line(r, json!({"role": "assistant", "content": piece})));
        }
        if !self.tool_calls.is_empty() {
            out.push(self.line(
                r,
                json!({"role": "assistant", "content": "", "tool_calls": self.calls_json()}),
            ));
        }
        out.push(self.done(r, json!({"role": "assistant", "content": ""})));
        out
    }

    fn text(text: &str) -> Self {
        Self::new(text, None, Vec::new())
    }

    fn scripted_usage(&mut self) -> &mut Option<MockUsage> {
        &mut self.usage
    }
}

/// Constructors and builders in Ollama's terms (the vendor-neutral ones are [`crate::Reply`]'s).
impl OllamaReply {
    /// One tool call without an id (as most Ollama versions send it).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls([OllamaToolCall::new(name, arguments)])
    }

    /// Several tool calls, in order.
    pub fn tool_calls(calls: impl IntoIterator<Item = OllamaToolCall>) -> Self {
        Self::answer(OllamaAnswer::new("", None, calls.into_iter().collect()))
    }

    /// Thinking (`message.thinking`, sent when the request says `think: true`) then text.
    pub fn thinking(thinking: impl Into<String>, text: impl Into<String>) -> Self {
        Self::answer(OllamaAnswer::new(
            &text.into(),
            Some(thinking.into()),
            Vec::new(),
        ))
    }

    /// Override `done_reason` (default `stop`).
    pub fn done_reason(self, reason: impl Into<String>) -> Self {
        self.with_answer(|a| a.done_reason = Some(reason.into()))
    }

    /// `503` "server busy" (Ollama's queue is full).
    pub fn busy() -> Self {
        Self::error(
            503,
            ollama_error("server busy, please try again.  maximum pending requests exceeded"),
        )
    }

    /// The answer as one response object (`None` for errors, raw bodies and hangs).
    pub fn response(&self, model: &str) -> Option<Value> {
        self.answer_ref()
            .map(|a| a.message(&Render::standalone(model)))
    }

    /// The answer as NDJSON lines (`None` for errors, raw bodies and hangs).
    pub fn lines(&self, model: &str) -> Option<Vec<Value>> {
        self.answer_ref()
            .map(|a| a.events(&Render::standalone(model)))
    }
}

/// Per-answer values of the wire objects.
pub struct Render {
    pub(crate) model: String,
    /// Size of the request's `messages`, for the usage estimate.
    pub(crate) prompt_bytes: usize,
}

impl Render {
    fn standalone(model: &str) -> Self {
        Render {
            model: model.into(),
            prompt_bytes: 0,
        }
    }
}

/// Ollama's error body: `{"error": "…"}`.
pub fn ollama_error(message: &str) -> Value {
    json!({ "error": message })
}
