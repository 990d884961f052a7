//! What a strict provider checks on every request: each assistant tool call is answered by
//! exactly one tool message before the next assistant message, and no tool message answers an
//! unknown call.

use std::collections::HashSet;

use serde_json::Value;

use crate::mock::{message_at, request_messages, CallIds};

/// Every pairing problem in a Chat Completions request body (empty when well-formed).
///
/// With `strict_order`, tool results must also directly follow their assistant message (no user
/// or system message in between), as OpenAI itself requires.
pub fn tool_call_violations(body: &Value, strict_order: bool) -> Vec<String> {
    let mut out = Vec::new();
    let Some(messages) = request_messages(body, &mut out) else {
        return out;
    };
    // (message index, call id, function name) awaiting a result.
    let mut pending: Vec<(usize, String, String)> = Vec::new();
    let mut ids = CallIds::default();
    let mut answered: HashSet<String> = HashSet::new();

    let unanswered =
        |pending: &mut Vec<(usize, String, String)>, out: &mut Vec<String>, at: &str| {
            for (i, id, name) in pending.drain(..) {
                out.push(format!(
                    "messages[{i}]: tool call `{id}` ({name}) has no tool result before {at}"
                ));
            }
        };

    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "assistant" => {
                unanswered(&mut pending, &mut out, &message_at(i, "assistant"));
                let calls = match msg.get("tool_calls") {
                    None | Some(Value::Null) => continue,
                    Some(Value::Array(calls)) => calls,
                    Some(_) => {
                        out.push(format!("messages[{i}]: `tool_calls` is not an array"));
                        continue;
                    }
                };
                for (k, call) in calls.iter().enumerate() {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    if name.is_empty() {
                        out.push(format!("messages[{i}].tool_calls[{k}]: no function name"));
                    }
                    if !call
                        .pointer("/function/arguments")
                        .is_some_and(Value::is_string)
                    {
                        out.push(format!(
                            "messages[{i}].tool_calls[{k}]: function.arguments must be a string"
                        ));
                    }
                    match ids.register(call, "no id", |id| format!("duplicate tool call id `{id}`"))
                    {
                        Ok(id) => pending.push((i, id.to_owned(), name)),
                        Err(why) => out.push(format!("messages[{i}].tool_calls[{k}]: {why}")),
                    }
                }
            }
            "tool" => {
                let Some(id) = msg.get("tool_call_id").and_then(Value::as_str) else {
                    out.push(format!("messages[{i}] (tool): no tool_call_id"));
                    continue;
                };
                if let Some(pos) = pending.iter().position(|(_, p, _)| p == id) {
                    pending.remove(pos);
                    answered.insert(id.to_owned());
                } else if answered.contains(id) {
                    out.push(format!(
                        "messages[{i}] (tool): tool call `{id}` is answered more than once"
                    ));
                } else {
                    out.push(format!(
                        "messages[{i}] (tool): tool_call_id `{id}` does not answer a preceding assistant tool call"
                    ));
                }
            }
            "user" | "system" | "developer" => {
                if strict_order && !pending.is_empty() {
                    out.push(format!(
                        "messages[{i}] ({role}) comes between tool calls and their results"
                    ));
                }
            }
            other => out.push(format!("messages[{i}]: unknown role `{other}`")),
        }
    }
    unanswered(&mut pending, &mut out, "the end of messages");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::tool_call_violations;

    fn call(id: &str) -> serde_json::Value {
        json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
    }

    #[test]
    fn well_formed_history_passes() {
        let body = json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
            {"role": "assistant", "content": "done"},
        ]});
        assert_eq!(tool_call_violations(&body, true), Vec::<String>::new());
    }

    #[test]
    fn broken_histories_are_named() {
        let body = json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "again"},
            {"role": "user", "content": "hm"},
            {"role": "assistant", "content": "x"},
            {"role": "tool", "tool_call_id": "zzz", "content": "?"},
            {"role": "assistant", "content": null, "tool_calls": [call("c")]},
        ]});
        assert_eq!(
            tool_call_violations(&body, true),
            vec![
                "messages[3] (tool): tool call `a` is answered more than once",
                "messages[4] (user) comes between tool calls and their results",
                "messages[1]: tool call `b` (f) has no tool result before messages[5] (assistant)",
                "messages[6] (tool): tool_call_id `zzz` does not answer a preceding assistant tool call",
                "messages[7]: tool call `c` (f) has no tool result before the end of messages",
            ]
        );
        // Lenient order: only the interleaved user message is accepted.
        assert_eq!(tool_call_violations(&body, false).len(), 4);
    }
}
