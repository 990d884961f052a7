//! What Ollama's `/api/chat` decodes and an adapter can get wrong: `content` is a string (Go's
//! decoder refuses a list), `images` are bare base64 (no data URL), tool-call `arguments` are a
//! JSON object (not OpenAI's JSON text), and — the pairing a model needs to make sense of its
//! history — each assistant tool call is answered by one `tool` message naming it before the
//! next assistant or user message.

use serde_json::Value;

use crate::mock::{array_items, message_at, request_messages};

/// Every problem in a `/api/chat` request body (empty when well-formed).
pub fn ollama_violations(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(messages) = request_messages(body, &mut out) else {
        return out;
    };
    // (message index, function name) awaiting a tool message.
    let mut pending: Vec<(usize, String)> = Vec::new();
    let unanswered = |pending: &mut Vec<(usize, String)>, out: &mut Vec<String>, at: &str| {
        for (i, name) in pending.drain(..) {
            out.push(format!(
                "messages[{i}]: tool call `{name}` has no tool message before {at}"
            ));
        }
    };
    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        match msg.get("content") {
            None | Some(Value::String(_)) => {}
            Some(other) => out.push(format!(
                "messages[{i}].content: json: cannot unmarshal {} into Go struct field Message.messages.content of type string",
                go_kind(other)
            )),
        }
        for (k, image) in array_items(msg, "images").enumerate() {
            if image.as_str().is_none_or(|s| s.starts_with("data:")) {
                out.push(format!(
                    "messages[{i}].images[{k}]: illegal base64 data (a data URL or not a string)"
                ));
            }
        }
        match role {
            "assistant" => {
                unanswered(&mut pending, &mut out, &message_at(i, "assistant"));
                for (k, call) in array_items(msg, "tool_calls").enumerate() {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if name.is_empty() {
                        out.push(format!("messages[{i}].tool_calls[{k}]: no function name"));
                    }
                    match call.pointer("/function/arguments") {
                        None | Some(Value::Object(_)) => {}
                        Some(other) => out.push(format!(
                            "messages[{i}].tool_calls[{k}]: json: cannot unmarshal {} into Go struct field ToolCallFunction.messages.tool_calls.function.arguments of type api.ToolCallFunctionArguments",
                            go_kind(other)
                        )),
                    }
                    pending.push((i, name.to_owned()));
                }
            }
            "tool" => {
                let name = msg.get("tool_name").and_then(Value::as_str).unwrap_or("");
                match pending.iter().position(|(_, n)| n == name) {
                    Some(pos) => {
                        pending.remove(pos);
                    }
                    None => out.push(format!(
                        "messages[{i}] (tool): tool_name `{name}` does not answer a pending tool call"
                    )),
                }
            }
            "user" => unanswered(&mut pending, &mut out, &message_at(i, "user")),
            "system" => {}
            other => out.push(format!("messages[{i}]: invalid role `{other}`")),
        }
    }
    unanswered(&mut pending, &mut out, "the end of messages");
    out
}

fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null => "null",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use crate::mock::assert_problems;

    use super::ollama_violations;

    fn call(name: &str) -> serde_json::Value {
        json!({"function": {"name": name, "arguments": {"x": 1}}})
    }

    #[test]
    fn well_formed_history_passes() {
        let body = json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u", "images": ["aGk="]},
            {"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "content": "1", "tool_name": "b"},
            {"role": "tool", "content": "2", "tool_name": "a"},
            {"role": "assistant", "content": "done"},
        ]});
        assert_eq!(ollama_violations(&body), Vec::<String>::new());
    }

    #[test]
    fn broken_histories_are_named() {
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "u"}], "images": ["data:image/png;base64,aGk="]},
            {"role": "assistant", "content": "", "tool_calls": [
                call("a"),
                {"function": {"name": "b", "arguments": "{\"x\":1}"}},
            ]},
            {"role": "tool", "content": "1", "tool_name": "a"},
            {"role": "user", "content": "hm"},
            {"role": "tool", "content": "?", "tool_name": "zzz"},
        ]});
        let v = ollama_violations(&body);
        assert_problems(
            &v,
            &[
                "cannot unmarshal array",
                "illegal base64",
                "api.ToolCallFunctionArguments",
                "tool call `b` has no tool message before messages[3]",
                "`zzz` does not answer",
            ],
        );
    }
}
