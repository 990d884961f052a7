//! The three tools the model sees, with DeerFlow's names and arguments. Which arguments a tool
//! offers depends on its provider, as in DeerFlow (Tavily's `web_search` takes only `query`;
//! DuckDuckGo's also takes `max_results`; DuckDuckGo's `image_search` adds its filters). A
//! `max_results` in the tool entry overrides the model's.
//!
//! All three declare [`Tool::returns_remote_content`], so ToolResultSanitization neutralizes
//! what they return whatever they are called.

use std::sync::Arc;

use antler_protocol::{Content, Object, ToolSpec, ToolStatus};
use antler_runtime::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::fetch::DirectFetcher;
use crate::guard::UrlGuard;
use crate::providers::{
    brave::Brave, ddg::DuckDuckGo, exa::Exa, firecrawl::Firecrawl, jina::Jina, searxng::Searxng,
    serper::Serper, tavily::Tavily, ImageArgs, Reply,
};

/// The search backend of a `web_search` tool.
#[derive(Debug, Clone)]
pub enum SearchBackend {
    DuckDuckGo(DuckDuckGo),
    Searxng(Searxng),
    Tavily(Tavily),
    Brave(Brave),
    Serper(Serper),
    Exa(Exa),
    Firecrawl(Firecrawl),
}

impl SearchBackend {
    /// Whether the model may pass `max_results` (DeerFlow's signature for this provider).
    fn takes_max_results(&self) -> bool {
        match self {
            SearchBackend::DuckDuckGo(_) | SearchBackend::Brave(_) | SearchBackend::Serper(_) => {
                true
            }
            SearchBackend::Searxng(_)
            | SearchBackend::Tavily(_)
            | SearchBackend::Exa(_)
            | SearchBackend::Firecrawl(_) => false,
        }
    }

    async fn search(&self, query: &str, max: usize) -> Reply {
        match self {
            SearchBackend::DuckDuckGo(p) => p.web_search(query, max).await,
            SearchBackend::Searxng(p) => p.web_search(query, max).await,
            SearchBackend::Tavily(p) => p.web_search(query, max).await,
            SearchBackend::Brave(p) => p.web_search(query, max).await,
            SearchBackend::Serper(p) => p.web_search(query, max).await,
            SearchBackend::Exa(p) => p.web_search(query, max).await,
            SearchBackend::Firecrawl(p) => p.web_search(query, max).await,
        }
    }
}

/// The backend of a `web_fetch` tool.
#[derive(Debug, Clone)]
pub enum FetchBackend {
    /// A reader service fetches the page from its own network.
    Reader(Reader),
    /// antler fetches the page itself.
    Direct(DirectFetcher),
}

/// A reader service.
#[derive(Debug, Clone)]
pub enum Reader {
    Jina(Jina),
    Firecrawl(Firecrawl),
    Exa(Exa),
    Tavily(Tavily),
}

/// The backend of an `image_search` tool.
#[derive(Debug, Clone)]
pub enum ImageBackend {
    DuckDuckGo(DuckDuckGo),
    Serper(Serper),
    Brave(Brave),
}

fn to_output(r: Reply) -> ToolOutput {
    ToolOutput::Content {
        content: Content::Text(r.text),
        status: if r.error {
            ToolStatus::Error
        } else {
            ToolStatus::Success
        },
        artifact: Value::Null,
        additional_kwargs: Object::new(),
    }
}

fn arg_str(args: &Object, key: &str) -> Option<String> {
    match args.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        _ => None,
    }
}

fn arg_int(args: &Object, key: &str) -> Option<i64> {
    match args.get(key) {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    }
}

fn required(args: &Object, key: &str) -> Result<String, ToolError> {
    arg_str(args, key).ok_or_else(|| {
        ToolError::InvalidArguments(format!(
            "`{key}` is required and must be a non-empty string"
        ))
    })
}

/// Race a provider call against the run's cancellation.
async fn cancellable(
    ctx: &ToolContext<'_>,
    fut: impl std::future::Future<Output = Reply>,
) -> Reply {
    tokio::select! {
        r = fut => r,
        _ = ctx.run.cancel.cancelled() => Reply::err("Error: the run was cancelled"),
    }
}

const QUERY_DESC: &str =
    "Search keywords describing what you want to find. Be specific for better results.";

/// `web_search`.
pub struct WebSearchTool {
    spec: Arc<ToolSpec>,
    backend: SearchBackend,
    /// `max_results` from the tool entry (wins over the model's).
    configured_max: Option<i64>,
    cap: usize,
}

impl WebSearchTool {
    pub fn new(backend: SearchBackend, configured_max: Option<i64>, cap: usize) -> Self {
        let mut props = json!({"query": {"type": "string", "description": QUERY_DESC}});
        if backend.takes_max_results() {
            props["max_results"] = json!({
                "type": "integer",
                "description": "Maximum number of results to return. Default is 5.",
                "default": 5,
            });
        }
        Self {
            spec: query_spec(
                "web_search",
                "Search the web for information: current events, news, articles, \
documentation and facts. Returns titles, URLs and snippets; use web_fetch on a result's URL to \
read the page.",
                props,
            ),
            backend,
            configured_max,
            cap,
        }
    }
}

impl WebSearchTool {
    /// [`Tool::call`].
    async fn run(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let query = required(&args, "query")?;
        let asked = self.configured_max.or_else(|| {
            self.backend
                .takes_max_results()
                .then(|| arg_int(&args, "max_results"))
                .flatten()
        });
        let max = crate::providers::clamp_results(asked, 5, self.cap);
        Ok(to_output(
            cancellable(&ctx, self.backend.search(&query, max)).await,
        ))
    }
}

