//! What the Gemini API checks on every request, the parts an adapter can get wrong: roles are
//! `user` or `model`, no content has empty `parts` and no text part is empty, every part carries
//! one kind of data, a function-call turn follows a user turn (or a function-response turn),
//! and the next turn answers each of its calls with one `functionResponse` of the same name.
//! With `strict` (Gemini 3's rule), replayed function calls carry their `thoughtSignature`.

use serde_json::Value;

/// The data fields a `Part` may carry; exactly one must be set.
const DATA_FIELDS: [&str; 7] = [
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
];

/// Every problem in a `generateContent` request body (empty when well-formed).
pub fn gemini_violations(body: &Value, strict: bool) -> Vec<String> {
    let mut out = Vec::new();
    let Some(contents) = body.get("contents").and_then(Value::as_array) else {
        out.push("request body has no `contents` array".to_owned());
        return out;
    };
    if contents.is_empty() {
        out.push("* GenerateContentRequest.contents: contents is not specified".to_owned());
    }
    if let Some(system) = body.get("systemInstruction") {
        if system
            .get("parts")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            out.push("systemInstruction: parts must not be empty".to_owned());
        }
    }
    // Names of the previous model turn's function calls, awaiting responses.
    let mut pending: Option<(usize, Vec<String>)> = None;
    let mut prev_role = "";
    let mut prev_had_response = false;
    for (i, content) in contents.iter().enumerate() {
        let role = content.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "model" {
            out.push(format!(
                "contents[{i}].role: must be 'user' or 'model', got '{role}'"
            ));
        }
        let parts: &[Value] = match content.get("parts").and_then(Value::as_array) {
            Some(p) if !p.is_empty() => p,
            _ => {
                out.push(format!("contents[{i}].parts: must not be empty"));
                &[]
            }
        };
        let mut calls = Vec::new();
        let mut responses = Vec::new();
        for (k, part) in parts.iter().enumerate() {
            let at = format!("contents[{i}].parts[{k}]");
            let fields: Vec<&str> = DATA_FIELDS
                .iter()
                .copied()
                .filter(|f| part.get(*f).is_some())
                .collect();
            if fields.len() != 1 {
                out.push(format!(
                    "{at}: a part must carry exactly one of {}, it has {fields:?}",
                    DATA_FIELDS.join(", ")
                ));
            }
            if let Some(text) = part.get("text") {
                if text.as_str().is_none_or(str::is_empty) {
                    out.push(format!(
                        "{at}: Unable to submit request because it has an empty text parameter"
                    ));
                }
            }
            if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    out.push(format!("{at}.functionCall.name: must not be empty"));
                }
                if call.get("args").is_some_and(|a| !a.is_object()) {
                    out.push(format!("{at}.functionCall.args: must be an object"));
                }
                if role != "model" {
                    out.push(format!("{at}: functionCall outside a model turn"));
                }
                if strict && !part.get("thoughtSignature").is_some_and(Value::is_string) {
                    out.push(format!(
                        "{at}: Function call is missing a thought_signature in functionCall parts"
                    ));
                }
                calls.push(name.to_owned());
            }
            if let Some(resp) = part.get("functionResponse") {
                let name = resp.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    out.push(format!("{at}.functionResponse.name: must not be empty"));
                }
                if !resp.get("response").is_some_and(Value::is_object) {
                    out.push(format!("{at}.functionResponse.response: must be an object"));
                }
                if role != "user" {
                    out.push(format!("{at}: functionResponse outside a user turn"));
                }
                responses.push(name.to_owned());
            }
        }
        if let Some((from, expected)) = pending.take() {
            let mut got = responses.clone();
            let mut expected_sorted = expected.clone();
            got.sort();
            expected_sorted.sort();
            if got != expected_sorted {
                out.push(format!(
                    "contents[{i}]: Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn (contents[{from}] called {expected:?}, answered {responses:?})"
                ));
            }
        } else if !responses.is_empty() {
            out.push(format!(
                "contents[{i}]: function responses {responses:?} do not answer the previous turn's function calls"
            ));
        }
        if !calls.is_empty() {
            if i == 0 || !(prev_role == "user" || prev_had_response) {
                out.push(format!(
                    "contents[{i}]: Please ensure that function call turn comes immediately after a user turn or after a function response turn."
                ));
            }
            pending = Some((i, calls));
        }
        prev_role = role;
        prev_had_response = !responses.is_empty();
    }
    if let Some((from, expected)) = pending {
        out.push(format!(
            "contents[{from}]: function calls {expected:?} have no function response turn after them"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use crate::mock::assert_problems;

    use super::gemini_violations;

    fn call(name: &str) -> serde_json::Value {
        json!({"functionCall": {"name": name, "args": {}}, "thoughtSignature": "sig"})
    }

    fn response(name: &str) -> serde_json::Value {
        json!({"functionResponse": {"name": name, "response": {"output": "ok"}}})
    }

    #[test]
    fn well_formed_history_passes() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "s"}]},
            "contents": [
                {"role": "user", "parts": [{"text": "u"}]},
                {"role": "model", "parts": [{"text": "t"}, call("a"), call("b")]},
                {"role": "user", "parts": [response("b"), response("a")]},
                {"role": "model", "parts": [call("a")]},
                {"role": "user", "parts": [response("a"), {"text": "more"}]},
                {"role": "model", "parts": [{"text": "done"}]},
            ]
        });
        assert_eq!(gemini_violations(&body, true), Vec::<String>::new());
    }

    #[test]
    fn broken_histories_are_named() {
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": ""}]},
            {"role": "model", "parts": [call("a"), call("b")]},
            {"role": "user", "parts": [response("a")]},
            {"role": "model", "parts": []},
            {"role": "model", "parts": [{"functionCall": {"name": "c", "args": "x"}}]},
            {"role": "assistant", "parts": [{"text": "x", "inlineData": {}}]},
        ]});
        let v = gemini_violations(&body, true);
        assert_problems(
            &v,
            &[
                "empty text parameter",
                "number of function response parts",
                "parts: must not be empty",
                "args: must be an object",
                "thought_signature",
                "function call turn comes immediately after",
                "must be 'user' or 'model'",
                "exactly one of",
                "contents[4] called [\"c\"], answered []",
            ],
        );
    }
}
