//! MCP tools in the agents' tool sets (spec 50 §4.0 step 3, §4.14, §4.17).
//!
//! From one snapshot of the MCP catalog: the tools (after the built-ins, before `task`, so
//! subagents inherit them as their types allow); with `tool_search.enabled`, the deferred set
//! (every MCP tool), the `tool_search` tool over it, the `<available-deferred-tools>` prompt
//! section, McpRouting's keyword index, and `<mcp_routing_hints>`.

use std::sync::Arc;

use antler_config::Config;
use antler_mcp::{Catalog, RoutingMode};
use antler_runtime::Tool;
use antler_tools::tool_search::{deferred_tools_prompt_section, ToolSearchTool};

/// Deferred-tool wiring for one agent build.
pub struct Deferred {
    pub search: Arc<ToolSearchTool>,
    pub names: Vec<String>,
    pub hash: String,
    /// `(name, priority, keywords)` of deferred tools with `routing.mode: prefer`.
    pub routing: Vec<(String, i64, Vec<String>)>,
}

/// What the MCP catalog contributes to one agent build.
pub struct McpSetup {
    pub tools: Vec<Arc<dyn Tool>>,
    pub deferred: Option<Deferred>,
    /// `<available-deferred-tools>` and `<mcp_routing_hints>`, blank-line separated (empty
    /// when neither applies).
    pub prompt_section: String,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn keyword_list(k: &[String]) -> String {
    match k {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{}, or {last}", init.join(", ")),
    }
}

/// DeerFlow's `<mcp_routing_hints>`: for each `prefer` tool with keywords (priority high first,
/// then name), when to prefer it — through `tool_search` first when it is deferred.
pub fn routing_hints(catalog: &Catalog, deferred: bool) -> String {
    let mut hints: Vec<(i64, &str, Vec<String>)> = catalog
        .tools
        .iter()
        .filter(|t| t.routing().mode == RoutingMode::Prefer && !t.routing().keywords.is_empty())
        .map(|t| {
            (
                t.routing().priority,
                t.name(),
                t.routing().keywords.iter().map(|k| escape(k)).collect(),
            )
        })
        .collect();
    if hints.is_empty() {
        return String::new();
    }
    hints.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let mut lines = vec!["<mcp_routing_hints>".to_owned()];
    for (_, name, keywords) in hints {
        let name = escape(name);
        lines.push(format!(
            "When the user's request involves {}:",
            keyword_list(&keywords)
        ));
        if deferred {
            lines.push(format!(
                "  use `tool_search` to fetch `{name}`, then prefer that MCP tool."
            ));
        } else {
            lines.push(format!("  prefer the `{name}` tool."));
        }
    }
    lines.push("</mcp_routing_hints>".to_owned());
    lines.join("\n")
}

/// The MCP part of an agent build from `catalog`.
pub fn setup(config: &Config, catalog: &Catalog) -> McpSetup {
    let tools = catalog.dyn_tools();
    let deferred = (config.tool_search.enabled && !tools.is_empty()).then(|| {
        let specs = tools.iter().map(|t| t.spec().clone()).collect();
        let search = Arc::new(ToolSearchTool::new(specs));
        let routing = catalog
            .tools
            .iter()
            .filter(|t| t.routing().mode == RoutingMode::Prefer)
            .map(|t| {
                (
                    t.name().to_owned(),
                    t.routing().priority,
                    t.routing().keywords.clone(),
                )
            })
            .collect();
        Deferred {
            names: search.deferred_names(),
            hash: search.catalog_hash().to_owned(),
            search,
            routing,
        }
    });
    let mut sections = Vec::new();
    if let Some(d) = &deferred {
        sections.push(deferred_tools_prompt_section(&d.names));
    }
    let hints = routing_hints(catalog, deferred.is_some());
    if !hints.is_empty() {
        sections.push(hints);
    }
    McpSetup {
        tools,
        deferred,
        prompt_section: sections.join("\n\n"),
    }
}
