//! OAuth token injection for HTTP/SSE servers (DeerFlow's `oauth` block): a token from the
//! `token_url` by `client_credentials` or `refresh_token`, cached until `refresh_skew_seconds`
//! before it expires, then fetched again. One fetch per server at a time; a rotated refresh
//! token is kept in memory (never written back to the file), as DeerFlow does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Mutex;

use crate::config::{GrantType, OAuthConfig};
use crate::McpError;

#[derive(Clone)]
struct Token {
    header: String,
    expires_at: Instant,
}

struct Entry {
    config: OAuthConfig,
    token: Option<Token>,
}

/// Tokens per server.
#[derive(Default)]
pub struct TokenManager {
    client: reqwest::Client,
    servers: std::sync::Mutex<HashMap<String, Arc<Mutex<Entry>>>>,
}

impl TokenManager {
    pub fn new(client: reqwest::Client) -> Self {
        TokenManager {
            client,
            servers: Default::default(),
        }
    }

    fn entry(&self, server: &str, config: &OAuthConfig) -> Arc<Mutex<Entry>> {
        let mut map = match self.servers.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.entry(server.to_owned())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Entry {
                    config: config.clone(),
                    token: None,
                }))
            })
            .clone()
    }

    /// Forget every token (the config changed or the cache was reset).
    pub fn clear(&self) {
        match self.servers.lock() {
            Ok(mut m) => m.clear(),
            Err(p) => p.into_inner().clear(),
        }
    }

    /// The `Authorization` header value for `server`, fetching a token when there is none or it
    /// is about to expire.
    pub async fn authorization(
        &self,
        server: &str,
        config: &OAuthConfig,
    ) -> Result<String, McpError> {
        let entry = self.entry(server, config);
        let mut e = entry.lock().await;
        let skew = Duration::from_secs(e.config.refresh_skew_seconds.max(0) as u64);
        if let Some(t) = &e.token {
            if t.expires_at > Instant::now() + skew {
                return Ok(t.header.clone());
            }
        }
        let token = fetch(&self.client, &mut e.config)
            .await
            .map_err(|m| McpError::OAuth(format!("mcpServers.{server}.oauth: {m}")))?;
        tracing::info!(server, "fetched an OAuth access token for the MCP server");
        e.token = Some(token.clone());
        Ok(token.header)
    }
}

async fn fetch(client: &reqwest::Client, oauth: &mut OAuthConfig) -> Result<Token, String> {
    // Operator extras first, so they cannot override the reserved fields below.
    let mut form: Vec<(String, String)> = oauth
        .extra_token_params
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut set = |k: &str, v: &str| {
        form.retain(|(key, _)| key != k);
        form.push((k.to_owned(), v.to_owned()));
    };
    match oauth.grant_type {
        GrantType::ClientCredentials => {
            set("grant_type", "client_credentials");
            set("client_id", oauth.client_id.as_deref().unwrap_or(""));
            set(
                "client_secret",
                oauth.client_secret.as_deref().unwrap_or(""),
            );
        }
        GrantType::RefreshToken => {
            set("grant_type", "refresh_token");
            set(
                "refresh_token",
                oauth.refresh_token.as_deref().unwrap_or(""),
            );
            if let Some(id) = oauth.client_id.as_deref().filter(|s| !s.is_empty()) {
                set("client_id", id);
            }
            if let Some(s) = oauth.client_secret.as_deref().filter(|s| !s.is_empty()) {
                set("client_secret", s);
            }
        }
    }
    if let Some(s) = oauth.scope.as_deref().filter(|s| !s.is_empty()) {
        set("scope", s);
    }
    if let Some(a) = oauth.audience.as_deref().filter(|s| !s.is_empty()) {
        set("audience", a);
    }
    let resp = client
        .post(&oauth.token_url)
        .form(&form)
        .timeout(Duration::from_secs(15))
        .send()
        .await
        .map_err(|e| format!("token request failed: {e}"))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("the token endpoint answered {status}"));
    }
    let body: Value = resp
        .json()
        .await
        .map_err(|e| format!("the token response is not JSON: {e}"))?;
    let access = body
        .get(&oauth.token_field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("the token response has no '{}'", oauth.token_field))?;
    if oauth.grant_type == GrantType::RefreshToken {
        if let Some(rotated) = body
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            oauth.refresh_token = Some(rotated.to_owned());
        }
    }
    let token_type = body
        .get(&oauth.token_type_field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(&oauth.default_token_type);
    let expires_in = match body.get(&oauth.expires_in_field) {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(3600),
        Some(Value::String(s)) => s.parse().unwrap_or(3600),
        _ => 3600,
    };
    Ok(Token {
        header: format!("{token_type} {access}"),
        expires_at: Instant::now() + Duration::from_secs(expires_in.max(1) as u64),
    })
}
