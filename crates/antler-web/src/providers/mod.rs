//! One module per provider. Each speaks its service's documented wire format and returns what
//! DeerFlow's tool for that provider returns — including its error shapes — as a [`Reply`].
//!
//! Failures (HTTP 4xx/5xx, timeouts, malformed JSON, a missing key) become error results the
//! model can read; they never fail the run.

pub mod brave;
pub mod ddg;
pub mod exa;
pub mod firecrawl;
pub mod jina;
pub mod searxng;
pub mod serper;
pub mod tavily;

use serde_json::{json, Value};

use crate::http::{Api, ApiError};

/// `image_search` arguments (DuckDuckGo's filters are ignored by providers without them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageArgs {
    pub query: String,
    pub max_results: usize,
    /// `Small`, `Medium`, `Large`, `Wallpaper`.
    pub size: Option<String>,
    /// `photo`, `clipart`, `gif`, `transparent`, `line`.
    pub type_image: Option<String>,
    /// `Square`, `Tall`, `Wide`.
    pub layout: Option<String>,
}

/// What a web tool answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    /// A failure (the tool message gets `status: "error"`); "no results" is not one.
    pub error: bool,
}

impl Reply {
    pub fn ok(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            error: false,
        }
    }

    pub fn err(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            error: true,
        }
    }

    /// An `Error: …` text (the prefix is added when missing).
    pub fn error_text(text: impl Into<String>) -> Reply {
        let t = text.into();
        if t.starts_with("Error") {
            Reply::err(t)
        } else {
            Reply::err(format!("Error: {t}"))
        }
    }

    /// `json.dumps(v, indent=2, ensure_ascii=False)`.
    pub fn pretty(v: &Value) -> Reply {
        Reply::ok(serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()))
    }

    /// DeerFlow's `{"error": msg, "query": q}` (Python's default separators).
    pub fn query_error(msg: &str, query: &str, error: bool) -> Reply {
        Reply {
            text: format!(
                "{{\"error\": {}, \"query\": {}}}",
                json_str(msg),
                json_str(query)
            ),
            error,
        }
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{}\"", s.escape_default()))
}

/// The first `n` characters (Python's `s[:n]`).
pub fn truncate_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A string field of a JSON object, `""` when absent or not a string.
pub fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The array at JSON `pointer` of `body` (empty when absent or not an array).
pub fn items_at<'a>(body: &'a Value, pointer: &str) -> &'a [Value] {
    body.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// DeerFlow's search results, `[{title, url, snippet}]` pretty-printed: the first `max` items at
/// `pointer`, their snippet from the vendor's field `snippet_key`.
pub fn search_results(body: &Value, pointer: &str, snippet_key: &str, max: usize) -> Reply {
    let results: Vec<Value> = items_at(body, pointer)
        .iter()
        .take(max)
        .map(|r| {
            json!({
                "title": str_field(r, "title"),
                "url": str_field(r, "url"),
                "snippet": str_field(r, snippet_key),
            })
        })
        .collect();
    Reply::pretty(&Value::Array(results))
}

/// A fetched page as DeerFlow returns it, `# {title}\n\n{text}` (title `Untitled` when blank,
/// text cut at 4096 characters), from the first of `body.results`, its text at `text_key`.
pub fn first_page(body: &Value, text_key: &str) -> Reply {
    match items_at(body, "/results").first() {
        Some(r) => {
            let title = Some(str_field(r, "title"))
                .filter(|t| !t.is_empty())
                .unwrap_or("Untitled");
            Reply::ok(format!(
                "# {title}\n\n{}",
                truncate_chars(str_field(r, text_key), 4096)
            ))
        }
        None => Reply::err("Error: No results found"),
    }
}

/// `max_results` as DeerFlow clamps it: invalid or < 1 → `default`, capped at `cap`.
pub fn clamp_results(value: Option<i64>, default: usize, cap: usize) -> usize {
    match value {
        Some(n) if n >= 1 => (n as usize).min(cap),
        _ => default.min(cap),
    }
}

/// A search query as Serper/Brave send it: trimmed and cut to `max` characters.
pub fn clean_query(q: &str, max: usize) -> String {
    truncate_chars(q.trim(), max).to_owned()
}

/// DeerFlow's `_safe_public_url` for image URLs returned to the model: http(s) and not a
/// literal non-public address or `localhost` (string checks only — whoever downloads the URL
/// must check the address it resolves to, as `web_fetch` does). `""` when refused.
pub fn safe_public_url(v: Option<&Value>) -> String {
    let Some(raw) = v.and_then(Value::as_str).map(str::trim) else {
        return String::new();
    };
    let Ok(url) = url::Url::parse(raw) else {
        return String::new();
    };
    if !matches!(url.scheme(), "http" | "https") {
        return String::new();
    }
    let ok = match url.host() {
        None => false,
        Some(url::Host::Ipv4(ip)) => !crate::guard::is_blocked_ip(ip.into()),
        Some(url::Host::Ipv6(ip)) => !crate::guard::is_blocked_ip(ip.into()),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            !d.is_empty() && d != "localhost" && !d.ends_with(".localhost")
        }
    };
    if ok {
        raw.to_owned()
    } else {
        String::new()
    }
}

