//! DeerFlowSummarizationMiddleware (chain L5, before_model): when the history reaches a trigger,
//! replace its older part with one summary so the run can go on inside the model's window.
//!
//! Placed after DynamicContext (whose reminders it must keep) and before Todo/TokenUsage/Title.
//! Every `before_model` it checks the triggers (`messages`, `tokens`, `fraction` of the model's
//! `context_window`; a list means any). Token counts come from a [`CachedTokenCounter`], so the
//! check costs O(new messages) per step. When a trigger fires it:
//!
//! 1. finds a cutoff that keeps the `keep` tail and never separates an AI tool call from its
//!    results;
//! 2. rescues from the older part the dynamic-context reminders, the current user request and
//!    the most recently loaded skill files (seed rescue, `preserve_recent_skill_*`);
//! 3. runs the before-summarization hooks (memory flush) with the messages about to be removed —
//!    before the summary exists, as the seed orders it, so a summary that then fails has still
//!    flushed them (DeerFlow today flushes after the summary; a retry here hands the hooks only
//!    the messages they have not been given yet, so nothing is flushed twice);
//! 4. asks the summary model (`model_name`, then the run's model) for a summary of the rest —
//!    no tools, not streamed, reported to observers as `middleware:summarize` — then writes
//!    `[remove-all, summary, rescued…, tail…]`.
//!
//! The summary is a human message named `summary`, hidden from UIs (`hide_from_ui`), seen by the
//! model (the seeds' shape, DESIGN §7). A later summarization folds the previous summary into the
//! new one. If every summary call fails the history is left untouched and the next model call
//! tries again. Nothing is lost: checkpoints are append-only, so the removed messages stay in the
//! thread's earlier checkpoints (and in the run journal).

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use antler_models::tokens::{CachedTokenCounter, TokenCounter};
use antler_models::ChatModel;
use antler_protocol::markers;
use antler_protocol::{
    AiMessage, Content, HumanMessage, Message, Object, StateUpdate, ThreadState,
};
use antler_runtime::{HookOutput, HookSet, Middleware, MiddlewareError, RunContext, RunEvent};
use async_trait::async_trait;
use futures::FutureExt;
use serde_json::{json, Value};

use crate::hook::HookResult;
use crate::side_model::invoke_observed;

/// What is about to be compressed away.
#[derive(Clone, Debug)]
pub struct SummarizationEvent {
    pub thread_id: String,
    pub user_id: Option<String>,
    pub agent_name: Option<String>,
    /// The messages that the summary will replace, in order.
    pub messages: Vec<Message>,
    /// The messages kept after the summary (rescued ones first, then the recent tail).
    pub preserved: Vec<Message>,
}

/// Called before a summary replaces old messages (e.g. to flush them to long-term memory).
/// A failing hook is logged and never blocks summarization or the other hooks.
#[async_trait]
pub trait BeforeSummarizationHook: Send + Sync {
    async fn before_summarization(&self, event: &SummarizationEvent) -> Result<(), String>;

    /// Name used in logs.
    fn name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

/// The middleware's name (also its `updates` node prefix).
pub const NAME: &str = "DeerFlowSummarizationMiddleware";
/// `caller` of the summary model call in [`RunEvent`]s.
pub const CALLER: &str = "middleware:summarize";
/// `name` of the summary message.
pub const SUMMARY_NAME: &str = markers::SUMMARY;
/// Text before the summary in the summary message.
pub const SUMMARY_PREFIX: &str = "Summary of the conversation so far:\n\n";
/// Summary used when nothing is left to summarize (no model call).
pub const NO_HISTORY: &str = "No previous conversation history.";
/// Summary used when trimming left nothing to send (no model call).
pub const TOO_LONG: &str = "Previous conversation was too long to summarize.";

/// Built-in summary prompt; `{messages}` receives the conversation.
pub const DEFAULT_SUMMARY_PROMPT: &str = "\
You are compressing the history of a conversation between a user and an AI agent, so that the \
agent can keep working after the older turns are dropped from its context.

Read the conversation below and write down the context the agent needs to carry on. Be specific: \
keep names, numbers, file paths, commands, decisions and open questions exactly as they appear. \
Leave out pleasantries and anything that no longer matters.

Write exactly these four sections, in this order, each under its own heading. When a section has \
nothing to report, write \"None\" under it.

## Overall intent
What the user wants to achieve overall, with the constraints and preferences they stated.

## Key context
Important facts, the decisions made and why, approaches that were tried and rejected, and where \
the work stands now.

## Artifacts
Files created, modified or read that still matter, with their full paths and what each holds or \
what changed in it.

## Next steps
What remains to be done, in order, including anything the user is waiting for.

When an existing summary is given, merge it with the new messages into one summary; keep its \
facts unless the new messages supersede them.

Reply with the summary only, without any introduction or closing remark.

<messages>
{messages}
</messages>";

/// `summarization:` (spec 60 §16) and its `{type, value}` sizes. `enabled` and `model_name` are
/// read by the chain builder; the middleware itself ignores them.
pub use antler_config::{ContextSize, SummarizationConfig};

/// Where skills are mounted unless [`DeerFlowSummarizationMiddleware::with_skills_container_path`]
/// says otherwise (`skills.container_path`).
pub const DEFAULT_SKILLS_CONTAINER_PATH: &str = "/mnt/skills";

/// Settings the middleware cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SummarizationConfigError {
    #[error("summarization.{key}: a fraction must be greater than 0 and at most 1, got {value}")]
    BadFraction { key: String, value: f64 },
    #[error("summarization.{key}: the value must be greater than 0")]
    NotPositive { key: String },
    #[error("summarization.{key} uses `fraction`, which needs the model's `context_window`")]
    NoContextWindow { key: String },
    #[error("summarization.summary_prompt must contain the {{messages}} placeholder")]
    PromptWithoutPlaceholder,
}