/// The spec of a search tool: `props` (`query` among them, required) and its description.
fn query_spec(name: &str, description: &str, props: Value) -> Arc<ToolSpec> {
    Arc::new(ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters: json!({"type": "object", "properties": props, "required": ["query"]}),
    })
}

/// `web_fetch`.
pub struct WebFetchTool {
    spec: Arc<ToolSpec>,
    backend: FetchBackend,
    /// Checks the URL before it is handed to a reader service (the direct fetcher checks itself).
    guard: UrlGuard,
}

impl WebFetchTool {
    pub fn new(backend: FetchBackend, guard: UrlGuard) -> Self {
        let spec = ToolSpec {
            name: "web_fetch".into(),
            description: "Fetch the contents of a web page at a given URL and return it as \
Markdown.\nOnly fetch EXACT URLs that the user gave you or that web_search or web_fetch returned; \
never guess or construct URLs.\nPages behind a login (private documents, intranets) cannot be \
read.\nDo not add www. to URLs that do not have it.\nURLs must include the scheme: \
https://example.com is valid, example.com is not."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"url": {"type": "string", "description": "The URL to fetch the contents of."}},
                "required": ["url"],
            }),
        };
        Self {
            spec: Arc::new(spec),
            backend,
            guard,
        }
    }

    async fn fetch(&self, url: &str) -> Reply {
        let reader = match &self.backend {
            FetchBackend::Direct(d) => return d.web_fetch(url).await,
            FetchBackend::Reader(r) => r,
        };
        // A reader fetches from its own network — possibly the operator's (a self-hosted
        // instance) — so the model's URL is checked before it is sent.
        let url = match self.guard.check(url).await {
            Ok(u) => u.to_string(),
            Err(r) => return Reply::error_text(r.to_string()),
        };
        match reader {
            Reader::Jina(p) => p.web_fetch(&url).await,
            Reader::Firecrawl(p) => p.web_fetch(&url).await,
            Reader::Exa(p) => p.web_fetch(&url).await,
            Reader::Tavily(p) => p.web_fetch(&url).await,
        }
    }
}

impl WebFetchTool {
    /// [`Tool::call`].
    async fn run(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let url = required(&args, "url")?;
        Ok(to_output(cancellable(&ctx, self.fetch(&url)).await))
    }
}

/// `image_search`.
pub struct ImageSearchTool {
    spec: Arc<ToolSpec>,
    backend: ImageBackend,
    configured_max: Option<i64>,
    cap: usize,
}

impl ImageSearchTool {
    pub fn new(backend: ImageBackend, configured_max: Option<i64>, cap: usize) -> Self {
        let mut props = json!({
            "query": {"type": "string", "description": "Search keywords describing the images you want to find. Be specific (e.g. \"Japanese woman street photography 1990s\" rather than \"woman\")."},
            "max_results": {"type": "integer", "description": "Maximum number of images to return. Default is 5.", "default": 5},
        });
        if matches!(backend, ImageBackend::DuckDuckGo(_)) {
            props["size"] = json!({"type": "string", "enum": ["Small", "Medium", "Large", "Wallpaper"], "description": "Image size filter. Use Large for reference images."});
            props["type_image"] = json!({"type": "string", "enum": ["photo", "clipart", "gif", "transparent", "line"], "description": "Image type filter. Use photo for realistic references."});
            props["layout"] = json!({"type": "string", "enum": ["Square", "Tall", "Wide"], "description": "Layout filter."});
        }
        Self {
            spec: query_spec(
                "image_search",
                "Search for images online. Use it before generating images to find \
reference images for characters, portraits, objects, scenes, styles or anything that needs visual \
accuracy. The returned image URLs can be used as references in image generation.",
                props,
            ),
            backend,
            configured_max,
            cap,
        }
    }
}

impl ImageSearchTool {
    /// [`Tool::call`].
    async fn run(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let query = required(&args, "query")?;
        let max = crate::providers::clamp_results(
            self.configured_max
                .or_else(|| arg_int(&args, "max_results")),
            5,
            self.cap,
        );
        let fut = async {
            match &self.backend {
                ImageBackend::DuckDuckGo(p) => {
                    let a = ImageArgs {
                        query: query.clone(),
                        max_results: max,
                        size: arg_str(&args, "size"),
                        type_image: arg_str(&args, "type_image"),
                        layout: arg_str(&args, "layout"),
                    };
                    p.image_search(&a).await
                }
                ImageBackend::Serper(p) => p.image_search(&query, max).await,
                ImageBackend::Brave(p) => p.image_search(&query, max).await,
            }
        };
        Ok(to_output(cancellable(&ctx, fut).await))
    }
}

/// `impl Tool` for the web tools: each has a `spec` field and an inherent `run`, and returns
/// remote (untrusted) content.
macro_rules! remote_tool {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl Tool for $ty {
            fn spec(&self) -> &Arc<ToolSpec> {
                &self.spec
            }

            fn returns_remote_content(&self) -> bool {
                true
            }

            async fn call(
                &self,
                args: Object,
                ctx: ToolContext<'_>,
            ) -> Result<ToolOutput, ToolError> {
                self.run(args, ctx).await
            }
        }
    )*};
}
remote_tool!(WebSearchTool, WebFetchTool, ImageSearchTool);
