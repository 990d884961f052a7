//! DeerFlow's `extensions_config.json` (spec 50 §4.17): where it is, what an `mcpServers` entry
//! may say, and the fingerprint that tells when it changed on disk.
//!
//! The file is read as JSON with `$VAR` string values resolved from the environment (unset →
//! `""`, as DeerFlow does) before validation, so a validated entry never holds a placeholder.
//! Every entry is validated on its own and a bad one is a one-line error naming the server and
//! the key; [`ExtensionsConfig::load`] keeps going past bad entries (they are reported, the good
//! ones still load) while [`ExtensionsConfig::validate`] (`antler config check`) fails on the
//! first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::McpError;

/// DeerFlow's default bound on server bring-up (spawn + initialize + tools/list).
pub const DEFAULT_SESSION_INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variables naming the file, in the order they are honoured.
pub const PATH_ENVS: [&str; 2] = [
    "ANTLER_EXTENSIONS_CONFIG",
    "DEER_FLOW_EXTENSIONS_CONFIG_PATH",
];

/// File names looked for beside config.yaml, then in the working directory.
pub const FILE_NAMES: [&str; 2] = ["extensions_config.json", "mcp_config.json"];

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// The legacy HTTP+SSE transport (GET an event stream, POST to the endpoint it names).
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// DeerFlow's `type` value.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Sse { .. } => "sse",
            Transport::Http { .. } => "http",
        }
    }
}

/// `routing` of a server or tool: soft hints that prefer its tools for matching requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Routing {
    pub mode: RoutingMode,
    /// 0–100 (clamped).
    pub priority: i64,
    pub keywords: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    #[default]
    Off,
    Prefer,
}

/// A per-tool `routing` override: only the keys it sets replace the server's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RoutingOverride {
    mode: Option<RoutingMode>,
    priority: Option<i64>,
    keywords: Option<Vec<String>>,
}

/// OAuth token injection for HTTP/SSE servers (DeerFlow's `oauth` block).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    pub token_url: String,
    #[serde(default)]
    pub grant_type: GrantType,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub audience: Option<String>,
    #[serde(default = "default_token_field")]
    pub token_field: String,
    #[serde(default = "default_token_type_field")]
    pub token_type_field: String,
    #[serde(default = "default_expires_in_field")]
    pub expires_in_field: String,
    #[serde(default = "default_token_type")]
    pub default_token_type: String,
    #[serde(default = "default_refresh_skew")]
    pub refresh_skew_seconds: i64,
    #[serde(default)]
    pub extra_token_params: BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantType {
    #[default]
    ClientCredentials,
    RefreshToken,
}

fn yes() -> bool {
    true
}
fn default_token_field() -> String {
    "access_token".into()
}
fn default_token_type_field() -> String {
    "token_type".into()
}
fn default_expires_in_field() -> String {
    "expires_in".into()
}
fn default_token_type() -> String {
    "Bearer".into()
}
fn default_refresh_skew() -> i64 {
    60
}

/// One validated `mcpServers` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub enabled: bool,
    pub transport: Transport,
    pub oauth: Option<OAuthConfig>,
    pub description: String,
    /// Expose tools as `{server}_{tool}` (default) or under their raw names.
    pub tool_name_prefix: bool,
    /// Bound on one tool call; `None` = no bound beyond the run's own cancellation.
    pub tool_call_timeout: Option<Duration>,
    /// Bound on bring-up; `None` (an explicit `null`) = unbounded.
    pub session_init_timeout: Option<Duration>,
    pub routing: Routing,
    tool_routing: BTreeMap<String, RoutingOverride>,
}

