//! TokenBudget (chain L16, before_agent + after_model + after_agent + wrap_model): a per-run cap
//! on model tokens (spec 40 part 2 §5.1, spec 60 §5).
//!
//! After each model response the run's usage grows by the positive change of every AI message's
//! `usage_metadata` since it was last seen — so usage folded into an earlier message later (a
//! subagent's tokens merged into the message that dispatched it) still counts. At
//! `warn_threshold` a warning is queued once per run and appended to the *next* request only (a
//! hidden `budget_warning` human message after the tool results, so tool-call/result pairing is
//! never split and nothing is checkpointed). At `hard_stop_threshold` the last AI message is
//! rewritten in place: the exceeded notice is appended, every tool call (structured and raw) is
//! removed, and the loop ends with it as the final answer; the run's `stop_reason` becomes
//! `token_capped` (the run itself succeeds).
//!
//! Cost per step is O(new messages): the scan walks back from the newest message and stops after
//! a few AI messages whose usage is unchanged (usage is folded retroactively only into the
//! message just before a tool batch) or at the last message that existed before the run.
//! Earlier runs never count.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use antler_protocol::markers;
use antler_protocol::{AiMessage, Content, HumanMessage, Message, StateUpdate, ThreadState};
use antler_runtime::{
    keys, HookOutput, Middleware, MiddlewareError, ModelNext, ModelRequest, RunContext,
};
use async_trait::async_trait;
use serde_json::json;

use crate::hook::{AfterAgentResult, BeforeAgentResult, HookResult, ModelResult};

/// `token_budget:` (spec 60 §5), also the subagent budget's schema.
pub use antler_config::TokenBudgetConfig;

const NAME: &str = "TokenBudgetMiddleware";
/// Runs tracked at once (oldest dropped), as DeerFlow's bounded maps.
const MAX_RUNS: usize = 1000;
/// The scan stops after this many AI messages whose usage did not change.
const LOOKBACK: usize = 3;
/// The run stop reason a hard stop sets.
pub const STOP_REASON: &str = "token_capped";

#[derive(Default)]
struct RunBudget {
    /// Last message that existed before the run (its id); the scan never goes past it.
    boundary: Option<String>,
    /// AI message id → (input, output) last counted.
    seen: HashMap<String, (u64, u64)>,
    input: u64,
    output: u64,
    warned: bool,
    pending: Vec<String>,
}

#[derive(Default)]
struct Runs {
    by_run: HashMap<String, RunBudget>,
    order: VecDeque<String>,
    stop_reasons: HashMap<String, String>,
    stop_order: VecDeque<String>,
}

/// Before `run` enters `map` (insertion order in `order`), evicts the oldest runs so at most
/// `MAX_RUNS` stay.
fn make_room<V>(map: &mut HashMap<String, V>, order: &mut VecDeque<String>, run: &str) {
    if map.contains_key(run) {
        return;
    }
    while map.len() >= MAX_RUNS {
        match order.pop_front() {
            Some(old) => {
                map.remove(&old);
            }
            None => break,
        }
    }
    order.push_back(run.to_owned());
}

impl Runs {
    fn get(&mut self, run: &str) -> &mut RunBudget {
        make_room(&mut self.by_run, &mut self.order, run);
        self.by_run.entry(run.to_owned()).or_default()
    }

    fn drop_run(&mut self, run: &str) {
        if self.by_run.remove(run).is_some() {
            self.order.retain(|r| r != run);
        }
    }

    fn set_stop(&mut self, run: &str) {
        make_room(&mut self.stop_reasons, &mut self.stop_order, run);
        self.stop_reasons
            .insert(run.to_owned(), STOP_REASON.to_owned());
    }
}

pub struct TokenBudgetMiddleware {
    settings: TokenBudgetConfig,
    runs: Mutex<Runs>,
}

impl TokenBudgetMiddleware {
    pub fn new(settings: TokenBudgetConfig) -> Self {
        TokenBudgetMiddleware {
            settings,
            runs: Mutex::new(Runs::default()),
        }
    }

