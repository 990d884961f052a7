//! A `tools:` entry's extra keys as DeerFlow reads them (`max_results`, `api_key`, `timeout`,
//! `proxy`, `trust_env`, …), antler's additions (`base_url` on every provider,
//! `allow_private_addresses`, the direct fetcher's limits), and which provider a `use:` names.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::WebConfigError;

/// The three web tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `web_search`
    Search,
    /// `web_fetch`
    Fetch,
    /// `image_search`
    Images,
}

impl ToolKind {
    /// The tool's name (what the model sees).
    pub fn tool_name(self) -> &'static str {
        match self {
            ToolKind::Search => "web_search",
            ToolKind::Fetch => "web_fetch",
            ToolKind::Images => "image_search",
        }
    }

    fn from_suffix(s: &str) -> Option<ToolKind> {
        match s {
            "web_search_tool" => Some(ToolKind::Search),
            "web_fetch_tool" => Some(ToolKind::Fetch),
            "image_search_tool" => Some(ToolKind::Images),
            _ => None,
        }
    }
}

/// A provider antler implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderId {
    /// DuckDuckGo (`ddg_search` for text, `image_search` for images); no key.
    DuckDuckGo,
    /// A SearXNG instance (`base_url`); no key.
    Searxng,
    Tavily,
    Brave,
    Serper,
    Exa,
    Firecrawl,
    /// Jina's reader (`r.jina.ai`); key optional.
    Jina,
    /// antler's own fetcher (`antler.web.direct:web_fetch_tool`).
    Direct,
}

/// Whether a provider needs a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyNeed {
    None,
    /// Works without one, with lower limits.
    Optional,
    Required,
}

impl ProviderId {
    /// A human name for `antler config check`.
    pub fn label(self) -> &'static str {
        match self {
            ProviderId::DuckDuckGo => "DuckDuckGo",
            ProviderId::Searxng => "SearXNG",
            ProviderId::Tavily => "Tavily",
            ProviderId::Brave => "Brave Search",
            ProviderId::Serper => "Serper (Google)",
            ProviderId::Exa => "Exa",
            ProviderId::Firecrawl => "Firecrawl",
            ProviderId::Jina => "Jina reader",
            ProviderId::Direct => "antler direct fetcher",
        }
    }

    /// The environment variable DeerFlow (or the provider's SDK) falls back to for the key.
    pub fn key_env(self) -> Option<&'static str> {
        match self {
            ProviderId::Tavily => Some("TAVILY_API_KEY"),
            ProviderId::Brave => Some("BRAVE_SEARCH_API_KEY"),
            ProviderId::Serper => Some("SERPER_API_KEY"),
            ProviderId::Exa => Some("EXA_API_KEY"),
            ProviderId::Firecrawl => Some("FIRECRAWL_API_KEY"),
            ProviderId::Jina => Some("JINA_API_KEY"),
            ProviderId::DuckDuckGo | ProviderId::Searxng | ProviderId::Direct => None,
        }
    }

    pub fn key_need(self) -> KeyNeed {
        match self {
            ProviderId::DuckDuckGo | ProviderId::Searxng | ProviderId::Direct => KeyNeed::None,
            // Tavily's SDK has a keyless mode; Jina serves anonymous requests at a lower rate.
            ProviderId::Jina | ProviderId::Tavily => KeyNeed::Optional,
            ProviderId::Brave | ProviderId::Serper | ProviderId::Exa | ProviderId::Firecrawl => {
                KeyNeed::Required
            }
        }
    }

    /// The provider's default API root (DeerFlow's endpoints); `base_url` replaces it.
    pub fn default_base(self, kind: ToolKind) -> &'static str {
        match (self, kind) {
            (ProviderId::DuckDuckGo, ToolKind::Search) => "https://html.duckduckgo.com",
            (ProviderId::DuckDuckGo, _) => "https://duckduckgo.com",
            (ProviderId::Searxng, _) => "http://localhost:8088",
            (ProviderId::Tavily, _) => "https://api.tavily.com",
            (ProviderId::Brave, _) => "https://api.search.brave.com",
            (ProviderId::Serper, _) => "https://google.serper.dev",
            (ProviderId::Exa, _) => "https://api.exa.ai",
            (ProviderId::Firecrawl, _) => "https://api.firecrawl.dev",
            (ProviderId::Jina, _) => "https://r.jina.ai",
            (ProviderId::Direct, _) => "",
        }
    }
}

/// antler's own `use:` for the direct fetcher.
pub const DIRECT_FETCH_USE: &str = "antler.web.direct:web_fetch_tool";

