//! DuckDuckGo, no key: DeerFlow's default `web_search` (`ddg_search`) and `image_search`.
//!
//! Text: `POST https://html.duckduckgo.com/html/` with the form `q`, `b`, `kl` (region), `kp`
//! (safe search) returns an HTML page; each `div.result` holds `a.result__a` (title, link — a
//! direct URL or a `//duckduckgo.com/l/?uddg=<url>` redirect) and `.result__snippet`. Ads
//! (`result--ad`, `duckduckgo.com/y.js` links) are skipped. More results come from posting the
//! page's "Next" form (`.nav-link form` hidden inputs). A bot check answers with an "anomaly"
//! page instead of results.
//!
//! Images: `GET https://duckduckgo.com/?q=…` yields a `vqd` token in the page; `GET
//! https://duckduckgo.com/i.js?o=json&q=…&l=<region>&vqd=…&p=<safe>&f=<filters>` returns JSON
//! `{"results": [{title, image, thumbnail, url, height, width, source}], "next": …}`.
//!
//! `base_url` (antler) replaces both hosts. DeerFlow's `backend` choice (other engines through
//! DDGS) is not available: antler always asks DuckDuckGo itself.

use std::sync::OnceLock;

use dom_query::{Document, Selection};
use regex::Regex;
use reqwest::header::{ACCEPT, REFERER, USER_AGENT};
use serde_json::{json, Value};

use super::{image_results, query_results, str_field, Reply};
use crate::http::{Api, ApiError};

/// DuckDuckGo serves its HTML endpoints to browsers.
const BROWSER_UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// Result pages fetched at most per search.
const MAX_PAGES: usize = 3;

/// One text hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// A parsed result page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultPage {
    pub hits: Vec<Hit>,
    /// The "Next" form's fields, when there is a next page.
    pub next: Option<Vec<(String, String)>>,
    /// DuckDuckGo answered with its bot check instead of results.
    pub anomaly: bool,
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The target of a result link: `uddg` redirects unwrapped, protocol-relative made https.
fn result_url(href: &str) -> String {
    let href = href.trim();
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else if href.starts_with('/') {
        format!("https://duckduckgo.com{href}")
    } else {
        href.to_owned()
    };
    if let Ok(u) = url::Url::parse(&absolute) {
        if u.host_str().is_some_and(|h| h.ends_with("duckduckgo.com")) && u.path() == "/l/" {
            if let Some((_, target)) = u.query_pairs().find(|(k, _)| k == "uddg") {
                return target.into_owned();
            }
        }
    }
    absolute
}

fn sel<'a>(s: &Selection<'a>, css: &str) -> Selection<'a> {
    s.try_select(css).unwrap_or_default()
}

/// Parse an `html.duckduckgo.com/html/` page.
pub fn parse_results(html: &str) -> ResultPage {
    let doc = Document::from(html);
    let find = |css: &str| doc.try_select(css).unwrap_or_default();
    if find(".anomaly-modal__modal, #challenge-form").exists() || html.contains("anomaly-modal") {
        return ResultPage {
            anomaly: true,
            ..Default::default()
        };
    }
    let mut hits = Vec::new();
    for r in find("div.result").iter() {
        if r.has_class("result--ad") || r.has_class("result--no-result") {
            continue;
        }
        let link = sel(&r, "a.result__a").first();
        let href = link
            .attr("href")
            .or_else(|| sel(&r, "a.result__snippet").first().attr("href"));
        let Some(href) = href else { continue };
        let url = result_url(&href);
        if url.is_empty() || url.contains("duckduckgo.com/y.js") {
            continue;
        }
        hits.push(Hit {
            title: collapse(&link.text()),
            url,
            snippet: collapse(&sel(&r, ".result__snippet").first().text()),
        });
    }
    let form = find(".nav-link form").iter().find(|f| {
        sel(f, "input[type=submit]")
            .attr("value")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("next"))
    });
    let next = form.map(|f| {
        sel(&f, "input[type=hidden]")
            .iter()
            .filter_map(|i| Some((i.attr("name")?.to_string(), i.attr("value")?.to_string())))
            .collect::<Vec<_>>()
    });
    ResultPage {
        hits,
        next: next.filter(|n| !n.is_empty()),
        anomaly: false,
    }
}

