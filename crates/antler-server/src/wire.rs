//! JSON shapes the HTTP surface answers with (spec 70 §2): threads, runs, serialized state and
//! timestamps, plus the payload hygiene every REST and SSE body shares — base64 image blocks of
//! hidden human messages are stripped, secrets in run configs are redacted.
//!
//! Serializing a state is O(state); callers only do it when a client asked for values.

use antler_protocol::{Message, StateSnapshot, ThreadState};
use antler_store::{RunRecord, ThreadRecord};
use serde_json::{json, Map, Value};

/// `2026-08-22T09:24:20.123456Z` → `2026-08-22T09:24:20.123456+00:00` (spec 70 §0.2).
pub fn iso(ts: &str) -> String {
    match ts.strip_suffix('Z') {
        Some(head) => format!("{head}+00:00"),
        None => ts.to_owned(),
    }
}

/// Now, ISO-8601 with offset.
pub fn now_iso() -> String {
    antler_protocol::checkpoint::rfc3339_micros(chrono::Utc::now(), false)
}

/// Whether a content block is an inline (base64 `data:`) image.
fn is_inline_image(block: &Value) -> bool {
    let Some(kind) = block.get("type").and_then(Value::as_str) else {
        return false;
    };
    match kind {
        "image_url" => {
            let url = block
                .get("image_url")
                .and_then(|u| u.get("url").or(Some(u)))
                .and_then(Value::as_str)
                .unwrap_or("");
            url.starts_with("data:")
        }
        "image" => {
            block.get("source_type").and_then(Value::as_str) == Some("base64")
                || block.pointer("/source/type").and_then(Value::as_str) == Some("base64")
                || block.get("base64").is_some()
                || block
                    .get("url")
                    .and_then(Value::as_str)
                    .is_some_and(|u| u.starts_with("data:"))
        }
        _ => false,
    }
}

/// A hidden human message carrying inline images: they must not leave the server (§2.3).
pub fn needs_strip(m: &Message) -> bool {
    match m {
        Message::Human(h) if m.is_hidden() => match &h.content {
            antler_protocol::Content::Blocks(b) => b.iter().any(is_inline_image),
            antler_protocol::Content::Text(_) => false,
        },
        _ => false,
    }
}

/// The message as JSON, inline images of hidden human messages dropped.
pub fn message_value(m: &Message) -> Value {
    let mut v = m.to_value();
    if needs_strip(m) {
        if let Some(Value::Array(blocks)) = v.get_mut("content") {
            blocks.retain(|b| !is_inline_image(b));
        }
    }
    v
}

/// The serialized state (`values`) with hygiene applied.
pub fn state_value(state: &ThreadState) -> Value {
    let mut v = serde_json::to_value(state).unwrap_or(Value::Null);
    if state.messages.iter().any(needs_strip) {
        if let Some(Value::Array(msgs)) = v.get_mut("messages") {
            for (m, orig) in msgs.iter_mut().zip(state.messages.iter()) {
                if needs_strip(orig) {
                    *m = message_value(orig);
                }
            }
        }
    }
    v
}

/// The serialized state as one line of JSON. Skips the intermediate `Value` when nothing needs
/// stripping.
pub fn state_string(state: &ThreadState) -> String {
    if state.messages.iter().any(needs_strip) {
        state_value(state).to_string()
    } else {
        serde_json::to_string(state).unwrap_or_else(|_| "null".to_owned())
    }
}

/// A `values` snapshot as one line of JSON, as [`state_string`] writes the state it shows.
pub fn snapshot_string(snapshot: &StateSnapshot) -> String {
    if snapshot.messages.iter().any(|m| needs_strip(m)) {
        state_value(&snapshot.to_state()).to_string()
    } else {
        serde_json::to_string(snapshot).unwrap_or_else(|_| "null".to_owned())
    }
}

