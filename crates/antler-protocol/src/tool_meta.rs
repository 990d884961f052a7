//! `deerflow_tool_meta`: the structured classification every tool result carries (spec 30
//! §ToolErrorHandling). ToolErrorHandling stamps it, ReadBeforeWrite stamps its refusals with
//! it, ToolProgress reads it. It lives here, next to the markers, because it is wire contract
//! several crates read and write.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::messages::{Content, ToolMessage, ToolStatus};

/// `additional_kwargs` key of a tool result's classification.
pub const TOOL_META: &str = "deerflow_tool_meta";

/// A tool result's classification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolMeta {
    /// `success`, `partial_success` or `error`.
    pub status: String,
    /// `auth`, `rate_limited`, `transient`, `config`, `permission`, `no_results`, `not_found`,
    /// `internal`, `unknown`, … (`None` for plain successes).
    pub error_type: Option<String>,
    pub recoverable_by_model: bool,
    /// `stop`, `summarize`, `try_alternative`, `rewrite_query`, `continue`.
    pub recommended_next_action: String,
    /// `exception`, `tool_return`, `content_analysis`, `progress_middleware`, …
    pub source: String,
}

/// `(error_type, recoverable_by_model, recommended_next_action)` of a failure text.
pub type Classification = (&'static str, bool, &'static str);

/// Keyword rules in priority order (first match wins). Numeric codes match as whole words.
const RULES: &[(&[&str], Classification)] = &[
    (
        &[
            "401",
            "403",
            "unauthorized",
            "authentication",
            "invalid api key",
        ],
        ("auth", false, "stop"),
    ),
    (
        &["rate limit", "rate limited", "rate_limit"],
        ("rate_limited", false, "summarize"),
    ),
    (
        &[
            "timeout",
            "timed out",
            "connection",
            "network error",
            "temporarily unavailable",
        ],
        ("transient", false, "try_alternative"),
    ),
    (
        &[
            "not configured",
            "not installed",
            "missing required",
            "disabled",
            "no api key",
        ],
        ("config", false, "stop"),
    ),
    (
        &[
            "permission denied",
            "access denied",
            "path traversal",
            "forbidden",
        ],
        ("permission", true, "try_alternative"),
    ),
    (
        &[
            "no results found",
            "no content found",
            "no images found",
            "no results",
        ],
        ("no_results", true, "rewrite_query"),
    ),
    (
        &["not found", "no such file", "does not exist", "404"],
        ("not_found", true, "rewrite_query"),
    ),
    (
        &["unexpected error", "internal error", "500"],
        ("internal", false, "stop"),
    ),
];

/// Phrases that mark a successful result as incomplete.
const PARTIAL_MARKERS: &[&str] = &[
    "partial results",
    "limited results",
    "truncated",
    "results may be incomplete",
    "no results found",
    "no content found",
    "no images found",
];

fn contains_word(haystack: &str, word: &str) -> bool {
    let bytes = haystack.as_bytes();
    haystack.match_indices(word).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + word.len()).copied();
        let is_word = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        !is_word(before) && !is_word(after)
    })
}

/// Classify a failure text by DeerFlow's keyword rules; no match is `unknown`, recoverable.
pub fn classify(text: &str) -> Classification {
    let lower = text.to_lowercase();
    for (keywords, class) in RULES {
        let hit = keywords.iter().any(|k| {
            if k.bytes().all(|b| b.is_ascii_digit()) {
                contains_word(&lower, k)
            } else {
                lower.contains(k)
            }
        });
        if hit {
            return *class;
        }
    }
    ("unknown", true, "try_alternative")
}

