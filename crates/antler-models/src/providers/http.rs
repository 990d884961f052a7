//! Mapping transport failures and non-2xx answers of every provider to [`ModelError`]: OpenAI's
//! `{"error": {"message", "code"|"type"}}`, Anthropic's `{"type": "error", "error": {"type",
//! "message"}}`, Google's `{"error": {"code": 429, "message", "status", "details"}}` (its retry
//! hint is a `RetryInfo` detail, not a header), Ollama's `{"error": "…"}`, and the plain shapes
//! gateways use.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::ModelError;

/// Longest provider message kept when the error body is not JSON.
const MAX_MESSAGE_CHARS: usize = 2000;
/// Longest raw body kept on [`ModelError::Http`].
const MAX_BODY_BYTES: usize = 64 * 1024;

/// `s` cut to at most `max` characters, with `…` when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_owned(),
    }
}

/// A reqwest failure: timeouts → [`ModelError::Timeout`], everything else on the way to a
/// response (refused, reset, DNS, TLS) → [`ModelError::Connect`].
pub(crate) fn from_reqwest(
    e: &reqwest::Error,
    timeout: Duration,
    connect_timeout: Duration,
) -> ModelError {
    if e.is_timeout() {
        return ModelError::Timeout(if e.is_connect() {
            connect_timeout
        } else {
            timeout
        });
    }
    ModelError::Connect(describe(e))
}

/// The error with its whole source chain (reqwest's own message is only the outermost layer).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A non-2xx answer: status, retry hint, and OpenAI's `{"error": {message, type, code}}`.
pub(crate) fn http_error(status: u16, headers: &HeaderMap, body: &[u8]) -> ModelError {
    let body_text = String::from_utf8_lossy(&body[..body.len().min(MAX_BODY_BYTES)]).into_owned();
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let (message, code) = parsed.as_ref().map_or((None, None), error_fields);
    let message = message.unwrap_or_else(|| {
        let trimmed = body_text.trim();
        if trimmed.is_empty() {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                // 529 is Anthropic's "overloaded"; it has no canonical reason phrase.
                .unwrap_or(if status == 529 {
                    "Overloaded"
                } else {
                    "no response body"
                })
                .to_owned()
        } else {
            truncate(trimmed, MAX_MESSAGE_CHARS)
        }
    });
    ModelError::Http {
        status,
        retry_after: retry_after(headers, SystemTime::now())
            .or_else(|| parsed.as_ref().and_then(google_retry_delay)),
        message,
        code,
        body: body_text,
    }
}

/// `(message, code)` from OpenAI's error shape, or the common variants gateways use
/// (`{"error": "text"}`, `{"message": …}`, `{"detail": …}`).
fn error_fields(v: &Value) -> (Option<String>, Option<String>) {
    let as_text = |v: &Value| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match v.get("error") {
        Some(Value::Object(err)) => {
            let message = err.get("message").and_then(as_text);
            // A string code (OpenAI), else Google's `status` over its numeric HTTP `code`.
            let code = err
                .get("code")
                .filter(|c| c.is_string())
                .and_then(as_text)
                .or_else(|| err.get("status").and_then(as_text))
                .or_else(|| err.get("type").and_then(as_text))
                .or_else(|| err.get("code").and_then(as_text));
            (message, code)
        }
        Some(Value::String(s)) => (
            Some(s.clone()),
            v.get("code")
                .and_then(as_text)
                .or_else(|| v.get("type").and_then(as_text)),
        ),
        _ => (
            v.get("message")
                .or_else(|| v.get("detail"))
                .and_then(as_text),
            v.get("code").and_then(as_text),
        ),
    }
}

/// Google's retry hint: `error.details[]` of type `google.rpc.RetryInfo` with `retryDelay`
/// (`"7s"`, `"1.5s"`).
fn google_retry_delay(v: &Value) -> Option<Duration> {
    let details = v.pointer("/error/details")?.as_array()?;
    details.iter().find_map(|d| {
        let is_retry_info = d
            .get("@type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"));
        let secs = d
            .get("retryDelay")?
            .as_str()?
            .strip_suffix('s')?
            .parse::<f64>()
            .ok()?;
        (is_retry_info && secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
    })
}

/// `retry-after-ms` (milliseconds), else `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