/// Every candidate summary model failed (or answered blank).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summary generation failed")]
pub struct SummaryGenerationError;

/// Options of one [`DeerFlowSummarizationMiddleware::compact`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompactOptions {
    /// Skip the trigger check (manual compaction).
    pub force: bool,
    /// Keep policy for this call only.
    pub keep: Option<ContextSize>,
}

/// A summarization that happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Compaction {
    /// The summary text (without [`SUMMARY_PREFIX`]).
    pub summary: String,
    /// The new summary message.
    pub summary_message: Message,
    /// What the summary replaced (after rescue), in order.
    pub summarized: Vec<Message>,
    /// What is kept after the summary: rescued messages, then the recent tail.
    pub preserved: Vec<Message>,
    /// Ids of the state messages the compaction removes (summarized ones, older summaries).
    pub removed_ids: Vec<String>,
    /// Tokens of the history before compaction (as the trigger measured it).
    pub total_tokens: usize,
    /// The state carried a `summary_text` (a DeerFlow-shaped summary) that is now folded in.
    pub clears_summary_text: bool,
}

impl Compaction {
    /// The compacted message list: the summary, then the preserved messages.
    pub fn messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.preserved.len() + 1);
        out.push(self.summary_message.clone());
        out.extend(self.preserved.iter().cloned());
        out
    }

    /// The state write: a remove-all marker, then [`Compaction::messages`].
    pub fn update(&self) -> StateUpdate {
        let mut msgs = Vec::with_capacity(self.preserved.len() + 2);
        msgs.push(Message::remove_all());
        msgs.extend(self.messages());
        StateUpdate {
            messages: Some(msgs),
            summary_text: self.clears_summary_text.then_some(None),
            ..Default::default()
        }
    }
}

/// The summary message of a thread (also the legacy DeerFlow shape).
pub fn is_summary_message(m: &Message) -> bool {
    matches!(m, Message::Human(h) if h.name.as_deref() == Some(SUMMARY_NAME))
}

/// A hidden DynamicContext reminder (date or memory), on a human or system message.
pub fn is_dynamic_context_reminder(m: &Message) -> bool {
    matches!(m, Message::Human(_) | Message::System(_)) && markers::is_dynamic_context_reminder(m)
}

/// Compresses old history into a summary message near the token trigger.
pub struct DeerFlowSummarizationMiddleware {
    settings: SummarizationConfig,
    run_model: Arc<dyn ChatModel>,
    summary_model: Option<Arc<dyn ChatModel>>,
    context_window: Option<u64>,
    hooks: Vec<Arc<dyn BeforeSummarizationHook>>,
    tokens: Arc<CachedTokenCounter>,
    prompt: String,
    skill_tools: HashSet<String>,
    skills_root: String,
    /// Per message list, the ids already handed to the hooks by an attempt whose summary then
    /// failed; cleared when a summary succeeds (those messages are gone then).
    flushed: std::sync::Mutex<std::collections::HashMap<String, HashSet<String>>>,
}

/// Most message lists whose flushed ids are remembered (a failing summary model on many threads
/// at once); beyond it the memory is dropped and a retry may flush again.
const MAX_FLUSHED_LISTS: usize = 1024;

fn check_size(
    key: String,
    size: ContextSize,
    window: Option<u64>,
) -> Result<(), SummarizationConfigError> {
    match size {
        ContextSize::Tokens(0) | ContextSize::Messages(0) => {
            Err(SummarizationConfigError::NotPositive { key })
        }
        ContextSize::Fraction(f) if !(f > 0.0 && f <= 1.0) => {
            Err(SummarizationConfigError::BadFraction { key, value: f })
        }
        ContextSize::Fraction(_) if window.is_none() => {
            Err(SummarizationConfigError::NoContextWindow { key })
        }
        _ => Ok(()),
    }
}