impl ServerConfig {
    /// The routing of one raw tool name: the server's, with the tool's override keys applied.
    pub fn routing_for(&self, raw_tool: &str) -> Routing {
        let mut r = self.routing.clone();
        if let Some(o) = self.tool_routing.get(raw_tool) {
            if let Some(m) = o.mode {
                r.mode = m;
            }
            if let Some(p) = o.priority {
                r.priority = p.clamp(0, 100);
            }
            if let Some(k) = &o.keywords {
                r.keywords = k.clone();
            }
        }
        r
    }
}

/// The serde shape of an entry (DeerFlow's field names; unknown keys allowed, as DeerFlow's
/// `extra="allow"`).
#[derive(Deserialize)]
struct RawServer {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default, rename = "type")]
    type_: Option<String>,
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    oauth: Option<OAuthConfig>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default = "yes")]
    tool_name_prefix: bool,
    #[serde(default)]
    tool_call_timeout: Option<f64>,
    #[serde(default = "default_init_timeout")]
    session_init_timeout: Option<f64>,
    #[serde(default)]
    routing: Routing,
    #[serde(default)]
    tools: BTreeMap<String, RawToolOverride>,
}

#[derive(Deserialize, Default)]
struct RawToolOverride {
    #[serde(default)]
    routing: Option<RoutingOverride>,
}

fn default_init_timeout() -> Option<f64> {
    Some(DEFAULT_SESSION_INIT_TIMEOUT.as_secs_f64())
}

fn seconds(name: &str, key: &str, v: Option<f64>) -> Result<Option<Duration>, McpError> {
    match v {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(McpError::Config(format!(
            "mcpServers.{name}.{key}: must be a positive number of seconds (got {s})"
        ))),
    }
}

/// Validate one entry (its `$VAR`s already resolved). Errors name the server and the key.
pub fn parse_server(name: &str, value: &Value) -> Result<ServerConfig, McpError> {
    let raw: RawServer = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." || path.is_empty() {
            String::new()
        } else {
            format!(".{path}")
        };
        McpError::Config(format!("mcpServers.{name}{key}: {}", e.inner()))
    })?;
    // DeerFlow: `type` wins, `transport` (the MCP spec's spelling) is its alias, stdio default.
    let kind = raw
        .type_
        .filter(|t| !t.is_empty())
        .or(raw.transport.filter(|t| !t.is_empty()))
        .unwrap_or_else(|| "stdio".into());
    let transport = match kind.as_str() {
        "stdio" => Transport::Stdio {
            command: raw
                .command
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| {
                    McpError::Config(format!(
                        "mcpServers.{name}.command: a stdio server needs `command`"
                    ))
                })?,
            args: raw.args,
            env: raw.env,
        },
        "sse" | "http" => {
            let url = raw.url.filter(|u| !u.trim().is_empty()).ok_or_else(|| {
                McpError::Config(format!(
                    "mcpServers.{name}.url: an {kind} server needs `url`"
                ))
            })?;
            if url::Url::parse(&url).is_err() {
                return Err(McpError::Config(format!(
                    "mcpServers.{name}.url: not a URL: {url}"
                )));
            }
            for k in raw.headers.keys() {
                if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                    return Err(McpError::Config(format!(
                        "mcpServers.{name}.headers.{k}: not a valid HTTP header name"
                    )));
                }
            }
            if kind == "sse" {
                Transport::Sse {
                    url,
                    headers: raw.headers,
                }
            } else {
                Transport::Http {
                    url,
                    headers: raw.headers,
                }
            }
        }
        other => {
            return Err(McpError::Config(format!(
                "mcpServers.{name}.type: unknown transport '{other}' (expected stdio, sse or http)"
            )))
        }
    };
    if let Some(o) = &raw.oauth {
        if o.enabled {
            let missing = match o.grant_type {
                GrantType::ClientCredentials if o.client_id.as_deref().unwrap_or("").is_empty() => {
                    Some("client_id")
                }
                GrantType::ClientCredentials
                    if o.client_secret.as_deref().unwrap_or("").is_empty() =>
                {
                    Some("client_secret")
                }
                GrantType::RefreshToken if o.refresh_token.as_deref().unwrap_or("").is_empty() => {
                    Some("refresh_token")
                }
                _ => None,
            };
            if let Some(k) = missing {
                return Err(McpError::Config(format!(
                    "mcpServers.{name}.oauth.{k}: required for grant_type {:?}",
                    o.grant_type
                )));
            }
        }
    }
    let mut routing = raw.routing;
    routing.priority = routing.priority.clamp(0, 100);
    Ok(ServerConfig {
        name: name.to_owned(),
        enabled: raw.enabled,
        transport,
        oauth: raw.oauth,
        description: raw.description.unwrap_or_default(),
        tool_name_prefix: raw.tool_name_prefix,
        tool_call_timeout: seconds(name, "tool_call_timeout", raw.tool_call_timeout)?,
        session_init_timeout: seconds(name, "session_init_timeout", raw.session_init_timeout)?,
        routing,
        tool_routing: raw
            .tools
            .into_iter()
            .filter_map(|(k, v)| v.routing.map(|r| (k, r)))
            .collect(),
    })
}

