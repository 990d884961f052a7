//! Placeholders for what changes from run to run (ids, timestamps, durations, the temporary
//! data home), so a snapshot pins the shape and content of an output and nothing else.

use serde_json::{json, Value};

struct Patterns {
    uuid: regex::Regex,
    timestamp: regex::Regex,
    date: regex::Regex,
}

fn patterns() -> &'static Patterns {
    static P: std::sync::OnceLock<Patterns> = std::sync::OnceLock::new();
    P.get_or_init(|| Patterns {
        uuid: regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
            .unwrap_or_else(|e| panic!("uuid pattern: {e}")),
        timestamp: regex::Regex::new(r"^\d{4}-\d{2}-\d{2}T[0-9:.]+(Z|[+-]\d{2}:\d{2})$")
            .unwrap_or_else(|e| panic!("timestamp pattern: {e}")),
        // The date reminder names today.
        date: regex::Regex::new(r"\d{4}-\d{2}-\d{2}, [A-Z][a-z]+day")
            .unwrap_or_else(|e| panic!("date pattern: {e}")),
    })
}

/// `v` with uuids, RFC 3339 timestamps, today's date, run/thread/checkpoint ids, durations and
/// paths below a data home (`…/threads/…` → `[home]/threads/…`) replaced by placeholders.
pub fn redact(v: &Value) -> Value {
    let p = patterns();
    match v {
        Value::String(s) if p.timestamp.is_match(s) => json!("[timestamp]"),
        Value::String(s) => {
            let s = p.uuid.replace_all(s, "[uuid]");
            json!(p.date.replace_all(&s, "[date]"))
        }
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), redact_field(k, v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn redact_field(key: &str, v: &Value) -> Value {
    match key {
        "thread_id" | "run_id" | "checkpoint_id" | "parent_checkpoint_id" => {
            json!(format!("[{key}]"))
        }
        _ if v.is_number() && (key.ends_with("_ms") || key.contains("latency")) => {
            json!("[duration]")
        }
        // The data home is a fresh temporary folder.
        _ if key.ends_with("_path") => match v.as_str() {
            Some(s) => match s.find("/threads/") {
                Some(i) => json!(format!("[home]{}", &s[i..])),
                None => redact(v),
            },
            None => redact(v),
        },
        _ => redact(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_values_become_placeholders() {
        let v = json!({
            "run_id": "abc",
            "id": "lc_run--0b9f1c2e-1111-4222-8333-944455556666",
            "created_at": "2026-12-02T05:55:21.123456+00:00",
            "latency_ms": 12,
            "workspace_path": "/tmp/.tmpX/.antler/threads/t1/user-data/workspace",
            "text": "Today is 2026-12-02, Wednesday.",
            "kept": [1, "plain"],
        });
        assert_eq!(
            redact(&v),
            json!({
                "run_id": "[run_id]",
                "id": "lc_run--[uuid]",
                "created_at": "[timestamp]",
                "latency_ms": "[duration]",
                "workspace_path": "[home]/threads/t1/user-data/workspace",
                "text": "Today is [date].",
                "kept": [1, "plain"],
            })
        );
    }
}
