//! The MCP manager: one per process. It reads `extensions_config.json`, discovers every enabled
//! server's tools, caches them until the file changes (path, mtime, size, sha256) or the cache
//! is reset, and runs the sessions tool calls use.
//!
//! Start-up policy (measured in the README): discovery happens when an agent is built — the
//! tools must be known to offer them — with every server in parallel, each bounded by its
//! `session_init_timeout`, so a slow or broken server delays only the first build after a
//! change, by at most that bound, and never fails it. Its result (tools or the failure) is
//! cached like DeerFlow's. The sessions tool calls use start lazily: a stdio server per
//! (server, user:thread) scope on that scope's first call, with the thread workspace as cwd
//! and `TMPDIR` under it, pooled (LRU, [`POOL_CAP`]); an HTTP/SSE server keeps one shared
//! session (reopened when it drops or its OAuth token changes). A session that died is
//! reported to the model as a tool error and started again on the next call.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use antler_protocol::{Object, ToolSpec};
use antler_runtime::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceError;
use serde::Serialize;

use crate::config::{ExtensionsConfig, Fingerprint, Lookup, Routing, ServerConfig, Transport};
use crate::result::{to_output, Rewrite};
use crate::session::{connect, Session, StdioPlace};
use crate::McpError;

/// DeerFlow's cap on pooled stdio sessions.
pub const POOL_CAP: usize = 256;

/// The folder under a thread's workspace that holds a stdio server's temporary files.
pub const MCP_TMP_SUBDIR: &str = ".mcp/tmp";

/// Whether a tool name is safe to show the model (and to list in the prompt).
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What a server yielded at discovery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "error", rename_all = "snake_case")]
pub enum ServerState {
    /// `enabled: false`.
    Disabled,
    /// Tools discovered.
    Ready,
    /// Could not start, timed out, or failed to list its tools.
    Failed(String),
    /// The entry failed validation.
    Invalid(String),
}

/// One server as `antler mcp list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ServerStatus {
    pub name: String,
    #[serde(rename = "type")]
    pub transport: &'static str,
    pub enabled: bool,
    #[serde(flatten)]
    pub state: ServerState,
    pub description: String,
    /// Names the model sees.
    pub tools: Vec<String>,
    /// Raw tool names dropped for breaking `^[A-Za-z0-9_-]+$`.
    pub dropped_tools: Vec<String>,
    /// Discovery time.
    pub elapsed_ms: u64,
}

/// One version of the MCP tool set.
#[derive(Default)]
pub struct Catalog {
    pub path: Option<PathBuf>,
    fingerprint: Option<Fingerprint>,
    loaded: bool,
    /// A problem with the file as a whole (unreadable, not JSON, a missing named file).
    pub error: Option<String>,
    pub servers: Vec<ServerStatus>,
    pub tools: Vec<Arc<McpTool>>,
    /// Bumped on every reload.
    pub generation: u64,
}

impl Catalog {
    /// The tools as antler tools.
    pub fn dyn_tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|t| t.clone() as Arc<dyn Tool>)
            .collect()
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Session>>>>;

/// stdio sessions per (server, scope), least recently used evicted past the cap.
struct Pool {
    cap: usize,
    tick: AtomicU64,
    map: Mutex<HashMap<(String, String), (Slot, u64)>>,
}

