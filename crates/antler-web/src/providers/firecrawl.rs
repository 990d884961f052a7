//! Firecrawl (v2 API): `POST {base}/v2/search` `{"query", "limit"}` → `{success, data: {web:
//! [{url, title, description}]}}`, returned as DeerFlow's `[{title, url, snippet}]`;
//! `POST {base}/v2/scrape` `{"url", "formats": ["markdown"]}` → `{success, data: {markdown,
//! metadata: {title}}}`, returned as `# {title}\n\n{first 4,096 chars}`. The key goes in
//! `Authorization: Bearer` (`api_key`, else `FIRECRAWL_API_KEY`). Failures are `Error: …`.

use reqwest::header::AUTHORIZATION;
use serde_json::{json, Value};

use super::{require_key, search_results, str_field, truncate_chars, Reply};
use crate::http::Api;

#[derive(Debug, Clone)]
pub struct Firecrawl {
    pub api: Api,
    pub base: String,
    pub key: Option<String>,
}

impl Firecrawl {
    async fn post(&self, path: &str, body: Value) -> Result<Value, Reply> {
        let key = require_key(
            &self.key,
            "Error: API key is required. Set FIRECRAWL_API_KEY or api_key on the tool entry",
        )?;
        let req = self
            .api
            .post_json(&self.base, path, &body)
            .header(AUTHORIZATION, format!("Bearer {key}"));
        let data = self.api.json(req).await.map_err(|e| {
            tracing::warn!(error = %e, "Firecrawl request failed");
            let detail = serde_json::from_str::<Value>(e.body())
                .ok()
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned));
            match detail {
                Some(d) => Reply::error_text(format!("Firecrawl API error: {e}: {d}")),
                None => Reply::error_text(format!("Firecrawl API error: {e}")),
            }
        })?;
        if data.get("success").and_then(Value::as_bool) == Some(false) {
            let why = Some(str_field(&data, "error"))
                .filter(|s| !s.is_empty())
                .unwrap_or("request failed");
            return Err(Reply::error_text(format!("Firecrawl: {why}")));
        }
        Ok(data)
    }

    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        match self
            .post("/v2/search", json!({"query": query, "limit": max_results}))
            .await
        {
            Ok(data) => search_results(&data, "/data/web", "description", usize::MAX),
            Err(r) => r,
        }
    }

    pub async fn web_fetch(&self, url: &str) -> Reply {
        match self
            .post("/v2/scrape", json!({"url": url, "formats": ["markdown"]}))
            .await
        {
            Ok(data) => Self::page(&data),
            Err(r) => r,
        }
    }

    /// `# {title}\n\n{first 4,096 chars}` of a scrape answer.
    fn page(data: &Value) -> Reply {
        let markdown = data
            .pointer("/data/markdown")
            .and_then(Value::as_str)
            .unwrap_or("");
        if markdown.is_empty() {
            return Reply::err("Error: No content found");
        }
        let title = data
            .pointer("/data/metadata/title")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .unwrap_or("Untitled");
        Reply::ok(format!("# {title}\n\n{}", truncate_chars(markdown, 4096)))
    }
}