impl DeerFlowSummarizationMiddleware {
    /// `run_model` is the model the run executes with: it summarizes when `summary_model` is
    /// `None`, and is the fallback when the summary model fails. `context_window` (the run
    /// model's `context_window`) is required when a trigger or `keep` uses `fraction`. Tokens are
    /// counted with the run model's encoding.
    pub fn new(
        settings: SummarizationConfig,
        run_model: Arc<dyn ChatModel>,
        summary_model: Option<Arc<dyn ChatModel>>,
        context_window: Option<u64>,
        hooks: Vec<Arc<dyn BeforeSummarizationHook>>,
    ) -> Result<Self, SummarizationConfigError> {
        for (i, t) in settings.trigger.iter().enumerate() {
            let key = if settings.trigger.len() == 1 {
                "trigger".to_owned()
            } else {
                format!("trigger[{i}]")
            };
            check_size(key, *t, context_window)?;
        }
        check_size("keep".to_owned(), settings.keep, context_window)?;
        let prompt = match &settings.summary_prompt {
            Some(p) if !p.contains("{messages}") => {
                return Err(SummarizationConfigError::PromptWithoutPlaceholder)
            }
            Some(p) => p.clone(),
            None => DEFAULT_SUMMARY_PROMPT.to_owned(),
        };
        let counter = TokenCounter::for_model(&run_model.info().model);
        Ok(DeerFlowSummarizationMiddleware {
            skill_tools: settings
                .skill_file_read_tool_names
                .iter()
                .cloned()
                .collect(),
            settings,
            run_model,
            summary_model,
            context_window,
            hooks,
            tokens: Arc::new(CachedTokenCounter::new(counter)),
            prompt,
            skills_root: DEFAULT_SKILLS_CONTAINER_PATH.to_owned(),
            flushed: Default::default(),
        })
    }

    /// Where skills are mounted for the agent (`skills.container_path`): reads of files below
    /// it count as skill loads for the rescue.
    pub fn with_skills_container_path(mut self, path: impl Into<String>) -> Self {
        self.skills_root = path.into();
        self
    }

    pub fn skills_container_path(&self) -> &str {
        &self.skills_root
    }

    /// Count tokens with another counter (tests, custom tokenizers).
    pub fn with_token_counter(mut self, counter: TokenCounter) -> Self {
        self.tokens = Arc::new(CachedTokenCounter::new(counter));
        self
    }

    /// Share a token cache with other middlewares.
    pub fn with_token_cache(mut self, cache: Arc<CachedTokenCounter>) -> Self {
        self.tokens = cache;
        self
    }

    pub fn token_cache(&self) -> &Arc<CachedTokenCounter> {
        &self.tokens
    }

    pub fn settings(&self) -> &SummarizationConfig {
        &self.settings
    }

    /// Summarize `state` if a trigger is met (or always, with `force`). `Ok(None)` when there is
    /// nothing to do; `Err` when every summary model failed. The caller commits
    /// [`Compaction::update`] (the loop) or writes [`Compaction::messages`] (manual compaction);
    /// hooks have already run.
    pub async fn compact(
        &self,
        state: &ThreadState,
        run: &RunContext,
        opts: CompactOptions,
    ) -> Result<Option<Compaction>, SummaryGenerationError> {
        let msgs = state.messages.shared();
        let summary_text = state
            .summary_text
            .as_deref()
            .filter(|s| !s.trim().is_empty());
        // One tally per message list: subagents share the thread id but have their own lists.
        let key = CachedTokenCounter::thread_key(&run.thread_id, &run.assistant_id);
        let key = key.as_str();
        if !opts.force && !self.triggered(key, &msgs, summary_text) {
            return Ok(None);
        }

        // The old summaries are not history to cut: they are folded into the new summary.
        let counts_all = self.tokens.counts(key, &msgs);
        let mut real = Vec::with_capacity(msgs.len());
        let mut counts = Vec::with_capacity(msgs.len());
        let mut previous: Vec<String> = summary_text.map(str::to_owned).into_iter().collect();
        for (m, c) in msgs.iter().zip(&counts_all) {
            if is_summary_message(m) {
                let text = m.text();
                let text = text.strip_prefix(SUMMARY_PREFIX).unwrap_or(&text).trim();
                if !text.is_empty() {
                    previous.push(text.to_owned());
                }
            } else {
                real.push(m.clone());
                counts.push(*c);
            }
        }
        let previous = previous.join("\n\n");
        let total_tokens = counts_all.iter().sum::<usize>()
            + summary_text.map_or(0, |s| self.tokens.count_message(&summary_text_message(s)));

        let keep = opts.keep.unwrap_or(self.settings.keep);
        let cutoff = self.cutoff(&real, &counts, keep);
        if cutoff == 0 {
            return Ok(None);
        }
        let (summarized, preserved) = self.partition(&real, &counts, cutoff);
        if summarized.is_empty() {
            return Ok(None);
        }

        // Side effects from here on (memory hooks, the summary model): the deferred supersteps
        // before them are written first.
        if let Err(e) = run.persist().await {
            tracing::warn!(error = %e, "could not write the run's pending checkpoints");
        }
        self.flush(key, run, &summarized, &preserved).await;
        let summary = match self.summary_prompt(&summarized, &previous) {
            Prompt::Canned(text) => text.to_owned(),
            Prompt::Ask(prompt) => self.generate(&prompt, run).await?,
        };
        self.flushed_ids().remove(key);

        let mut kwargs = Object::new();
        markers::mark_hidden(&mut kwargs);
        let summary_message = Message::Human(HumanMessage {
            content: Content::Text(format!("{SUMMARY_PREFIX}{summary}")),
            additional_kwargs: kwargs.into(),
            name: Some(SUMMARY_NAME.to_owned()),
            id: Some(uuid::Uuid::new_v4().to_string()),
            ..Default::default()
        });
        let kept: HashSet<&str> = preserved.iter().filter_map(Message::id).collect();
        let removed_ids = msgs
            .iter()
            .filter_map(|m| m.id())
            .filter(|id| !kept.contains(id))
            .map(str::to_owned)
            .collect();
        Ok(Some(Compaction {
            summary,
            summary_message,
            summarized,
            preserved,
            removed_ids,
            total_tokens,
            clears_summary_text: state.summary_text.is_some(),
        }))
    }

