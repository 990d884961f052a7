//! `antler mcp list [--output json]`: the MCP servers of `extensions_config.json`, whether
//! each started, and the tools the agent will be offered — discovered now, exactly as a run
//! would (each server bounded by its `session_init_timeout`).

use antler_agent::App;
use clap::Subcommand;
use serde_json::json;

use crate::render::OutputFormat;
use crate::{exit, Failure};

#[derive(Subcommand)]
pub(crate) enum McpCmd {
    /// Servers, their status and their tools (names as the model sees them).
    List {
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
}

#[allow(clippy::print_stdout)]
pub(crate) async fn run(app: &App, cmd: McpCmd) -> Result<u8, Failure> {
    let McpCmd::List { output } = cmd;
    let catalog = app.mcp.refresh().await;
    let deferred = app.config.tool_search.enabled && !catalog.tools.is_empty();
    if output != OutputFormat::Text {
        let v = json!({
            "path": catalog.path,
            "error": catalog.error,
            "tool_search": deferred,
            "servers": catalog.servers,
        });
        println!("{v}");
        return Ok(exit::OK);
    }
    match &catalog.path {
        Some(p) => println!("extensions config: {}", p.display()),
        None => println!("no extensions_config.json (or mcp_config.json) found: no MCP servers"),
    }
    if let Some(e) = &catalog.error {
        println!("error: {e}");
    }
    for s in &catalog.servers {
        let state = match &s.state {
            antler_mcp::ServerState::Disabled => "disabled".to_owned(),
            antler_mcp::ServerState::Ready => format!(
                "ready, {} tool(s) in {} ms{}",
                s.tools.len(),
                s.elapsed_ms,
                if deferred {
                    " (deferred: tool_search)"
                } else {
                    ""
                }
            ),
            antler_mcp::ServerState::Failed(e) => format!("failed: {e}"),
            antler_mcp::ServerState::Invalid(e) => format!("invalid: {e}"),
        };
        println!("{:<20} {:<6} {state}", s.name, s.transport);
        for t in &s.tools {
            println!("    {t}");
        }
        for t in &s.dropped_tools {
            println!("    (dropped, bad name) {t:?}");
        }
    }
    Ok(exit::OK)
}
