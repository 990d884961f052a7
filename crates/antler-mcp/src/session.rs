//! Bringing one MCP session up over each transport, on rmcp's client.
//!
//! stdio servers get a scrubbed environment (the MCP SDKs' default set — PATH, HOME, USER,
//! LOGNAME, SHELL, TERM, LANG — plus the entry's `env`), so antler's own secrets never reach a
//! server; their stderr is forwarded to the log and its last lines kept for error messages.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncBufReadExt;

use crate::config::{ServerConfig, Transport};
use crate::sse::SseClientTransport;
use crate::McpError;

/// A live rmcp client session.
pub type Client = RunningService<RoleClient, ()>;

/// Environment variables a stdio server inherits from antler (the MCP SDKs' default set).
const INHERITED_ENV: [&str; 7] = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG"];

/// How many stderr lines of a stdio server are kept for error messages.
const STDERR_TAIL: usize = 8;

/// The last lines a stdio server wrote to stderr.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut q = match self.0.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        if q.len() == STDERR_TAIL {
            q.pop_front();
        }
        q.push_back(line);
    }

    /// The last line, if any (what a crashing server usually says last).
    pub fn last(&self) -> Option<String> {
        let q = match self.0.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        q.back().cloned()
    }
}

/// A connected session and what it was connected with.
pub struct Session {
    pub client: Client,
    /// The `Authorization` value it was opened with (OAuth); a different current token means
    /// the session must be reopened.
    pub auth: Option<String>,
    pub stderr: StderrTail,
}

impl Session {
    /// Whether the session's service loop ended (the process exited, the stream closed).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed() || self.client.peer().is_transport_closed()
    }

    /// A description of why a session ended, with the server's last stderr line.
    pub fn death_note(&self) -> String {
        match self.stderr.last() {
            Some(l) => format!("the server exited (last stderr line: {l})"),
            None => "the server closed the connection".into(),
        }
    }
}

/// Where and how a stdio process runs.
#[derive(Clone, Debug, Default)]
pub struct StdioPlace {
    pub cwd: Option<PathBuf>,
    /// Extra variables (TMPDIR/TMP/TEMP), set unless the entry's `env` sets them.
    pub env: BTreeMap<String, String>,
}

fn header_map(
    server: &str,
    headers: &BTreeMap<String, String>,
    auth: Option<&str>,
) -> Result<HeaderMap, McpError> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
            McpError::Config(format!(
                "mcpServers.{server}.headers.{k}: not a header name"
            ))
        })?;
        let value = HeaderValue::from_str(v).map_err(|_| {
            McpError::Config(format!(
                "mcpServers.{server}.headers.{k}: not a header value"
            ))
        })?;
        map.insert(name, value);
    }
    if let Some(a) = auth {
        let value = HeaderValue::from_str(a)
            .map_err(|_| McpError::OAuth(format!("mcpServers.{server}.oauth: bad token")))?;
        map.insert(reqwest::header::AUTHORIZATION, value);
    }
    Ok(map)
}

/// Start a session with `server` (no timeout here; callers bound it by
/// `session_init_timeout`).
pub async fn connect(
    server: &ServerConfig,
    place: &StdioPlace,
    http: &reqwest::Client,
    auth: Option<String>,
) -> Result<Session, McpError> {
    let name = server.name.as_str();
    let start = |e: String| McpError::Start(name.to_owned(), e);
    match &server.transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).env_clear();
            for k in INHERITED_ENV {
                if let Some(v) = std::env::var_os(k) {
                    cmd.env(k, v);
                }
            }
            for (k, v) in &place.env {
                if !env.contains_key(k) {
                    cmd.env(k, v);
                }
            }
            cmd.envs(env);
            if let Some(cwd) = &place.cwd {
                cmd.current_dir(cwd);
            }
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| start(format!("could not start `{command}`: {e}")))?;
            let tail = StderrTail::default();
            if let Some(stderr) = stderr {
                let tail = tail.clone();
                let server = name.to_owned();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %server, "mcp stderr: {line}");
                        tail.push(line);
                    }
                });
            }
            let client = ().serve(transport).await.map_err(|e| {
                let why = match tail.last() {
                    Some(l) => format!("{e} (last stderr line: {l})"),
                    None => e.to_string(),
                };
                start(why)
            })?;
            Ok(Session {
                client,
                auth: None,
                stderr: tail,
            })
        }
        Transport::Http { url, headers } => {
            let map = header_map(name, headers, None)?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(map.into_iter().filter_map(|(k, v)| Some((k?, v))).collect());
            if let Some(a) = &auth {
                // rmcp sends `Bearer {auth_header}`; a non-Bearer token type goes as a header.
                match a.strip_prefix("Bearer ") {
                    Some(token) => config = config.auth_header(token.to_owned()),
                    None => {
                        let v = HeaderValue::from_str(a).map_err(|_| {
                            McpError::OAuth(format!("mcpServers.{name}.oauth: bad token"))
                        })?;
                        config
                            .custom_headers
                            .insert(reqwest::header::AUTHORIZATION, v);
                    }
                }
            }
            let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
            let client = ().serve(transport).await.map_err(|e| start(e.to_string()))?;
            Ok(Session {
                client,
                auth,
                stderr: StderrTail::default(),
            })
        }
        Transport::Sse { url, headers } => {
            let map = header_map(name, headers, auth.as_deref())?;
            let transport = SseClientTransport::connect(http.clone(), url, map)
                .await
                .map_err(|e| start(e.to_string()))?;
            let client = ().serve(transport).await.map_err(|e| start(e.to_string()))?;
            Ok(Session {
                client,
                auth,
                stderr: StderrTail::default(),
            })
        }
    }
}