    /// Whether any trigger clause is met. Cheap clauses first; tokens are measured at most once.
    fn triggered(&self, key: &str, msgs: &[Arc<Message>], summary_text: Option<&str>) -> bool {
        // The DeerFlow-shaped summary (if any) is projected into every request, so it counts as
        // one more message.
        let count = msgs.len() + usize::from(summary_text.is_some());
        let mut measured: Option<usize> = None;
        let mut bounded: Option<usize> = None;
        for clause in &self.settings.trigger {
            let threshold = match *clause {
                ContextSize::Messages(n) => {
                    if count >= n {
                        return true;
                    }
                    continue;
                }
                ContextSize::Tokens(t) => t,
                ContextSize::Fraction(f) => match self.context_window {
                    Some(w) => ((w as f64 * f) as u64).max(1),
                    None => continue,
                },
            };
            if self.usage_reaches(msgs, threshold) {
                return true;
            }
            // A bound below the threshold settles the clause without tokenizing: short threads
            // never build the BPE tables (most of a cold start's CPU and memory).
            let bound = *bounded.get_or_insert_with(|| {
                self.tokens.bound(key, msgs)
                    + summary_text.map_or(0, |s| {
                        self.tokens
                            .counter()
                            .upper_bound_message(&summary_text_message(s))
                    })
            });
            if (bound as u64) < threshold {
                continue;
            }
            let total = *measured.get_or_insert_with(|| {
                let m = self.tokens.measure(key, msgs);
                m.scaled
                    + summary_text
                        .map_or(0, |s| self.tokens.count_message(&summary_text_message(s)))
            });
            if total as u64 >= threshold {
                return true;
            }
        }
        false
    }

    /// The provider's own count on the last AI message reaches `threshold` (only when that
    /// message comes from the run model's provider: counts of other tokenizers do not compare).
    fn usage_reaches(&self, msgs: &[Arc<Message>], threshold: u64) -> bool {
        let Some(ai) = msgs.iter().rev().find_map(|m| m.as_ai()) else {
            return false;
        };
        let Some(total) = ai.usage_metadata.as_ref().map(|u| u.total_tokens) else {
            return false;
        };
        let provider = ai
            .response_metadata
            .get("model_provider")
            .and_then(Value::as_str);
        total >= threshold
            && provider.is_some_and(|p| {
                provider_family(p) == provider_family(&self.run_model.info().provider)
            })
    }

    /// Index of the first message to keep (0 = nothing to summarize).
    fn cutoff(&self, real: &[Arc<Message>], counts: &[usize], keep: ContextSize) -> usize {
        let len = real.len();
        let target = match keep {
            ContextSize::Messages(k) => {
                if len <= k {
                    return 0;
                }
                return safe_cutoff(real, len - k);
            }
            ContextSize::Tokens(t) => usize::try_from(t).unwrap_or(usize::MAX),
            ContextSize::Fraction(f) => match self.context_window {
                Some(w) => ((w as f64 * f) as usize).max(1),
                // Validated at construction; a per-call override may still lack a window.
                None => return self.cutoff(real, counts, ContextSize::Messages(20)),
            },
        };
        if counts.iter().sum::<usize>() <= target {
            return 0;
        }
        // Earliest index whose suffix fits the target (suffix sums only grow going back).
        let mut suffix = 0usize;
        let mut earliest = None;
        for i in (0..len).rev() {
            suffix += counts[i];
            if suffix > target {
                break;
            }
            earliest = Some(i);
        }
        let cut = earliest.unwrap_or(len.saturating_sub(1));
        safe_cutoff(real, cut)
    }

