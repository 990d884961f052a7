//! ToolErrorHandling (chain S14, wrap_tool): any tool failure becomes an error tool message and
//! the run continues. Failures carry a `deerflow_tool_meta` classification; with
//! [`ToolErrorHandlingMiddleware::with_result_meta`] (set when ToolProgress, its only reader,
//! is on) every other tool message gets one too.
//!
//! Sits inside guardrails and the bash audit and outside Clarification, so every outer wrapper
//! still sees the raw call. Only `Err` is converted: results and commands (the clarification
//! stop) pass through unchanged — the error type cannot carry them.

use antler_protocol::tool_meta::{self, ToolMeta};
use antler_protocol::{ToolMessage, ToolStatus};
use antler_runtime::{HookSet, Middleware, ToolCallRequest, ToolError, ToolNext, ToolOutcome};
use async_trait::async_trait;

use crate::hook::ToolResult;

/// Longest failure detail kept in the message.
const MAX_DETAIL_CHARS: usize = 500;

#[derive(Debug, Default)]
pub struct ToolErrorHandlingMiddleware {
    result_meta: bool,
}

impl ToolErrorHandlingMiddleware {
    pub fn new() -> Self {
        ToolErrorHandlingMiddleware::default()
    }

    /// Also classify successful and error-text results (spec 30 "Normalization").
    pub fn with_result_meta(mut self, on: bool) -> Self {
        self.result_meta = on;
        self
    }
}

fn error_kind(e: &ToolError) -> &'static str {
    match e {
        ToolError::InvalidArguments(_) => "ValidationError",
        ToolError::Failed(_) => "ToolException",
        ToolError::Io(_) => "OSError",
        ToolError::InvalidCommand(..) => "InvalidCommand",
    }
}

/// The message the model reads for a failed tool call.
pub fn failure_message(tool: &str, e: &ToolError) -> String {
    let kind = error_kind(e);
    let mut detail = e.to_string();
    if detail.is_empty() {
        detail = kind.to_owned();
    }
    if detail.chars().count() > MAX_DETAIL_CHARS {
        detail = detail
            .chars()
            .take(MAX_DETAIL_CHARS - 3)
            .collect::<String>()
            + "...";
    }
    // One line: the reason, then the recovery hint.
    let detail = detail.replace('\n', " ");
    format!(
        "Error: Tool '{tool}' failed with {kind}: {detail}. Continue with available context, or choose an alternative tool."
    )
}

#[async_trait]
impl Middleware for ToolErrorHandlingMiddleware {
    middleware_identity!("ToolErrorHandlingMiddleware", HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        // What an error result needs of the call (not a copy of its arguments).
        let name = req.call.name.clone();
        let id = crate::hook::answer_id(&req.call, "missing_tool_call_id");
        match next.run(req).await {
            Ok(ToolOutcome::Message(mut msg)) if self.result_meta => {
                tool_meta::normalize(&mut msg);
                Ok(ToolOutcome::Message(msg))
            }
            Ok(outcome) => Ok(outcome),
            Err(e) => {
                tracing::warn!(tool = %name, error = %e, "tool failed; returning an error result");
                let mut msg = ToolMessage::error(id, failure_message(&name, &e)).with_name(name);
                msg.id = Some(uuid::Uuid::new_v4().to_string());
                msg.status = ToolStatus::Error;
                ToolMeta::error(&format!("{}: {e}", error_kind(&e)), "exception").stamp(&mut msg);
                Ok(ToolOutcome::Message(msg))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn long_details_are_cut() {
        let msg = failure_message("t", &ToolError::Failed("x".repeat(2000)));
        assert!(msg.contains(&format!("{}...", "x".repeat(497))));
        assert!(!msg.contains(&"x".repeat(498)));
    }
}
