//! What the Responses API checks in `input`, the parts an adapter can get wrong: every
//! `function_call` has a non-empty `call_id`, a `name` and JSON-text `arguments`, and is answered
//! by exactly one later `function_call_output` (which answers nothing else); a `reasoning` item
//! has its `summary`, is followed by the item it produced, and when `store` is false carries its
//! `encrypted_content` (its id refers to nothing stored); messages have a known role.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// Every problem in a `/v1/responses` request body (empty when well-formed).
pub fn responses_violations(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let items = match body.get("input") {
        Some(Value::String(_)) => return out,
        Some(Value::Array(items)) => items,
        _ => {
            out.push("Missing required parameter: 'input'.".to_owned());
            return out;
        }
    };
    let store = body.get("store").and_then(Value::as_bool).unwrap_or(true);
    // call_id → input index of the call, for calls still awaiting their output.
    let mut pending: HashMap<String, usize> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => match item.get("role").and_then(Value::as_str) {
                Some("user" | "assistant" | "system" | "developer") => {
                    if item.get("content").is_none() {
                        out.push(format!("Missing required parameter: 'input[{i}].content'."));
                    }
                }
                other => out.push(format!(
                    "Invalid value: '{}'. Supported values are: 'assistant', 'system', 'developer', and 'user'. (input[{i}].role)",
                    other.unwrap_or("")
                )),
            },
            "function_call" => {
                let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if call_id.is_empty() {
                    out.push(format!("Missing required parameter: 'input[{i}].call_id'."));
                    continue;
                }
                if item.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                    out.push(format!("Missing required parameter: 'input[{i}].name'."));
                }
                if !item.get("arguments").is_some_and(Value::is_string) {
                    out.push(format!(
                        "Invalid type for 'input[{i}].arguments': expected a string."
                    ));
                }
                if !seen.insert(call_id.to_owned()) {
                    out.push(format!("input[{i}]: Duplicate function call id '{call_id}'."));
                }
                pending.insert(call_id.to_owned(), i);
            }
            "function_call_output" => {
                let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if item.get("output").is_none() {
                    out.push(format!("Missing required parameter: 'input[{i}].output'."));
                }
                if pending.remove(call_id).is_some() {
                    answered.insert(call_id.to_owned());
                } else if answered.contains(call_id) {
                    out.push(format!(
                        "input[{i}]: function call '{call_id}' is answered more than once."
                    ));
                } else {
                    out.push(format!(
                        "input[{i}]: No tool call found for function call output with call_id {call_id}."
                    ));
                }
            }
            "reasoning" => {
                let id = item.get("id").and_then(Value::as_str).unwrap_or("");
                if !item.get("summary").is_some_and(Value::is_array) {
                    out.push(format!("Missing required parameter: 'input[{i}].summary'."));
                }
                let follows = items
                    .get(i + 1)
                    .and_then(|n| n.get("type").and_then(Value::as_str).or(Some("message")));
                if follows.is_none_or(|t| t == "reasoning" || t == "function_call_output") {
                    out.push(format!(
                        "Item '{id}' of type 'reasoning' was provided without its required following item. (input[{i}])"
                    ));
                }
                if !store && !item.get("encrypted_content").is_some_and(Value::is_string) {
                    out.push(format!(
                        "Item with id '{id}' not found. Items are not persisted when `store` is set to false. (input[{i}])"
                    ));
                }
            }
            "item_reference" => {}
            other => out.push(format!("input[{i}]: unknown item type '{other}'")),
        }
    }
    let mut left: Vec<(&String, &usize)> = pending.iter().collect();
    left.sort_by_key(|(_, i)| **i);
    for (call_id, i) in left {
        out.push(format!(
            "input[{i}]: No tool output found for function call {call_id}."
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use crate::mock::assert_problems;

    use super::responses_violations;

    fn call(id: &str) -> serde_json::Value {
        json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"})
    }

    fn output(id: &str) -> serde_json::Value {
        json!({"type": "function_call_output", "call_id": id, "output": "ok"})
    }

    #[test]
    fn well_formed_input_passes() {
        let body = json!({"store": false, "input": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"},
            call("a"), call("b"),
            output("b"), output("a"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
        ]});
        assert_eq!(responses_violations(&body), Vec::<String>::new());
    }

    #[test]
    fn broken_input_is_named() {
        let body = json!({"store": false, "input": [
            {"role": "user", "content": "u"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            call("a"), call("b"),
            output("a"), output("a"), output("zzz"),
            {"type": "reasoning", "id": "rs_2"},
        ]});
        let v = responses_violations(&body);
        assert_problems(
            &v,
            &[
                "not persisted",
                "answered more than once",
                "No tool call found",
                "'input[7].summary'",
                "without its required following item",
                "'rs_2' not found",
                "No tool output found for function call b",
            ],
        );
    }
}
