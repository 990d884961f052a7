//! Estimated heap footprint of messages, for byte bounds on history kept in memory (the server's
//! replay buffers of finished runs). An estimate of what the allocator holds, not of the wire
//! size: a small JSON object costs far more in memory (a slot per key, a `String` per key) than
//! its text, and a tool-calling AI message holds several.

use std::collections::HashSet;
use std::mem::size_of;

use serde_json::Value;

use crate::messages::{Content, InvalidToolCall, Message, Object, ToolCall, UsageMetadata};
use crate::shared::{Shared, SharedValue};

/// What the allocator adds to a block (header and rounding), on average.
const BLOCK: usize = 16;
/// An `Arc`'s block beside its value: the block and the two counts.
const ARC: usize = BLOCK + 2 * size_of::<usize>();
/// Per entry of a `serde_json::Map` (an `IndexMap`): the entry (hash, key, value) and its slot
/// in the hash index, beside the key's own allocation.
const MAP_ENTRY: usize = 8 + size_of::<String>() + size_of::<Value>() + 9;

fn string(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        s.len() + BLOCK
    }
}

fn opt_string(s: &Option<String>) -> usize {
    s.as_deref().map_or(0, string)
}

/// A JSON value's heap bytes (not counting the `Value` itself, which lives in its parent).
fn json(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => string(s),
        Value::Array(a) => array(a),
        Value::Object(m) => object(m),
    }
}

fn array(a: &[Value]) -> usize {
    std::mem::size_of_val(a) + BLOCK + a.iter().map(json).sum::<usize>()
}

/// A JSON object's heap bytes: its two tables, its keys and its values.
fn object(m: &Object) -> usize {
    if m.is_empty() {
        return 0;
    }
    2 * BLOCK
        + m.iter()
            .map(|(k, v)| MAP_ENTRY + string(k) + json(v))
            .sum::<usize>()
}

fn content(c: &Content) -> usize {
    match c {
        Content::Text(s) => string(s),
        Content::Blocks(b) => array(b),
    }
}

/// A shared field counted once per allocation across everything `seen` has walked.
fn shared<T: SharedValue>(
    f: &Shared<T>,
    seen: &mut HashSet<usize>,
    inner: impl FnOnce(&T) -> usize,
) -> usize {
    match f.addr() {
        Some(addr) if seen.insert(addr) => ARC + inner(f),
        _ => 0,
    }
}

fn tool_call(c: &ToolCall) -> usize {
    string(&c.name) + object(&c.args) + opt_string(&c.id) + string(&c.kind)
}

fn invalid_call(c: &InvalidToolCall) -> usize {
    string(&c.kind)
        + opt_string(&c.id)
        + opt_string(&c.name)
        + opt_string(&c.args)
        + opt_string(&c.error)
}

fn usage(u: &UsageMetadata) -> usize {
    u.input_token_details.as_ref().map_or(0, object)
        + u.output_token_details.as_ref().map_or(0, object)
}

impl Message {
    /// Estimated heap bytes of this message held in an `Arc` (its block, strings and JSON).
    /// Parts shared between versions of a message count once: `seen` holds the shared
    /// allocations already counted, so walking every version of a history sums what they hold
    /// together.
    pub fn heap_estimate(&self, seen: &mut HashSet<usize>) -> usize {
        let base = ARC + size_of::<Message>();
        macro_rules! common {
            ($m:expr) => {
                content(&$m.content)
                    + opt_string(&$m.name)
                    + opt_string(&$m.id)
                    + shared(&$m.additional_kwargs, seen, object)
                    + shared(&$m.response_metadata, seen, object)
            };
        }
        base + match self {
            Message::Human(m) => common!(m),
            Message::System(m) => common!(m),
            Message::Remove(m) => common!(m),
            Message::Tool(m) => common!(m) + string(&m.tool_call_id) + json(&m.artifact),
            Message::Ai(m) => {
                common!(m)
                    + shared(&m.tool_calls, seen, |calls| {
                        calls.len() * size_of::<ToolCall>()
                            + calls.iter().map(tool_call).sum::<usize>()
                    })
                    + shared(&m.invalid_tool_calls, seen, |calls| {
                        calls.len() * size_of::<InvalidToolCall>()
                            + calls.iter().map(invalid_call).sum::<usize>()
                    })
                    + m.usage_metadata.as_ref().map_or(0, usage)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::messages::AiMessage;
    use serde_json::json;

    fn calling(id: &str) -> AiMessage {
        let raw = json!([{"id": id, "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\":\"echo hi\"}"}}]);
        let mut kwargs = Object::new();
        kwargs.insert("tool_calls".into(), raw);
        AiMessage {
            id: Some(format!("msg-{id}")),
            additional_kwargs: kwargs.into(),
            tool_calls: vec![ToolCall::new(
                id,
                "bash",
                json!({"command": "echo hi"}).as_object().unwrap().clone(),
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn json_costs_more_in_memory_than_on_the_wire() {
        let m = Message::Ai(calling("call_1"));
        let wire = serde_json::to_string(&m).unwrap().len();
        let heap = m.heap_estimate(&mut HashSet::new());
        assert!(heap > 2 * wire, "heap {heap}, wire {wire}");
    }

    #[test]
    fn parts_shared_between_versions_count_once() {
        let decoded = calling("call_1");
        let mut stamped = decoded.clone();
        stamped
            .additional_kwargs
            .insert("token_usage_attribution".into(), json!({"kind": "tool"}));
        let (a, b) = (Message::Ai(decoded), Message::Ai(stamped));
        let alone = b.heap_estimate(&mut HashSet::new());
        let mut seen = HashSet::new();
        let together = a.heap_estimate(&mut seen) + b.heap_estimate(&mut seen);
        let a_alone = a.heap_estimate(&mut HashSet::new());
        // The stamped version's own map is counted; its tool calls and metadata are not again.
        assert!(together < a_alone + alone);
        assert!(together > a_alone);
    }
}
