//! The HTTP client for provider APIs and the failures it reports.
//!
//! Provider endpoints come from the operator's config (a default host or `base_url`), never from
//! the model, so they are not put through the SSRF guard — a self-hosted SearXNG on the intranet
//! is the normal case. What the model controls (a page URL handed to a reader service) is
//! checked by the guard before it is sent. API clients follow no redirects, read at most
//! [`MAX_API_BODY`] bytes, and give up after the entry's `timeout`.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::Value;

/// Largest provider response read.
pub const MAX_API_BODY: usize = 8 << 20;

/// The User-Agent antler sends to provider APIs.
pub const USER_AGENT: &str = concat!("antler/", env!("CARGO_PKG_VERSION"));

/// Why a provider call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("HTTP {status}")]
    Status { status: StatusCode, body: String },
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Transport(String),
    #[error("response larger than {} MiB", MAX_API_BODY >> 20)]
    TooLarge,
    #[error("response is not valid JSON: {0}")]
    BadJson(String),
}

impl ApiError {
    /// The status code, for messages that quote it.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The first 500 characters of an error body.
    pub fn body(&self) -> &str {
        match self {
            ApiError::Status { body, .. } => body,
            _ => "",
        }
    }
}

/// Connection settings shared by a tool's requests.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub timeout: Duration,
    /// `proxy:` — every request goes through it.
    pub proxy: Option<String>,
    /// `trust_env:` — honour `HTTP(S)_PROXY` from the environment (DeerFlow's default).
    pub trust_env: bool,
}

/// A provider API client.
#[derive(Debug, Clone)]
pub struct Api {
    client: reqwest::Client,
    timeout: Duration,
}

impl Api {
    pub fn new(opts: &ClientOptions) -> Result<Api, reqwest::Error> {
        let mut b = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none());
        if !opts.trust_env {
            b = b.no_proxy();
        }
        if let Some(p) = &opts.proxy {
            b = b.proxy(reqwest::Proxy::all(p)?);
        }
        Ok(Api {
            client: b.build()?,
            timeout: opts.timeout,
        })
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A `POST` of `body` as JSON to `{base}{path}`, the provider's auth still to add.
    pub fn post_json(&self, base: &str, path: &str, body: &serde_json::Value) -> RequestBuilder {
        self.client
            .post(format!("{base}{path}"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .json(body)
    }

    /// Send, read the body (bounded) and fail on a non-2xx status.
    pub async fn send(&self, req: RequestBuilder) -> Result<(HeaderMap, Vec<u8>), ApiError> {
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = read_limited(resp, MAX_API_BODY)
            .await
            .map_err(|e| match e {
                ReadError::TooLarge => ApiError::TooLarge,
                ReadError::Http(e) => self.transport(e),
            })?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(ApiError::Status {
                status,
                body: text.chars().take(500).collect(),
            });
        }
        Ok((headers, body))
    }

    /// [`Api::send`] and parse the body as JSON.
    pub async fn json(&self, req: RequestBuilder) -> Result<Value, ApiError> {
        let (_, body) = self.send(req).await?;
        serde_json::from_slice(&body).map_err(|e| ApiError::BadJson(e.to_string()))
    }

    /// [`Api::send`] and decode the body as text.
    pub async fn text(&self, req: RequestBuilder) -> Result<String, ApiError> {
        let (headers, body) = self.send(req).await?;
        let ct = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        Ok(crate::decode::decode(&body, ct, true))
    }

    fn transport(&self, e: reqwest::Error) -> ApiError {
        if e.is_timeout() {
            ApiError::Timeout(self.timeout)
        } else {
            ApiError::Transport(error_chain(&e))
        }
    }
}

/// A reqwest error and its causes on one line, without the URL.
pub fn error_chain(e: &reqwest::Error) -> String {
    let mut parts = vec![if e.is_connect() {
        "connection failed".to_owned()
    } else if e.is_request() {
        "request failed".to_owned()
    } else if e.is_body() || e.is_decode() {
        "reading the response failed".to_owned()
    } else {
        "request failed".to_owned()
    }];
    let mut cur = std::error::Error::source(e);
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p == &t) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Why reading a body stopped.
#[derive(Debug)]
pub enum ReadError {
    TooLarge,
    Http(reqwest::Error),
}

/// Read a body of at most `max` bytes; more is an error.
pub async fn read_limited(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Http)? {
        if out.len() + chunk.len() > max {
            return Err(ReadError::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
