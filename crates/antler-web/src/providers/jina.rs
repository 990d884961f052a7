//! Jina reader, DeerFlow's default `web_fetch`: `POST {base}/` with `{"url": …}`,
//! `Content-Type: application/json`, `X-Return-Format: html`, `X-Timeout: <timeout s>` and, when a
//! key is set (`api_key`, else `JINA_API_KEY`; optional, raises the rate limit),
//! `Authorization: Bearer`. The returned HTML goes through the same readability → Markdown
//! conversion as the direct fetcher, and the first 4,096 characters are returned, as in DeerFlow.

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::json;

use super::{truncate_chars, Reply};
use crate::http::{Api, ApiError};

#[derive(Debug, Clone)]
pub struct Jina {
    pub api: Api,
    pub base: String,
    pub key: Option<String>,
    /// Seconds Jina may spend on the page (`timeout`).
    pub timeout_secs: u64,
}

impl Jina {
    pub async fn web_fetch(&self, url: &str) -> Reply {
        let mut req = self
            .api
            .client()
            .post(format!("{}/", self.base))
            .header(CONTENT_TYPE, "application/json")
            .header("X-Return-Format", "html")
            .header("X-Timeout", self.timeout_secs.to_string())
            .json(&json!({"url": url}));
        if let Some(k) = &self.key {
            req = req.header(AUTHORIZATION, format!("Bearer {k}"));
        }
        let html = match self.api.text(req).await {
            Ok(h) => h,
            Err(ApiError::Status { status, body }) => {
                return Reply::err(format!(
                    "Error: Jina API returned status {}: {body}",
                    status.as_u16()
                ))
            }
            Err(e) => return Reply::err(format!("Error: Request to Jina API failed: {e}")),
        };
        if html.trim().is_empty() {
            return Reply::err("Error: Jina API returned empty response");
        }
        let target = url.to_owned();
        let page = tokio::task::spawn_blocking(move || {
            crate::markdown::html_to_page(&html, Some(&target))
        })
        .await;
        match page {
            Ok(p) => Reply::ok(truncate_chars(&p.to_markdown(), 4096)),
            Err(e) => Reply::err(format!("Error: converting the page failed: {e}")),
        }
    }
}