/// Replace every string value that starts with `$` by the environment value (`""` if unset).
/// Keys are left alone, as DeerFlow does.
pub fn resolve_env(v: &mut Value, env: &dyn Fn(&str) -> Option<String>) {
    match v {
        Value::String(s) => {
            if let Some(var) = s.strip_prefix('$') {
                *s = env(var).unwrap_or_default();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| resolve_env(i, env)),
        Value::Object(map) => map.values_mut().for_each(|i| resolve_env(i, env)),
        _ => {}
    }
}

/// What identifies one version of the file: DeerFlow's (path, mtime, size, sha256).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub path: PathBuf,
    pub mtime: Option<SystemTime>,
    pub size: u64,
    pub sha256: [u8; 32],
}

impl Fingerprint {
    /// `None` when the file cannot be read.
    pub fn of(path: &Path) -> Option<Fingerprint> {
        let meta = std::fs::metadata(path).ok()?;
        let bytes = std::fs::read(path).ok()?;
        Some(Fingerprint {
            path: path.to_path_buf(),
            mtime: meta.modified().ok(),
            size: meta.len(),
            sha256: Sha256::digest(&bytes).into(),
        })
    }
}

/// Where to look for the file.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    /// The folder of config.yaml, when there is one.
    pub config_dir: Option<PathBuf>,
    /// The working directory (project root).
    pub cwd: PathBuf,
}

impl Lookup {
    pub fn new(config_file: Option<&Path>, cwd: impl Into<PathBuf>) -> Self {
        Lookup {
            config_dir: config_file
                .and_then(Path::parent)
                .filter(|d| !d.as_os_str().is_empty())
                .map(Path::to_path_buf),
            cwd: cwd.into(),
        }
    }

    /// The file in force: `$ANTLER_EXTENSIONS_CONFIG`, `$DEER_FLOW_EXTENSIONS_CONFIG_PATH`
    /// (either must exist: an operator naming a file that is gone is an error, not "no
    /// servers"), then `extensions_config.json` beside config.yaml / in the working directory,
    /// then `mcp_config.json` likewise. `Ok(None)` = no file = no servers.
    pub fn resolve(&self) -> Result<Option<PathBuf>, McpError> {
        self.resolve_with_env(&|k| std::env::var(k).ok())
    }

    pub fn resolve_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<PathBuf>, McpError> {
        for var in PATH_ENVS {
            if let Some(p) = env(var).filter(|p| !p.trim().is_empty()) {
                let p = PathBuf::from(p);
                if !p.is_file() {
                    return Err(McpError::Config(format!(
                        "{var} names {}, which does not exist",
                        p.display()
                    )));
                }
                return Ok(Some(p));
            }
        }
        Ok(self.candidates().into_iter().find(|p| p.is_file()))
    }

