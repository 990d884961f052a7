//! Steps of the wire mapping that several wire formats take alike: merging the call's settings
//! into the configured body fields, tool schemas, which invalid tool calls may be replayed, and
//! the small pieces of building messages and chunks from an answer.

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::{AiMessageChunk, Message, Object, ToolSpec};
use serde::de::DeserializeOwned;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::http::truncate;
use crate::ModelError;

/// Longest piece of an unreadable answer quoted in a [`ModelError::Decode`].
const QUOTED_CHARS: usize = 500;

/// Merge the call's `settings` over `fields`, key by key (later wins): `null` settings are
/// ignored, and a `settings.extra_body` object is merged like its keys.
pub(crate) fn merge_settings(fields: &mut Object, settings: &Object) {
    for (k, v) in settings {
        match (k.as_str(), v) {
            (_, Value::Null) => {}
            ("extra_body", Value::Object(extra)) => {
                for (k, v) in extra {
                    fields.insert(k.clone(), v.clone());
                }
            }
            _ => {
                fields.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Remove `keys` from `fields`, saying why for each one that was set.
pub(crate) fn drop_keys<'k>(
    fields: &mut Object,
    keys: impl IntoIterator<Item = &'k str>,
    why: &str,
) {
    for key in keys {
        if fields.remove(key).is_some() {
            tracing::debug!(key, "{why}");
        }
    }
}

/// Serializes each element of a slice through a borrowed view, e.g. `Each(tools, WireTool)`.
pub(crate) struct Each<'a, T, F>(pub &'a [T], pub F);

impl<'a, T, V, F> Serialize for Each<'a, T, F>
where
    F: Fn(&'a T) -> V,
    V: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&(self.1)(item))?;
        }
        seq.end()
    }
}

/// Ends a request body's map with what every wire format puts last: `tool_choice` when set,
/// `stream: true` when streaming, then the remaining settings in order.
pub(crate) fn end_body<M: SerializeMap>(
    mut m: M,
    tool_choice: Option<&Value>,
    stream: bool,
    rest: &Object,
) -> Result<M::Ok, M::Error> {
    if let Some(choice) = tool_choice {
        m.serialize_entry("tool_choice", choice)?;
    }
    if stream {
        m.serialize_entry("stream", &true)?;
    }
    for (k, v) in rest {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

/// A tool's JSON schema; a tool without one gets the empty object schema the APIs require.
pub(crate) struct ToolSchema<'a>(pub &'a ToolSpec);

impl Serialize for ToolSchema<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.0.parameters.is_null() {
            return self.0.parameters.serialize(s);
        }
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("type", "object")?;
        m.serialize_entry("properties", &Object::new())?;
        m.end()
    }
}

/// Ids of the tool calls some tool message answers, computed only when an assistant message
/// carries invalid tool calls: those are replayed only when answered, else a strict provider
/// rejects the unanswered call.
pub(crate) fn answered_invalid_calls(messages: &[Arc<Message>]) -> Option<HashSet<&str>> {
    let has_invalid = messages.iter().any(|m| {
        m.as_ai()
            .is_some_and(|ai| !ai.invalid_tool_calls.is_empty())
    });
    has_invalid.then(|| {
        messages
            .iter()
            .filter_map(|m| m.as_tool())
            .map(|t| t.tool_call_id.as_str())
            .collect()
    })
}

/// `bytes` as the JSON shape `T`, or a [`ModelError::Decode`] saying it is not `what` and quoting
/// its start.
pub(crate) fn decode_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ModelError::Decode(format!(
            "{what} ({e}): {}",
            truncate(&String::from_utf8_lossy(bytes), QUOTED_CHARS)
        ))
    })
}

/// Give a raw tool call without a usable `id` a generated `{prefix}<uuid>`, so its result can be
/// paired with it.
pub(crate) fn ensure_call_id(call: &mut Object, prefix: &str) {
    let has_id = call
        .get("id")
        .and_then(Value::as_str)
        .is_some_and(|id| !id.is_empty());
    if !has_id {
        let id = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
        tracing::debug!(%id, "provider sent a tool call without an id; generated one");
        call.insert("id".into(), Value::String(id));
    }
}

/// The metadata every answer carries, in LangChain's keys: `finish_reason` (OpenAI's
/// vocabulary), `model_name` (the call's model when the answer names none) and the provider's
/// answer `id`.
pub(crate) fn response_metadata(
    finish_reason: Option<&str>,
    model: Option<String>,
    default_model: &str,
    provider_id: Option<String>,
) -> Object {
    let mut meta = Object::new();
    meta.insert(
        "finish_reason".into(),
        finish_reason.map_or(Value::Null, Value::from),
    );
    meta.insert(
        "model_name".into(),
        Value::String(model.unwrap_or_else(|| default_model.to_owned())),
    );
    if let Some(id) = provider_id {
        meta.insert("id".into(), Value::String(id));
    }
    meta
}

/// An empty delta of message `id`.
pub(crate) fn delta_chunk(id: &str) -> AiMessageChunk {
    AiMessageChunk {
        id: Some(id.to_owned()),
        ..Default::default()
    }
}

/// Whether a delta carries anything worth forwarding.
pub(crate) fn has_payload(c: &AiMessageChunk) -> bool {
    !(c.content.is_empty() && c.additional_kwargs.is_empty() && c.tool_call_chunks.is_empty())
}

/// Append `delta` to the string at `key`, creating it when absent.
pub(crate) fn append_str(obj: &mut Object, key: &str, delta: &str) {
    match obj.get_mut(key) {
        Some(Value::String(s)) => s.push_str(delta),
        _ => {
            obj.insert(key.to_owned(), Value::from(delta));
        }
    }
}
