//! Serper (Google Search API): `POST {base}/search` and `POST {base}/images` with
//! `{"q": query, "num": N}`, `X-API-KEY: <key>` (`api_key`, else `SERPER_API_KEY`) and a JSON
//! body. Web answers `organic: [{title, link, snippet}]` → DeerFlow's `{query, total_results,
//! results: [{title, url, content}]}`; images answer `images: [{title, imageUrl, thumbnailUrl}]`
//! → `{…, results: [{title, image_url, thumbnail_url}], usage_hint}` with non-public URLs
//! dropped. At most 10 results; queries are cut at 500 characters.

use serde_json::{json, Value};

use super::{
    clean_query, image_results, query_results, safe_public_url, str_field, url_present, Reply,
};
use crate::http::{Api, ApiError};

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
        match self.api.json(req).await {
            Ok(v) if v.is_object() => Ok(v),
            Ok(_) => Err(Reply::query_error(
                "Serper returned an unexpected response format",
                query,
                true,
            )),
            Err(e @ ApiError::Status { .. }) => {
                tracing::warn!(error = %e, body = %e.body(), "Serper API error");
                Err(Reply::query_error(
                    &format!("Serper API error: {e}"),
                    query,
                    true,
                ))
            }
            Err(e) => Err(Reply::query_error(&e.to_string(), query, true)),
        }
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

    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let query = clean_query(query, 500);
        let max = max_results.min(MAX_RESULTS);
        let organic = match self
            .post("/search", &query, max)
            .await
            .and_then(|d| Self::items(&d, "organic", &query))
        {
            Ok(o) => o,
            Err(r) => return r,
        };
        if organic.is_empty() {
            return Reply::query_error("No results found", &query, false);
        }
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
        query_results(&query, results)
    }

    pub async fn image_search(&self, query: &str, max_results: usize) -> Reply {
        let query = clean_query(query, 500);
        let max = max_results.min(MAX_RESULTS);
        let images = match self
            .post("/images", &query, max)
            .await
            .and_then(|d| Self::items(&d, "images", &query))
        {
            Ok(i) => i,
            Err(r) => return r,
        };
        if images.is_empty() {
            return Reply::query_error("No images found", &query, false);
        }
        let mut results = Vec::new();
        for r in &images {
            let (raw_image, raw_thumb) = (r.get("imageUrl"), r.get("thumbnailUrl"));
            let (safe_image, safe_thumb) = (safe_public_url(raw_image), safe_public_url(raw_thumb));
            let image_url = if !safe_image.is_empty() || url_present(raw_image) {
                safe_image.clone()
            } else {
                safe_thumb.clone()
            };
            let thumbnail_url = if !safe_thumb.is_empty() || url_present(raw_thumb) {
                safe_thumb
            } else {
                safe_image
            };
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
            return Reply::query_error("No safe image URLs found", &query, false);
        }
        image_results(&query, results)
    }
}