    /// Pop the stop reason a hard stop recorded for `run_id` (`token_capped`), for callers that
    /// hold the middleware rather than the run context (the subagent executor).
    pub fn consume_stop_reason(&self, run_id: &str) -> Option<String> {
        let mut runs = self.runs.lock().ok()?;
        let r = runs.stop_reasons.remove(run_id);
        if r.is_some() {
            runs.stop_order.retain(|x| x != run_id);
        }
        r
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Runs>, MiddlewareError> {
        self.runs
            .lock()
            .map_err(|_| MiddlewareError::new(NAME, "budget state poisoned"))
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    // Digits before the next comma; the first group has 1–3.
    let mut left = match digits.len() % 3 {
        0 => 3,
        r => r,
    };
    for c in digits.chars() {
        if left == 0 {
            out.push(',');
            left = 3;
        }
        out.push(c);
        left -= 1;
    }
    out
}

/// The warning text (spec 60 §5).
pub fn warning_text(kind: &str, used: u64, budget: u64, fraction: f64) -> String {
    format!(
        "[TOKEN BUDGET WARNING] You have used {} of your {} {kind} token budget ({:.0}%). Wrap up the current work and give your final answer; start no new tool calls unless one is truly necessary.",
        thousands(used),
        thousands(budget),
        fraction * 100.0
    )
}

/// The hard-stop text (spec 60 §5).
pub fn exceeded_text(kind: &str, used: u64, budget: u64) -> String {
    format!(
        "[TOKEN BUDGET EXCEEDED] The {kind} token usage ({}) has exceeded the safety limit ({}). Producing final answer with results collected so far.",
        thousands(used),
        thousands(budget)
    )
}

/// Append `text` to an AI message's content after a blank line (string, block list, or empty),
/// and strip every tool call so the loop ends on it. Shared shape with the loop-detection stop.
pub fn force_final_answer(msg: &AiMessage, text: &str) -> AiMessage {
    let mut out = msg.clone();
    out.content = match &msg.content {
        Content::Text(s) => Content::Text(format!("{s}\n\n{text}")),
        Content::Blocks(blocks) => {
            let mut b = blocks.clone();
            b.push(json!({"type": "text", "text": format!("\n\n{text}")}));
            Content::Blocks(b)
        }
    };
    // Clears raw `tool_calls`/`function_call` too and rewrites finish_reason tool_calls → stop.
    out.set_tool_calls(Vec::new());
    out.additional_kwargs.remove("tool_calls");
    out.additional_kwargs.remove("function_call");
    out
}

/// Fold the usage growth of the newest AI messages into the run's totals.
fn accumulate(budget: &mut RunBudget, state: &ThreadState) {
    let mut unchanged = 0;
    for m in state.messages.iter().rev() {
        if let (Some(b), Some(id)) = (&budget.boundary, m.id()) {
            if b == id {
                break;
            }
        }
        let Message::Ai(ai) = m else { continue };
        let Some(id) = ai.id.as_deref() else { continue };
        let (inp, out) = ai
            .usage_metadata
            .as_ref()
            .map(|u| (u.input_tokens, u.output_tokens))
            .unwrap_or((0, 0));
        let (pi, po) = budget.seen.get(id).copied().unwrap_or((0, 0));
        let (di, dout) = (inp.saturating_sub(pi), out.saturating_sub(po));
        if di > 0 || dout > 0 {
            budget.input += di;
            budget.output += dout;
            budget
                .seen
                .insert(id.to_owned(), (inp.max(pi), out.max(po)));
        } else if budget.seen.contains_key(id) {
            unchanged += 1;
            if unchanged >= LOOKBACK {
                break;
            }
        } else {
            budget.seen.insert(id.to_owned(), (inp, out));
        }
    }
}

#[async_trait]
impl Middleware for TokenBudgetMiddleware {
    middleware_identity!(NAME, crate::hook::RUN_GUARD_HOOKS, deferrable: antler_runtime::HookSet::AFTER_MODEL);

    async fn before_agent(&self, state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        if !self.settings.enabled {
            return Ok(HookOutput::none());
        }
        // Everything up to the current last message predates the run and never counts.
        let boundary = state
            .messages
            .last()
            .and_then(|m| m.id().map(str::to_owned));
        let mut runs = self.lock()?;
        let b = runs.get(&run.run_id);
        if b.boundary.is_none() && b.seen.is_empty() {
            b.boundary = boundary;
        }
        Ok(HookOutput::none())
    }

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let s = &self.settings;
        if !s.enabled {
            return Ok(HookOutput::none());
        }
        let Some(Message::Ai(last)) = state.messages.last() else {
            return Ok(HookOutput::none());
        };
        let mut runs = self.lock()?;
        let b = runs.get(&run.run_id);
        accumulate(b, state);
        let total = b.input + b.output;
        if total == 0 {
            return Ok(HookOutput::none());
        }
        let mut dims: Vec<(&str, u64, u64)> = vec![("total", total, s.max_tokens.max(1))];
        if let Some(limit) = s.max_input_tokens.filter(|l| *l > 0) {
            dims.push(("input", b.input, limit));
        }
        if let Some(limit) = s.max_output_tokens.filter(|l| *l > 0) {
            dims.push(("output", b.output, limit));
        }
        // The strictly highest fraction decides; ties keep the earlier dimension.
        let mut worst = ("", 0, 0, 0.0_f64);
        for (kind, used, limit) in dims {
            let f = used as f64 / limit as f64;
            if f > worst.3 {
                worst = (kind, used, limit, f);
            }
        }
        let (kind, used, limit, fraction) = worst;
        if fraction >= s.hard_stop_threshold {
            tracing::warn!(run = %run.run_id, dimension = kind, used, limit, "token budget exhausted; forcing the final answer");
            runs.set_stop(&run.run_id);
            drop(runs);
            run.set(&keys::STOP_REASON, STOP_REASON.to_owned());
            let stopped = force_final_answer(last, &exceeded_text(kind, used, limit));
            return Ok(HookOutput::update(StateUpdate::message(stopped)));
        }
        if fraction >= s.warn_threshold && !b.warned {
            b.warned = true;
            tracing::info!(run = %run.run_id, dimension = kind, used, limit, "token budget warning queued");
            b.pending.push(warning_text(kind, used, limit, fraction));
        }
        Ok(HookOutput::none())
    }

    async fn after_agent(&self, _state: &ThreadState, run: &RunContext) -> AfterAgentResult {
        if self.settings.enabled {
            self.lock()?.drop_run(&run.run_id);
        }
        Ok(HookOutput::none())
    }

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if self.settings.enabled {
            let pending = match self.runs.lock() {
                Ok(mut runs) => runs
                    .by_run
                    .get_mut(&req.run.run_id)
                    .map(|b| std::mem::take(&mut b.pending))
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            if !pending.is_empty() {
                let mut kwargs = antler_protocol::Object::new();
                markers::mark_hidden(&mut kwargs);
                let msg = Message::Human(HumanMessage {
                    content: Content::Text(pending.join("\n\n")),
                    name: Some(markers::BUDGET_WARNING.into()),
                    additional_kwargs: kwargs.into(),
                    ..Default::default()
                });
                req.messages_mut().push(std::sync::Arc::new(msg));
            }
        }
        next.run(req).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(200_000), "200,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn texts_name_the_dimension_and_amounts() {
        assert_eq!(
            exceeded_text("output", 6000, 5000),
            "[TOKEN BUDGET EXCEEDED] The output token usage (6,000) has exceeded the safety limit (5,000). Producing final answer with results collected so far."
        );
        assert!(warning_text("input", 9000, 10000, 0.9).starts_with(
            "[TOKEN BUDGET WARNING] You have used 9,000 of your 10,000 input token budget (90%)."
        ));
    }

    #[test]
    fn the_forced_answer_keeps_content_and_drops_every_tool_call() {
        let mut ai = AiMessage {
            content: Content::Text("partial".into()),
            id: Some("a".into()),
            tool_calls: vec![antler_protocol::ToolCall::new(
                "c1",
                "bash",
                Default::default(),
            )]
            .into(),
            ..Default::default()
        };
        ai.additional_kwargs
            .insert("tool_calls".into(), json!([{"id": "c1"}]));
        ai.additional_kwargs
            .insert("function_call".into(), json!({"name": "bash"}));
        ai.response_metadata
            .insert("finish_reason".into(), json!("tool_calls"));
        let out = force_final_answer(&ai, "STOP");
        assert_eq!(out.content, Content::Text("partial\n\nSTOP".into()));
        assert!(out.tool_calls.is_empty());
        assert!(!out.additional_kwargs.contains_key("tool_calls"));
        assert!(!out.additional_kwargs.contains_key("function_call"));
        assert_eq!(out.finish_reason(), Some("stop"));
        assert_eq!(out.id.as_deref(), Some("a"));

        let blocks = AiMessage {
            content: Content::Blocks(vec![json!({"type": "text", "text": "x"})]),
            ..Default::default()
        };
        let out = force_final_answer(&blocks, "STOP");
        assert_eq!(
            out.content,
            Content::Blocks(vec![
                json!({"type": "text", "text": "x"}),
                json!({"type": "text", "text": "\n\nSTOP"})
            ])
        );
    }
}
