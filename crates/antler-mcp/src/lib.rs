//! antler's MCP client (spec 50 §4.17), on the official Rust SDK (`rmcp`).
//!
//! - [`config`]: DeerFlow's `extensions_config.json` — lookup, `$VAR`s, validation, the
//!   on-disk fingerprint, atomic writes for the server routes.
//! - [`McpManager`]: discovery (parallel, bounded by `session_init_timeout`), the tool cache,
//!   the session pool; its [`McpTool`]s are antler tools (`{server}_{tool}`, remote content).
//! - [`session`]: one session per transport — stdio (child process), streamable HTTP, and the
//!   legacy SSE transport ([`sse`]), which rmcp lacks and antler adds over its `Transport` seam.
//! - [`result`]: MCP results as tool messages, file references rewritten to `/mnt/user-data`.
//! - [`oauth`]: `client_credentials` / `refresh_token` tokens for HTTP/SSE servers.

pub mod config;
pub mod manager;
pub mod oauth;
pub mod result;
pub mod session;
pub mod sse;

pub use config::{ExtensionsConfig, Lookup, Routing, RoutingMode, ServerConfig, Transport};
pub use manager::{valid_tool_name, Catalog, McpManager, McpTool, ServerState, ServerStatus};

use std::time::Duration;

/// What can go wrong talking to MCP servers.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// A bad `extensions_config.json` or entry (the message names the server and key).
    #[error("{0}")]
    Config(String),
    /// A server that could not be started or initialized.
    #[error("MCP server '{0}' could not start: {1}")]
    Start(String, String),
    /// A server whose session ended during a call; the next call starts it again.
    #[error(
        "MCP server '{0}' stopped during the call: {1}; it will be started again on the next call"
    )]
    Died(String, String),
    /// The server answered the call with a protocol error.
    #[error("MCP call failed: {0}")]
    Call(String),
    #[error("no answer within {}s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("OAuth: {0}")]
    OAuth(String),
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
