//! Serper (Google Search API): `POST {base}/search` and `POST {base}/images` with
//! `{"q": query, "num": N}`, `X-API-KEY: <key>` (`api_key`, else `SERPER_API_KEY`) and a JSON
//! body. Web answers `organic: [{title, link, snippet}]` → DeerFlow's `{query, total_results,
//! results: [{title, url, content}]}`; images answer `images: [{title, imageUrl, thumbnailUrl}]`
//! → `{…, results: [{title, image_url, thumbnail_url}], usage_hint}` with non-public URLs
//! dropped. At most 10 results; queries are cut at 500 characters.

use serde_json::{json, Value};

use super::{clean_query, image_results, image_urls, query_json, query_results, str_field, Reply};
use crate::http::Api;

/// Serper's result cap.
pub const MAX_RESULTS: usize = 10;

#[derive(Debug, Clone)]
pub struct Serper {
    pub api: Api,
    pub base: String,
    pub key: Option<String>,
}

impl Serper {
    async fn post(&self, path: &str, query: &str, num: usize) -> Result<Value, Reply> {
        let Some(key) = &self.key else {
            return Err(Reply::query_error(
                "SERPER_API_KEY is not configured",
                query,
                true,
            ));
        };
        let req = self
            .api
            .post_json(&self.base, path, &json!({"q": query, "num": num}))
            .header("X-API-KEY", key);
        query_json(&self.api, req, "Serper", query, false).await
    }

    /// The list under `field`: missing or null is "no results", anything else malformed.
    fn items(data: &Value, field: &str, query: &str) -> Result<Vec<Value>, Reply> {
        match data.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.iter().filter(|v| v.is_object()).cloned().collect()),
            Some(_) => Err(Reply::query_error(
                "Serper returned an unexpected response format",
                query,
                true,
            )),
        }
    }

    /// Searches `path` for `query` (trimmed and cut at 500 characters) and hands the cleaned
    /// query, the result cap and the non-empty list under `field` to `render`; `none` is the
    /// answer when that list is empty.
    async fn search(
        &self,
        path: &str,
        field: &str,
        query: &str,
        max_results: usize,
        none: &str,
        render: impl FnOnce(&str, usize, Vec<Value>) -> Reply,
    ) -> Reply {
        let query = clean_query(query, 500);
        let max = max_results.min(MAX_RESULTS);
        let data = match self.post(path, &query, max).await {
            Ok(d) => d,
            Err(r) => return r,
        };
        match Self::items(&data, field, &query) {
            Ok(items) if items.is_empty() => Reply::query_error(none, &query, false),
            Ok(items) => render(&query, max, items),
            Err(r) => r,
        }
    }

    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let none = "No results found";
        self.search("/search", "organic", query, max_results, none, Self::web)
            .await
    }

    pub async fn image_search(&self, query: &str, max_results: usize) -> Reply {
        let none = "No images found";
        self.search("/images", "images", query, max_results, none, Self::images)
            .await
    }

    /// Web results in DeerFlow's `{title, url, content}` shape, at most `max` of them.
    fn web(query: &str, max: usize, organic: Vec<Value>) -> Reply {
        let results: Vec<Value> = organic
            .iter()
            .take(max)
            .map(|r| {
                json!({
                    "title": str_field(r, "title"),
                    "url": str_field(r, "link"),
                    "content": str_field(r, "snippet"),
                })
            })
            .collect();
        query_results(query, results)
    }

    /// Image results with safe URLs, at most `max` of them.
    fn images(query: &str, max: usize, images: Vec<Value>) -> Reply {
        let mut results = Vec::new();
        for r in &images {
            let [(image_url, _), (thumbnail_url, _)] =
                image_urls(r.get("imageUrl"), r.get("thumbnailUrl"));
            if image_url.is_empty() && thumbnail_url.is_empty() {
                continue;
            }
            results.push(json!({
                "title": str_field(r, "title"),
                "image_url": image_url,
                "thumbnail_url": thumbnail_url,
            }));
            if results.len() >= max {
                break;
            }
        }
        if results.is_empty() {
            return Reply::query_error("No safe image URLs found", query, false);
        }
        image_results(query, results)
    }
}
