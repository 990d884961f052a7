//! Structured notifications of what a run does — for the run journal, usage accounting and
//! metrics. Observers are never part of the model's context (seed 002: the journal is not fed
//! to the model). They are called inline and must not block: buffer, then flush elsewhere.

use std::time::Duration;

use antler_models::ModelError;
use antler_protocol::{AiMessage, StateUpdate, ToolCall, ToolMessage};
use serde_json::Value;

use crate::agent::RunStatus;
use crate::context::RunContext;

/// One thing that happened in a run.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// The run was admitted and its input applied.
    RunStart,
    /// A model answered. `caller` is `lead_agent`, `subagent:<type>` or `middleware:<name>`.
    ModelResponse {
        caller: &'a str,
        model: &'a str,
        /// Messages sent (not counting the system prompt).
        request_messages: usize,
        response: &'a AiMessage,
        latency: Duration,
    },
    /// A model call failed (each failed attempt of a retried call is reported).
    ModelError {
        caller: &'a str,
        model: &'a str,
        error: &'a ModelError,
        latency: Duration,
    },
    /// A tool call finished with this message (after every wrapper).
    ToolResult {
        call: &'a ToolCall,
        message: &'a ToolMessage,
        duration: Duration,
    },
    /// A node wrote to the state.
    Update {
        node: &'a str,
        update: &'a StateUpdate,
    },
    /// A middleware did something worth recording (`summarize`, `loop_warning`, …).
    Middleware {
        name: &'a str,
        action: &'a str,
        payload: &'a Value,
    },
    /// The run ended.
    RunEnd {
        status: RunStatus,
        error: Option<&'a str>,
    },
}

/// Receives a run's [`RunEvent`]s.
pub trait RunObserver: Send + Sync {
    fn on_event(&self, run: &RunContext, event: &RunEvent<'_>);
}
