//! Tavily: `POST {base}/search` `{"query", "max_results"}` → `results: [{title, url, content}]`,
//! returned as DeerFlow's `[{title, url, snippet}]`; `POST {base}/extract` `{"urls": [url]}` →
//! `results: [{url, title?, raw_content}]` / `failed_results: [{url, error}]`, returned as
//! `# {title}\n\n{first 4,096 chars}`. The key goes in `Authorization: Bearer` (`api_key`, else
//! `TAVILY_API_KEY`); without one the SDK's keyless mode header is sent instead.

use reqwest::header::AUTHORIZATION;
use serde_json::{json, Value};

use super::{first_page, items_at, search_results, str_field, Reply};
use crate::http::{Api, ApiError};

#[derive(Debug, Clone)]
pub struct Tavily {
    pub api: Api,
    pub base: String,
    pub key: Option<String>,
}

impl Tavily {
    fn post(&self, path: &str, body: Value) -> reqwest::RequestBuilder {
        let req = self
            .api
            .post_json(&self.base, path, &body)
            .header("X-Client-Source", "antler");
        match &self.key {
            Some(k) => req.header(AUTHORIZATION, format!("Bearer {k}")),
            None => req.header("X-Tavily-Access-Mode", "keyless"),
        }
    }

    fn failure(e: &ApiError) -> String {
        // Tavily explains errors in `{"detail": {"error": "…"}}`.
        let detail = serde_json::from_str::<Value>(e.body()).ok().and_then(|v| {
            v.pointer("/detail/error")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        match detail {
            Some(d) => format!("Error: Tavily API error: {e}: {d}"),
            None => format!("Error: Tavily API error: {e}"),
        }
    }

    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let req = self.post(
            "/search",
            json!({"query": query, "max_results": max_results}),
        );
        match self.api.json(req).await {
            Ok(body) => search_results(&body, "/results", "content", usize::MAX),
            Err(e) => {
                tracing::warn!(error = %e, "Tavily search failed");
                Reply::err(Self::failure(&e))
            }
        }
    }

    pub async fn web_fetch(&self, url: &str) -> Reply {
        let req = self.post("/extract", json!({"urls": [url]}));
        let body = match self.api.json(req).await {
            Ok(b) => b,
            Err(e) => return Reply::err(Self::failure(&e)),
        };
        if let Some(f) = items_at(&body, "/failed_results").first() {
            return Reply::error_text(format!("Error: {}", str_field(f, "error")));
        }
        first_page(&body, "raw_content")
    }
}