    /// Where a new file is written when none exists (beside config.yaml, else the cwd).
    pub fn default_path(&self) -> PathBuf {
        self.config_dir
            .as_deref()
            .unwrap_or(&self.cwd)
            .join(FILE_NAMES[0])
    }

    fn candidates(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<&Path> = Vec::new();
        if let Some(d) = &self.config_dir {
            dirs.push(d);
        }
        if self.config_dir.as_deref() != Some(self.cwd.as_path()) {
            dirs.push(&self.cwd);
        }
        FILE_NAMES
            .iter()
            .flat_map(|f| dirs.iter().map(move |d| d.join(f)))
            .collect()
    }
}

/// The MCP part of one version of the file.
#[derive(Clone, Debug, Default)]
pub struct ExtensionsConfig {
    /// `None` when there is no file.
    pub path: Option<PathBuf>,
    /// Valid entries, in file order.
    pub servers: Vec<ServerConfig>,
    /// `(server, one-line error)` for entries that failed validation.
    pub errors: Vec<(String, String)>,
}

impl ExtensionsConfig {
    /// Read and validate `path`. A file that is not JSON or has no object at the top is an
    /// error; a bad entry is recorded in `errors` and skipped.
    pub fn load(path: &Path) -> Result<Self, McpError> {
        Self::load_with_env(path, &|k| std::env::var(k).ok())
    }

    pub fn load_with_env(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, McpError> {
        let raw = read_raw(path)?;
        Self::from_raw(Some(path), raw, env)
    }

    /// Validate an already-read document (`$VAR`s unresolved).
    pub fn from_raw(
        path: Option<&Path>,
        mut raw: Map<String, Value>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, McpError> {
        let shown = path.map(|p| p.display().to_string()).unwrap_or_default();
        let servers = match raw.remove("mcpServers") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(McpError::Config(format!(
                    "{shown}: mcpServers: expected an object of server entries"
                )))
            }
        };
        let mut out = ExtensionsConfig {
            path: path.map(Path::to_path_buf),
            ..Default::default()
        };
        for (name, mut entry) in servers {
            resolve_env(&mut entry, env);
            match parse_server(&name, &entry) {
                Ok(s) => out.servers.push(s),
                Err(e) => out.errors.push((name, e.to_string())),
            }
        }
        Ok(out)
    }

    /// `antler config check`: the first bad entry is an error.
    pub fn validate(&self) -> Result<(), McpError> {
        match self.errors.first() {
            Some((_, e)) => Err(McpError::Config(format!(
                "{}: {e}",
                self.path
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ))),
            None => Ok(()),
        }
    }

    pub fn enabled(&self) -> impl Iterator<Item = &ServerConfig> {
        self.servers.iter().filter(|s| s.enabled)
    }
}

/// The file as a JSON object (no `$VAR` resolution): what the config routes merge into.
pub fn read_raw(path: &Path) -> Result<Map<String, Value>, McpError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| McpError::Config(format!("{}: {e}", path.display())))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(McpError::Config(format!(
            "{}: expected a JSON object at the top",
            path.display()
        ))),
        Err(e) => Err(McpError::Config(format!(
            "{}: not valid JSON: {e}",
            path.display()
        ))),
    }
}

/// Write `doc` to `path` without ever exposing a partial file: a temporary file in the same
/// folder (keeping the old file's permissions), fsync, rename over, fsync the folder.
pub fn write_atomic(path: &Path, doc: &Value) -> Result<(), McpError> {
    use std::io::Write;
    let target = if path.is_symlink() {
        std::fs::canonicalize(path)?
    } else {
        path.to_path_buf()
    };
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir)?;
    let mode = std::fs::metadata(&target).ok().map(|m| m.permissions());
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| FILE_NAMES[0].into());
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        let text = serde_json::to_string_pretty(doc).map_err(std::io::Error::other)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        if let Some(p) = mode {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(result?)
}
