//! `antler serve`: load the config, open the app, reconcile runs a previous process left
//! unfinished, and serve the HTTP API (`antler-server`) until Ctrl-C or SIGTERM.
//!
//! API keys come from the environment only, never the command line (it shows in `ps`):
//! `ANTLER_API_KEY` (the single `default` user) and/or `ANTLER_API_KEYS` (`user=key,…`).
//! Binding anything but a loopback address without a key is refused.

use std::path::Path;
use std::sync::Arc;

use antler_server::{Server, ServerConfig};

use crate::{exit, open_app, warn_user, Failure, ServeArgs};

fn api_keys() -> Vec<antler_server::ApiKey> {
    let mut keys = Vec::new();
    if let Ok(k) = std::env::var("ANTLER_API_KEY") {
        let k = k.trim();
        if !k.is_empty() {
            keys.push(antler_server::ApiKey {
                key: k.to_owned(),
                user_id: antler_server::DEFAULT_USER.to_owned(),
            });
        }
    }
    if let Ok(list) = std::env::var("ANTLER_API_KEYS") {
        keys.extend(ServerConfig::parse_api_keys(&list));
    }
    keys
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    warn_user("shutting down: cancelling live runs");
}

pub(crate) async fn serve(config_path: Option<&Path>, args: &ServeArgs) -> Result<u8, Failure> {
    let config = ServerConfig {
        host: args.host,
        port: args.port,
        api_keys: api_keys(),
        cors_origins: args.cors_origins.clone(),
        retention: std::time::Duration::from_secs(args.retention_secs),
        header_read_timeout: std::time::Duration::from_secs(args.header_read_timeout_secs),
        max_connections: args.max_connections,
        ..ServerConfig::default()
    };
    config
        .validate()
        .map_err(|e| Failure::usage(e.to_string()))?;
    let app = open_app(config_path)?;
    let auth = if config.auth_required() {
        format!("API key required ({} key(s))", config.api_keys.len())
    } else {
        "no authentication (loopback only)".to_owned()
    };
    let app = Arc::new(app);
    // Discover MCP tools while the server starts, so the first run does not wait for them.
    let mcp = app.mcp.clone();
    tokio::spawn(async move {
        mcp.refresh().await;
    });
    let state = Server::new(app.clone(), config.clone()).into_state();
    state.reconcile().await.map_err(|e| Failure {
        code: exit::STORE,
        message: e.to_string(),
    })?;
    let listener = tokio::net::TcpListener::bind(config.addr())
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", config.addr())))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::usage(e.to_string()))?;
    warn_user(&format!(
        "serving on http://{addr} (API under /api and /api/langgraph; {auth})"
    ));
    state
        .serve(listener, shutdown_signal())
        .await
        .map_err(|e| Failure {
            code: exit::RUN_FAILED,
            message: format!("server error: {e}"),
        })?;
    // Write pending long-term memory updates before exiting (bounded by
    // memory.shutdown_flush_timeout_seconds).
    if !app.flush_memory().await {
        warn_user("memory: not every pending update was written before shutdown");
    }
    app.close_store().await;
    Ok(exit::OK)
}
