//! DynamicContext (chain L1, before_agent + wrap_model): today's date (always) and the user's
//! memory (when injection is enabled) reach the model as hidden `<system-reminder>` messages,
//! frozen into the conversation once, so the system prompt stays byte-identical across turns and
//! threads and the provider's prefix cache keeps hitting (spec 40 §3, seed 000).
//!
//! Shapes (the seed's hidden `<system-reminder>` *human* message; the memory block is kept apart
//! from the date, as DeerFlow does today, so memory text can never pose as the date):
//! - date reminder: `HumanMessage` `<system-reminder>\n<current_date>YYYY-MM-DD, Weekday</current_date>\n</system-reminder>`
//!   with `hide_from_ui`, `dynamic_context_reminder` and `reminder_date`;
//! - memory block: `HumanMessage` `<system-reminder>\n<memory>…</memory>\n</system-reminder>` with
//!   `hide_from_ui` and `dynamic_context_reminder`, never `reminder_date`;
//! - the user's message, copied verbatim under the id `{id}__user`.
//!
//! ID swap: the reminder takes the id of the current user message, so `add_messages` replaces
//! that message in place, and the memory block and user copy are appended after it. Only the
//! *last* user message is a target, and only when nothing but hidden messages follows it — a
//! copy moved to the tail is answered as the current question, so an older prompt must never go
//! there. Later runs of the same day inject nothing; a run on a later day adds a date-update
//! reminder (no memory) in front of its user message.
//!
//! Reminders duplicated in history (an older build, a fork, a legacy shape next to a new one)
//! are dropped from the model request only — stored messages are never edited. The duplicate
//! set is computed once per run in before_agent; wrap_model_call does nothing when it is empty.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_protocol::markers;
use antler_protocol::{Content, HumanMessage, Message, Object, StateUpdate, ThreadState};
use antler_runtime::{
    HookOutput, HookSet, Middleware, ModelNext, ModelRequest, RunContext, RunEvent, RunKey,
};
use async_trait::async_trait;
use chrono::NaiveDate;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::hook::{BeforeAgentResult, ModelResult};

/// Where DynamicContext gets the user's memory block (`<memory>…</memory>` content), already
/// capped to its token budget. Implemented by the long-term memory system.
#[async_trait]
pub trait MemorySource: Send + Sync {
    /// The text to inject for this user (and custom agent), or `None` when there is nothing.
    async fn injection(&self, user_id: Option<&str>, agent_name: Option<&str>) -> Option<String>;
}

const NAME: &str = "DynamicContextMiddleware";
/// `additional_kwargs` flag of every dynamic-context reminder.
pub const REMINDER_FLAG: &str = markers::DYNAMIC_CONTEXT_REMINDER;
/// `additional_kwargs` key holding the date a date reminder announced.
pub const REMINDER_DATE: &str = markers::REMINDER_DATE;
const USER_SUFFIX: &str = "__user";
const MEMORY_SUFFIX: &str = "__memory";
/// Run-context key holding the ids to drop from this run's model requests.
const DROP_KEY: RunKey<Vec<String>> = RunKey::new("DynamicContextMiddleware.drop_ids");

/// Today's local date. Injectable so a test can cross midnight without waiting.
pub trait Clock: Send + Sync {
    fn today(&self) -> NaiveDate;
}

/// The machine's local date.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalClock;

impl Clock for LocalClock {
    fn today(&self) -> NaiveDate {
        chrono::Local::now().date_naive()
    }
}

/// A clock that says what it is told (tests).
#[derive(Debug)]
pub struct ManualClock(Mutex<NaiveDate>);

impl ManualClock {
    pub fn new(date: NaiveDate) -> Self {
        ManualClock(Mutex::new(date))
    }

    pub fn set(&self, date: NaiveDate) {
        if let Ok(mut d) = self.0.lock() {
            *d = date;
        }
    }
}

impl Clock for ManualClock {
    fn today(&self) -> NaiveDate {
        self.0
            .lock()
            .map(|d| *d)
            .unwrap_or_else(|_| chrono::Local::now().date_naive())
    }
}

