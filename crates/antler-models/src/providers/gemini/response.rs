//! Turning a `GenerateContentResponse` into a LangChain-shaped [`AiMessage`].
//!
//! Both paths end in [`Parts::into_message`]: the non-streaming path reads [`Parts`] from one
//! response, the streaming path accumulates them from the chunks. So a streamed answer folds into
//! the message the same answer gives unstreamed.

use antler_protocol::{AiMessage, Content, Object, UsageMetadata};
use serde::Deserialize;
use serde_json::Value;

use super::THOUGHT_SIGNATURES_KEY;
use crate::providers::mapping::{
    answer_message, call_id_or_new, decode_json, error_description, error_in_answer,
    reasoning_kwargs, response_metadata, token_details, Calls,
};
use crate::ModelError;

/// `usageMetadata`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    total_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
}

impl WireUsage {
    /// langchain-google-genai's reading: thought tokens are output tokens (itemised as
    /// `reasoning`), cached prompt tokens are itemised as `cache_read`.
    pub(crate) fn into_usage(self) -> UsageMetadata {
        let input = self.prompt_token_count.unwrap_or(0);
        let thoughts = self.thoughts_token_count;
        let output = self.candidates_token_count.unwrap_or(0) + thoughts.unwrap_or(0);
        let mut usage = UsageMetadata::new(input, output);
        if let Some(total) = self.total_token_count {
            usage.total_tokens = total;
        }
        usage.input_token_details =
            token_details([("cache_read", self.cached_content_token_count)]);
        usage.output_token_details = token_details([("reasoning", thoughts)]);
        usage
    }
}

