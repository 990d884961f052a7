//! McpRouting (chain L11 on the lead, U4 on subagents; before_model): with `tool_search`
//! enabled, deferred MCP tools whose routing is `mode: prefer` with keywords are promoted when
//! a keyword occurs in the latest real user message, so their schemas reach the model in the
//! same call without a `tool_search` round trip.
//!
//! Matching is case-folded substring search over the user's original text; matches are ranked
//! by priority (high first), then name, and at most `tool_search.auto_promote_top_k` are
//! promoted. The update writes `promoted{catalog_hash, names}`, which the reducer unions with
//! earlier promotions. It never runs tools and logs no user text. Must precede
//! DeferredToolFilter, which reads the promotions ([`assert_before_filter`]).

use antler_protocol::{markers, Message, Promoted, StateUpdate, ThreadState};
use antler_runtime::{HookOutput, HookSet, Middleware, RunContext};
use async_trait::async_trait;

use crate::hook::HookResult;

/// One indexed deferred tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingEntry {
    pub name: String,
    pub priority: i64,
    /// Trimmed, non-empty, case-folded.
    pub keywords: Vec<String>,
}

/// Auto-promotes deferred MCP tools from routing keywords.
#[derive(Clone, Debug)]
pub struct McpRoutingMiddleware {
    index: Vec<RoutingEntry>,
    catalog_hash: String,
    top_k: usize,
}

impl McpRoutingMiddleware {
    /// `None` when nothing is indexed (entries without keywords are dropped).
    pub fn new(
        entries: impl IntoIterator<Item = (String, i64, Vec<String>)>,
        catalog_hash: impl Into<String>,
        top_k: usize,
    ) -> Option<Self> {
        let index: Vec<RoutingEntry> = entries
            .into_iter()
            .filter_map(|(name, priority, keywords)| {
                let keywords: Vec<String> = keywords
                    .iter()
                    .map(|k| k.trim().to_lowercase())
                    .filter(|k| !k.is_empty())
                    .collect();
                (!name.is_empty() && !keywords.is_empty()).then_some(RoutingEntry {
                    name,
                    priority,
                    keywords,
                })
            })
            .collect();
        if index.is_empty() {
            return None;
        }
        Some(McpRoutingMiddleware {
            index,
            catalog_hash: catalog_hash.into(),
            top_k: top_k.clamp(1, 5),
        })
    }

    /// The names promoted for `state`, best first.
    pub fn matches(&self, state: &ThreadState) -> Vec<String> {
        let Some(Message::Human(h)) = state
            .messages
            .iter()
            .rev()
            .find(|m| m.is_real_user_message())
        else {
            return Vec::new();
        };
        let text = match h.additional_kwargs.get(markers::ORIGINAL_USER_CONTENT) {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => h.content.text(),
        };
        if text.is_empty() {
            return Vec::new();
        }
        let haystack = text.to_lowercase();
        let mut hits: Vec<&RoutingEntry> = self
            .index
            .iter()
            .filter(|e| e.keywords.iter().any(|k| haystack.contains(k.as_str())))
            .collect();
        hits.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        hits.into_iter()
            .take(self.top_k)
            .map(|e| e.name.clone())
            .collect()
    }
}

#[async_trait]
impl Middleware for McpRoutingMiddleware {
    middleware_identity!("McpRoutingMiddleware", HookSet::BEFORE_MODEL, deferrable: HookSet::BEFORE_MODEL);

    async fn before_model(&self, state: &ThreadState, _run: &RunContext) -> HookResult {
        let names = self.matches(state);
        if names.is_empty() {
            return Ok(HookOutput::none());
        }
        tracing::debug!(
            count = names.len(),
            "auto-promoted deferred MCP tool schemas"
        );
        Ok(HookOutput::update(StateUpdate {
            promoted: Some(Promoted {
                catalog_hash: Some(self.catalog_hash.clone()),
                names,
            }),
            ..Default::default()
        }))
    }
}

/// DeerFlow's build-time check: routing must run before the deferred filter.
pub fn assert_before_filter(names: &[&str]) -> Result<(), String> {
    let routing = names.iter().position(|n| *n == "McpRoutingMiddleware");
    let filter = names
        .iter()
        .position(|n| *n == "DeferredToolFilterMiddleware");
    match (routing, filter) {
        (Some(r), Some(f)) if r > f => Err(format!(
            "McpRoutingMiddleware must be installed before DeferredToolFilterMiddleware (routing index {r}, deferred filter index {f})"
        )),
        _ => Ok(()),
    }
}