    /// Split at `cutoff` and move the rescued messages from the older part to the front of the
    /// kept part, in their original order: dynamic-context reminders, the current user request
    /// and the selected skill-file loads (each AI call with its results).
    fn partition(
        &self,
        real: &[Arc<Message>],
        counts: &[usize],
        cutoff: usize,
    ) -> (Vec<Message>, Vec<Message>) {
        let older = &real[..cutoff];
        let latest_user = real
            .iter()
            .rev()
            .find(|m| m.is_real_user_message())
            .and_then(|m| m.id());
        let bundles = self.skill_bundles(older, &counts[..cutoff]);
        let rescued_tools: HashSet<usize> = bundles
            .iter()
            .flat_map(|b| b.tool_indices.iter().copied())
            .collect();

        let mut summarized = Vec::with_capacity(older.len());
        let mut rescued = Vec::new();
        for (i, m) in older.iter().enumerate() {
            if let (Some(b), Message::Ai(ai)) =
                (bundles.iter().find(|b| b.ai_index == i), m.as_ref())
            {
                let (kept, rest): (Vec<_>, Vec<_>) = ai
                    .tool_calls
                    .iter()
                    .cloned()
                    .partition(|c| b.call_ids.contains(c.id_str()));
                let mut copy = ai.clone();
                copy.content = Content::Text(String::new());
                copy.set_tool_calls(kept);
                rescued.push(Message::Ai(copy));
                rescued.extend(b.tool_indices.iter().map(|&k| (*older[k]).clone()));
                if !rest.is_empty() || !ai.content.is_empty() {
                    let mut rest_copy: AiMessage = ai.clone();
                    rest_copy.set_tool_calls(rest);
                    summarized.push(Message::Ai(rest_copy));
                }
                continue;
            }
            if rescued_tools.contains(&i) {
                continue;
            }
            if is_dynamic_context_reminder(m) || (latest_user.is_some() && m.id() == latest_user) {
                rescued.push((**m).clone());
            } else {
                summarized.push((**m).clone());
            }
        }
        rescued.extend(real[cutoff..].iter().map(|m| (**m).clone()));
        (summarized, rescued)
    }

    fn skill_bundles(&self, older: &[Arc<Message>], counts: &[usize]) -> Vec<SkillBundle> {
        let s = &self.settings;
        if s.preserve_recent_skill_count == 0
            || s.preserve_recent_skill_tokens == 0
            || self.skill_tools.is_empty()
        {
            return Vec::new();
        }
        let root = self.skills_root.trim_end_matches('/');
        let mut bundles = Vec::new();
        let mut i = 0;
        while i < older.len() {
            let Message::Ai(ai) = older[i].as_ref() else {
                i += 1;
                continue;
            };
            let paths: Vec<(&str, &str)> = ai
                .tool_calls
                .iter()
                .filter(|c| self.skill_tools.contains(&c.name))
                .filter_map(|c| {
                    let path = call_path(&c.args)?;
                    let under = if root.is_empty() {
                        path.starts_with('/')
                    } else {
                        path == root || path.starts_with(&format!("{root}/"))
                    };
                    (under && !c.id_str().is_empty()).then_some((c.id_str(), path))
                })
                .collect();
            let mut j = i + 1;
            while j < older.len() && matches!(older[j].as_ref(), Message::Tool(_)) {
                j += 1;
            }
            if paths.is_empty() {
                i += 1;
                continue;
            }
            let mut bundle = SkillBundle {
                ai_index: i,
                tool_indices: Vec::new(),
                call_ids: HashSet::new(),
                tokens: 0,
                key: String::new(),
            };
            let mut keys = Vec::new();
            for (k, m) in older.iter().enumerate().take(j).skip(i + 1) {
                let Some(t) = m.as_tool() else { continue };
                if let Some((id, path)) = paths.iter().find(|(id, _)| *id == t.tool_call_id) {
                    bundle.tokens += counts[k];
                    bundle.tool_indices.push(k);
                    bundle.call_ids.insert((*id).to_owned());
                    keys.push(*path);
                }
            }
            if !bundle.tool_indices.is_empty() {
                keys.sort_unstable();
                bundle.key = keys.join("|");
                bundles.push(bundle);
            }
            i = j;
        }

        // Newest first, within the count and token budgets, one bundle per set of files.
        let mut selected = Vec::new();
        let mut seen = HashSet::new();
        let mut total = 0u64;
        for b in bundles.into_iter().rev() {
            if selected.len() >= s.preserve_recent_skill_count {
                break;
            }
            let tokens = b.tokens as u64;
            if seen.contains(&b.key)
                || tokens > s.preserve_recent_skill_tokens_per_skill
                || total + tokens > s.preserve_recent_skill_tokens
            {
                continue;
            }
            total += tokens;
            seen.insert(b.key.clone());
            selected.push(b);
        }
        selected.reverse();
        selected
    }

