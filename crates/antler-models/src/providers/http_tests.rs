#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use pretty_assertions::assert_eq;
use reqwest::header::{HeaderMap, HeaderValue};

use super::{http_error, retry_after, truncate};
use crate::ModelError;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

/// The HTTP error expected for a body with a code and a 3 s `retry-after`.
fn http_3s(status: u16, message: &str, code: &str, body: &[u8]) -> ModelError {
    ModelError::Http {
        status,
        retry_after: Some(Duration::from_secs(3)),
        message: message.into(),
        code: Some(code.into()),
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

#[test]
fn retry_after_seconds_ms_and_http_date() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(
        retry_after(&headers(&[("retry-after", "7")]), now),
        Some(Duration::from_secs(7))
    );
    assert_eq!(
        retry_after(
            &headers(&[("retry-after", "7"), ("retry-after-ms", "1500")]),
            now
        ),
        Some(Duration::from_millis(1500))
    );
    let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
    assert_eq!(
        retry_after(&headers(&[("retry-after", &date)]), now),
        Some(Duration::from_secs(30))
    );
    let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
    assert_eq!(
        retry_after(&headers(&[("retry-after", &past)]), now),
        Some(Duration::ZERO)
    );
    assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
    assert_eq!(retry_after(&headers(&[]), now), None);
}

#[test]
fn openai_error_body_gives_message_and_code() {
    let body = br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    let err = http_error(429, &headers(&[("retry-after", "3")]), body);
    assert_eq!(
        err,
        http_3s(429, "Rate limit reached", "rate_limit_exceeded", body)
    );
}

#[test]
fn code_falls_back_to_type_and_message_to_raw_body() {
    let err = http_error(
        400,
        &HeaderMap::new(),
        br#"{"error":{"message":"bad","type":"invalid_request_error","code":null}}"#,
    );
    assert_eq!(err.to_string(), "provider returned HTTP 400: bad");
    let ModelError::Http { code, .. } = err else {
        panic!()
    };
    assert_eq!(code.as_deref(), Some("invalid_request_error"));

    let html = format!("<html>{}</html>", "x".repeat(5000));
    let ModelError::Http {
        message,
        code,
        body,
        ..
    } = http_error(502, &HeaderMap::new(), html.as_bytes())
    else {
        panic!()
    };
    assert_eq!(message.chars().count(), 2001);
    assert_eq!(code, None);
    assert_eq!(body, html);

    let ModelError::Http { message, .. } = http_error(503, &HeaderMap::new(), b"") else {
        panic!()
    };
    assert_eq!(message, "Service Unavailable");
}

#[test]
fn truncate_respects_char_boundaries() {
    assert_eq!(truncate("héllo", 2), "hé…");
    assert_eq!(truncate("hé", 2), "hé");
}

// Anthropic error bodies.
#[test]
fn anthropic_error_body_gives_message_and_type() {
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", HeaderValue::from_static("3"));
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let err = http_error(529, &headers, body);
    assert_eq!(err, http_3s(529, "Overloaded", "overloaded_error", body));
    assert!(err.is_transient());
}

#[test]
fn other_bodies_and_dates() {
    let headers = HeaderMap::new();
    let ModelError::Http { message, code, .. } = http_error(529, &headers, b"") else {
        panic!()
    };
    assert_eq!((message.as_str(), code), ("Overloaded", None));
    let ModelError::Http { message, .. } = http_error(502, &headers, b"<html>bad gateway") else {
        panic!()
    };
    assert_eq!(message, "<html>bad gateway");

    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let mut h = HeaderMap::new();
    let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
    h.insert("retry-after", HeaderValue::from_str(&later).unwrap());
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
    h.insert("retry-after-ms", HeaderValue::from_static("1500"));
    assert_eq!(retry_after(&h, now), Some(Duration::from_millis(1500)));
    assert_eq!(truncate("héllo", 2), "hé…");
}

// Google (Gemini) and Ollama error bodies.
#[test]
fn google_error_body_gives_status_as_code_and_retry_info_as_retry_after() {
    let body = br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7.5s"}]}}"#;
    let ModelError::Http {
        retry_after,
        message,
        code,
        ..
    } = http_error(429, &HeaderMap::new(), body)
    else {
        panic!()
    };
    assert_eq!(retry_after, Some(Duration::from_millis(7500)));
    assert_eq!(message, "Quota exceeded");
    assert_eq!(code.as_deref(), Some("RESOURCE_EXHAUSTED"));
    // A header still wins over the detail.
    let ModelError::Http { retry_after, .. } =
        http_error(429, &headers(&[("retry-after", "2")]), body)
    else {
        panic!()
    };
    assert_eq!(retry_after, Some(Duration::from_secs(2)));

    let ModelError::Http { message, code, .. } = http_error(
        404,
        &HeaderMap::new(),
        br#"{"error":"model 'qwen3' not found, try pulling it first"}"#,
    ) else {
        panic!()
    };
    assert_eq!(message, "model 'qwen3' not found, try pulling it first");
    assert_eq!(code, None);
}
