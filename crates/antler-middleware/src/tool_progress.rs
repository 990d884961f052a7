//! ToolProgress (chain S13; before_agent, wrap_model, wrap_tool): a result-quality guard that
//! notices a tool which keeps returning nothing new, hints the model, and blocks the tool when
//! retrying cannot help (spec 30 §ToolProgress). Off by default (`tool_progress.enabled`).
//!
//! Per (thread, tool) a small state machine — active → warned → blocked — is driven by the
//! `deerflow_tool_meta` ToolErrorHandling (inside this wrapper) stamps on every result:
//!
//! - an unrecoverable `stop` result (auth, config, internal) blocks at once;
//! - errors, partial results and near-duplicate successes (Jaccard over word sets) count as
//!   problems; `stagnation_threshold` of them in a row warn (a hint is queued);
//! - `warn_escalation_count` more: recoverable problems stay warned (the hint is repeated),
//!   unrecoverable ones block;
//! - any good result resets the tool to active.
//!
//! A blocked tool is answered with `[TOOL_BLOCKED] <reason>` without running. Hints (≤ 3 per
//! run) go into the next model request as one request-only `progress_hint` message. A new run
//! starts every tool of the thread afresh. Complements LoopDetection, which watches call
//! patterns rather than results.
//!
//! This guard is independent of the live progress *events* long tools stream while they run
//! (`bash` output lines, subagent steps): those are `custom` stream events emitted through
//! [`antler_runtime::ToolContext::progress`].

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use antler_protocol::markers::PROGRESS_HINT;
use antler_protocol::tool_meta::{ToolMeta, TOOL_META};
use antler_protocol::{Content, HumanMessage, Message, ThreadState, ToolMessage, ToolStatus};
use antler_runtime::{
    HookOutput, HookSet, Middleware, ModelNext, ModelRequest, RunContext, ToolCallRequest,
    ToolNext, ToolOutcome,
};
use async_trait::async_trait;
use regex::Regex;
use serde_json::json;

use crate::hook::{BeforeAgentResult, ModelResult, ToolResult};

pub use antler_config::ToolProgressConfig;

/// Hints queued per (thread, run) at most.
const MAX_PENDING_PER_RUN: usize = 3;
/// Only the head of a result is compared (bounds the regex work on large pages).
const MAX_CONTENT_FOR_WORDSET: usize = 8192;

static WORD: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\b\w{3,}\b").ok());

/// Lowercase words of at least three word characters from the first 8192 chars.
pub fn word_set(content: &str) -> HashSet<String> {
    let head: String = content.chars().take(MAX_CONTENT_FOR_WORDSET).collect();
    let lower = head.to_lowercase();
    match WORD.as_ref() {
        Some(re) => re
            .find_iter(&lower)
            .map(|m| m.as_str().to_owned())
            .collect(),
        None => HashSet::new(),
    }
}

/// Whether `current` is similar to one of the last three sets (both with ≥ `min_words`).
pub fn is_near_duplicate(
    current: &HashSet<String>,
    recent: &[HashSet<String>],
    threshold: f64,
    min_words: usize,
) -> bool {
    if current.len() < min_words {
        return false;
    }
    let start = recent.len().saturating_sub(3);
    recent[start..].iter().any(|prev| {
        if prev.len() < min_words {
            return false;
        }
        let inter = current.intersection(prev).count();
        let union = current.len() + prev.len() - inter;
        union > 0 && inter as f64 / union as f64 >= threshold
    })
}

/// Where a tool stands in a thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    #[default]
    Active,
    Warned,
    Blocked,
}

#[derive(Clone, Debug, Default)]
struct ToolState {
    phase: Phase,
    problems: usize,
    block_reason: Option<String>,
    recent: Vec<HashSet<String>>,
}

fn hint_for(meta: &ToolMeta) -> String {
    let kind = meta.error_type.as_deref().unwrap_or(meta.status.as_str());
    let base = match kind {
        "no_results" => "[PROGRESS HINT] Your search returned no results.",
        "not_found" => "[PROGRESS HINT] The resource was not found repeatedly.",
        "rate_limited" => "[PROGRESS HINT] The tool is being rate-limited.",
        "transient" => "[PROGRESS HINT] The tool failed repeatedly with transient errors.",
        "partial_success" => "[PROGRESS HINT] The tool returned incomplete results several times.",
        "success" => "[PROGRESS HINT] The tool keeps returning the same results.",
        _ => "[PROGRESS HINT] The tool is not producing new information.",
    };
    let action = match meta.recommended_next_action.as_str() {
        "rewrite_query" => "Rephrase the query with other keywords or take another approach.",
        "try_alternative" => "Use a different tool or strategy.",
        "summarize" => "Summarize what you have found so far and move on.",
        "stop" => "Do not retry this operation: it cannot succeed.",
        "continue" => "Rephrase the query or search for a different term.",
        _ => "",
    };
    format!("{base} {action}").trim().to_owned()
}