    /// The prompt for `summarized` (spec 40 §1.6), or a canned summary.
    fn summary_prompt(&self, summarized: &[Message], previous: &str) -> Prompt {
        if summarized.is_empty() {
            return Prompt::Canned(NO_HISTORY);
        }
        let budget = self
            .settings
            .trim_tokens_to_summarize
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
        let mut window = match budget {
            Some(b) => self.trim_for_summary(summarized, b),
            None => summarized.to_vec(),
        };
        if window.is_empty() {
            window = summarized[summarized.len() - 1..].to_vec();
        }
        let transcript = buffer_string(&window);
        let previous = previous.trim();
        let (previous, new) = match budget {
            None => (previous.to_owned(), transcript),
            Some(b) => {
                let b = b.max(1);
                if previous.is_empty() {
                    (String::new(), self.trim_section(&transcript, b, Keep::Head))
                } else {
                    let new_budget = (b / 2).max(1);
                    let prev_budget = (b - new_budget).max(1);
                    (
                        self.trim_section(previous, prev_budget, Keep::Tail),
                        self.trim_section(&transcript, new_budget, Keep::Head),
                    )
                }
            }
        };
        let mut parts: Vec<String> = Vec::new();
        if !previous.is_empty() {
            parts.extend([
                "<existing_summary>".to_owned(),
                escape(&previous),
                "</existing_summary>".to_owned(),
                String::new(),
            ]);
        }
        if !new.is_empty() {
            parts.extend([
                "<new_messages>".to_owned(),
                escape(&new),
                "</new_messages>".to_owned(),
            ]);
        }
        if parts.is_empty() {
            return Prompt::Canned(TOO_LONG);
        }
        Prompt::Ask(
            self.prompt
                .replace("{messages}", &parts.join("\n"))
                .trim_end()
                .to_owned(),
        )
    }

    /// The most recent messages within `budget` tokens (LangChain's `trim_messages`, strategy
    /// last, starting on a human message, keeping a leading system message, allowing the oldest
    /// kept human message to be cut to its last lines).
    fn trim_for_summary(&self, msgs: &[Message], budget: usize) -> Vec<Message> {
        let mut left = budget;
        let (system, rest) = match msgs.split_first() {
            Some((first @ Message::System(_), rest)) => {
                let c = self.tokens.count_message(first);
                if c <= left {
                    left -= c;
                    (Some(first), rest)
                } else {
                    (None, rest)
                }
            }
            _ => (None, msgs),
        };
        let mut kept: Vec<Message> = Vec::new();
        for m in rest.iter().rev() {
            let c = self.tokens.count_message(m);
            if c <= left {
                left -= c;
                kept.push(m.clone());
                continue;
            }
            if let Message::Human(h) = m {
                if let Content::Text(text) = &h.content {
                    if let Some(part) = self.last_lines_within(h, text, left) {
                        kept.push(part);
                    }
                }
            }
            break;
        }
        kept.reverse();
        let start = kept
            .iter()
            .position(|m| matches!(m, Message::Human(_)))
            .unwrap_or(kept.len());
        let mut out: Vec<Message> = system.cloned().into_iter().collect();
        out.extend(kept.drain(start..));
        out
    }

