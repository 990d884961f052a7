//! SubagentLimit (chain L14, lead only when subagents are enabled; after_model): hard limits on
//! `task` calls, enforced on the AI message rather than asked of the model in the prompt.
//!
//! - Per response: at most `max_concurrent` `task` calls survive (the first ones, by position);
//!   `max_concurrent` is the run option `max_concurrent_subagents` clamped to [2, 4] (the seed's
//!   range; DeerFlow today allows 1).
//! - Per run: at most `max_total` delegations (run option `max_total_subagents`, else
//!   `subagents.max_total_per_run`; default 6, clamped to [1, 50]). Earlier delegations of this
//!   run are counted from the `delegations` ledger entries tagged with the run id. When the
//!   budget is spent, every `task` call is dropped, a visible notice is appended to the message
//!   and the run's `stop_reason` becomes `subagent_limit_capped`.
//!
//! Other tool calls are never touched. The message is rewritten in place (same id) with
//! [`AiMessage::set_tool_calls`], so the provider-raw tool calls and `finish_reason` agree with
//! the structured list. after_model hooks run in reverse chain order, so this runs before
//! DurableContext records the current message's dispatches: only earlier ones count.

use std::collections::HashSet;

use antler_protocol::{AiMessage, Content, Message, StateUpdate, ThreadState};
use antler_runtime::{keys, HookOutput, HookSet, Middleware, RunContext};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::hook::HookResult;

/// Fewest `task` calls kept per response (the seed's floor).
pub const MIN_CONCURRENT_SUBAGENTS: usize = 2;
/// Most `task` calls kept per response.
pub const MAX_CONCURRENT_SUBAGENTS: usize = 4;
/// Default per-response limit (`max_concurrent_subagents`).
pub const DEFAULT_CONCURRENT_SUBAGENTS: usize = 3;
/// Range and default of the per-run total.
pub const MIN_TOTAL_SUBAGENTS: usize = 1;
pub const MAX_TOTAL_SUBAGENTS: usize = 50;
pub const DEFAULT_TOTAL_SUBAGENTS: usize = 6;

/// The run option that overrides the per-run total.
pub const MAX_TOTAL_OPTION: &str = "max_total_subagents";
/// `stop_reason` set when the per-run total is exhausted.
pub const STOP_REASON: &str = "subagent_limit_capped";

/// Appended to the AI message when the run's delegation budget is spent.
pub const LIMIT_REACHED_NOTICE: &str = "[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Continue using the subagent results already collected, execute remaining simple work directly, or summarize the remaining work instead of launching more subagents.";

/// Clamp a per-response limit to [2, 4].
pub fn clamp_concurrency(value: i64) -> usize {
    value.clamp(
        MIN_CONCURRENT_SUBAGENTS as i64,
        MAX_CONCURRENT_SUBAGENTS as i64,
    ) as usize
}

/// Clamp a per-run total to [1, 50].
pub fn clamp_total(value: i64) -> usize {
    value.clamp(MIN_TOTAL_SUBAGENTS as i64, MAX_TOTAL_SUBAGENTS as i64) as usize
}

/// Truncates excess `task` calls per response and per run.
#[derive(Clone, Debug)]
pub struct SubagentLimitMiddleware {
    max_concurrent: Option<usize>,
    max_total: usize,
}

default_is_new!(SubagentLimitMiddleware);

impl SubagentLimitMiddleware {
    /// Per-response limit from the run option `max_concurrent_subagents`, per-run total 6.
    pub fn new() -> Self {
        SubagentLimitMiddleware {
            max_concurrent: None,
            max_total: DEFAULT_TOTAL_SUBAGENTS,
        }
    }

    /// The per-run total when the run gives none (`subagents.max_total_per_run`); clamped.
    pub fn with_max_total(mut self, max_total: i64) -> Self {
        self.max_total = clamp_total(max_total);
        self
    }

