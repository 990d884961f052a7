//! DeerFlow's web tools for antler: `web_search`, `web_fetch` and `image_search`, built from a
//! config `tools:` entry by its `use:` string and extra keys, exactly as DeerFlow reads them.
//!
//! | tool | `use:` | provider |
//! |---|---|---|
//! | `web_search` | `deerflow.community.ddg_search.tools:web_search_tool` | DuckDuckGo (default, no key) |
//! | | `deerflow.community.{searxng,tavily,brave,serper,exa,firecrawl}.tools:web_search_tool` | |
//! | `web_fetch` | `deerflow.community.jina_ai.tools:web_fetch_tool` | Jina reader (default) |
//! | | `deerflow.community.{firecrawl,exa,tavily}.tools:web_fetch_tool` | |
//! | | `antler.web.direct:web_fetch_tool` | antler fetches and converts the page itself |
//! | `image_search` | `deerflow.community.image_search.tools:image_search_tool` | DuckDuckGo (default) |
//! | | `deerflow.community.{serper,brave}.tools:image_search_tool` | |
//!
//! Every entry also accepts `base_url` (self-hosted instances, tests) and
//! `allow_private_addresses` (the SSRF guard's opt-out, see [`guard`]). An entry that names a web
//! tool with a provider antler does not have is a [`WebConfigError`] naming the entry. A
//! provider failure is an error *result* for the model, never a failed run.
//!
//! Results are attacker-controlled text: every tool here declares
//! [`Tool::returns_remote_content`](antler_runtime::Tool::returns_remote_content), so the
//! ToolResultSanitization middleware neutralizes framework tags in them.

pub mod decode;
pub mod fetch;
pub mod guard;
pub mod http;
pub mod markdown;
pub mod options;
pub mod providers;
pub mod tools;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use antler_runtime::Tool;
use serde_json::{Map, Value};

use crate::fetch::{DirectFetcher, FetchLimits};
use crate::guard::{Resolver, UrlGuard};
use crate::http::{Api, ClientOptions};
use crate::options::{EntryOptions, KeyNeed, KeySource, ProviderId, ToolKind, KNOWN_USES};
use crate::providers::{brave, ddg, exa, firecrawl, jina, searxng, serper, tavily};
use crate::tools::{
    FetchBackend, ImageBackend, ImageSearchTool, Reader, SearchBackend, WebFetchTool, WebSearchTool,
};

pub use options::{is_web_entry, parse_use, DIRECT_FETCH_USE};

/// A web tool entry that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("tools entry '{entry}': `use: {use_}` is not a web provider antler has (known: {known})", known = KNOWN_USES.join(", "))]
    UnknownProvider { entry: String, use_: String },
    #[error("tools entry '{entry}': `{key}` {problem}")]
    BadOption {
        entry: String,
        key: String,
        problem: String,
    },
    #[error("tools entry '{entry}': cannot build its HTTP client: {reason}")]
    Client { entry: String, reason: String },
}

/// What `antler config check` says about one web tool entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSummary {
    pub tool: ToolKind,
    pub provider: ProviderId,
    /// Where the key comes from, if one was found.
    pub key: Option<KeySource>,
    pub base_url: Option<String>,
    pub allow_private_addresses: bool,
}

impl std::fmt::Display for ProviderSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.tool.tool_name(), self.provider.label())?;
        if let Some(b) = &self.base_url {
            write!(f, " at {b}")?;
        }
        let var = self.provider.key_env().unwrap_or("api_key");
        match (self.provider.key_need(), &self.key) {
            (KeyNeed::None, _) => write!(f, "; no key needed")?,
            (_, Some(KeySource::Entry)) => write!(f, "; key: set (api_key)")?,
            (_, Some(KeySource::Env(v))) => write!(f, "; key: set (${v})")?,
            (KeyNeed::Optional, None) => write!(
                f,
                "; key: not set (optional; set {var} or api_key for higher limits)"
            )?,
            (KeyNeed::Required, None) => write!(f, "; key: MISSING (set {var} or api_key)")?,
        }
        let fetches_urls = matches!(self.tool, ToolKind::Fetch);
        if fetches_urls && self.allow_private_addresses {
            write!(f, "; private addresses ALLOWED")?;
        } else if fetches_urls {
            write!(f, "; private addresses refused")?;
        }
        Ok(())
    }
}

type EnvFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Builds web tools from config entries. The defaults read the process environment and the
/// system resolver; tests swap both.
#[derive(Clone)]
pub struct WebToolBuilder {
    env: EnvFn,
    resolver: Option<Arc<dyn Resolver>>,
    policy: Option<Arc<dyn Fn(IpAddr) -> bool + Send + Sync>>,
}

impl Default for WebToolBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl WebToolBuilder {
    pub fn new() -> Self {
        Self {
            env: Arc::new(|k| std::env::var(k).ok()),
            resolver: None,
            policy: None,
        }
    }

    /// Read provider key variables from `env` instead of the process environment.
    pub fn with_env(
        mut self,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.env = Arc::new(env);
        self
    }