/// Keys whose values are secrets in a run's `config`.
fn is_secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "authorization",
        "cookie",
        "credential",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// `value` with every secret-looking key's value replaced by `"***"` (spec 70 §2.2).
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) && !v.is_null() && !v.is_object() {
                        Value::String("***".into())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// Run JSON (spec 70 §2.2).
pub fn run_json(r: &RunRecord) -> Value {
    json!({
        "run_id": r.run_id,
        "thread_id": r.thread_id,
        "assistant_id": r.assistant_id,
        "status": r.status.as_str(),
        "metadata": r.metadata,
        "kwargs": r.kwargs,
        "multitask_strategy": r.multitask_strategy,
        "created_at": iso(&r.created_at),
        "updated_at": iso(&r.updated_at),
        "error": r.error,
        "stop_reason": r.stop_reason,
        "total_input_tokens": r.total_input_tokens,
        "total_output_tokens": r.total_output_tokens,
        "total_tokens": r.total_tokens,
        "llm_call_count": r.llm_call_count,
        "lead_agent_tokens": r.total_tokens,
        "subagent_tokens": 0,
        "middleware_tokens": 0,
        "message_count": 0,
    })
}

/// Thread JSON (spec 70 §2.1) with the given `values` and live status.
pub fn thread_json(t: &ThreadRecord, status: &str, values: Value) -> Value {
    let metadata = match &t.metadata {
        Value::Object(_) => t.metadata.clone(),
        _ => Value::Object(Map::new()),
    };
    json!({
        "thread_id": t.thread_id,
        "created_at": iso(&t.created_at),
        "updated_at": iso(&t.updated_at),
        "metadata": metadata,
        "status": status,
        "values": values,
        "interrupts": {},
    })
}

/// Client metadata minus server-owned keys (spec 70 §2.1).
pub fn clean_metadata(mut m: Map<String, Value>) -> Map<String, Value> {
    for k in ["user_id", "owner_id"] {
        m.remove(k);
    }
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_protocol::{Content, HumanMessage};

    #[test]
    fn timestamps_get_an_offset() {
        assert_eq!(
            iso("2026-08-22T09:24:20.123456Z"),
            "2026-08-22T09:24:20.123456+00:00"
        );
        assert_eq!(
            iso("2026-08-22T09:24:20+02:00"),
            "2026-08-22T09:24:20+02:00"
        );
        assert!(now_iso().ends_with("+00:00"));
    }

    #[test]
    fn inline_images_of_hidden_messages_are_stripped() {
        let mut h = HumanMessage {
            content: Content::Blocks(vec![
                json!({"type": "text", "text": "here"}),
                json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
                json!({"type": "image_url", "image_url": {"url": "https://x/y.png"}}),
            ]),
            id: Some("h1".into()),
            ..Default::default()
        };
        let visible = Message::Human(h.clone());
        assert!(!needs_strip(&visible));
        h.additional_kwargs
            .insert("hide_from_ui".into(), json!(true));
        h.id = Some("h2".into());
        let hidden = Message::Human(h);
        assert!(needs_strip(&hidden));
        let mut state = ThreadState::default();
        state.messages.push(visible);
        state.messages.push(hidden);
        let v: Value = serde_json::from_str(&state_string(&state)).unwrap();
        assert_eq!(v["messages"][0]["content"].as_array().unwrap().len(), 3);
        let kept = v["messages"][1]["content"].as_array().unwrap();
        assert_eq!(kept.len(), 2);
        assert!(!v["messages"][1].to_string().contains("base64"));
        assert_eq!(v["messages"][1]["id"], "h2");
        // A `values` snapshot frames exactly as its state, stripped or not.
        assert_eq!(snapshot_string(&state.snapshot()), state_string(&state));
        state.title = Some("t".into());
        let visible_only = ThreadState {
            messages: state.messages.iter().take(1).cloned().collect(),
            ..state.clone()
        };
        assert_eq!(
            snapshot_string(&visible_only.snapshot()),
            state_string(&visible_only)
        );
        assert_eq!(snapshot_string(&state.snapshot()), state_string(&state));
    }

    #[test]
    fn secrets_are_redacted() {
        let v = redact(
            &json!({"recursion_limit": 5, "configurable": {"api_key": "sk-1", "model_name": "m", "x_token": 3}}),
        );
        assert_eq!(
            v,
            json!({"recursion_limit": 5, "configurable": {"api_key": "***", "model_name": "m", "x_token": "***"}})
        );
    }
}