impl ToolMeta {
    /// An error classified from `text`.
    pub fn error(text: &str, source: &str) -> ToolMeta {
        let (kind, recoverable, action) = classify(text);
        ToolMeta {
            status: "error".into(),
            error_type: Some(kind.into()),
            recoverable_by_model: recoverable,
            recommended_next_action: action.into(),
            source: source.into(),
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The meta stamped on `msg`, if well-formed.
    pub fn of(msg: &ToolMessage) -> Option<ToolMeta> {
        serde_json::from_value(msg.additional_kwargs.get(TOOL_META)?.clone()).ok()
    }

    /// Stamp `self` on `msg` (overwrites).
    pub fn stamp(&self, msg: &mut ToolMessage) {
        msg.additional_kwargs
            .insert(TOOL_META.to_owned(), self.to_value());
    }
}

/// Words an error page's title wraps its reason phrase in.
const PAGE_FILLER: &[&str] = &[
    "http",
    "error",
    "page",
    "the",
    "file",
    "or",
    "directory",
    "url",
    "resource",
];

/// `web_fetch` of an error page: its first line reduced to a bare HTTP reason phrase
/// (`# 404 Not Found`, `Error 403: Forbidden`), else `None` ("404 Ways to Cook Rice" is a page).
fn error_page(text: &str) -> Option<Classification> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let lower = first.trim_start_matches('#').to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let start = words
        .iter()
        .position(|w| {
            let code = w.len() == 3
                && w.bytes().all(|b| b.is_ascii_digit())
                && (w.starts_with('4') || w.starts_with('5'));
            !(code || PAGE_FILLER.contains(w))
        })
        .unwrap_or(words.len());
    let phrase = words[start..]
        .iter()
        .filter(|w| !PAGE_FILLER.contains(w))
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    Some(match phrase.as_str() {
        "unauthorized" | "proxy authentication required" => ("auth", false, "stop"),
        "forbidden" | "access denied" | "permission denied" => {
            ("permission", true, "try_alternative")
        }
        "not found" => ("not_found", true, "rewrite_query"),
        "too many requests" => ("rate_limited", false, "summarize"),
        "internal server" | "not implemented" => ("internal", false, "stop"),
        "bad gateway"
        | "service unavailable"
        | "service temporarily unavailable"
        | "gateway timeout" => ("transient", false, "try_alternative"),
        _ => return None,
    })
}

/// Whether a JSON `error` field says something went wrong.
fn meaningful_error(v: &Value) -> Option<String> {
    match v {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) => {
            let t = s.trim().to_lowercase();
            let empty = matches!(
                t.as_str(),
                "" | "none" | "null" | "false" | "no" | "ok" | "success" | "n/a"
            );
            (!empty).then(|| s.clone())
        }
        Value::Array(a) if a.is_empty() => None,
        Value::Object(o) if o.is_empty() => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        other => Some(other.to_string()),
    }
}

/// The meta a result without one gets (spec 30 §ToolErrorHandling "Normalization").
pub fn infer(msg: &ToolMessage) -> ToolMeta {
    let text = match &msg.content {
        Content::Text(s) => s.as_str(),
        _ => "",
    };
    let json_error = || -> Option<Option<String>> {
        let v: Value = serde_json::from_str(text.trim()).ok()?;
        let obj = v.as_object()?;
        Some(obj.get("error").and_then(meaningful_error))
    };
    if msg.status == ToolStatus::Error && !text.starts_with("Error:") {
        return match json_error() {
            Some(Some(err)) => ToolMeta::error(&err, "tool_return"),
            Some(None) => ToolMeta {
                status: "error".into(),
                error_type: Some("unknown".into()),
                recoverable_by_model: true,
                recommended_next_action: "try_alternative".into(),
                source: "tool_return".into(),
            },
            None => ToolMeta::error(text, "tool_return"),
        };
    }
    if let Some(rest) = text.strip_prefix("Error:") {
        return ToolMeta::error(rest, "tool_return");
    }
    if let Some(Some(err)) = json_error() {
        return ToolMeta::error(&err, "tool_return");
    }
    if msg.name.as_deref() == Some("web_fetch") {
        if let Some((kind, recoverable, action)) = error_page(text) {
            return ToolMeta {
                status: "error".into(),
                error_type: Some(kind.into()),
                recoverable_by_model: recoverable,
                recommended_next_action: action.into(),
                source: "content_analysis".into(),
            };
        }
    }
    let lower = text.to_lowercase();
    if PARTIAL_MARKERS.iter().any(|m| lower.contains(m)) {
        return ToolMeta {
            status: "partial_success".into(),
            error_type: None,
            recoverable_by_model: true,
            recommended_next_action: "rewrite_query".into(),
            source: "content_analysis".into(),
        };
    }
    ToolMeta {
        status: "success".into(),
        error_type: None,
        recoverable_by_model: true,
        recommended_next_action: "continue".into(),
        source: "content_analysis".into(),
    }
}