    /// Resolve host names with `resolver` (tests; pinned names).
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Replace the guard's address policy (`true` = refused); see [`UrlGuard::with_policy`].
    pub fn with_address_policy(
        mut self,
        blocked: impl Fn(IpAddr) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.policy = Some(Arc::new(blocked));
        self
    }

    fn guard(&self, allow_private: bool) -> UrlGuard {
        let mut g = UrlGuard::new(allow_private);
        if let Some(r) = &self.resolver {
            g = g.with_resolver(r.clone());
        }
        if let Some(p) = &self.policy {
            let p = p.clone();
            g = g.with_policy(move |ip| p(ip));
        }
        g
    }

    fn identify(entry: &str, use_: &str) -> Result<(ToolKind, ProviderId), WebConfigError> {
        parse_use(use_).ok_or_else(|| unknown(entry, use_))
    }

    /// What an entry sets up, for `antler config check`; `None` when it is not a web entry.
    pub fn describe(
        &self,
        entry: &str,
        use_: &str,
        extra: &Map<String, Value>,
    ) -> Result<Option<ProviderSummary>, WebConfigError> {
        if !is_web_entry(entry, use_) {
            return Ok(None);
        }
        let (tool, provider) = Self::identify(entry, use_)?;
        let o = EntryOptions::new(entry, extra);
        Ok(Some(ProviderSummary {
            tool,
            provider,
            key: o.api_key(provider, &*self.env)?.map(|(_, s)| s),
            base_url: o.base_url()?,
            allow_private_addresses: o.bool("allow_private_addresses")?.unwrap_or(false),
        }))
    }

    /// Build the tool of a `tools:` entry; `None` when it is not a web entry.
    pub fn build(
        &self,
        entry: &str,
        use_: &str,
        extra: &Map<String, Value>,
    ) -> Result<Option<Arc<dyn Tool>>, WebConfigError> {
        if !is_web_entry(entry, use_) {
            return Ok(None);
        }
        let (kind, provider) = Self::identify(entry, use_)?;
        let o = EntryOptions::new(entry, extra);
        let client_err = |e: reqwest::Error| WebConfigError::Client {
            entry: entry.to_owned(),
            reason: e.to_string(),
        };
        let default_timeout = match provider {
            ProviderId::Jina | ProviderId::Direct => Duration::from_secs(10),
            _ => Duration::from_secs(30),
        };
        let timeout = o.seconds("timeout")?.unwrap_or(default_timeout);
        let allow_private = o.bool("allow_private_addresses")?.unwrap_or(false);
        let guard = self.guard(allow_private);
        let configured_max = o.int("max_results")?;
        let base = o
            .base_url()?
            .unwrap_or_else(|| provider.default_base(kind).to_owned());
        let key = o.api_key(provider, &*self.env)?.map(|(k, _)| k);
        let api = || {
            Api::new(&ClientOptions {
                timeout,
                proxy: o.string("proxy")?,
                trust_env: o.bool("trust_env")?.unwrap_or(true),
            })
            .map_err(client_err)
        };
        let tool: Arc<dyn Tool> = match kind {
            ToolKind::Search => {
                let (backend, cap) = match provider {
                    ProviderId::DuckDuckGo => {
                        (SearchBackend::DuckDuckGo(self.ddg(&o, api()?, &base)?), 30)
                    }
                    ProviderId::Searxng => (
                        SearchBackend::Searxng(searxng::Searxng { api: api()?, base }),
                        50,
                    ),
                    ProviderId::Tavily => (
                        SearchBackend::Tavily(tavily::Tavily {
                            api: api()?,
                            base,
                            key,
                        }),
                        20,
                    ),
                    ProviderId::Brave => (
                        SearchBackend::Brave(brave::Brave {
                            api: api()?,
                            base,
                            key,
                            image_params: Vec::new(),
                        }),
                        brave::WEB_MAX,
                    ),
                    ProviderId::Serper => (
                        SearchBackend::Serper(serper::Serper {
                            api: api()?,
                            base,
                            key,
                        }),
                        serper::MAX_RESULTS,
                    ),
                    ProviderId::Exa => (SearchBackend::Exa(self.exa(&o, api()?, base, key)?), 100),
                    ProviderId::Firecrawl => (
                        SearchBackend::Firecrawl(firecrawl::Firecrawl {
                            api: api()?,
                            base,
                            key,
                        }),
                        100,
                    ),
                    ProviderId::Jina | ProviderId::Direct => return Err(unknown(entry, use_)),
                };
                Arc::new(WebSearchTool::new(backend, configured_max, cap))
            }
            ToolKind::Fetch => {
                let backend = match provider {
                    ProviderId::Jina => FetchBackend::Reader(Reader::Jina(jina::Jina {
                        api: api()?,
                        base,
                        key,
                        timeout_secs: timeout.as_secs().max(1),
                    })),
                    ProviderId::Firecrawl => {
                        FetchBackend::Reader(Reader::Firecrawl(firecrawl::Firecrawl {
                            api: api()?,
                            base,
                            key,
                        }))
                    }
                    ProviderId::Exa => {
                        FetchBackend::Reader(Reader::Exa(self.exa(&o, api()?, base, key)?))
                    }
                    ProviderId::Tavily => FetchBackend::Reader(Reader::Tavily(tavily::Tavily {
                        api: api()?,
                        base,
                        key,
                    })),
                    ProviderId::Direct => {
                        let limits = FetchLimits {
                            timeout,
                            max_bytes: match o.int("max_bytes")? {
                                Some(n) if n > 0 => n as usize,
                                Some(_) => {
                                    return Err(bad(
                                        entry,
                                        "max_bytes",
                                        "must be a positive number of bytes",
                                    ))
                                }
                                None => fetch::DEFAULT_MAX_BYTES,
                            },
                            max_redirects: match o.int("max_redirects")? {
                                Some(n) if n >= 0 => n as usize,
                                Some(_) => {
                                    return Err(bad(entry, "max_redirects", "must be 0 or more"))
                                }
                                None => fetch::DEFAULT_MAX_REDIRECTS,
                            },
                        };
                        FetchBackend::Direct(
                            DirectFetcher::new(guard.clone(), limits).map_err(client_err)?,
                        )
                    }
                    ProviderId::DuckDuckGo
                    | ProviderId::Searxng
                    | ProviderId::Brave
                    | ProviderId::Serper => return Err(unknown(entry, use_)),
                };
                Arc::new(WebFetchTool::new(backend, guard))
            }
            ToolKind::Images => {
                let (backend, cap) = match provider {
                    ProviderId::DuckDuckGo => {
                        (ImageBackend::DuckDuckGo(self.ddg(&o, api()?, &base)?), 100)
                    }
                    ProviderId::Serper => (
                        ImageBackend::Serper(serper::Serper {
                            api: api()?,
                            base,
                            key,
                        }),
                        serper::MAX_RESULTS,
                    ),
                    ProviderId::Brave => {
                        let mut image_params = Vec::new();
                        for k in ["country", "search_lang", "safesearch", "spellcheck"] {
                            if let Some(v) = extra.get(k).filter(|v| !v.is_null()) {
                                let v = match v {
                                    Value::String(s) => s.clone(),
                                    other => other.to_string(),
                                };
                                image_params.push((k.to_owned(), v));
                            }
                        }
                        (
                            ImageBackend::Brave(brave::Brave {
                                api: api()?,
                                base,
                                key,
                                image_params,
                            }),
                            brave::IMAGES_MAX,
                        )
                    }
                    _ => return Err(unknown(entry, use_)),
                };
                Arc::new(ImageSearchTool::new(backend, configured_max, cap))
            }
        };
        Ok(Some(tool))
    }

