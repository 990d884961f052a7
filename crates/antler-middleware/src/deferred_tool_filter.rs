//! DeferredToolFilter (chain L12 on the lead, U5 on subagents; wrap_model + wrap_tool): with
//! `tool_search` enabled, deferred (MCP) tools stay registered and executable, but their schemas
//! are withheld from the model until `tool_search` (or MCP routing) promotes them.
//!
//! Promotions live in `state.promoted`, scoped by the catalog hash of the build's deferred set:
//! a promotion recorded under another hash (the tool set changed since) promotes nothing. A call
//! to a deferred tool that is not promoted is answered with an error telling the model to search
//! first; the tool never runs. An empty deferred set makes the middleware a pass-through.
//!
//! Sits after McpRouting (whose promotions it must see) and before the safety/clarification
//! tail; it only reads state, so its position among hooks does not matter otherwise.

use std::collections::HashSet;

use antler_protocol::{ThreadState, ToolMessage, ToolStatus};
use antler_runtime::{
    HookSet, Middleware, ModelNext, ModelRequest, ToolCallRequest, ToolNext, ToolOutcome,
};
use async_trait::async_trait;

use crate::hook::{ModelResult, ToolResult};

/// The middleware's name in chain listings.
pub const NAME: &str = "DeferredToolFilterMiddleware";

/// Hides unpromoted deferred tools from the model and refuses calls to them.
#[derive(Clone, Debug)]
pub struct DeferredToolFilterMiddleware {
    deferred: HashSet<String>,
    catalog_hash: Option<String>,
}

/// The error a model gets for calling a deferred tool before promoting it.
pub fn not_promoted_message(name: &str) -> String {
    format!(
        "Error: Tool '{name}' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry."
    )
}

impl DeferredToolFilterMiddleware {
    /// `deferred_names`: the build's deferred tools; `catalog_hash`: the hash `tool_search`
    /// records promotions under.
    pub fn new(
        deferred_names: impl IntoIterator<Item = String>,
        catalog_hash: Option<String>,
    ) -> Self {
        DeferredToolFilterMiddleware {
            deferred: deferred_names.into_iter().collect(),
            catalog_hash,
        }
    }

    /// Whether `name` is deferred and not promoted under the current catalog hash.
    pub fn is_hidden(&self, name: &str, state: &ThreadState) -> bool {
        if !self.deferred.contains(name) {
            return false;
        }
        match &state.promoted {
            Some(p) if p.catalog_hash == self.catalog_hash => !p.names.iter().any(|n| n == name),
            _ => true,
        }
    }
}

#[async_trait]
impl Middleware for DeferredToolFilterMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL | HookSet::WRAP_TOOL);

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if !self.deferred.is_empty() {
            let state = req.state.clone();
            let before = req.tools.len();
            req.tools.retain(|t| !self.is_hidden(&t.name, &state));
            if req.tools.len() < before {
                tracing::debug!(
                    hidden = before - req.tools.len(),
                    "deferred tool schemas withheld from the model"
                );
            }
        }
        next.run(req).await
    }

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let name = req.call.name.as_str();
        if self.deferred.is_empty() || name.is_empty() || !self.is_hidden(name, &req.state) {
            return next.run(req).await;
        }
        let id = crate::hook::answer_id(&req.call, "missing_tool_call_id");
        let mut msg = ToolMessage::error(id, not_promoted_message(name)).with_name(name);
        msg.status = ToolStatus::Error;
        msg.id = Some(uuid::Uuid::new_v4().to_string());
        Ok(ToolOutcome::Message(msg))
    }
}