/// Every `use:` antler understands, for error messages and docs.
pub const KNOWN_USES: &[&str] = &[
    "deerflow.community.ddg_search.tools:web_search_tool",
    "deerflow.community.searxng.tools:web_search_tool",
    "deerflow.community.tavily.tools:web_search_tool",
    "deerflow.community.brave.tools:web_search_tool",
    "deerflow.community.serper.tools:web_search_tool",
    "deerflow.community.exa.tools:web_search_tool",
    "deerflow.community.firecrawl.tools:web_search_tool",
    "deerflow.community.jina_ai.tools:web_fetch_tool",
    "deerflow.community.firecrawl.tools:web_fetch_tool",
    "deerflow.community.exa.tools:web_fetch_tool",
    "deerflow.community.tavily.tools:web_fetch_tool",
    DIRECT_FETCH_USE,
    "deerflow.community.image_search.tools:image_search_tool",
    "deerflow.community.serper.tools:image_search_tool",
    "deerflow.community.brave.tools:image_search_tool",
];

/// Whether a `tools:` entry is a web tool antler must either build or reject: one of the three
/// names, a DeerFlow community search/fetch/image `use:`, or an `antler.web.` one.
pub fn is_web_entry(name: &str, use_: &str) -> bool {
    matches!(name, "web_search" | "web_fetch" | "image_search")
        || use_.starts_with("antler.web.")
        || (use_.starts_with("deerflow.community.")
            && use_
                .rsplit_once(':')
                .is_some_and(|(_, t)| ToolKind::from_suffix(t).is_some()))
}

/// The tool and provider a `use:` names, if antler implements it.
pub fn parse_use(use_: &str) -> Option<(ToolKind, ProviderId)> {
    if use_ == DIRECT_FETCH_USE {
        return Some((ToolKind::Fetch, ProviderId::Direct));
    }
    let rest = use_.strip_prefix("deerflow.community.")?;
    let (module, tool) = rest.split_once(':')?;
    let package = module.strip_suffix(".tools")?;
    let kind = ToolKind::from_suffix(tool)?;
    let provider = match (package, kind) {
        ("ddg_search", ToolKind::Search) | ("image_search", ToolKind::Images) => {
            ProviderId::DuckDuckGo
        }
        ("searxng", ToolKind::Search) => ProviderId::Searxng,
        ("tavily", ToolKind::Search | ToolKind::Fetch) => ProviderId::Tavily,
        ("brave", ToolKind::Search | ToolKind::Images) => ProviderId::Brave,
        ("serper", ToolKind::Search | ToolKind::Images) => ProviderId::Serper,
        ("exa", ToolKind::Search | ToolKind::Fetch) => ProviderId::Exa,
        ("firecrawl", ToolKind::Search | ToolKind::Fetch) => ProviderId::Firecrawl,
        ("jina_ai", ToolKind::Fetch) => ProviderId::Jina,
        _ => return None,
    };
    Some((kind, provider))
}

/// Where a key came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The entry's `api_key` (possibly a resolved `$VAR`).
    Entry,
    /// The provider's environment variable.
    Env(&'static str),
}

/// Typed access to one entry's extra keys; type errors name the entry and the key.
pub struct EntryOptions<'a> {
    pub(crate) entry: &'a str,
    pub(crate) extra: &'a Map<String, Value>,
}

impl<'a> EntryOptions<'a> {
    pub fn new(entry: &'a str, extra: &'a Map<String, Value>) -> Self {
        Self { entry, extra }
    }

    fn bad(&self, key: &str, problem: &str) -> WebConfigError {
        WebConfigError::BadOption {
            entry: self.entry.to_owned(),
            key: key.to_owned(),
            problem: problem.to_owned(),
        }
    }