    /// A fixed per-response limit instead of the run option; clamped.
    pub fn with_max_concurrent(mut self, max_concurrent: i64) -> Self {
        self.max_concurrent = Some(clamp_concurrency(max_concurrent));
        self
    }

    /// The per-response limit for a run.
    pub fn concurrency_for(&self, run: &RunContext) -> usize {
        self.max_concurrent.unwrap_or_else(|| {
            clamp_concurrency(
                i64::try_from(run.options.max_concurrent_subagents).unwrap_or(i64::MAX),
            )
        })
    }

    /// The per-run total for a run.
    pub fn total_for(&self, run: &RunContext) -> usize {
        run.options
            .extra
            .get(MAX_TOTAL_OPTION)
            .and_then(Value::as_i64)
            .map(clamp_total)
            .unwrap_or(self.max_total)
    }

    /// The rewritten last AI message when it carries more `task` calls than allowed.
    pub fn truncate(&self, state: &ThreadState, run: &RunContext) -> Option<AiMessage> {
        let Some(Message::Ai(last)) = state.messages.last() else {
            return None;
        };
        let task_positions: Vec<usize> = last
            .tool_calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.name == "task")
            .map(|(i, _)| i)
            .collect();
        if task_positions.is_empty() {
            return None;
        }
        let run_id = Some(run.run_id.as_str()).filter(|r| !r.is_empty());
        if run_id.is_none() {
            tracing::warn!("subagent limit has no run id; counting every delegation of the thread as spent in this run");
        }
        let prior = prior_delegations(state, run_id);
        let max_total = self.total_for(run);
        let max_concurrent = self.concurrency_for(run);
        let remaining = max_total.saturating_sub(prior);
        let allowed = max_concurrent.min(remaining);
        if task_positions.len() <= allowed {
            return None;
        }
        let drop: HashSet<usize> = task_positions[allowed..].iter().copied().collect();
        tracing::warn!(
            dropped = drop.len(),
            max_concurrent,
            max_total,
            prior,
            "truncated excess task calls"
        );
        let kept = last
            .tool_calls
            .iter()
            .enumerate()
            .filter(|(i, _)| !drop.contains(i))
            .map(|(_, c)| c.clone())
            .collect();
        let mut msg = last.clone();
        msg.set_tool_calls(kept);
        if remaining == 0 {
            run.set(&keys::STOP_REASON, STOP_REASON.to_owned());
            msg.content = append_notice(std::mem::take(&mut msg.content));
        }
        Some(msg)
    }
}

/// Distinct ledger ids of this run (all of them when the run id is unknown: fail restrictive).
fn prior_delegations(state: &ThreadState, run_id: Option<&str>) -> usize {
    state
        .delegations
        .iter()
        .filter(|d| match run_id {
            Some(r) => d.run_id.as_deref() == Some(r),
            None => true,
        })
        .filter(|d| !d.id.is_empty())
        .map(|d| d.id.as_str())
        .collect::<HashSet<_>>()
        .len()
}

fn append_notice(content: Content) -> Content {
    match content {
        Content::Text(t) if t.is_empty() => Content::Text(LIMIT_REACHED_NOTICE.to_owned()),
        Content::Text(t) => Content::Text(format!("{t}\n\n{LIMIT_REACHED_NOTICE}")),
        Content::Blocks(mut blocks) => {
            blocks.push(json!({"type": "text", "text": format!("\n\n{LIMIT_REACHED_NOTICE}")}));
            Content::Blocks(blocks)
        }
    }
}

#[async_trait]
impl Middleware for SubagentLimitMiddleware {
    middleware_identity!("SubagentLimitMiddleware", HookSet::AFTER_MODEL, deferrable: HookSet::AFTER_MODEL);

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        Ok(match self.truncate(state, run) {
            Some(msg) => HookOutput::update(StateUpdate::message(Message::Ai(msg))),
            None => HookOutput::none(),
        })
    }
}