/// The `vqd` token in DuckDuckGo's search page (`vqd="…"`, `vqd='…'` or `vqd=…&`).
pub fn extract_vqd(page: &str) -> Option<String> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let re = RE
        .get_or_init(|| Regex::new(r#"vqd=(?:"([^"]+)"|'([^']+)'|([0-9A-Za-z_-]+)&)"#).ok())
        .as_ref()?;
    let c = re.captures(page)?;
    c.get(1)
        .or_else(|| c.get(2))
        .or_else(|| c.get(3))
        .map(|m| m.as_str().to_owned())
}

/// The DuckDuckGo provider.
#[derive(Debug, Clone)]
pub struct DuckDuckGo {
    pub api: Api,
    pub text_base: String,
    pub images_base: String,
    pub region: String,
    pub safesearch: String,
}

impl DuckDuckGo {
    fn kp(&self) -> &'static str {
        match self.safesearch.to_ascii_lowercase().as_str() {
            "on" | "strict" => "1",
            "off" => "-2",
            _ => "-1",
        }
    }

    async fn page(&self, form: &[(String, String)]) -> Result<ResultPage, ApiError> {
        let req = self
            .api
            .client()
            .post(format!("{}/html/", self.text_base))
            .header(USER_AGENT, BROWSER_UA)
            .header(REFERER, format!("{}/", self.text_base))
            .header(ACCEPT, "text/html")
            .form(form);
        let html = self.api.text(req).await?;
        Ok(parse_results(&html))
    }

    /// `web_search`: DeerFlow's `{query, total_results, results: [{title, url, content}]}`.
    pub async fn web_search(&self, query: &str, max_results: usize) -> Reply {
        let mut form = vec![
            ("q".to_owned(), query.to_owned()),
            ("b".to_owned(), String::new()),
            ("kl".to_owned(), self.region.clone()),
            ("kp".to_owned(), self.kp().to_owned()),
        ];
        let mut hits: Vec<Hit> = Vec::new();
        for _ in 0..MAX_PAGES {
            let page = match self.page(&form).await {
                Ok(p) => p,
                Err(e) if hits.is_empty() => {
                    tracing::warn!(error = %e, "DuckDuckGo search failed");
                    return Reply::query_error(
                        &format!("DuckDuckGo search failed: {e}"),
                        query,
                        true,
                    );
                }
                Err(e) => {
                    tracing::debug!(error = %e, "DuckDuckGo next page failed; keeping what we have");
                    break;
                }
            };
            if page.anomaly {
                if hits.is_empty() {
                    return Reply::query_error(
                        "DuckDuckGo refused the request (bot check); try again later",
                        query,
                        true,
                    );
                }
                break;
            }
            for h in page.hits {
                if !hits.iter().any(|x| x.url == h.url) {
                    hits.push(h);
                }
            }
            match page.next {
                Some(next) if hits.len() < max_results => form = next,
                _ => break,
            }
        }
        hits.truncate(max_results);
        if hits.is_empty() {
            return Reply::query_error("No results found", query, false);
        }
        let results: Vec<Value> = hits
            .iter()
            .map(|h| json!({"title": h.title, "url": h.url, "content": h.snippet}))
            .collect();
        query_results(query, results)
    }

    /// `image_search`: `{query, total_results, results: [{title, image_url, thumbnail_url}],
    /// usage_hint}`.
    pub async fn image_search(&self, args: &super::ImageArgs) -> Reply {
        let query = args.query.as_str();
        match self.images(args).await {
            Ok(items) if items.is_empty() => Reply::query_error("No images found", query, false),
            Ok(items) => {
                let results: Vec<Value> = items
                    .iter()
                    .take(args.max_results)
                    .map(|r| {
                        json!({
                            "title": str_field(r, "title"),
                            "image_url": str_field(r, "image"),
                            "thumbnail_url": str_field(r, "thumbnail"),
                        })
                    })
                    .collect();
                image_results(query, results)
            }
            Err(e) => {
                tracing::warn!(error = %e, "DuckDuckGo image search failed");
                Reply::query_error(&format!("DuckDuckGo image search failed: {e}"), query, true)
            }
        }
    }

    async fn images(&self, args: &super::ImageArgs) -> Result<Vec<Value>, ImageError> {
        let home = self
            .api
            .client()
            .get(format!("{}/", self.images_base))
            .query(&[("q", args.query.as_str())])
            .header(USER_AGENT, BROWSER_UA)
            .header(ACCEPT, "text/html");
        let page = self.api.text(home).await?;
        let vqd = extract_vqd(&page).ok_or(ImageError::NoToken)?;
        let safe = match self.safesearch.to_ascii_lowercase().as_str() {
            "off" => "-1",
            _ => "1",
        };
        let mut query: Vec<(&str, String)> = vec![
            ("o", "json".into()),
            ("q", args.query.clone()),
            ("l", self.region.clone()),
            ("vqd", vqd),
            ("p", safe.into()),
        ];
        let filters = [
            ("size", &args.size),
            ("type", &args.type_image),
            ("layout", &args.layout),
        ];
        if filters.iter().any(|(_, v)| v.is_some()) {
            // DDG's filter list: time, size, color, type, layout, license (empty = any).
            let f = |k: &str, v: &Option<String>| {
                v.as_ref().map(|v| format!("{k}:{v}")).unwrap_or_default()
            };
            query.push((
                "f",
                format!(
                    ",{},,{},{},",
                    f("size", &args.size),
                    f("type", &args.type_image),
                    f("layout", &args.layout)
                ),
            ));
        }
        let req = self
            .api
            .client()
            .get(format!("{}/i.js", self.images_base))
            .query(&query)
            .header(USER_AGENT, BROWSER_UA)
            .header(REFERER, format!("{}/", self.images_base))
            .header(ACCEPT, "application/json, text/javascript, */*; q=0.01")
            .header("Sec-Fetch-Mode", "cors");
        let body = self.api.json(req).await?;
        match body.get("results") {
            Some(Value::Array(items)) => {
                Ok(items.iter().filter(|v| v.is_object()).cloned().collect())
            }
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(_) => Err(ImageError::Api(ApiError::BadJson(
                "`results` is not a list".into(),
            ))),
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ImageError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("no search token (vqd) in DuckDuckGo's page")]
    NoToken,
}
