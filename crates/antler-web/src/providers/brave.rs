//! Brave Search API: `GET {base}/res/v1/web/search?q=…&count=N&text_decorations=false` and
//! `GET {base}/res/v1/images/search?q=…&count=N[&country&search_lang&safesearch&spellcheck]`
//! with `X-Subscription-Token: <key>` and `Accept: application/json`. The key is `api_key`, else
//! `BRAVE_SEARCH_API_KEY`. Web answers `web.results: [{title, url, description}]` → DeerFlow's
//! `{query, total_results, results: [{title, url, content}]}` (count capped at 20); images answer
//! `results: [{title, url, source, thumbnail: {src, width, height}, properties: {url, width,
//! height}}]` → `{…, results: [{title, image_url, thumbnail_url, source_url, source, width,
//! height}], usage_hint}` (count capped at 200, non-public URLs dropped).

use reqwest::header::ACCEPT;
use serde_json::{json, Map, Value};

use super::{
    clean_query, image_results, image_urls, query_json, query_results, safe_public_url, str_field,
    Reply,
};
use crate::http::Api;

/// Brave's `count` caps.
pub const WEB_MAX: usize = 20;
pub const IMAGES_MAX: usize = 200;

#[derive(Debug, Clone)]
pub struct Brave {
    pub api: Api,
    pub base: String,
    pub key: Option<String>,
    /// `country`, `search_lang`, `safesearch`, `spellcheck` from the image_search entry.
    pub image_params: Vec<(String, String)>,
}

impl Brave {
    fn missing_key(query: &str) -> Reply {
        Reply::query_error("BRAVE_SEARCH_API_KEY is not configured", query, true)
    }

    async fn get(
        &self,
        path: &str,
        params: &[(String, String)],
        service: &str,
        query: &str,
    ) -> Result<Value, Reply> {
        let key = self.key.as_deref().unwrap_or_default();
        let req = self
            .api
            .client()
            .get(format!("{}{path}", self.base))
            .query(params)
            .header("X-Subscription-Token", key)
            .header(ACCEPT, "application/json");
        query_json(&self.api, req, service, query, true).await
    }

    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let query = clean_query(query, 400);
        if self.key.is_none() {
            return Self::missing_key(&query);
        }
        let params = vec![
            ("q".to_owned(), query.clone()),
            ("count".to_owned(), max_results.min(WEB_MAX).to_string()),
            ("text_decorations".to_owned(), "false".to_owned()),
        ];
        let data = match self
            .get("/res/v1/web/search", &params, "Brave Search", &query)
            .await
        {
            Ok(d) => d,
            Err(r) => return r,
        };
        let items = data
            .pointer("/web/results")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if items.is_empty() {
            return Reply::query_error("No results found", &query, false);
        }
        let results: Vec<Value> = items
            .iter()
            .map(|r| {
                json!({
                    "title": str_field(r, "title"),
                    "url": str_field(r, "url"),
                    "content": str_field(r, "description"),
                })
            })
            .collect();
        query_results(&query, results)
    }

    pub async fn image_search(&self, query: &str, max_results: usize) -> Reply {
        let query = clean_query(query, 400);
        if self.key.is_none() {
            return Self::missing_key(&query);
        }
        let count = max_results.min(IMAGES_MAX);
        let mut params = vec![
            ("q".to_owned(), query.clone()),
            ("count".to_owned(), count.to_string()),
        ];
        params.extend(self.image_params.iter().cloned());
        let data = match self
            .get(
                "/res/v1/images/search",
                &params,
                "Brave Image Search",
                &query,
            )
            .await
        {
            Ok(d) => d,
            Err(r) => return r,
        };
        let items = match data.get("results") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a.clone(),
            Some(_) => {
                return Reply::query_error(
                    "Brave Image Search returned an unexpected response format",
                    &query,
                    true,
                )
            }
        };
        if items.is_empty() {
            return Reply::query_error("No images found", &query, false);
        }
        let empty = Value::Object(Map::new());
        let mut results = Vec::new();
        for item in items.iter().filter(|i| i.is_object()) {
            let thumb = item
                .get("thumbnail")
                .filter(|v| v.is_object())
                .unwrap_or(&empty);
            let props = item
                .get("properties")
                .filter(|v| v.is_object())
                .unwrap_or(&empty);
            let [(image_url, image_from), (thumbnail_url, thumb_from)] =
                image_urls(props.get("url"), thumb.get("src"));
            if image_url.is_empty() && thumbnail_url.is_empty() {
                continue;
            }
            // The dimensions of whichever object the shown URL came from.
            let dims = if image_url.is_empty() {
                thumb_from.pick(thumb, props, &empty)
            } else {
                image_from.pick(props, thumb, &empty)
            };
            results.push(json!({
                "title": str_field(item, "title"),
                "image_url": image_url,
                "thumbnail_url": thumbnail_url,
                "source_url": safe_public_url(item.get("url")),
                "source": str_field(item, "source"),
                "width": dims.get("width").cloned().unwrap_or(Value::Null),
                "height": dims.get("height").cloned().unwrap_or(Value::Null),
            }));
            if results.len() >= count {
                break;
            }
        }
        if results.is_empty() {
            return Reply::query_error("No safe image URLs found", &query, false);
        }
        image_results(&query, results)
    }
}
