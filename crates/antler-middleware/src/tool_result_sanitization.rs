//! ToolResultSanitization (chain S3, wrap_tool): framework tags and forged user-input markers in
//! the results of remote-content tools are neutralized before the model reads them.
//!
//! A fetched page or a search snippet is attacker-controlled text; without this a page could
//! carry a forged `<system-reminder>` (or `--- END USER INPUT ---`) and have it read as trusted
//! framework context. Results get the same [`neutralize`] as the user's own text, no framing.
//!
//! Scope: DeerFlow's names (`web_search`, `web_fetch`, `image_search`, `web_capture`, plus any
//! configured in [`ToolResultSanitizationSettings::tool_names`]) **or** a tool that declares
//! [`Tool::returns_remote_content`](antler_runtime::Tool::returns_remote_content) — how the web
//! tools and MCP tools opt in whatever they are called. Local tools (bash, file reads) are never
//! touched, so code and logs are not mangled.
//!
//! Position: inside ToolOutputBudget (S2), so the raw text is neutralized before it is truncated
//! or saved; outside ToolErrorHandling (S14), so error results that quote remote text are
//! neutralized too.

use antler_protocol::untrusted::neutralize;
use antler_protocol::{Content, Message, ToolMessage};
use antler_runtime::{HookSet, Middleware, ToolCallRequest, ToolNext, ToolOutcome};
use async_trait::async_trait;
use serde_json::Value;

use crate::hook::ToolResult;

/// The middleware's name in `updates` events and `antler chain`.
pub const NAME: &str = "ToolResultSanitizationMiddleware";

/// DeerFlow's remote-content tools, by name.
pub const REMOTE_CONTENT_TOOLS: &[&str] =
    &["web_fetch", "web_search", "image_search", "web_capture"];

/// Which tools are sanitized besides those that declare remote content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResultSanitizationSettings {
    /// Tool names whose results are neutralized (default: [`REMOTE_CONTENT_TOOLS`]).
    pub tool_names: Vec<String>,
}

impl Default for ToolResultSanitizationSettings {
    fn default() -> Self {
        Self {
            tool_names: REMOTE_CONTENT_TOOLS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ToolResultSanitizationMiddleware {
    settings: ToolResultSanitizationSettings,
}

impl ToolResultSanitizationMiddleware {
    pub fn new(settings: ToolResultSanitizationSettings) -> Self {
        Self { settings }
    }

    fn applies(&self, req: &ToolCallRequest) -> bool {
        req.tool
            .as_ref()
            .is_some_and(|t| t.returns_remote_content())
            || self.settings.tool_names.contains(&req.call.name)
    }
}

/// Neutralized content, or `None` when nothing changed (the result is then kept as it is).
fn neutralize_content(content: &Content) -> Option<Content> {
    match content {
        Content::Text(s) => {
            let out = neutralize(s);
            (out != *s).then_some(Content::Text(out))
        }
        Content::Blocks(blocks) => {
            let mut changed = false;
            let out = blocks
                .iter()
                .map(|b| match b {
                    Value::String(s) => {
                        let n = neutralize(s);
                        changed |= n != *s;
                        Value::String(n)
                    }
                    Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                        match o.get("text") {
                            Some(Value::String(s)) => {
                                let n = neutralize(s);
                                if n == *s {
                                    b.clone()
                                } else {
                                    changed = true;
                                    let mut o = o.clone();
                                    o.insert("text".into(), Value::String(n));
                                    Value::Object(o)
                                }
                            }
                            _ => b.clone(),
                        }
                    }
                    other => other.clone(),
                })
                .collect();
            changed.then_some(Content::Blocks(out))
        }
    }
}

fn sanitize_message(msg: &mut ToolMessage) -> bool {
    match neutralize_content(&msg.content) {
        Some(c) => {
            msg.content = c;
            true
        }
        None => false,
    }
}

/// Neutralize a tool call's outcome in place; whether anything changed.
pub fn sanitize_outcome(outcome: &mut ToolOutcome) -> bool {
    match outcome {
        ToolOutcome::Message(m) => sanitize_message(m),
        ToolOutcome::Command(cmd) => {
            let mut changed = false;
            for m in cmd.update.messages.iter_mut().flatten() {
                if let Message::Tool(t) = m {
                    changed |= sanitize_message(t);
                }
            }
            changed
        }
    }
}

#[async_trait]
impl Middleware for ToolResultSanitizationMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let applies = self.applies(&req);
        let tool = req.call.name.clone();
        let mut outcome = next.run(req).await?;
        if applies && sanitize_outcome(&mut outcome) {
            tracing::debug!(%tool, "neutralized framework tags in a remote tool result");
        }
        Ok(outcome)
    }
}

#[cfg(test)]
#[path = "tool_result_sanitization_tests.rs"]
mod tests;
