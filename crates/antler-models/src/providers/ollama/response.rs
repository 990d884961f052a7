//! Turning an `/api/chat` answer into a LangChain-shaped [`AiMessage`].
//!
//! Both paths end in [`Parts::into_message`]: the non-streaming path reads [`Parts`] from the one
//! response object, the streaming path accumulates them from the NDJSON lines (each the same
//! shape, `done: true` on the last).

use antler_protocol::{AiMessage, Content, Object, UsageMetadata};
use serde::Deserialize;
use serde_json::Value;

use crate::providers::mapping::{
    answer_message, call_id_or_new, decode_json, error_description, error_in_answer,
    reasoning_kwargs, response_metadata, Calls,
};
use crate::ModelError;

/// One response object (the whole answer, or one line of a stream).
#[derive(Debug, Deserialize)]
pub struct WireChat {
    pub(crate) model: Option<String>,
    pub(crate) created_at: Option<String>,
    pub(crate) message: Option<WireMessage>,
    pub(crate) done: Option<bool>,
    pub(crate) done_reason: Option<String>,
    pub(crate) prompt_eval_count: Option<u64>,
    pub(crate) eval_count: Option<u64>,
    pub(crate) total_duration: Option<u64>,
    pub(crate) load_duration: Option<u64>,
    pub(crate) prompt_eval_duration: Option<u64>,
    pub(crate) eval_duration: Option<u64>,
    pub(crate) error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub content: Option<String>,
    pub thinking: Option<String>,
    pub tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireToolCall {
    pub id: Option<String>,
    pub function: Option<WireFunction>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunction {
    pub name: Option<String>,
    pub arguments: Option<Value>,
}

/// A tool call of the answer, its id settled (Ollama's, or a generated one).
#[derive(Debug)]
pub(crate) struct Call {
    pub id: String,
    pub name: Option<String>,
    pub arguments: Option<Value>,
}

/// Everything the final message is built from.
#[derive(Debug, Default)]
pub struct Parts {
    pub(crate) text: String,
    pub(crate) thinking: String,
    pub(crate) calls: Vec<Call>,
    pub(crate) done: bool,
    pub(crate) done_reason: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) created_at: Option<String>,
    pub(crate) prompt_eval_count: Option<u64>,
    pub(crate) eval_count: Option<u64>,
    /// `total_duration`, `load_duration`, `prompt_eval_duration`, `eval_duration` (ns).
    pub(crate) durations: Object,
}

impl Parts {
    /// Fold one response object in; returns the text and thinking it added and the index of its
    /// first new call.
    pub(crate) fn absorb(&mut self, wire: WireChat) -> (String, String, usize) {
        if self.model.is_none() {
            self.model = wire.model.filter(|m| !m.is_empty());
        }
        if self.created_at.is_none() {
            self.created_at = wire.created_at;
        }
        let first_new = self.calls.len();
        let (mut text, mut thinking) = (String::new(), String::new());
        if let Some(message) = wire.message {
            if let Some(t) = message.content {
                self.text.push_str(&t);
                text = t;
            }
            if let Some(t) = message.thinking {
                self.thinking.push_str(&t);
                thinking = t;
            }
            for call in message.tool_calls.unwrap_or_default() {
                let (name, arguments) = match call.function {
                    Some(f) => (f.name.filter(|n| !n.is_empty()), f.arguments),
                    None => (None, None),
                };
                self.calls.push(Call {
                    id: call_id_or_new(call.id),
                    name,
                    arguments,
                });
            }
        }
        if wire.done == Some(true) {
            self.done = true;
            self.done_reason = wire.done_reason.or(self.done_reason.take());
            self.prompt_eval_count = wire.prompt_eval_count;
            self.eval_count = wire.eval_count;
            for (k, v) in [
                ("total_duration", wire.total_duration),
                ("load_duration", wire.load_duration),
                ("prompt_eval_duration", wire.prompt_eval_duration),
                ("eval_duration", wire.eval_duration),
            ] {
                if let Some(v) = v {
                    self.durations.insert(k.into(), Value::from(v));
                }
            }
        }
        (text, thinking, first_new)
    }

    pub(crate) fn into_message(self, message_id: &str, default_model: &str) -> AiMessage {
        let mut calls = Calls::default();
        for call in self.calls {
            // Ollama sends an object; a JSON string (an OpenAI habit of some templates) is read.
            let args = match call.arguments {
                None | Some(Value::Null) => Ok(Object::new()),
                Some(Value::Object(o)) => Ok(o),
                Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
                    Ok(Value::Object(o)) => Ok(o),
                    _ => Err(s),
                },
                Some(other) => Err(other.to_string()),
            };
            match (args, call.name) {
                (Ok(args), Some(name)) => calls.valid(Some(call.id), name, args),
                (args, name) => {
                    let error = if name.is_none() {
                        "tool call has no function name"
                    } else {
                        "tool call arguments are not a JSON object"
                    };
                    let raw = args.map_or_else(|raw| raw, |o| Value::Object(o).to_string());
                    calls.invalid(Some(call.id), name, Some(raw), error);
                }
            }
        }
        let finish_reason = if !calls.valid.is_empty() && self.done {
            Some("tool_calls")
        } else {
            self.done_reason.as_deref()
        };
        let mut meta = response_metadata(finish_reason, self.model, default_model, None);
        if let Some(r) = &self.done_reason {
            meta.insert("done_reason".into(), Value::from(r.as_str()));
        }
        if let Some(c) = self.created_at {
            meta.insert("created_at".into(), Value::String(c));
        }
        meta.extend(self.durations);
        let usage = (self.prompt_eval_count.is_some() || self.eval_count.is_some()).then(|| {
            UsageMetadata::new(
                self.prompt_eval_count.unwrap_or(0),
                self.eval_count.unwrap_or(0),
            )
        });
        let kwargs = reasoning_kwargs(self.thinking);
        answer_message(
            message_id,
            Content::Text(self.text),
            kwargs,
            meta,
            calls,
            usage,
        )
    }
}

/// Ollama's error text from `{"error": …}`.
pub(crate) fn error_text(error: &Value) -> String {
    error_description(error, None)
}

/// Parse a 2xx non-streaming body.
pub(crate) fn parse_chat(
    body: &[u8],
    message_id: &str,
    default_model: &str,
) -> Result<AiMessage, ModelError> {
    let wire: WireChat = decode_json(body, "response is not an Ollama chat response")?;
    error_in_answer(wire.error.as_ref(), error_text)?;
    if wire.message.is_none() {
        return Err(ModelError::Decode("response has no message".into()));
    }
    let mut parts = Parts::default();
    parts.absorb(wire);
    Ok(parts.into_message(message_id, default_model))
}