/// Settings (DeerFlow: `memory.enabled && memory.injection_enabled`; the 5 s injection cap).
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicContextSettings {
    /// Inject the memory block on the first injection of a thread.
    pub injection_enabled: bool,
    /// Longest wait for the memory source; past it nothing is injected this run (the next run
    /// tries again).
    pub inject_timeout: Duration,
}

impl Default for DynamicContextSettings {
    fn default() -> Self {
        DynamicContextSettings {
            injection_enabled: true,
            inject_timeout: Duration::from_secs(5),
        }
    }
}

pub struct DynamicContextMiddleware {
    settings: DynamicContextSettings,
    memory: Option<Arc<dyn MemorySource>>,
    clock: Arc<dyn Clock>,
}

impl DynamicContextMiddleware {
    /// `memory` is consulted only when `settings.injection_enabled`.
    pub fn new(settings: DynamicContextSettings, memory: Option<Arc<dyn MemorySource>>) -> Self {
        DynamicContextMiddleware {
            settings,
            memory,
            clock: Arc::new(LocalClock),
        }
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// `YYYY-MM-DD, Weekday` (e.g. `2026-05-08, Friday`).
pub fn format_date(date: NaiveDate) -> String {
    date.format("%Y-%m-%d, %A").to_string()
}

fn flag(m: &Message, key: &str) -> bool {
    m.additional_kwargs()
        .get(key)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// A hidden dynamic-context reminder (human, or system in legacy checkpoints).
pub fn is_dynamic_context_reminder(m: &Message) -> bool {
    matches!(m, Message::Human(_) | Message::System(_)) && flag(m, REMINDER_FLAG)
}

/// A user message that may receive the ID swap: human, not a reminder, not the summary, and not
/// already a user copy (suffix test, so `__user__user…` chains cannot grow; an id merely
/// containing `__user` stays eligible).
pub fn is_injection_target(m: &Message) -> bool {
    matches!(m, Message::Human(_))
        && !is_dynamic_context_reminder(m)
        && !markers::is_summary(m)
        && !m.id().is_some_and(|id| id.ends_with(USER_SUFFIX))
}

fn between<'a>(s: &'a str, open: &str, close: &str, last: bool) -> Option<&'a str> {
    let start = if last { s.rfind(open)? } else { s.find(open)? } + open.len();
    let len = s[start..].find(close)?;
    Some(&s[start..start + len]).filter(|d| !d.trim().is_empty())
}

/// The date a reminder announced: its `reminder_date`; for legacy reminders without one, the
/// `<current_date>` in a system reminder, or in a legacy human reminder that is not a memory
/// block (there the date followed the memory, so the last occurrence is the real one).
fn reminder_date(m: &Message) -> Option<String> {
    if let Some(d) = m
        .additional_kwargs()
        .get(REMINDER_DATE)
        .and_then(Value::as_str)
    {
        if !d.is_empty() {
            return Some(d.to_owned());
        }
    }
    let text = m.text();
    match m {
        Message::System(_) => between(&text, "<current_date>", "</current_date>", false),
        Message::Human(_) if !m.id().is_some_and(|id| id.ends_with(MEMORY_SUFFIX)) => {
            let rest = text.trim_start().strip_prefix("<system-reminder>")?;
            between(rest, "<current_date>", "</current_date>", true)
        }
        _ => None,
    }
    .map(str::to_owned)
}

fn hidden_kwargs(date: Option<&str>) -> Object {
    let mut k = Object::new();
    markers::mark_hidden(&mut k);
    k.insert(REMINDER_FLAG.into(), Value::Bool(true));
    if let Some(d) = date {
        k.insert(REMINDER_DATE.into(), Value::from(d));
    }
    k
}

/// The date reminder for `date` (already formatted).
pub fn date_reminder(id: &str, date: &str) -> Message {
    Message::Human(HumanMessage {
        content: Content::Text(format!(
            "<system-reminder>\n<current_date>{date}</current_date>\n</system-reminder>"
        )),
        additional_kwargs: hidden_kwargs(Some(date)).into(),
        id: Some(id.to_owned()),
        ..Default::default()
    })
}

/// The memory block, or `None` for blank memory.
pub fn memory_block(id: &str, text: &str) -> Option<Message> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let inner = if text.starts_with("<memory>") {
        text.to_owned()
    } else {
        format!("<memory>\n{text}\n</memory>")
    };
    Some(Message::Human(HumanMessage {
        content: Content::Text(format!("<system-reminder>\n{inner}\n</system-reminder>")),
        additional_kwargs: hidden_kwargs(None).into(),
        id: Some(id.to_owned()),
        ..Default::default()
    }))
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What one pass over the history found.
#[derive(Default)]
struct Scan {
    /// Date of the latest dated reminder.
    last_date: Option<String>,
    /// Index of the swap target, if the tail allows one.
    target: Option<usize>,
    /// Latest memory block's content (for the audit record).
    memory: Option<String>,
    /// Reminders repeating an earlier one.
    duplicates: Vec<String>,
}

/// One pass over the history (once per run): the last injected date, the target, and the
/// reminders that repeat an earlier one — a date reminder announcing the same date as the one
/// before it, or a memory/other reminder with the same content as an earlier one.
fn scan(messages: &antler_protocol::Messages) -> Scan {
    let mut s = Scan::default();
    // Target: the last message that is not hidden must be an eligible user message.
    for (i, m) in messages.iter().enumerate().rev() {
        if is_dynamic_context_reminder(m) || m.is_hidden() {
            continue;
        }
        if is_injection_target(m) {
            s.target = Some(i);
        }
        break;
    }
    let mut prev_date: Option<String> = None;
    let mut contents: HashSet<String> = HashSet::new();
    for m in messages.iter() {
        if !is_dynamic_context_reminder(m) {
            continue;
        }
        let is_memory = m.id().is_some_and(|id| id.ends_with(MEMORY_SUFFIX));
        let date = if is_memory { None } else { reminder_date(m) };
        let dup = match &date {
            Some(d) => {
                let dup = prev_date.as_deref() == Some(d.as_str());
                prev_date = Some(d.clone());
                s.last_date = Some(d.clone());
                dup
            }
            None => {
                let text = m.text();
                if is_memory {
                    s.memory = Some(text.clone());
                }
                !contents.insert(text)
            }
        };
        if dup {
            if let Some(id) = m.id() {
                s.duplicates.push(id.to_owned());
            }
        }
    }
    s
}

impl DynamicContextMiddleware {
    async fn memory_text(&self, run: &RunContext) -> Result<Option<String>, ()> {
        let Some(source) = self
            .memory
            .as_ref()
            .filter(|_| self.settings.injection_enabled)
        else {
            return Ok(None);
        };
        let fut = source.injection(run.user_id.as_deref(), run.options.agent_name.as_deref());
        tokio::time::timeout(self.settings.inject_timeout, fut)
            .await
            .map_err(|_| ())
    }

