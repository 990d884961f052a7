//! OAuth token injection against a token endpoint and MCP endpoints on 127.0.0.1 (axum).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use antler_mcp::config::parse_server;
use antler_mcp::oauth::TokenManager;
use antler_mcp::ServerState;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::Fixture;
use serde_json::{json, Value};

#[derive(Clone, Default)]
struct Seen {
    forms: Arc<Mutex<Vec<HashMap<String, String>>>>,
    auth: Arc<Mutex<Vec<String>>>,
    expires_in: i64,
}

async fn token(State(s): State<Seen>, Form(f): Form<HashMap<String, String>>) -> Json<Value> {
    let n = {
        let mut forms = s.forms.lock().unwrap();
        forms.push(f);
        forms.len()
    };
    Json(json!({
        "access_token": format!("tok-{n}"),
        "token_type": "Bearer",
        "expires_in": s.expires_in,
        "refresh_token": format!("rot-{n}"),
    }))
}

async fn record(State(s): State<Seen>, headers: HeaderMap) -> StatusCode {
    if let Some(a) = headers.get("authorization") {
        s.auth.lock().unwrap().push(a.to_str().unwrap().to_owned());
    }
    StatusCode::UNAUTHORIZED
}

async fn serve(expires_in: i64) -> (String, Seen) {
    let seen = Seen {
        expires_in,
        ..Default::default()
    };
    let app = Router::new()
        .route("/token", post(token))
        .route("/mcp", post(record).get(record))
        .route("/sse", get(record))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, seen)
}

fn oauth_entry(base: &str, kind: &str, oauth: Value) -> Value {
    let path = if kind == "sse" { "sse" } else { "mcp" };
    json!({"type": kind, "url": format!("{base}/{path}"), "oauth": oauth, "session_init_timeout": 10})
}

/// The OAuth settings of HTTP server `s` at `base` configured with `oauth`.
fn http_oauth(base: &str, oauth: Value) -> antler_mcp::config::OAuthConfig {
    let server = parse_server("s", &oauth_entry(base, "http", oauth)).unwrap();
    server.oauth.clone().unwrap()
}

#[tokio::test]
async fn client_credentials_tokens_are_cached_until_the_skew_window() {
    let (base, seen) = serve(3600).await;
    let oauth = http_oauth(
        &base,
        json!({
            "token_url": format!("{base}/token"),
            "client_id": "id-1",
            "client_secret": "secret-1",
            "scope": "read",
            "extra_token_params": {"resource": "r1", "grant_type": "password"},
        }),
    );
    let tm = TokenManager::new(reqwest::Client::new());
    assert_eq!(tm.authorization("s", &oauth).await.unwrap(), "Bearer tok-1");
    assert_eq!(
        tm.authorization("s", &oauth).await.unwrap(),
        "Bearer tok-1",
        "cached"
    );
    let forms = seen.forms.lock().unwrap().clone();
    assert_eq!(forms.len(), 1);
    let f = &forms[0];
    assert_eq!(
        f["grant_type"], "client_credentials",
        "extras never override reserved fields"
    );
    assert_eq!(
        (f["client_id"].as_str(), f["client_secret"].as_str()),
        ("id-1", "secret-1")
    );
    assert_eq!(
        (f["scope"].as_str(), f["resource"].as_str()),
        ("read", "r1")
    );
}

#[tokio::test]
async fn refresh_tokens_rotate_and_expiring_tokens_are_refetched() {
    // expires_in 30 s < refresh_skew_seconds 60: every use fetches again.
    let (base, seen) = serve(30).await;
    let oauth = http_oauth(
        &base,
        json!({
            "token_url": format!("{base}/token"),
            "grant_type": "refresh_token",
            "refresh_token": "initial",
        }),
    );
    let tm = TokenManager::new(reqwest::Client::new());
    assert_eq!(tm.authorization("s", &oauth).await.unwrap(), "Bearer tok-1");
    assert_eq!(tm.authorization("s", &oauth).await.unwrap(), "Bearer tok-2");
    let forms = seen.forms.lock().unwrap().clone();
    assert_eq!(forms[0]["refresh_token"], "initial");
    assert_eq!(
        forms[1]["refresh_token"], "rot-1",
        "the rotated token is used next"
    );
    assert_eq!(forms[1]["grant_type"], "refresh_token");
}

#[tokio::test]
async fn the_token_is_sent_to_http_and_sse_servers() {
    let (base, seen) = serve(3600).await;
    let oauth =
        json!({"token_url": format!("{base}/token"), "client_id": "a", "client_secret": "b"});
    let f = Fixture::new(json!({
        "h": oauth_entry(&base, "http", oauth.clone()),
        "s": oauth_entry(&base, "sse", oauth),
    }));
    let catalog = f.manager.refresh().await;
    // Both endpoints refuse (401): discovery fails, but each saw the injected header.
    for s in &catalog.servers {
        assert!(matches!(s.state, ServerState::Failed(_)), "{s:?}");
    }
    let auth = seen.auth.lock().unwrap().clone();
    assert!(auth.len() >= 2, "{auth:?}");
    for a in &auth {
        assert!(a.starts_with("Bearer tok-"), "{a}");
    }
}