/// Where an image result's URL comes from: its own field when that is safe, its twin (image ↔
/// thumbnail) when its own field is absent; a field that was present but refused stays empty
/// rather than borrowing its twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlSource {
    Own,
    Twin,
    Refused,
}

impl UrlSource {
    /// `own`, `twin` or `none` after where the URL came from.
    pub fn pick<'a, T: ?Sized>(self, own: &'a T, twin: &'a T, none: &'a T) -> &'a T {
        match self {
            UrlSource::Own => own,
            UrlSource::Twin => twin,
            UrlSource::Refused => none,
        }
    }
}

/// The safe image and thumbnail URLs of an image result from its raw fields, each with where it
/// came from (see [`UrlSource`]).
pub fn image_urls(
    raw_image: Option<&Value>,
    raw_thumb: Option<&Value>,
) -> [(String, UrlSource); 2] {
    let safe = [safe_public_url(raw_image), safe_public_url(raw_thumb)];
    let pick = |own: usize, raw: Option<&Value>| {
        let source = if !safe[own].is_empty() {
            UrlSource::Own
        } else if !url_present(raw) {
            UrlSource::Twin
        } else {
            UrlSource::Refused
        };
        let url = source
            .pick(safe[own].as_str(), safe[1 - own].as_str(), "")
            .to_owned();
        (url, source)
    };
    [pick(0, raw_image), pick(1, raw_thumb)]
}

/// The JSON object a search API answered to `req`, or DeerFlow's error answer for `query`
/// naming `service`. `warn_other` also logs failures that are not an HTTP status.
pub async fn query_json(
    api: &Api,
    req: reqwest::RequestBuilder,
    service: &str,
    query: &str,
    warn_other: bool,
) -> Result<Value, Reply> {
    match api.json(req).await {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(Reply::query_error(
            &format!("{service} returned an unexpected response format"),
            query,
            true,
        )),
        Err(e @ ApiError::Status { .. }) => {
            tracing::warn!(error = %e, body = %e.body(), "{service} API error");
            Err(Reply::query_error(
                &format!("{service} API error: {e}"),
                query,
                true,
            ))
        }
        Err(e) => {
            if warn_other {
                tracing::warn!(error = %e, "{service} request failed");
            }
            Err(Reply::query_error(&e.to_string(), query, true))
        }
    }
}

/// The API key, or `Err(Reply::err(missing))` when none is configured.
pub fn require_key<'a>(key: &'a Option<String>, missing: &str) -> Result<&'a str, Reply> {
    key.as_deref().ok_or_else(|| Reply::err(missing))
}

/// Whether a URL field holds a non-empty string (a field that was present but filtered stays
/// empty instead of falling back to its counterpart).
pub fn url_present(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str)
        .is_some_and(|s| !s.trim().is_empty())
}

/// DeerFlow's answer to a web search: `{query, total_results, results}`.
pub fn query_results(query: &str, results: Vec<Value>) -> Reply {
    Reply::pretty(&json!({"query": query, "total_results": results.len(), "results": results}))
}

/// DeerFlow's answer to an image search: `{query, total_results, results, usage_hint}`.
pub fn image_results(query: &str, results: Vec<Value>) -> Reply {
    Reply::pretty(&json!({
        "query": query,
        "total_results": results.len(),
        "results": results,
        "usage_hint": IMAGE_USAGE_HINT,
    }))
}

/// The usage hint DeerFlow's image tools add.
pub const IMAGE_USAGE_HINT: &str =
    "Use the 'image_url' values as reference images in image generation. Download them first if needed.";

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn helpers_match_deerflow() {
        assert_eq!(
            Reply::query_error("No results found", "rust \"async\"", false).text,
            r#"{"error": "No results found", "query": "rust \"async\""}"#
        );
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 10), "hi");
        assert_eq!(clamp_results(Some(50), 5, 10), 10);
        assert_eq!(clamp_results(Some(0), 5, 10), 5);
        assert_eq!(clamp_results(None, 5, 3), 3);
        assert_eq!(
            safe_public_url(Some(&json!("https://img.example/a.png"))),
            "https://img.example/a.png"
        );
        for bad in [
            "http://127.0.0.1/a.png",
            "http://2130706433/",
            "ftp://x/y",
            "http://localhost./a",
            "http://[::1]/",
        ] {
            assert_eq!(safe_public_url(Some(&json!(bad))), "", "{bad}");
        }
        assert_eq!(
            Reply::pretty(&json!({"a": [], "b": {"c": 1}})).text,
            "{\n  \"a\": [],\n  \"b\": {\n    \"c\": 1\n  }\n}"
        );
    }
}
