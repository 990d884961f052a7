//! Small steps the vendors' request checks and renderers share.

use std::collections::HashSet;

use serde_json::Value;

/// The tool-call ids of one request: every call needs one, and no two calls share one.
#[derive(Debug, Default)]
pub(crate) struct CallIds(HashSet<String>);

impl CallIds {
    /// The call's non-empty `id`, now registered; otherwise why it is unusable, in the vendor's
    /// words (`missing`, or `repeated(id)`).
    pub(crate) fn register<'a>(
        &mut self,
        call: &'a Value,
        missing: &str,
        repeated: impl FnOnce(&str) -> String,
    ) -> Result<&'a str, String> {
        let Some(id) = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return Err(missing.to_owned());
        };
        if !self.0.insert(id.to_owned()) {
            return Err(repeated(id));
        }
        Ok(id)
    }
}

/// The request's `messages`; a missing or empty list is the first problem in `out`.
pub(crate) fn request_messages<'a>(body: &'a Value, out: &mut Vec<String>) -> Option<&'a [Value]> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        out.push("request body has no `messages` array".to_owned());
        return None;
    };
    if messages.is_empty() {
        out.push("`messages` is empty".to_owned());
    }
    Some(messages)
}

/// The elements of the array at `key` of `v` (none when it is absent or not an array).
pub(crate) fn array_items<'a>(v: &'a Value, key: &str) -> std::slice::Iter<'a, Value> {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
}

/// How a problem names the `i`-th message of the history, with its role.
pub(crate) fn message_at(i: usize, role: &str) -> String {
    format!("messages[{i}] ({role})")
}

/// The request's `model`, or `mock-model` when it names none.
pub(crate) fn request_model(request: &Value) -> String {
    request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned()
}

/// Serialized size of the request's `keys` (the prompt, for the usage estimate).
pub(crate) fn prompt_bytes(request: &Value, keys: &[&str]) -> usize {
    keys.iter()
        .filter_map(|k| request.get(k))
        .map(|v| v.to_string().len())
        .sum()
}

/// `found` holds exactly one problem per `expected` piece, in order, each containing its piece.
#[cfg(test)]
#[allow(clippy::panic)]
pub(crate) fn assert_problems(found: &[String], expected: &[&str]) {
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (i, (problem, piece)) in found.iter().zip(expected).enumerate() {
        assert!(
            problem.contains(piece),
            "problem {i}: {problem:?} does not contain {piece:?}"
        );
    }
}
