//! Exa: `POST {base}/search` `{"query", "type", "numResults", "contents": {"highlights":
//! {"maxCharacters"}}}` → `results: [{title, url, highlights: [..]}]`, returned as DeerFlow's
//! `[{title, url, snippet}]` (highlights joined by newlines); `POST {base}/contents`
//! `{"urls": [url], "text": {"maxCharacters": 4096}}` → `results: [{title, text}]`, returned as
//! `# {title}\n\n{text}`. Header `x-api-key` (`api_key`, else `EXA_API_KEY`). Failures are
//! `Error: …` texts as in DeerFlow.

use serde_json::{json, Value};

use super::{first_page, items_at, require_key, str_field, Reply};
use crate::http::Api;

#[derive(Debug, Clone)]
pub struct Exa {
    pub api: Api,
    pub base: String,
    pub key: Option<String>,
    /// `search_type` (default `auto`).
    pub search_type: String,
    /// `contents_max_characters` (default 1000).
    pub highlight_chars: i64,
}

impl Exa {
    async fn post(&self, path: &str, body: Value) -> Result<Value, Reply> {
        let key = require_key(
            &self.key,
            "Error: API key must be provided as api_key or in the EXA_API_KEY environment variable",
        )?;
        let req = self
            .api
            .post_json(&self.base, path, &body)
            .header("x-api-key", key);
        self.api.json(req).await.map_err(|e| {
            tracing::warn!(error = %e, "Exa request failed");
            let body = e.body();
            if body.is_empty() {
                Reply::error_text(format!("Exa API error: {e}"))
            } else {
                Reply::error_text(format!("Exa API error: {e}: {body}"))
            }
        })
    }

    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let body = json!({
            "query": query,
            "type": self.search_type,
            "numResults": max_results,
            "contents": {"highlights": {"maxCharacters": self.highlight_chars}},
        });
        let data = match self.post("/search", body).await {
            Ok(d) => d,
            Err(r) => return r,
        };
        let results: Vec<Value> = items_at(&data, "/results")
            .iter()
            .map(|r| {
                let snippet = r
                    .get("highlights")
                    .and_then(Value::as_array)
                    .map(|h| h.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n"))
                    .unwrap_or_default();
                json!({"title": str_field(r, "title"), "url": str_field(r, "url"), "snippet": snippet})
            })
            .collect();
        Reply::pretty(&Value::Array(results))
    }

    pub async fn web_fetch(&self, url: &str) -> Reply {
        let body = json!({"urls": [url], "text": {"maxCharacters": 4096}});
        let data = match self.post("/contents", body).await {
            Ok(d) => d,
            Err(r) => return r,
        };
        first_page(&data, "text")
    }
}
