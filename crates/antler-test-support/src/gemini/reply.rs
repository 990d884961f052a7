//! Scripted answers of [`crate::MockGemini`] ([`GeminiReply`] constructors in Gemini's terms) and
//! their rendering in the Gemini wire format: one `GenerateContentResponse`, or a series of them
//! as SSE `data:` chunks (text and thoughts piece by piece, each function call whole, the last
//! chunk with `finishReason` and the full `usageMetadata`).

use serde_json::{json, Map, Value};

use super::GeminiReply;
use crate::mock::{estimated_tokens, split_text, MockAnswer, MockUsage};

/// One part of a scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum GeminiPart {
    Text(String),
    /// A thought summary (`{"text": …, "thought": true}`).
    Thought(String),
    /// A function call with its arguments object and, when set, the `thoughtSignature` the API
    /// attaches (and wants back).
    FunctionCall {
        name: String,
        args: Value,
        signature: Option<String>,
    },
}

impl GeminiPart {
    pub fn text(text: impl Into<String>) -> Self {
        GeminiPart::Text(text.into())
    }

    pub fn thought(text: impl Into<String>) -> Self {
        GeminiPart::Thought(text.into())
    }

    pub fn function_call(name: impl Into<String>, args: Value) -> Self {
        GeminiPart::FunctionCall {
            name: name.into(),
            args,
            signature: None,
        }
    }

    /// A function call carrying `signature` as its `thoughtSignature`.
    pub fn signed_call(name: impl Into<String>, args: Value, signature: impl Into<String>) -> Self {
        GeminiPart::FunctionCall {
            name: name.into(),
            args,
            signature: Some(signature.into()),
        }
    }

    fn len(&self) -> usize {
        match self {
            GeminiPart::Text(t) | GeminiPart::Thought(t) => t.len(),
            GeminiPart::FunctionCall { name, args, .. } => name.len() + args.to_string().len(),
        }
    }

    fn json(&self, text: Option<&str>) -> Value {
        match self {
            GeminiPart::Text(t) => json!({"text": text.unwrap_or(t)}),
            GeminiPart::Thought(t) => json!({"text": text.unwrap_or(t), "thought": true}),
            GeminiPart::FunctionCall {
                name,
                args,
                signature,
            } => {
                let mut part = Map::new();
                part.insert("functionCall".into(), json!({"name": name, "args": args}));
                if let Some(sig) = signature {
                    part.insert("thoughtSignature".into(), json!(sig));
                }
                Value::Object(part)
            }
        }
    }
}

/// A scripted model turn in Gemini's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct GeminiAnswer {
    parts: Vec<GeminiPart>,
    usage: Option<MockUsage>,
    finish_reason: Option<String>,
    /// Answer with `promptFeedback.blockReason` and no candidate.
    blocked: Option<String>,
}

impl GeminiAnswer {
    pub(crate) fn new(parts: Vec<GeminiPart>) -> Self {
        GeminiAnswer {
            parts,
            usage: None,
            finish_reason: None,
            blocked: None,
        }
    }

    fn usage_json(&self, r: &Render) -> Value {
        let u = MockUsage::or_estimate(self.usage, r.prompt_bytes, || {
            self.parts.iter().map(GeminiPart::len).sum()
        });
        let mut usage = json!({
            "promptTokenCount": u.input,
            "candidatesTokenCount": u.output,
            "totalTokenCount": u.input + u.output + u.reasoning,
        });
        if u.reasoning > 0 {
            usage["thoughtsTokenCount"] = json!(u.reasoning);
        }
        if u.cached > 0 {
            usage["cachedContentTokenCount"] = json!(u.cached);
        }
        usage
    }

    fn finish(&self) -> &str {
        self.finish_reason.as_deref().unwrap_or("STOP")
    }

    fn response(&self, r: &Render, parts: Vec<Value>, finish: bool, usage: Value) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if finish {
            candidate["finishReason"] = json!(self.finish());
            candidate["safetyRatings"] = json!([]);
        }
        json!({
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": "gemini-mock-001",
            "responseId": r.id,
        })
    }

    fn blocked_json(&self, r: &Render, reason: &str) -> Value {
        json!({
            "promptFeedback": {"blockReason": reason, "safetyRatings": []},
            "usageMetadata": {"promptTokenCount": estimated_tokens(r.prompt_bytes), "totalTokenCount": estimated_tokens(r.prompt_bytes)},
            "modelVersion": "gemini-mock-001",
            "responseId": r.id,
        })
    }
}

impl MockAnswer for GeminiAnswer {
    type Render = Render;

