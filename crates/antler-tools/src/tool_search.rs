//! `tool_search` (spec 50 §4.14): deferred tool discovery.
//!
//! With `tool_search.enabled`, MCP tools stay executable but their schemas are withheld from the
//! model; the system prompt lists only their names (see [`deferred_tools_prompt_section`]). The
//! model calls `tool_search` to fetch the full schemas of the tools it needs, and the call
//! promotes them: the result is a `Command` writing `promoted{catalog_hash, names}`, which the
//! DeferredToolFilter middleware reads before every model call. The catalog hash scopes the
//! promotion, so a persisted promotion never exposes a tool whose schema has since changed.
//!
//! Query forms (DeerFlow's): `select:a,b` → exactly those names (no cap); `+req rest` → names
//! containing `req` (case-insensitive), ranked by hits of the regex `rest`; anything else → a
//! case-insensitive regex (an invalid one is matched literally) over `"{name} {description}"`,
//! name hits ranked first. Ranked forms return at most [`MAX_RESULTS`].

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::{Message, Promoted, StateUpdate, ToolMessage, ToolSpec};
use antler_runtime::{Command, ToolContext, ToolError, ToolOutput, TypedSpec, TypedTool};
use async_trait::async_trait;
use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Most tools a ranked search returns.
pub const MAX_RESULTS: usize = 5;

/// Range of `tool_search.auto_promote_top_k`.
pub const AUTO_PROMOTE_TOP_K_MIN: i64 = 1;
pub const AUTO_PROMOTE_TOP_K_MAX: i64 = 5;

/// Clamp `tool_search.auto_promote_top_k` (MCP routing auto-promotion breadth) to 1–5.
pub fn clamp_auto_promote_top_k(value: i64) -> usize {
    value.clamp(AUTO_PROMOTE_TOP_K_MIN, AUTO_PROMOTE_TOP_K_MAX) as usize
}

/// The deferred tools of one agent build: immutable, searchable, identified by a hash.
#[derive(Clone, Debug)]
pub struct DeferredCatalog {
    tools: Vec<Arc<ToolSpec>>,
    hash: String,
}

impl DeferredCatalog {
    /// A catalog over `tools` (kept in the given order; search ties keep it).
    pub fn new(tools: Vec<Arc<ToolSpec>>) -> Self {
        let hash = catalog_hash(&tools);
        DeferredCatalog { tools, hash }
    }

    /// First 16 hex chars of SHA-256 over the canonical JSON of `[{name, schema}]` sorted by
    /// name.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools matching `query`, best first.
    pub fn search(&self, query: &str) -> Vec<Arc<ToolSpec>> {
        let query = query.trim();
        if query.is_empty() {
            return Vec::new();
        }
        if let Some(rest) = query.strip_prefix("select:") {
            // Explicit names: no cap, or schemas the model asked for would silently go missing.
            let wanted: HashSet<&str> = rest.split(',').map(str::trim).collect();
            return self
                .tools
                .iter()
                .filter(|t| wanted.contains(t.name.as_str()))
                .cloned()
                .collect();
        }
        if let Some(rest) = query.strip_prefix('+') {
            let mut parts = rest.trim_start().splitn(2, char::is_whitespace);
            let Some(required) = parts.next().filter(|s| !s.is_empty()) else {
                return Vec::new();
            };
            let required = required.to_lowercase();
            let mut candidates: Vec<&Arc<ToolSpec>> = self
                .tools
                .iter()
                .filter(|t| t.name.to_lowercase().contains(&required))
                .collect();
            if let Some(terms) = parts.next().map(str::trim).filter(|s| !s.is_empty()) {
                if let Some(re) = compile(terms) {
                    // Stable: equal scores keep catalog order.
                    candidates
                        .sort_by_key(|t| std::cmp::Reverse(re.find_iter(&searchable(t)).count()));
                }
            }
            return candidates.into_iter().take(MAX_RESULTS).cloned().collect();
        }
        let Some(re) = compile(query) else {
            return Vec::new();
        };
        let mut scored: Vec<(u8, &Arc<ToolSpec>)> = self
            .tools
            .iter()
            .filter(|t| re.is_match(&searchable(t)))
            .map(|t| (if re.is_match(&t.name) { 2 } else { 1 }, t))
            .collect();
        scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
        scored
            .into_iter()
            .take(MAX_RESULTS)
            .map(|(_, t)| t.clone())
            .collect()
    }
}

fn searchable(t: &ToolSpec) -> String {
    format!("{} {}", t.name, t.description)
}

