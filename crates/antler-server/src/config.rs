//! How `antler serve` listens and whom it lets in: bind address, API keys, CORS allowlist,
//! request limits and stream tuning. [`ServerConfig::validate`] is the start-up gate: binding
//! anything but a loopback address without an API key is refused (spec 70 §7.3).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One accepted API key and the user it authenticates as.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub key: String,
    /// Owner of the threads created with this key (`[A-Za-z0-9_-]+`).
    pub user_id: String,
}

impl std::fmt::Debug for ApiKey {
    // The key itself is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("user_id", &self.user_id)
            .finish_non_exhaustive()
    }
}

/// The single user of an unauthenticated (loopback) server, as DeerFlow's auth-disabled mode.
pub const DEFAULT_USER: &str = "default";

/// Settings of the HTTP server (the agent's own settings live in `config.yaml`).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub host: IpAddr,
    pub port: u16,
    /// Empty: no authentication (allowed on loopback addresses only).
    pub api_keys: Vec<ApiKey>,
    /// Browser origins allowed cross-origin; empty turns CORS off.
    pub cors_origins: Vec<String>,
    /// Largest JSON request body.
    pub max_body_bytes: usize,
    /// Comment line sent on an idle event stream.
    pub heartbeat: Duration,
    /// How long a finished run's events stay replayable.
    pub retention: Duration,
    /// Bytes of events retained per run before the oldest are dropped (at least 256 events are
    /// always kept).
    pub max_buffered_bytes: usize,
    /// Bytes all finished runs' buffers may hold together while retained; beyond it the oldest
    /// finished runs are released early (a late join then gets `end`, as after `retention`).
    pub max_retained_bytes: usize,
    /// Longest a client may take to send a request's headers (and an idle keep-alive connection
    /// may wait for its next request) before the connection is closed. Responses, SSE streams
    /// included, are not limited by it.
    pub header_read_timeout: Duration,
    /// Concurrent connections served; more clients wait until one closes.
    pub max_connections: u32,
}

/// Default [`ServerConfig::header_read_timeout`].
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ServerConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 2026,
            api_keys: Vec::new(),
            cors_origins: Vec::new(),
            max_body_bytes: 16 * 1024 * 1024,
            heartbeat: Duration::from_secs(15),
            retention: Duration::from_secs(60),
            max_buffered_bytes: 64 * 1024 * 1024,
            max_retained_bytes: 32 * 1024 * 1024,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("refusing to listen on {0} without authentication: set ANTLER_API_KEY (clients send it as `Authorization: Bearer <key>` or `x-api-key`), or bind 127.0.0.1")]
    Unauthenticated(IpAddr),
    #[error("invalid API key entry for user '{0}': keys need at least 16 characters and user ids only letters, digits, '-' and '_'")]
    BadApiKey(String),
    #[error("two API keys are identical")]
    DuplicateApiKey,
    #[error("invalid CORS origin '{0}': use scheme://host[:port]")]
    BadOrigin(String),
}

impl ServerConfig {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// Whether requests must carry an API key.
    pub fn auth_required(&self) -> bool {
        !self.api_keys.is_empty()
    }

    /// Check the settings before binding.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.host.is_loopback() && self.api_keys.is_empty() {
            return Err(ConfigError::Unauthenticated(self.host));
        }
        for k in &self.api_keys {
            if k.key.len() < 16
                || k.key.chars().any(char::is_whitespace)
                || !antler_sandbox::paths::is_valid_user_id(&k.user_id)
            {
                return Err(ConfigError::BadApiKey(k.user_id.clone()));
            }
        }
        for (i, a) in self.api_keys.iter().enumerate() {
            if self.api_keys[i + 1..].iter().any(|b| b.key == a.key) {
                return Err(ConfigError::DuplicateApiKey);
            }
        }
        for o in &self.cors_origins {
            let ok = (o.starts_with("http://") || o.starts_with("https://"))
                && !o.ends_with('/')
                && axum::http::HeaderValue::from_str(o).is_ok();
            if !ok {
                return Err(ConfigError::BadOrigin(o.clone()));
            }
        }
        Ok(())
    }

    /// Parse `ANTLER_API_KEYS`-style lists: `user=key,user2=key2` (a bare `key` belongs to
    /// [`DEFAULT_USER`]).
    pub fn parse_api_keys(spec: &str) -> Vec<ApiKey> {
        spec.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|entry| match entry.split_once('=') {
                Some((user, key)) => ApiKey {
                    user_id: user.trim().to_owned(),
                    key: key.trim().to_owned(),
                },
                None => ApiKey {
                    user_id: DEFAULT_USER.to_owned(),
                    key: entry.to_owned(),
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn non_loopback_without_a_key_is_refused() {
        let mut c = ServerConfig {
            host: "0.0.0.0".parse().unwrap(),
            ..Default::default()
        };
        assert_eq!(
            c.validate(),
            Err(ConfigError::Unauthenticated("0.0.0.0".parse().unwrap()))
        );
        c.api_keys = ServerConfig::parse_api_keys("0123456789abcdef");
        assert_eq!(c.validate(), Ok(()));
        c.host = "::1".parse().unwrap();
        c.api_keys.clear();
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn keys_are_parsed_and_checked() {
        let keys = ServerConfig::parse_api_keys("alice=aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb");
        assert_eq!(keys[0].user_id, "alice");
        assert_eq!(keys[1].user_id, DEFAULT_USER);
        assert_eq!(keys[1].key, "bbbbbbbbbbbbbbbb");
        let short = ServerConfig {
            api_keys: ServerConfig::parse_api_keys("short"),
            ..Default::default()
        };
        assert!(matches!(short.validate(), Err(ConfigError::BadApiKey(_))));
        let dup = ServerConfig {
            api_keys: ServerConfig::parse_api_keys("a=aaaaaaaaaaaaaaaa,b=aaaaaaaaaaaaaaaa"),
            ..Default::default()
        };
        assert_eq!(dup.validate(), Err(ConfigError::DuplicateApiKey));
        assert!(!format!("{:?}", keys[0]).contains("aaaa"));
    }

    #[test]
    fn cors_origins_are_checked() {
        let c = ServerConfig {
            cors_origins: vec!["localhost:3000".into()],
            ..Default::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::BadOrigin(_))));
    }
}
