//! SearXNG (self-hosted metasearch), no key: `GET {base_url}/search?q=…&format=json&
//! language=auto&pageno=1&limit=N` with `Accept: application/json`; the answer's
//! `results: [{title, url, content}]` become DeerFlow's `[{title, url, snippet}]`, at most
//! `max_results`. Failures: `{"error": "…", "query": "…"}`. `base_url` defaults to
//! `http://localhost:8088` as in DeerFlow.

use reqwest::header::ACCEPT;

use super::{search_results, Reply};
use crate::http::Api;

#[derive(Debug, Clone)]
pub struct Searxng {
    pub api: Api,
    pub base: String,
}

impl Searxng {
    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let req = self
            .api
            .client()
            .get(format!("{}/search", self.base))
            .query(&[
                ("q", query.to_owned()),
                ("format", "json".to_owned()),
                ("language", "auto".to_owned()),
                ("pageno", "1".to_owned()),
                ("limit", max_results.to_string()),
            ])
            .header(ACCEPT, "application/json");
        let body = match self.api.json(req).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "SearXNG search failed");
                return Reply::query_error(&format!("SearXNG search failed: {e}"), query, true);
            }
        };
        search_results(&body, "/results", "content", max_results)
    }
}
