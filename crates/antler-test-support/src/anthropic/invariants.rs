//! What the Messages API checks on every request, the parts an adapter can get wrong: every
//! `tool_use` of an assistant message is answered by exactly one `tool_result` in the very next
//! (user) message, tool results come first in that message and answer nothing else, ids are
//! unique, thinking blocks carry their signature, and no content is empty.

use std::collections::HashSet;

use serde_json::Value;

use crate::mock::{request_messages, CallIds};

/// Every problem in a Messages request body (empty when well-formed).
pub fn tool_use_violations(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(messages) = request_messages(body, &mut out) else {
        return out;
    };
    let mut ids = CallIds::default();
    // Ids of the previous assistant message's tool_use blocks, awaiting results.
    let mut pending: Vec<String> = Vec::new();
    let mut pending_from = 0usize;
    let last = messages.len().saturating_sub(1);

    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        let blocks: Vec<&Value> = match msg.get("content") {
            Some(Value::String(s)) => {
                if s.is_empty() && !(i == last && role == "assistant") {
                    out.push(format!("messages.{i}: content is empty"));
                }
                Vec::new()
            }
            Some(Value::Array(items)) => {
                if items.is_empty() && !(i == last && role == "assistant") {
                    out.push(format!("messages.{i}: content is empty"));
                }
                items.iter().collect()
            }
            _ => {
                out.push(format!("messages.{i}: content must be a string or a list"));
                Vec::new()
            }
        };
        for (k, block) in blocks.iter().enumerate() {
            if block.get("type").and_then(Value::as_str) == Some("text")
                && block
                    .get("text")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                out.push(format!(
                    "messages.{i}.content.{k}: text content blocks must be non-empty"
                ));
            }
        }
        match role {
            "assistant" => {
                if !pending.is_empty() {
                    out.push(format!(
                        "messages.{pending_from}: tool_use ids without tool_result blocks immediately after: {}",
                        pending.join(", ")
                    ));
                    pending.clear();
                }
                for (k, block) in blocks.iter().enumerate() {
                    match block.get("type").and_then(Value::as_str) {
                        Some("tool_use") => {
                            if block
                                .get("name")
                                .and_then(Value::as_str)
                                .is_none_or(str::is_empty)
                            {
                                out.push(format!("messages.{i}.content.{k}: tool_use has no name"));
                            }
                            if !block.get("input").is_some_and(Value::is_object) {
                                out.push(format!(
                                    "messages.{i}.content.{k}: tool_use input must be an object"
                                ));
                            }
                            match ids.register(block, "tool_use has no id", |id| {
                                format!("tool_use ids must be unique, `{id}` repeats")
                            }) {
                                Ok(id) => {
                                    pending.push(id.to_owned());
                                    pending_from = i;
                                }
                                Err(why) => out.push(format!("messages.{i}.content.{k}: {why}")),
                            }
                        }
                        Some("thinking")
                            if !block.get("signature").is_some_and(Value::is_string) =>
                        {
                            out.push(format!(
                                "messages.{i}.content.{k}: thinking block has no signature"
                            ));
                        }
                        Some("tool_result") => out.push(format!(
                            "messages.{i}.content.{k}: tool_result in an assistant message"
                        )),
                        _ => {}
                    }
                }
            }
            "user" => {
                let expected = std::mem::take(&mut pending);
                let mut answered: HashSet<&str> = HashSet::new();
                let mut other_seen = false;
                for (k, block) in blocks.iter().enumerate() {
                    if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                        other_seen = true;
                        continue;
                    }
                    if other_seen {
                        out.push(format!(
                            "messages.{i}.content.{k}: tool_result blocks must come first in the message"
                        ));
                    }
                    if block.get("is_error").is_some_and(|v| !v.is_boolean()) {
                        out.push(format!(
                            "messages.{i}.content.{k}: is_error must be a boolean"
                        ));
                    }
                    let id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if !expected.iter().any(|e| e == id) {
                        out.push(format!(
                            "messages.{i}.content.{k}: tool_result `{id}` has no corresponding tool_use in the previous message"
                        ));
                    } else if !answered.insert(id) {
                        out.push(format!(
                            "messages.{i}.content.{k}: tool_use `{id}` is answered more than once"
                        ));
                    }
                }
                let missing: Vec<&str> = expected
                    .iter()
                    .map(String::as_str)
                    .filter(|id| !answered.contains(id))
                    .collect();
                if !missing.is_empty() {
                    out.push(format!(
                        "messages.{pending_from}: tool_use ids without tool_result blocks immediately after: {}",
                        missing.join(", ")
                    ));
                }
            }
            other => out.push(format!("messages.{i}: unknown role `{other}`")),
        }
    }
    if !pending.is_empty() {
        out.push(format!(
            "messages.{pending_from}: tool_use ids without tool_result blocks immediately after: {}",
            pending.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::tool_use_violations;

    fn tool_use(id: &str) -> serde_json::Value {
        json!({"type": "tool_use", "id": id, "name": "f", "input": {}})
    }

    fn result(id: &str) -> serde_json::Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
    }

    #[test]
    fn well_formed_history_passes() {
        let body = json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                tool_use("a"), tool_use("b"),
            ]},
            {"role": "user", "content": [result("b"), result("a"), {"type": "text", "text": "more"}]},
            {"role": "assistant", "content": "done"},
        ]});
        assert_eq!(tool_use_violations(&body), Vec::<String>::new());
    }

    #[test]
    fn broken_histories_are_named() {
        let body = json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": [tool_use("a"), tool_use("b")]},
            {"role": "user", "content": [{"type": "text", "text": "hm"}, result("a"), result("a")]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": ""}]},
            {"role": "user", "content": [result("zzz")]},
            {"role": "assistant", "content": [tool_use("a")]},
            {"role": "system", "content": "nope"},
        ]});
        assert_eq!(
            tool_use_violations(&body),
            vec![
                "messages.2.content.1: tool_result blocks must come first in the message",
                "messages.2.content.2: tool_result blocks must come first in the message",
                "messages.2.content.2: tool_use `a` is answered more than once",
                "messages.1: tool_use ids without tool_result blocks immediately after: b",
                "messages.3.content.1: text content blocks must be non-empty",
                "messages.3.content.0: thinking block has no signature",
                "messages.4.content.0: tool_result `zzz` has no corresponding tool_use in the previous message",
                "messages.5.content.0: tool_use ids must be unique, `a` repeats",
                "messages.6: unknown role `system`",
            ]
        );
    }
}