impl Pool {
    fn new(cap: usize) -> Self {
        Pool {
            cap: cap.max(1),
            tick: AtomicU64::new(0),
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (Slot, u64)>> {
        match self.map.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        }
    }

    fn slot(&self, key: (String, String)) -> Slot {
        let now = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        if let Some((slot, last)) = map.get_mut(&key) {
            *last = now;
            return slot.clone();
        }
        if map.len() >= self.cap {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
            {
                tracing::debug!(server = %oldest.0, scope = %oldest.1, "MCP session pool full; closing the least recently used session");
                map.remove(&oldest);
            }
        }
        let slot: Slot = Arc::default();
        map.insert(key, (slot.clone(), now));
        slot
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn clear(&self) {
        self.lock().clear();
    }
}

struct Inner {
    home: PathBuf,
    lookup: Lookup,
    http: reqwest::Client,
    oauth: crate::oauth::TokenManager,
    refresh: tokio::sync::Mutex<()>,
    catalog: RwLock<Arc<Catalog>>,
    pool: Pool,
    shared: Mutex<HashMap<String, Slot>>,
    generation: AtomicU64,
}

/// The process's MCP client (cheap to clone).
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

/// Bound a future by an optional timeout.
async fn bounded<T>(
    limit: Option<Duration>,
    f: impl std::future::Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    match limit {
        Some(d) => tokio::time::timeout(d, f)
            .await
            .map_err(|_| McpError::Timeout(d))?,
        None => f.await,
    }
}

impl McpManager {
    /// A manager for the data home `home` (thread folders), finding the file with `lookup`.
    pub fn new(home: impl Into<PathBuf>, lookup: Lookup) -> Self {
        Self::with_pool_cap(home, lookup, POOL_CAP)
    }

    pub fn with_pool_cap(home: impl Into<PathBuf>, lookup: Lookup, cap: usize) -> Self {
        // The shared TLS config: building this client reads no root certificate (start-up).
        let http = antler_models::tls::client_builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        McpManager {
            inner: Arc::new(Inner {
                home: home.into(),
                lookup,
                oauth: crate::oauth::TokenManager::new(http.clone()),
                http,
                refresh: tokio::sync::Mutex::new(()),
                catalog: RwLock::new(Arc::new(Catalog::default())),
                pool: Pool::new(cap),
                shared: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The file lookup in use.
    pub fn lookup(&self) -> &Lookup {
        &self.inner.lookup
    }

    /// The current tool set, without checking the file (what a synchronous agent build uses
    /// after [`McpManager::refresh`]).
    pub fn snapshot(&self) -> Arc<Catalog> {
        match self.inner.catalog.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Live stdio sessions.
    pub fn pooled_sessions(&self) -> usize {
        self.inner.pool.len()
    }

    /// Forget the tools and close every session; the next refresh discovers again
    /// (`POST /api/mcp/cache/reset`, a written config).
    pub async fn reset(&self) {
        let _g = self.inner.refresh.lock().await;
        self.inner.reset_sessions();
        let mut c = match self.inner.catalog.write() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        *c = Arc::new(Catalog::default());
    }

    /// The tool set for the file as it is now: the cached one when the file did not change,
    /// else a fresh discovery (sessions of the old version are closed).
    pub async fn refresh(&self) -> Arc<Catalog> {
        let inner = &self.inner;
        let _g = inner.refresh.lock().await;
        let current = self.snapshot();
        let path = inner.lookup.resolve();
        let (path, file_error) = match path {
            Ok(p) => (p, None),
            Err(e) => (None, Some(e.to_string())),
        };
        let fingerprint = path.as_deref().and_then(Fingerprint::of);
        if current.loaded
            && current.path == path
            && current.fingerprint == fingerprint
            && current.error == file_error
        {
            return current;
        }
        if current.loaded {
            tracing::info!(path = ?path, "MCP config changed on disk; reloading MCP tools");
        }
        inner.reset_sessions();
        let generation = inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut catalog = Catalog {
            path: path.clone(),
            fingerprint,
            loaded: true,
            error: file_error,
            generation,
            ..Default::default()
        };
        let config = match path.as_deref().map(ExtensionsConfig::load) {
            None => ExtensionsConfig::default(),
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "MCP config is unusable; no MCP tools");
                catalog.error = Some(e.to_string());
                ExtensionsConfig::default()
            }
        };
        if let Some(e) = &catalog.error {
            tracing::warn!(error = %e, "no MCP tools");
        }
        for (name, err) in &config.errors {
            tracing::warn!(server = %name, error = %err, "MCP server entry skipped");
        }
        let started = config.enabled().map(|s| {
            let inner = inner.clone();
            let server = Arc::new(s.clone());
            async move {
                let t0 = Instant::now();
                let r = inner.discover(&server).await;
                (server, r, t0.elapsed())
            }
        });
        let results = futures::future::join_all(started).await;
        let mut seen: HashSet<String> = HashSet::new();
        let mut by_name: BTreeMap<String, ServerStatus> = BTreeMap::new();
        for (server, result, elapsed) in results {
            let mut status = ServerStatus {
                name: server.name.clone(),
                transport: server.transport.kind(),
                enabled: true,
                state: ServerState::Ready,
                description: server.description.clone(),
                tools: Vec::new(),
                dropped_tools: Vec::new(),
                elapsed_ms: elapsed.as_millis() as u64,
            };
            match result {
                Err(e) => {
                    tracing::warn!(server = %server.name, error = %e, "MCP server skipped: tool discovery failed");
                    status.state = ServerState::Failed(e.to_string());
                }
                Ok(tools) => {
                    for t in tools {
                        let raw = t.name.to_string();
                        let exposed = if server.tool_name_prefix {
                            format!("{}_{raw}", server.name)
                        } else {
                            raw.clone()
                        };
                        if !valid_tool_name(&exposed) {
                            tracing::warn!(server = %server.name, tool = ?raw, "dropping an MCP tool whose name is not ^[A-Za-z0-9_-]+$ (it could not be bound as a function and could forge prompt structure)");
                            status.dropped_tools.push(raw);
                            continue;
                        }
                        if !seen.insert(exposed.clone()) {
                            tracing::warn!(server = %server.name, tool = %exposed, "duplicate MCP tool name; keeping the first");
                            continue;
                        }
                        let routing = server.routing_for(&raw);
                        let parameters = serde_json::Value::Object((*t.input_schema).clone());
                        status.tools.push(exposed.clone());
                        catalog.tools.push(Arc::new(McpTool {
                            spec: Arc::new(ToolSpec {
                                name: exposed,
                                description: t.description.as_deref().unwrap_or("").to_owned(),
                                parameters,
                            }),
                            raw_name: raw,
                            routing,
                            server: server.clone(),
                            manager: Arc::downgrade(inner),
                        }));
                    }
                }
            }
            by_name.insert(server.name.clone(), status);
        }
        // Statuses in file order, disabled and invalid entries included.
        for s in &config.servers {
            match by_name.remove(&s.name) {
                Some(st) => catalog.servers.push(st),
                None => catalog.servers.push(ServerStatus {
                    name: s.name.clone(),
                    transport: s.transport.kind(),
                    enabled: false,
                    state: ServerState::Disabled,
                    description: s.description.clone(),
                    tools: Vec::new(),
                    dropped_tools: Vec::new(),
                    elapsed_ms: 0,
                }),
            }
        }
        for (name, err) in &config.errors {
            catalog.servers.push(ServerStatus {
                name: name.clone(),
                transport: "?",
                enabled: false,
                state: ServerState::Invalid(err.clone()),
                description: String::new(),
                tools: Vec::new(),
                dropped_tools: Vec::new(),
                elapsed_ms: 0,
            });
        }
        tracing::info!(
            tools = catalog.tools.len(),
            servers = catalog.servers.len(),
            "MCP tools loaded"
        );
        let catalog = Arc::new(catalog);
        let mut c = match inner.catalog.write() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        *c = catalog.clone();
        catalog
    }
}

impl Inner {
    fn reset_sessions(&self) {
        self.pool.clear();
        match self.shared.lock() {
            Ok(mut m) => m.clear(),
            Err(p) => p.into_inner().clear(),
        }
        self.oauth.clear();
    }

    fn shared_slot(&self, server: &str) -> Slot {
        let mut m = match self.shared.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        m.entry(server.to_owned()).or_default().clone()
    }

    async fn auth(&self, server: &ServerConfig) -> Result<Option<String>, McpError> {
        match &server.oauth {
            Some(o) if o.enabled && !matches!(server.transport, Transport::Stdio { .. }) => {
                Ok(Some(self.oauth.authorization(&server.name, o).await?))
            }
            _ => Ok(None),
        }
    }

    /// List a server's tools, bounded by its `session_init_timeout`. An HTTP/SSE session is
    /// kept for calls; a stdio one is closed (calls get per-thread processes).
    async fn discover(&self, server: &ServerConfig) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let is_stdio = matches!(server.transport, Transport::Stdio { .. });
        bounded(server.session_init_timeout, async {
            let auth = self.auth(server).await?;
            let session = connect(server, &StdioPlace::default(), &self.http, auth).await?;
            let tools = session.client.list_all_tools().await.map_err(|e| {
                McpError::Start(server.name.clone(), format!("tools/list failed: {e}"))
            })?;
            if is_stdio {
                let _ = session.client.cancel().await;
            } else {
                *self.shared_slot(&server.name).lock().await = Some(Arc::new(session));
            }
            Ok(tools)
        })
        .await
        .map_err(|e| init_timeout_as_start(server, e))
    }

    /// The session a call of `server` in `scope` uses, started when there is none or it died.
    async fn session(
        &self,
        server: &ServerConfig,
        scope: &str,
        place: &StdioPlace,
    ) -> Result<Arc<Session>, McpError> {
        let stdio = matches!(server.transport, Transport::Stdio { .. });
        let auth = self.auth(server).await?;
        let slot = if stdio {
            self.pool.slot((server.name.clone(), scope.to_owned()))
        } else {
            self.shared_slot(&server.name)
        };
        let mut g = slot.lock().await;
        if let Some(s) = g.as_ref() {
            if !s.is_closed() && s.auth == auth {
                return Ok(s.clone());
            }
            if s.is_closed() {
                tracing::warn!(server = %server.name, scope, "MCP session ended ({}); starting it again", s.death_note());
            }
        }
        *g = None;
        let session = bounded(
            server.session_init_timeout,
            connect(server, place, &self.http, auth),
        )
        .await
        .map_err(|e| init_timeout_as_start(server, e))?;
        let session = Arc::new(session);
        *g = Some(session.clone());
        Ok(session)
    }

    fn forget(&self, server: &ServerConfig, scope: &str, dead: &Arc<Session>) {
        let stdio = matches!(server.transport, Transport::Stdio { .. });
        let slot = if stdio {
            self.pool.slot((server.name.clone(), scope.to_owned()))
        } else {
            self.shared_slot(&server.name)
        };
        if let Ok(mut g) = slot.try_lock() {
            if g.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead)) {
                *g = None;
            }
        };
    }
}

/// An MCP server's tool as an antler tool.
pub struct McpTool {
    spec: Arc<ToolSpec>,
    raw_name: String,
    routing: Routing,
    server: Arc<ServerConfig>,
    manager: Weak<Inner>,
}

impl McpTool {
    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server.name
    }

    /// The tool's name on its server.
    pub fn raw_name(&self) -> &str {
        &self.raw_name
    }

    /// The effective routing (server routing with the tool's override).
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    async fn run(
        &self,
        inner: &Inner,
        args: Object,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, McpError> {
        let server = &self.server;
        let stdio = matches!(server.transport, Transport::Stdio { .. });
        let user = ctx.run.user_id.as_deref();
        let scope = format!("{}:{}", user.unwrap_or("default"), ctx.run.thread_id);
        let mut place = StdioPlace::default();
        let mut rewrite = Rewrite::default();
        if let Ok(paths) = antler_sandbox::ThreadPaths::new(&inner.home, &ctx.run.thread_id, user) {
            if stdio {
                // The server's files land in the thread, where artifact routes can serve them
                // and their paths can be shown as /mnt/user-data/....
                paths.ensure_dirs()?;
                let tmp = paths.workspace.join(MCP_TMP_SUBDIR);
                std::fs::create_dir_all(&tmp)?;
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700));
                }
                let tmp = tmp.to_string_lossy().into_owned();
                for k in ["TMPDIR", "TMP", "TEMP"] {
                    place.env.insert(k.to_owned(), tmp.clone());
                }
                place.cwd = Some(paths.workspace.clone());
                rewrite.base_dir = Some(paths.workspace.clone());
            }
            rewrite.user_data = std::fs::canonicalize(&paths.user_data).ok();
        }
        let session = inner.session(server, &scope, &place).await?;
        let params = CallToolRequestParams::new(self.raw_name.clone()).with_arguments(args);
        let call = session.client.call_tool(params);
        let outcome = tokio::select! {
            r = bounded(server.tool_call_timeout, async { Ok(call.await) }) => r,
            _ = ctx.run.cancel.cancelled() => return Err(McpError::Cancelled),
        };
        let result = match outcome {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                if session.is_closed()
                    || matches!(
                        e,
                        ServiceError::TransportClosed | ServiceError::TransportSend(_)
                    )
                {
                    inner.forget(server, &scope, &session);
                    return Err(McpError::Died(server.name.clone(), session.death_note()));
                }
                return Err(McpError::Call(e.to_string()));
            }
            Err(e) => return Err(e),
        };
        let value = serde_json::to_value(&result).map_err(|e| McpError::Call(e.to_string()))?;
        Ok(to_output(&value, &rewrite))
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }

    /// An MCP server's answers are remote content: framework tags in them are neutralized.
    fn returns_remote_content(&self) -> bool {
        true
    }

    async fn call(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let Some(inner) = self.manager.upgrade() else {
            return Ok(ToolOutput::error(format!(
                "MCP server '{}' is no longer available",
                self.server.name
            )));
        };
        match self.run(&inner, args, ctx).await {
            Ok(out) => Ok(out),
            Err(McpError::Cancelled) => Ok(ToolOutput::error("the MCP tool call was cancelled")),
            Err(e) => {
                tracing::warn!(server = %self.server.name, tool = %self.raw_name, error = %e, "MCP tool call failed");
                Ok(ToolOutput::error(e.to_string()))
            }
        }
    }
}

/// A session start that hit `session_init_timeout`, as the start failure of `server` it is.
fn init_timeout_as_start(server: &ServerConfig, e: McpError) -> McpError {
    match e {
        McpError::Timeout(d) => McpError::Start(
            server.name.clone(),
            format!(
                "no answer within session_init_timeout ({}s)",
                d.as_secs_f64()
            ),
        ),
        other => other,
    }
}