fn block_reason(meta: &ToolMeta) -> String {
    match meta.error_type.as_deref().unwrap_or("") {
        "no_results" => "Repeated no-results — rewrite the query or use another tool.",
        "not_found" => "Repeated not-found — rewrite the query or use another resource.",
        "rate_limited" => "Repeated rate limiting — summarize what you have and continue.",
        "transient" => "Repeated transient failures — take another approach.",
        "auth" => "Authentication failed — this tool cannot be used.",
        "config" => "The tool is not configured — this tool cannot be used.",
        "internal" => "Repeated internal errors — this tool is unavailable.",
        _ => "No new information after several attempts — summarize and move on.",
    }
    .to_owned()
}

#[derive(Default)]
struct Store {
    /// thread → (last use, tool → state); LRU by `last use`.
    threads: HashMap<String, (u64, HashMap<String, ToolState>)>,
    tick: u64,
    /// (thread, run) → queued hints.
    pending: HashMap<(String, String), Vec<String>>,
}

impl Store {
    fn touch(&mut self, thread: &str, max: usize) -> &mut HashMap<String, ToolState> {
        self.tick += 1;
        let tick = self.tick;
        if !self.threads.contains_key(thread) {
            self.threads
                .insert(thread.to_owned(), (tick, HashMap::new()));
            while self.threads.len() > max.max(1) {
                let Some(oldest) = self
                    .threads
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                self.threads.remove(&oldest);
                self.pending.retain(|(t, _), _| *t != oldest);
            }
        }
        let entry = self
            .threads
            .entry(thread.to_owned())
            .or_insert_with(|| (tick, HashMap::new()));
        entry.0 = tick;
        &mut entry.1
    }
}

pub struct ToolProgressMiddleware {
    config: ToolProgressConfig,
    exempt: HashSet<String>,
    store: Mutex<Store>,
}

fn thread_key(run: &RunContext) -> String {
    if run.thread_id.is_empty() {
        "default".to_owned()
    } else {
        run.thread_id.clone()
    }
}

fn run_key(run: &RunContext) -> (String, String) {
    let r = if run.run_id.is_empty() {
        "default".to_owned()
    } else {
        run.run_id.clone()
    };
    (thread_key(run), r)
}

impl ToolProgressMiddleware {
    pub fn new(config: ToolProgressConfig) -> Self {
        ToolProgressMiddleware {
            exempt: config.exempt_tools.iter().cloned().collect(),
            config,
            store: Mutex::new(Store::default()),
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        match self.store.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        }
    }

    /// The phase of `tool` in `thread` (tests, diagnostics); no entry is created.
    pub fn phase(&self, thread: &str, tool: &str) -> Option<Phase> {
        let store = self.store();
        Some(store.threads.get(thread)?.1.get(tool)?.phase)
    }

    /// Threads tracked now.
    pub fn tracked_threads(&self) -> usize {
        self.store().threads.len()
    }