    fn audit_memory(&self, run: &RunContext, content: &str) {
        if run.observed() {
            let payload = json!({"content_sha256": sha256_hex(content)});
            run.observe(&RunEvent::Middleware {
                name: NAME,
                action: "context:memory",
                payload: &payload,
            });
        }
    }
}

#[async_trait]
impl Middleware for DynamicContextMiddleware {
    middleware_identity!(NAME, HookSet::BEFORE_AGENT | HookSet::WRAP_MODEL);

    async fn before_agent(&self, state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        let messages = &state.messages;
        if messages.is_empty() {
            return Ok(HookOutput::none());
        }
        let found = scan(messages);
        if !found.duplicates.is_empty() {
            run.set(&DROP_KEY, found.duplicates);
        }
        let current = format_date(self.clock.today());
        if found.last_date.is_some() {
            // Frozen: the memory in effect is the block already in the thread; it is never
            // reloaded on later turns.
            if let Some(mem) = &found.memory {
                self.audit_memory(run, mem);
            }
        }
        if found.last_date.as_deref() == Some(current.as_str()) {
            return Ok(HookOutput::none());
        }
        let Some(Message::Human(target)) = found.target.and_then(|i| messages.get(i)) else {
            return Ok(HookOutput::none());
        };
        let id = target
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut out = vec![date_reminder(&id, &current)];
        if found.last_date.is_none() {
            // First injection of the thread: the memory snapshot goes in once.
            match self.memory_text(run).await {
                Ok(Some(text)) => {
                    if let Some(block) = memory_block(&format!("{id}{MEMORY_SUFFIX}"), &text) {
                        self.audit_memory(run, &block.text());
                        out.push(block);
                    }
                }
                Ok(None) => {}
                Err(()) => {
                    tracing::warn!(
                        thread = %run.thread_id,
                        timeout = ?self.settings.inject_timeout,
                        "memory lookup timed out; no dynamic context injected this run"
                    );
                    return Ok(HookOutput::none());
                }
            }
        }
        let mut copy = target.clone();
        copy.id = Some(format!("{id}{USER_SUFFIX}"));
        out.push(Message::Human(copy));
        tracing::debug!(thread = %run.thread_id, target = %id, date = %current, first = found.last_date.is_none(), "injecting dynamic context");
        Ok(HookOutput::update(StateUpdate::messages(out)))
    }

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if let Some(ids) = req.run.get(&DROP_KEY) {
            let drop: HashSet<&str> = ids.iter().map(String::as_str).collect();
            if req
                .messages
                .iter()
                .any(|m| m.id().is_some_and(|id| drop.contains(id)))
            {
                req.messages_mut()
                    .retain(|m| !m.id().is_some_and(|id| drop.contains(id)));
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
    fn dates_are_formatted_with_the_weekday() {
        let d = NaiveDate::from_ymd_opt(2026, 5, 8).unwrap();
        assert_eq!(format_date(d), "2026-05-08, Friday");
    }

    #[test]
    fn legacy_dates_come_from_system_reminders_or_non_memory_human_reminders_only() {
        let mut sys = Message::system(
            "<system-reminder>\n<current_date>2026-05-08, Friday</current_date>\n</system-reminder>",
        );
        sys.additional_kwargs_mut()
            .insert(REMINDER_FLAG.into(), Value::Bool(true));
        assert_eq!(reminder_date(&sys).as_deref(), Some("2026-05-08, Friday"));

        // Seed-era combined shape: memory first, date last; a date inside memory cannot win.
        let mut legacy = Message::human(
            "<system-reminder>\n<memory>\n<current_date>1999-01-01</current_date>\n</memory>\n\n<current_date>2026-05-08, Friday</current_date>\n</system-reminder>",
        );
        legacy
            .additional_kwargs_mut()
            .insert(REMINDER_FLAG.into(), Value::Bool(true));
        assert_eq!(
            reminder_date(&legacy).as_deref(),
            Some("2026-05-08, Friday")
        );

        let mut mem = memory_block(
            "x__memory",
            "<current_date>1999-01-01, Friday</current_date>",
        )
        .unwrap();
        assert_eq!(reminder_date(&mem), None);
        mem.additional_kwargs_mut().remove(REMINDER_DATE);
        assert_eq!(reminder_date(&mem), None);
    }

    #[test]
    fn targets_exclude_copies_reminders_and_summaries() {
        let mut m = Message::human("hi");
        m.set_id("a__user");
        assert!(!is_injection_target(&m));
        m.set_id("a__user_b");
        assert!(is_injection_target(&m));
        *m.name_mut() = Some(markers::SUMMARY.into());
        assert!(!is_injection_target(&m));
        let r = date_reminder("r", "2026-05-08, Friday");
        assert!(!is_injection_target(&r));
        assert!(!is_injection_target(&Message::ai("x")));
    }

    #[test]
    fn blank_memory_gives_no_block() {
        assert!(memory_block("m", "  \n").is_none());
        let b = memory_block("m", "likes tea").unwrap();
        assert_eq!(
            b.text(),
            "<system-reminder>\n<memory>\nlikes tea\n</memory>\n</system-reminder>"
        );
    }
}