/// Stamp the inferred meta on `msg` unless it already carries one.
pub fn normalize(msg: &mut ToolMessage) {
    if !msg.additional_kwargs.contains_key(TOOL_META) {
        infer(msg).stamp(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tm(content: &str, status: ToolStatus) -> ToolMessage {
        ToolMessage {
            content: Content::Text(content.into()),
            status,
            tool_call_id: "c".into(),
            ..Default::default()
        }
    }

    #[test]
    fn keyword_rules_in_priority_order() {
        assert_eq!(classify("HTTP 401 Unauthorized").0, "auth");
        assert_eq!(classify("rate limited, slow down").0, "rate_limited");
        assert_eq!(classify("connection reset").0, "transient");
        assert_eq!(classify("tavily is not configured").0, "config");
        assert_eq!(classify("Permission denied").0, "permission");
        assert_eq!(classify("No results found for x").0, "no_results");
        assert_eq!(classify("File not found: /a").0, "not_found");
        assert_eq!(classify("internal error").0, "internal");
        assert_eq!(classify("something odd").0, "unknown");
        // Codes only as whole words.
        assert_eq!(classify("port 4010 busy").0, "unknown");
        assert_eq!(classify("status 404").0, "not_found");
    }

    #[test]
    fn inference_from_content() {
        let m = infer(&tm("Error: File not found: /x", ToolStatus::Error));
        assert_eq!(
            (
                m.status.as_str(),
                m.error_type.as_deref(),
                m.source.as_str()
            ),
            ("error", Some("not_found"), "tool_return")
        );
        let m = infer(&tm(r#"{"error": "rate_limit hit"}"#, ToolStatus::Success));
        assert_eq!(m.error_type.as_deref(), Some("rate_limited"));
        let m = infer(&tm(r#"{"error": "none", "x": 1}"#, ToolStatus::Success));
        assert_eq!(m.status, "success");
        let m = infer(&tm("output was truncated", ToolStatus::Success));
        assert_eq!(m.status, "partial_success");
        let m = infer(&tm("fine", ToolStatus::Success));
        assert_eq!(
            (m.status.as_str(), m.recommended_next_action.as_str()),
            ("success", "continue")
        );
        let m = infer(&tm(r#"{"a": 1}"#, ToolStatus::Error));
        assert_eq!(m.error_type.as_deref(), Some("unknown"));
    }

    #[test]
    fn web_fetch_error_pages_are_errors_but_pages_about_numbers_are_not() {
        let fetch = |text: &str| {
            let mut m = tm(text, ToolStatus::Success);
            m.name = Some("web_fetch".into());
            infer(&m)
        };
        for (page, kind) in [
            ("# 404 Not Found\n\nnginx", "not_found"),
            ("Error 403: Forbidden", "permission"),
            ("\n## 503 Service Temporarily Unavailable", "transient"),
            ("500 Internal Server Error", "internal"),
            ("HTTP 429 Too Many Requests", "rate_limited"),
            ("401 Unauthorized", "auth"),
        ] {
            let m = fetch(page);
            assert_eq!(
                (
                    m.status.as_str(),
                    m.error_type.as_deref(),
                    m.source.as_str()
                ),
                ("error", Some(kind), "content_analysis"),
                "{page}"
            );
        }
        assert_eq!(
            fetch("# 404 Ways to Cook Rice\nboil water").status,
            "success"
        );
        // Only web_fetch results are read as pages.
        assert_eq!(
            infer(&tm("# 404 Not Found", ToolStatus::Success)).status,
            "success"
        );
    }

    #[test]
    fn normalize_keeps_existing_meta_and_round_trips() {
        let mut msg = tm("fine", ToolStatus::Success);
        ToolMeta::error("auth failed 403", "exception").stamp(&mut msg);
        normalize(&mut msg);
        let meta = ToolMeta::of(&msg).unwrap_or_else(|| ToolMeta::error("", ""));
        assert_eq!(meta.source, "exception");
        assert_eq!(meta.error_type.as_deref(), Some("auth"));
    }
}