/// Case-insensitive regex; a pattern that does not compile is matched literally (queries come
/// from the model and must never fail the call). `None` only when even the literal exceeds the
/// regex size limit — then nothing matches.
fn compile(pattern: &str) -> Option<Regex> {
    let build = |p: &str| RegexBuilder::new(p).case_insensitive(true).build();
    build(pattern)
        .or_else(|_| build(&regex::escape(pattern)))
        .ok()
}

/// The OpenAI function schema of a tool (`{name, description, parameters}`), as `tool_search`
/// returns it.
fn function_schema(t: &ToolSpec) -> Value {
    json!({"name": t.name, "description": t.description, "parameters": t.parameters})
}

/// Canonical JSON in Python's `json.dumps(sort_keys=True, ensure_ascii=False)` form (keys sorted
/// at every level, `", "` and `": "` separators), so the hash matches DeerFlow's for the same
/// schemas.
fn canonical_json(v: &Value) -> String {
    antler_runtime::canonical_json(v, (", ", ": "))
}

/// The catalog hash of a set of deferred tools (order-independent).
pub fn catalog_hash(tools: &[Arc<ToolSpec>]) -> String {
    let mut sorted: Vec<&Arc<ToolSpec>> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let canon = Value::Array(
        sorted
            .iter()
            .map(|t| json!({"name": t.name, "schema": function_schema(t)}))
            .collect(),
    );
    let blob = canonical_json(&canon);
    let digest = Sha256::digest(blob.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// `<available-deferred-tools>` for the system prompt: the sorted names, HTML-escaped (names come
/// from external MCP servers and must not close the block), one per line. Empty without names.
pub fn deferred_tools_prompt_section<S: AsRef<str>>(names: &[S]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let mut sorted: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    sorted.sort_unstable();
    let body: Vec<String> = sorted.iter().map(|n| escape_text(n)).collect();
    format!(
        "<available-deferred-tools>\n{}\n</available-deferred-tools>",
        body.join("\n")
    )
}

/// HTML text escaping (`&`, `<`, `>`), as Python's `html.escape(quote=False)`.
fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `tool_search` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    /// What to look for: `select:name1,name2`, `+required rest`, or keywords (a regular expression).
    query: String,
}

/// The `tool_search` tool over one deferred catalog.
pub struct ToolSearchTool {
    spec: TypedSpec<Args>,
    catalog: DeferredCatalog,
}

impl ToolSearchTool {
    /// A `tool_search` over the deferred tools' specs (the MCP tools whose schemas are hidden).
    pub fn new(deferred: Vec<Arc<ToolSpec>>) -> Self {
        ToolSearchTool {
            spec: TypedSpec::new(
                "tool_search",
                "Fetch the full schemas of deferred tools so you can call them.\n\n\
Deferred tools are listed by name only in <available-deferred-tools>; until you fetch a tool \
here you cannot call it. Matching tools are returned with their complete schemas and become \
callable right away.\n\n\
Query forms:\n\
  - \"select:Read,Edit\" -- these exact tools, by name\n\
  - \"notebook jupyter\" -- keyword search, best matches first (at most 5)\n\
  - \"+slack send\" -- \"slack\" must be in the name, the remaining words rank the results",
            ),
            catalog: DeferredCatalog::new(deferred),
        }
    }

    pub fn catalog(&self) -> &DeferredCatalog {
        &self.catalog
    }

    /// The hash under which this tool records promotions.
    pub fn catalog_hash(&self) -> &str {
        self.catalog.hash()
    }

    /// Names of the deferred tools (for the filter middleware and the prompt section).
    pub fn deferred_names(&self) -> Vec<String> {
        self.catalog.names()
    }
}

#[async_trait]
impl TypedTool for ToolSearchTool {
    type Args = Args;

    antler_runtime::typed_spec!(spec);

    async fn invoke(&self, a: Args, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let matched = self.catalog.search(&a.query);
        let (content, names) = if matched.is_empty() {
            (format!("No tools found matching: {}", a.query), Vec::new())
        } else {
            let schemas: Vec<Value> = matched.iter().map(|t| function_schema(t)).collect();
            let text = serde_json::to_string_pretty(&schemas)
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            (text, matched.iter().map(|t| t.name.clone()).collect())
        };
        let message = ToolMessage::new(ctx.call_id, content).with_name("tool_search");
        let update = StateUpdate {
            promoted: Some(Promoted {
                catalog_hash: Some(self.catalog.hash().to_owned()),
                names,
            }),
            messages: Some(vec![Message::Tool(message)]),
            ..Default::default()
        };
        Ok(ToolOutput::Command(Command { update, goto: None }))
    }
}
