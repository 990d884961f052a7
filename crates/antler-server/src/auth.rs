//! Who is calling (spec 70 §7): without configured API keys (loopback only) every request acts as
//! the single user `default`; with keys, every route but `/health` and the public auth probes
//! needs `Authorization: Bearer <key>` or `x-api-key: <key>` (what `langgraph-sdk` sends from
//! `LANGGRAPH_API_KEY`), compared in constant time, else 401 JSON. Keys are never logged.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::config::DEFAULT_USER;
use crate::error::ApiError;
use crate::{AppState, User};

/// Equal length and bytes, without an early exit on the first difference.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim());
        }
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Routes reachable without credentials.
fn is_public(path: &str) -> bool {
    let rest = path
        .strip_prefix("/api/langgraph")
        .or_else(|| path.strip_prefix("/api"))
        .unwrap_or(path);
    path == "/health" || matches!(rest, "/v1/auth/setup-status" | "/v1/auth/providers")
}

/// The auth layer: attaches a [`User`] or answers 401.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if !state.config.auth_required() {
        req.extensions_mut().insert(User {
            id: DEFAULT_USER.to_owned(),
        });
        return next.run(req).await;
    }
    let user = presented_key(req.headers()).and_then(|k| {
        let mut found = None;
        for key in &state.config.api_keys {
            if ct_eq(key.key.as_bytes(), k.as_bytes()) {
                found = Some(key.user_id.clone());
            }
        }
        found
    });
    match user {
        Some(id) => {
            req.extensions_mut().insert(User { id });
            next.run(req).await
        }
        None if is_public(req.uri().path()) => next.run(req).await,
        None => ApiError::unauthorized(
            "not_authenticated",
            "Authentication required: send the API key as `Authorization: Bearer <key>` or `x-api-key`",
        )
        .into_response(),
    }
}

/// `GET /v1/auth/me`.
pub async fn me(user: User) -> Response {
    let email = if user.id == DEFAULT_USER {
        "default@test.local".to_owned()
    } else {
        format!("{}@antler.local", user.id.to_lowercase())
    };
    axum::Json(json!({
        "id": user.id,
        "email": email,
        "system_role": "admin",
        "needs_setup": false,
        "oauth_provider": null,
    }))
    .into_response()
}

/// `GET /v1/auth/setup-status`.
pub async fn setup_status() -> Response {
    axum::Json(json!({"needs_setup": false, "registration_enabled": false})).into_response()
}

/// `GET /v1/auth/providers`.
pub async fn providers() -> Response {
    axum::Json(json!({"providers": []})).into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn keys_compare_in_full() {
        assert!(ct_eq(b"abcdef", b"abcdef"));
        assert!(!ct_eq(b"abcdef", b"abcdeg"));
        assert!(!ct_eq(b"abc", b"abcdef"));
    }

    #[test]
    fn public_routes() {
        assert!(is_public("/health"));
        assert!(is_public("/api/v1/auth/setup-status"));
        assert!(is_public("/api/langgraph/v1/auth/providers"));
        assert!(!is_public("/api/v1/auth/me"));
        assert!(!is_public("/api/threads"));
    }

    #[test]
    fn bearer_or_x_api_key() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer  k1 ".parse().unwrap());
        assert_eq!(presented_key(&h), Some("k1"));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k2".parse().unwrap());
        assert_eq!(presented_key(&h), Some("k2"));
        assert_eq!(presented_key(&HeaderMap::new()), None);
    }
}