    fn message(&self, r: &Render) -> Value {
        if let Some(reason) = &self.blocked {
            return self.blocked_json(r, reason);
        }
        let parts = self.parts.iter().map(|p| p.json(None)).collect();
        self.response(r, parts, true, self.usage_json(r))
    }

    fn events(&self, r: &Render) -> Vec<Value> {
        if let Some(reason) = &self.blocked {
            return vec![self.blocked_json(r, reason)];
        }
        let partial_usage = json!({"promptTokenCount": self.usage_json(r)["promptTokenCount"]});
        let mut out = Vec::new();
        for part in &self.parts {
            match part {
                GeminiPart::Text(t) | GeminiPart::Thought(t) => {
                    for piece in split_text(t) {
                        out.push(self.response(
                            r,
                            vec![part.json(Some(&piece))],
                            false,
                            partial_usage.clone(),
                        ));
                    }
                }
                GeminiPart::FunctionCall { .. } => {
                    out.push(self.response(r, vec![part.json(None)], false, partial_usage.clone()));
                }
            }
        }
        // The real API sends the finish reason with a last (here: empty) text part.
        out.push(self.response(r, vec![json!({"text": ""})], true, self.usage_json(r)));
        out
    }

    fn text(text: &str) -> Self {
        Self::new(vec![GeminiPart::text(text)])
    }

    fn scripted_usage(&mut self) -> &mut Option<MockUsage> {
        &mut self.usage
    }
}

/// Constructors and builders in Gemini's terms (the vendor-neutral ones are [`crate::Reply`]'s).
impl GeminiReply {
    /// A model turn made of `parts`, in order.
    pub fn parts(parts: impl IntoIterator<Item = GeminiPart>) -> Self {
        Self::answer(GeminiAnswer::new(parts.into_iter().collect()))
    }

    /// One function call (no signature).
    pub fn function_call(name: impl Into<String>, args: Value) -> Self {
        Self::parts([GeminiPart::function_call(name, args)])
    }

    /// A thought summary followed by a text answer.
    pub fn thinking(thought: impl Into<String>, text: impl Into<String>) -> Self {
        Self::parts([GeminiPart::thought(thought), GeminiPart::text(text)])
    }

    /// The prompt is blocked: no candidate, `promptFeedback.blockReason = reason`.
    pub fn blocked(reason: impl Into<String>) -> Self {
        Self::parts([]).with_answer(|a| a.blocked = Some(reason.into()))
    }

    /// Override the finish reason (default `STOP`).
    pub fn finish_reason(self, reason: impl Into<String>) -> Self {
        self.with_answer(|a| a.finish_reason = Some(reason.into()))
    }

    /// `thoughtsTokenCount` and `cachedContentTokenCount` (with `.usage(…)` for the rest).
    pub fn thought_and_cached_tokens(self, thoughts: u64, cached: u64) -> Self {
        self.with_usage(|u| {
            u.reasoning = thoughts;
            u.cached = cached;
        })
    }

    /// `429 RESOURCE_EXHAUSTED` with a `RetryInfo` detail of `secs` (the API's way of saying
    /// when to retry; it sends no `Retry-After` header).
    pub fn rate_limited(secs: u64) -> Self {
        let mut body = gemini_error(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            "RESOURCE_EXHAUSTED",
        );
        body["error"]["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{secs}s"),
        }]);
        Self::error(429, body)
    }

    /// `503 UNAVAILABLE` ("The model is overloaded").
    pub fn overloaded() -> Self {
        Self::error(
            503,
            gemini_error(
                503,
                "The model is overloaded. Please try again later.",
                "UNAVAILABLE",
            ),
        )
    }

    /// The answer as one `GenerateContentResponse` (`None` for errors, raw bodies and hangs).
    pub fn response(&self) -> Option<Value> {
        self.answer_ref().map(|a| a.message(&Render::standalone()))
    }

    /// The answer as stream chunks (`None` for errors, raw bodies and hangs).
    pub fn chunks(&self) -> Option<Vec<Value>> {
        self.answer_ref().map(|a| a.events(&Render::standalone()))
    }
}

/// Per-answer values of the wire objects.
pub struct Render {
    pub(crate) id: String,
    /// Size of the request's `contents` and `systemInstruction`, for the usage estimate.
    pub(crate) prompt_bytes: usize,
}

impl Render {
    fn standalone() -> Self {
        Render {
            id: "resp-mock".into(),
            prompt_bytes: 0,
        }
    }
}

/// Google's error body: `{"error": {"code", "message", "status"}}`.
pub fn gemini_error(code: u16, message: &str, status: &str) -> Value {
    json!({"error": {"code": code, "message": message, "status": status}})
}