    /// `h` cut to its longest tail of whole lines that fits `budget`.
    fn last_lines_within(&self, h: &HumanMessage, text: &str, budget: usize) -> Option<Message> {
        let starts: Vec<usize> = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .filter(|&i| i < text.len())
            .collect();
        let with = |from: usize| {
            Message::Human(HumanMessage {
                content: Content::Text(text[from..].to_owned()),
                ..h.clone()
            })
        };
        // Fewest lines first would be linear; the kept tail only shrinks as `from` grows, so
        // binary search the earliest start that fits.
        let (mut lo, mut hi) = (0usize, starts.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.tokens.counter().count_message(&with(starts[mid])) <= budget {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        starts.get(lo).map(|&from| with(from))
    }

    /// Cut `text` to `budget` tokens at character granularity, keeping its head or tail; falls
    /// back to a character cap when counting leaves nothing.
    fn trim_section(&self, text: &str, budget: usize, keep: Keep) -> String {
        if text.trim().is_empty() {
            return String::new();
        }
        let counter = self.tokens.counter();
        if counter.count_text(text) <= budget {
            return text.to_owned();
        }
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(text.len()))
            .collect();
        let piece = |n: usize| match keep {
            Keep::Head => &text[..bounds[n]],
            Keep::Tail => &text[bounds[bounds.len() - 1 - n]..],
        };
        // Largest number of characters that fits.
        let (mut lo, mut hi) = (0usize, bounds.len() - 1);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if counter.count_text(piece(mid)) <= budget {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let out = piece(lo);
        if out.trim().is_empty() {
            bound_text(text, budget)
        } else {
            out.to_owned()
        }
    }

    /// Ask the candidates in order; the first non-blank answer wins.
    async fn generate(
        &self,
        prompt: &str,
        run: &RunContext,
    ) -> Result<String, SummaryGenerationError> {
        let mut candidates: Vec<&Arc<dyn ChatModel>> = Vec::with_capacity(2);
        if let Some(m) = &self.summary_model {
            candidates.push(m);
        }
        if !candidates
            .iter()
            .any(|m| Arc::ptr_eq(m, &self.run_model) || m.info().name == self.run_model.info().name)
        {
            candidates.push(&self.run_model);
        }
        let messages = [Arc::new(Message::human(prompt))];
        for (i, model) in candidates.iter().enumerate() {
            let last = i + 1 == candidates.len();
            let name = model.info().name.as_str();
            let message_id = format!("lc_run--{}", uuid::Uuid::new_v4());
            match invoke_observed(&***model, run, CALLER, &messages, &message_id).await {
                Ok(resp) => {
                    let text = resp.content.text();
                    let text = text.trim();
                    if !text.is_empty() {
                        return Ok(text.to_owned());
                    }
                    if last {
                        tracing::warn!(
                            model = name,
                            "summary model returned empty text; skipping compaction this turn"
                        );
                    } else {
                        tracing::warn!(
                            model = name,
                            "summary model returned empty text; falling back to the run model"
                        );
                    }
                }
                Err(error) => {
                    if last {
                        tracing::warn!(model = name, %error, "summary generation failed; skipping compaction this turn");
                    } else {
                        tracing::warn!(model = name, %error, "summary generation failed; falling back to the run model");
                    }
                }
            }
        }
        Err(SummaryGenerationError)
    }

    /// Run every hook in registration order; a failing (or panicking) hook is logged and the
    /// others still run.
    fn flushed_ids(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, HashSet<String>>> {
        self.flushed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hand the hooks the messages about to be summarized that an earlier, failed attempt on
    /// this list has not handed them yet (messages without an id always go).
    async fn flush(
        &self,
        key: &str,
        run: &RunContext,
        summarized: &[Message],
        preserved: &[Message],
    ) {
        if self.hooks.is_empty() {
            return;
        }
        let fresh: Vec<Message> = {
            let mut all = self.flushed_ids();
            if all.len() >= MAX_FLUSHED_LISTS && !all.contains_key(key) {
                all.clear();
            }
            let seen = all.entry(key.to_owned()).or_default();
            summarized
                .iter()
                .filter(|m| m.id().is_none_or(|id| seen.insert(id.to_owned())))
                .cloned()
                .collect()
        };
        if !fresh.is_empty() {
            self.fire_hooks(run, &fresh, preserved).await;
        }
    }

    async fn fire_hooks(&self, run: &RunContext, summarized: &[Message], preserved: &[Message]) {
        if self.hooks.is_empty() {
            return;
        }
        let event = SummarizationEvent {
            thread_id: run.thread_id.clone(),
            user_id: run.user_id.clone(),
            agent_name: run.options.agent_name.clone(),
            messages: summarized.to_vec(),
            preserved: preserved.to_vec(),
        };
        for hook in &self.hooks {
            let outcome = AssertUnwindSafe(hook.before_summarization(&event))
                .catch_unwind()
                .await;
            let error = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => "the hook panicked".to_owned(),
            };
            tracing::warn!(hook = hook.name(), %error, "before_summarization hook {} failed", hook.name());
        }
    }
}

enum Prompt {
    Canned(&'static str),
    Ask(String),
}

#[derive(Clone, Copy)]
enum Keep {
    Head,
    Tail,
}

/// One AI message's skill-file reads and their results.
struct SkillBundle {
    ai_index: usize,
    tool_indices: Vec<usize>,
    call_ids: HashSet<String>,
    tokens: usize,
    /// The sorted set of paths read (a re-read of the same files is the same bundle).
    key: String,
}

/// The path argument of a read-like tool call.
fn call_path(args: &Object) -> Option<&str> {
    ["path", "file_path", "filepath"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str))
        .filter(|p| !p.is_empty())
}

/// Move a cutoff that lands on tool results to their AI message (keeping the call with its
/// results); only if that AI message is not found, move past the results instead.
fn safe_cutoff(msgs: &[Arc<Message>], cutoff: usize) -> usize {
    if cutoff >= msgs.len() || !matches!(msgs[cutoff].as_ref(), Message::Tool(_)) {
        return cutoff;
    }
    let mut ids = HashSet::new();
    let mut end = cutoff;
    while let Some(Message::Tool(t)) = msgs.get(end).map(|m| m.as_ref()) {
        ids.insert(t.tool_call_id.as_str());
        end += 1;
    }
    for j in (0..cutoff).rev() {
        if let Message::Ai(ai) = msgs[j].as_ref() {
            if ai.tool_calls.iter().any(|c| ids.contains(c.id_str())) {
                return j;
            }
        }
    }
    end
}

/// Providers whose usage numbers compare (aliases of one family map to one name).
fn provider_family(p: &str) -> &str {
    match p {
        "amazon_bedrock" | "bedrock" | "bedrock_converse" => "bedrock",
        other => other,
    }
}

/// The DeerFlow-shaped summary projected as a message, for counting.
fn summary_text_message(text: &str) -> Message {
    Message::Human(HumanMessage {
        content: Content::Text(text.to_owned()),
        name: Some(SUMMARY_NAME.to_owned()),
        id: Some("__summary_text__".to_owned()),
        ..Default::default()
    })
}

/// A plain transcript: one `Role: text` line per message, tool calls appended to AI lines.
fn buffer_string(msgs: &[Message]) -> String {
    let mut out = String::new();
    for m in msgs {
        let role = match m {
            Message::Human(_) => "Human",
            Message::Ai(_) => "AI",
            Message::System(_) => "System",
            Message::Tool(_) => "Tool",
            Message::Remove(_) => continue,
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(role);
        out.push_str(": ");
        out.push_str(&m.text());
        if let Message::Ai(ai) = m {
            if !ai.tool_calls.is_empty() {
                out.push_str(&json!(ai.tool_calls).to_string());
            }
        }
    }
    out
}

/// Escape `&`, `<`, `>` so message text cannot close the prompt's sections.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Deterministic character cap: head two thirds, a `...` line, then the tail.
pub fn bound_text(text: &str, cap: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= cap {
        return text.to_owned();
    }
    if cap == 0 {
        return String::new();
    }
    const MARKER: &str = "\n...\n";
    let head = cap * 2 / 3;
    if cap <= MARKER.len() {
        return chars[..cap].iter().collect();
    }
    let tail = cap.saturating_sub(head + MARKER.len());
    if tail == 0 {
        return chars[..cap].iter().collect();
    }
    let mut out: String = chars[..head].iter().collect();
    out.push_str(MARKER);
    out.extend(&chars[chars.len() - tail..]);
    out
}

#[async_trait]
impl Middleware for DeerFlowSummarizationMiddleware {
    middleware_identity!(NAME, HookSet::BEFORE_MODEL, deferrable: HookSet::BEFORE_MODEL);

    async fn before_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let compaction = match self.compact(state, run, CompactOptions::default()).await {
            Ok(Some(c)) => c,
            // Failure is already logged: keep the history and try again on the next model call.
            Ok(None) | Err(SummaryGenerationError) => return Ok(HookOutput::none()),
        };
        let summary_id = compaction
            .summary_message
            .id()
            .unwrap_or_default()
            .to_owned();
        tracing::info!(
            thread = %run.thread_id,
            removed = compaction.removed_ids.len(),
            kept = compaction.preserved.len(),
            "summarized the conversation history"
        );
        // Re-measure: if what remains still does not fit the model's window, say so now
        // instead of pretending the compaction solved it (seed 002's failure table).
        if let Some(window) = self.context_window {
            let counter = self.tokens.counter();
            let remaining = counter.count_messages(compaction.messages().iter()) as u64;
            if remaining > window {
                if run.observed() {
                    let payload = json!({"tokens_after": remaining, "context_window": window});
                    run.observe(&RunEvent::Middleware {
                        name: NAME,
                        action: "context_over_window",
                        payload: &payload,
                    });
                }
                return Err(MiddlewareError::new(
                    NAME,
                    format!(
                        "the conversation still needs about {remaining} tokens after summarization, more than the model's context window of {window}; keep fewer recent messages (summarization.keep) or use a model with a larger window"
                    ),
                ));
            }
        }
        if run.observed() {
            let payload = json!({
                "removed_count": compaction.removed_ids.len(),
                "removed_ids": compaction.removed_ids,
                "summary_id": summary_id,
                "kept_count": compaction.preserved.len(),
            });
            run.observe(&RunEvent::Middleware {
                name: NAME,
                action: "summarize",
                payload: &payload,
            });
        }
        Ok(HookOutput::update(compaction.update()))
    }
}