    fn ddg(
        &self,
        o: &EntryOptions<'_>,
        api: Api,
        base: &str,
    ) -> Result<ddg::DuckDuckGo, WebConfigError> {
        let custom = o.base_url()?;
        if let Some(b) = o.string("backend")? {
            if !matches!(b.as_str(), "auto" | "duckduckgo") {
                tracing::warn!(entry = %o.entry, backend = %b, "DDGS backends other than DuckDuckGo are not available; using DuckDuckGo");
            }
        }
        Ok(ddg::DuckDuckGo {
            api,
            text_base: custom.clone().unwrap_or_else(|| base.to_owned()),
            images_base: custom.unwrap_or_else(|| "https://duckduckgo.com".to_owned()),
            region: o.string("region")?.unwrap_or_else(|| "wt-wt".to_owned()),
            safesearch: o
                .string("safesearch")?
                .unwrap_or_else(|| "moderate".to_owned()),
        })
    }

    fn exa(
        &self,
        o: &EntryOptions<'_>,
        api: Api,
        base: String,
        key: Option<String>,
    ) -> Result<exa::Exa, WebConfigError> {
        Ok(exa::Exa {
            api,
            base,
            key,
            search_type: o
                .string("search_type")?
                .unwrap_or_else(|| "auto".to_owned()),
            highlight_chars: o.int("contents_max_characters")?.unwrap_or(1000),
        })
    }
}

fn unknown(entry: &str, use_: &str) -> WebConfigError {
    WebConfigError::UnknownProvider {
        entry: entry.to_owned(),
        use_: use_.to_owned(),
    }
}

fn bad(entry: &str, key: &str, problem: &str) -> WebConfigError {
    WebConfigError::BadOption {
        entry: entry.to_owned(),
        key: key.to_owned(),
        problem: problem.to_owned(),
    }
}

/// Build a web tool from a `tools:` entry with the process environment; `None` when the entry
/// is not a web tool. See [`WebToolBuilder::build`].
pub fn build_tool(
    entry: &str,
    use_: &str,
    extra: &Map<String, Value>,
) -> Result<Option<Arc<dyn Tool>>, WebConfigError> {
    WebToolBuilder::new().build(entry, use_, extra)
}

/// Describe a web tool entry for `antler config check`; `None` when it is not a web tool.
pub fn describe(
    entry: &str,
    use_: &str,
    extra: &Map<String, Value>,
) -> Result<Option<ProviderSummary>, WebConfigError> {
    WebToolBuilder::new().describe(entry, use_, extra)
}