    /// Hints waiting for the next model call of (thread, run).
    pub fn pending_hints(&self, thread: &str, run: &str) -> Vec<String> {
        self.store()
            .pending
            .get(&(thread.to_owned(), run.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    fn blocked_reason(&self, thread: &str, tool: &str) -> Option<String> {
        // Read-only: a lookup must neither create entries nor refresh the LRU.
        let store = self.store();
        let state = store.threads.get(thread)?.1.get(tool)?;
        (state.phase == Phase::Blocked).then(|| state.block_reason.clone().unwrap_or_default())
    }

    fn transition(
        &self,
        state: &ToolState,
        meta: &ToolMeta,
        content: &str,
    ) -> (ToolState, Option<String>) {
        if state.phase == Phase::Blocked {
            return (state.clone(), None);
        }
        let n = state.problems + 1;
        if !meta.recoverable_by_model && meta.recommended_next_action == "stop" {
            return (
                ToolState {
                    phase: Phase::Blocked,
                    problems: n,
                    block_reason: Some(block_reason(meta)),
                    recent: state.recent.clone(),
                },
                None,
            );
        }
        let words = if meta.status == "success" {
            word_set(content)
        } else {
            HashSet::new()
        };
        let problem = meta.status == "error"
            || meta.status == "partial_success"
            || (meta.status == "success"
                && is_near_duplicate(
                    &words,
                    &state.recent,
                    self.config.jaccard_similarity_threshold,
                    self.config.min_word_count_for_similarity,
                ));
        if !problem {
            let mut recent = state.recent.clone();
            recent.push(words);
            let excess = recent.len().saturating_sub(3);
            recent.drain(..excess);
            return (
                ToolState {
                    phase: Phase::Active,
                    problems: 0,
                    block_reason: None,
                    recent,
                },
                None,
            );
        }
        let mut next = ToolState {
            problems: n,
            ..state.clone()
        };
        let threshold = self.config.stagnation_threshold;
        if n >= threshold + self.config.warn_escalation_count {
            if meta.recoverable_by_model {
                next.phase = Phase::Warned;
                return (next, Some(hint_for(meta)));
            }
            next.phase = Phase::Blocked;
            next.block_reason = Some(block_reason(meta));
            return (next, None);
        }
        if n >= threshold {
            next.phase = Phase::Warned;
            return (next, Some(hint_for(meta)));
        }
        (next, None)
    }

    fn observe(&self, run: &RunContext, tool: &str, msg: &ToolMessage) {
        let Some(raw) = msg.additional_kwargs.get(TOOL_META) else {
            tracing::warn!(
                tool,
                "tool_progress: no deerflow_tool_meta on a tracked tool's result; is ToolErrorHandling inside ToolProgress?"
            );
            return;
        };
        let Ok(meta) = serde_json::from_value::<ToolMeta>(raw.clone()) else {
            tracing::warn!(tool, meta = %raw, "tool_progress: malformed tool meta; not tracked");
            return;
        };
        let content = match &msg.content {
            Content::Text(s) => s.as_str(),
            _ => "",
        };
        let thread = thread_key(run);
        let mut store = self.store();
        let tools = store.touch(&thread, self.config.max_tracked_threads);
        let before = tools.get(tool).cloned().unwrap_or_default();
        let (after, hint) = self.transition(&before, &meta, content);
        let (phase, problems, reason) = (after.phase, after.problems, after.block_reason.clone());
        tools.insert(tool.to_owned(), after);
        if let Some(hint) = hint.filter(|_| self.config.inject_assessment) {
            let queue = store.pending.entry(run_key(run)).or_default();
            if queue.len() < MAX_PENDING_PER_RUN {
                queue.push(hint);
            }
        }
        drop(store);
        if phase != before.phase {
            match phase {
                Phase::Blocked => {
                    tracing::warn!(thread, tool, reason = ?reason, "tool_progress: blocked")
                }
                Phase::Warned => tracing::info!(thread, tool, problems, "tool_progress: warned"),
                Phase::Active => tracing::info!(thread, tool, "tool_progress: active again"),
            }
            if run.observed() {
                let payload = json!({"tool": tool, "phase": format!("{phase:?}").to_lowercase()});
                run.observe(&antler_runtime::RunEvent::Middleware {
                    name: "ToolProgressMiddleware",
                    action: "transition",
                    payload: &payload,
                });
            }
        }
    }
}

fn blocked_message(req: &ToolCallRequest, reason: &str) -> ToolMessage {
    let mut msg = ToolMessage::error(req.call.id_str(), format!("[TOOL_BLOCKED] {reason}"))
        .with_name(req.call.name.clone());
    msg.id = Some(uuid::Uuid::new_v4().to_string());
    msg.status = ToolStatus::Error;
    ToolMeta {
        status: "error".into(),
        error_type: Some("blocked_by_progress_guard".into()),
        recoverable_by_model: true,
        recommended_next_action: "summarize".into(),
        source: "progress_middleware".into(),
    }
    .stamp(&mut msg);
    msg
}

#[async_trait]
impl Middleware for ToolProgressMiddleware {
    middleware_identity!(
        "ToolProgressMiddleware",
        HookSet::BEFORE_AGENT | HookSet::WRAP_MODEL | HookSet::WRAP_TOOL
    );

    async fn before_agent(&self, _state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        let (thread, current) = run_key(run);
        let mut store = self.store();
        store
            .pending
            .retain(|(t, r), _| *t != thread || *r == current);
        if let Some((_, tools)) = store.threads.get_mut(&thread) {
            for state in tools.values_mut() {
                *state = ToolState::default();
            }
        }
        Ok(HookOutput::none())
    }

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        let hints = self.store().pending.remove(&run_key(&req.run));
        if let Some(hints) = hints.filter(|h| !h.is_empty()) {
            let mut unique: Vec<String> = Vec::new();
            for h in hints {
                if !unique.contains(&h) {
                    unique.push(h);
                }
            }
            let msg = Message::Human(HumanMessage {
                content: Content::Text(unique.join("\n\n")),
                name: Some(PROGRESS_HINT.to_owned()),
                ..Default::default()
            });
            req.messages_mut().push(std::sync::Arc::new(msg));
        }
        next.run(req).await
    }

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let tool = req.call.name.clone();
        if tool.is_empty() || self.exempt.contains(&tool) {
            return next.run(req).await;
        }
        let thread = thread_key(&req.run);
        if let Some(reason) = self.blocked_reason(&thread, &tool) {
            return Ok(ToolOutcome::Message(blocked_message(&req, &reason)));
        }
        let run = req.run.clone();
        let outcome = next.run(req).await?;
        if let ToolOutcome::Message(msg) = &outcome {
            self.observe(&run, &tool, msg);
        }
        Ok(outcome)
    }
}