    /// A non-empty string (trimmed); `null` and `""` count as unset.
    pub fn string(&self, key: &str) -> Result<Option<String>, WebConfigError> {
        match self.extra.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(self.bad(key, "must be a string")),
        }
    }

    /// An integer; numeric strings are accepted as DeerFlow coerces them.
    pub fn int(&self, key: &str) -> Result<Option<i64>, WebConfigError> {
        match self.extra.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map(Some)
                .ok_or_else(|| self.bad(key, "must be an integer")),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.bad(key, "must be an integer")),
            Some(_) => Err(self.bad(key, "must be an integer")),
        }
    }

    /// A boolean; `true/false/yes/no/on/off/1/0` strings are accepted.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, WebConfigError> {
        match self.extra.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(Some(true)),
                "0" | "false" | "no" | "off" => Ok(Some(false)),
                _ => Err(self.bad(key, "must be true or false")),
            },
            Some(_) => Err(self.bad(key, "must be true or false")),
        }
    }

    /// Seconds (`timeout: 10`, `timeout: 2.5`); must be positive.
    pub fn seconds(&self, key: &str) -> Result<Option<Duration>, WebConfigError> {
        let secs = match self.extra.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            Some(_) => None,
        };
        match secs {
            Some(s) if s > 0.0 && s.is_finite() => Ok(Some(Duration::from_secs_f64(s))),
            _ => Err(self.bad(key, "must be a positive number of seconds")),
        }
    }

    /// `base_url`: an absolute http(s) URL, without a trailing slash.
    pub fn base_url(&self) -> Result<Option<String>, WebConfigError> {
        let Some(raw) = self.string("base_url")? else {
            return Ok(None);
        };
        match url::Url::parse(&raw) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                Ok(Some(raw.trim_end_matches('/').to_owned()))
            }
            _ => Err(self.bad("base_url", "must be an absolute http:// or https:// URL")),
        }
    }

    /// The key from `api_key`, else from the provider's environment variable.
    pub fn api_key(
        &self,
        provider: ProviderId,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<(String, KeySource)>, WebConfigError> {
        if let Some(k) = self.string("api_key")? {
            return Ok(Some((k, KeySource::Entry)));
        }
        Ok(provider.key_env().and_then(|var| {
            env(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .map(|v| (v, KeySource::Env(var)))
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn uses_map_to_providers() {
        for u in KNOWN_USES {
            assert!(parse_use(u).is_some(), "{u}");
            assert!(is_web_entry("x", u), "{u}");
        }
        assert_eq!(
            parse_use("deerflow.community.ddg_search.tools:web_search_tool"),
            Some((ToolKind::Search, ProviderId::DuckDuckGo))
        );
        assert_eq!(
            parse_use("deerflow.community.image_search.tools:image_search_tool"),
            Some((ToolKind::Images, ProviderId::DuckDuckGo))
        );
        assert_eq!(
            parse_use("deerflow.community.jina_ai.tools:web_search_tool"),
            None
        );
        assert_eq!(
            parse_use("deerflow.community.infoquest.tools:web_search_tool"),
            None
        );
        assert!(is_web_entry(
            "x",
            "deerflow.community.infoquest.tools:web_fetch_tool"
        ));
        assert!(is_web_entry("web_fetch", "my.module:fetch"));
        assert!(!is_web_entry(
            "web_capture",
            "deerflow.community.browserless.tools:web_capture_tool"
        ));
        assert!(!is_web_entry("ls", "deerflow.sandbox.tools:ls_tool"));
    }

    #[test]
    fn options_are_typed_and_errors_name_entry_and_key() {
        let extra = json!({"max_results": "7", "timeout": 2.5, "allow_private_addresses": "yes",
            "base_url": "http://127.0.0.1:9/api/", "api_key": " k ", "bad": []})
        .as_object()
        .cloned()
        .unwrap();
        let o = EntryOptions::new("web_search", &extra);
        assert_eq!(o.int("max_results").unwrap(), Some(7));
        assert_eq!(
            o.seconds("timeout").unwrap(),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(o.bool("allow_private_addresses").unwrap(), Some(true));
        assert_eq!(
            o.base_url().unwrap().as_deref(),
            Some("http://127.0.0.1:9/api")
        );
        assert_eq!(
            o.api_key(ProviderId::Tavily, &|_| Some("env".into()))
                .unwrap(),
            Some(("k".into(), KeySource::Entry))
        );
        assert_eq!(
            o.int("bad").unwrap_err().to_string(),
            "tools entry 'web_search': `bad` must be an integer"
        );
        let none = Map::new();
        let o = EntryOptions::new("web_search", &none);
        assert_eq!(
            o.api_key(ProviderId::Tavily, &|v| (v == "TAVILY_API_KEY")
                .then(|| "tv".into()))
                .unwrap(),
            Some(("tv".into(), KeySource::Env("TAVILY_API_KEY")))
        );
        assert_eq!(
            o.api_key(ProviderId::DuckDuckGo, &|_| Some("x".into()))
                .unwrap(),
            None
        );
        let bad_url = json!({"base_url": "file:///x"})
            .as_object()
            .cloned()
            .unwrap();
        assert!(EntryOptions::new("e", &bad_url).base_url().is_err());
    }
}