/// One `GenerateContentResponse` (a whole answer, or one stream chunk).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireResponse {
    pub(crate) candidates: Option<Vec<WireCandidate>>,
    pub(crate) prompt_feedback: Option<Value>,
    pub(crate) usage_metadata: Option<WireUsage>,
    pub(crate) model_version: Option<String>,
    pub(crate) response_id: Option<String>,
    pub(crate) error: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireCandidate {
    pub content: Option<WireContent>,
    pub finish_reason: Option<String>,
    pub finish_message: Option<String>,
    pub safety_ratings: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireContent {
    pub parts: Option<Vec<WirePart>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WirePart {
    pub text: Option<String>,
    pub thought: Option<bool>,
    pub function_call: Option<WireCall>,
    pub thought_signature: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireCall {
    pub id: Option<String>,
    pub name: Option<String>,
    pub args: Option<Value>,
}

/// A function call of the answer, its id settled (the API's, or a generated one).
#[derive(Debug)]
pub(crate) struct Call {
    pub id: String,
    pub name: Option<String>,
    pub args: Option<Value>,
    pub signature: Option<String>,
}

impl Call {
    pub(crate) fn new(call: WireCall, signature: Option<String>) -> Self {
        Call {
            id: call_id_or_new(call.id),
            name: call.name.filter(|n| !n.is_empty()),
            args: call.args,
            signature,
        }
    }
}

/// Everything the final message is built from.
#[derive(Debug, Default)]
pub struct Parts {
    pub(crate) text: String,
    pub(crate) thoughts: String,
    pub(crate) calls: Vec<Call>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) finish_message: Option<String>,
    pub(crate) safety_ratings: Option<Value>,
    pub(crate) prompt_feedback: Option<Value>,
    pub(crate) model_version: Option<String>,
    pub(crate) response_id: Option<String>,
    pub(crate) usage: Option<WireUsage>,
}

impl Parts {
    /// Fold one response (or chunk) in; the parts of its first candidate are passed to `part`
    /// after they are recorded.
    pub(crate) fn absorb(&mut self, wire: WireResponse, mut part: impl FnMut(PartEvent<'_>)) {
        if let Some(usage) = wire.usage_metadata {
            self.usage = Some(usage);
        }
        keep_first(&mut self.model_version, wire.model_version);
        keep_first(&mut self.response_id, wire.response_id);
        if let Some(feedback) = wire.prompt_feedback {
            self.prompt_feedback = Some(feedback);
        }
        // `candidateCount > 1` is not supported: only the first candidate is read.
        let Some(candidate) = wire.candidates.and_then(|c| c.into_iter().next()) else {
            return;
        };
        if let Some(reason) = candidate.finish_reason {
            self.finish_reason = Some(reason);
        }
        if candidate.finish_message.is_some() {
            self.finish_message = candidate.finish_message;
        }
        if candidate.safety_ratings.is_some() {
            self.safety_ratings = candidate.safety_ratings;
        }
        let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
        for p in parts {
            if let Some(call) = p.function_call {
                let call = Call::new(call, p.thought_signature);
                self.calls.push(call);
                let index = self.calls.len() - 1;
                part(PartEvent::Call(&self.calls[index], index));
            } else if let Some(text) = p.text {
                if p.thought == Some(true) {
                    self.thoughts.push_str(&text);
                    part(PartEvent::Thought(&text));
                } else {
                    self.text.push_str(&text);
                    part(PartEvent::Text(&text));
                }
            }
        }
    }

    /// The answer is complete: a finish reason, or the prompt was blocked.
    pub(crate) fn finished(&self) -> bool {
        self.finish_reason.is_some() || block_reason(self.prompt_feedback.as_ref()).is_some()
    }

    pub(crate) fn into_message(self, message_id: &str, default_model: &str) -> AiMessage {
        let mut calls = Calls::default();
        let mut signatures = Object::new();
        for call in self.calls {
            if let Some(sig) = call.signature {
                signatures.insert(call.id.clone(), Value::String(sig));
            }
            match (call.args, call.name) {
                (None | Some(Value::Null), Some(name)) => {
                    calls.valid(Some(call.id), name, Object::new())
                }
                (Some(Value::Object(args)), Some(name)) => calls.valid(Some(call.id), name, args),
                (args, name) => {
                    let error = if name.is_none() {
                        "function call has no name"
                    } else {
                        "function call args are not a JSON object"
                    };
                    calls.invalid(Some(call.id), name, args.map(|a| a.to_string()), error);
                }
            }
        }
        let finish_reason = self
            .finish_reason
            .as_deref()
            .or_else(|| block_reason(self.prompt_feedback.as_ref()))
            .map(str::to_owned);
        let mut additional_kwargs = reasoning_kwargs(self.thoughts);
        if !signatures.is_empty() {
            additional_kwargs.insert(THOUGHT_SIGNATURES_KEY.into(), Value::Object(signatures));
        }
        let mut meta = response_metadata(
            finish_reason.as_deref(),
            None,
            default_model,
            self.response_id,
        );
        if let Some(v) = self.model_version {
            meta.insert("model_version".into(), Value::String(v));
        }
        if let Some(m) = self.finish_message {
            meta.insert("finish_message".into(), Value::String(m));
        }
        if let Some(r) = self
            .safety_ratings
            .filter(|r| r.as_array().is_none_or(|a| !a.is_empty()))
        {
            meta.insert("safety_ratings".into(), r);
        }
        if let Some(f) = self.prompt_feedback {
            meta.insert("prompt_feedback".into(), f);
        }
        let usage = self.usage.map(WireUsage::into_usage);
        answer_message(
            message_id,
            Content::Text(self.text),
            additional_kwargs,
            meta,
            calls,
            usage,
        )
    }
}

/// A part just recorded by [`Parts::absorb`].
pub(crate) enum PartEvent<'a> {
    Text(&'a str),
    Thought(&'a str),
    /// The call and its position among the answer's calls.
    Call(&'a Call, usize),
}

/// Why the prompt was blocked, from `promptFeedback`.
fn block_reason(feedback: Option<&Value>) -> Option<&str> {
    feedback
        .and_then(|f| f.get("blockReason"))
        .and_then(Value::as_str)
}

fn keep_first(slot: &mut Option<String>, value: Option<String>) {
    if slot.is_none() {
        *slot = value.filter(|v| !v.is_empty());
    }
}

/// The text of a Google `error` object (`"<status>: <message>"`).
pub(crate) fn error_text(error: &Value) -> String {
    error_description(error, Some("status"))
}

/// Parse a 2xx non-streaming body.
pub(crate) fn parse_response(
    body: &[u8],
    message_id: &str,
    default_model: &str,
) -> Result<AiMessage, ModelError> {
    let wire: WireResponse = decode_json(body, "response is not a GenerateContentResponse")?;
    error_in_answer(wire.error.as_ref(), error_text)?;
    if wire.candidates.as_ref().is_none_or(Vec::is_empty) && wire.prompt_feedback.is_none() {
        return Err(ModelError::Decode("response has no candidates".into()));
    }
    let mut parts = Parts::default();
    parts.absorb(wire, |_| {});
    Ok(parts.into_message(message_id, default_model))
}
