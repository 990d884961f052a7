//! Todo (chain L6, plan mode only): the `write_todos` planning loop (spec 40 part 2 §5.6, spec 50
//! §4.13). The chain includes it when the run's `is_plan_mode` is on (`antler run --plan-mode`);
//! the `write_todos` tool itself lives in antler-tools and writes `todos` through a command.
//!
//! - wrap_model: appends the static `<todo_list_system>` section to the system prompt (the same
//!   bytes on every call, so the prompt stays cacheable) and any queued completion reminder as a
//!   hidden, request-only `todo_completion_reminder` message.
//! - before_model: when the todo list exists but no `write_todos` call is visible any more
//!   (summarization dropped it) and no reminder is either, a hidden `todo_reminder` message with
//!   the list is persisted so the model keeps tracking it.
//! - after_model: several `write_todos` calls in one response are answered with errors; a clean
//!   final answer while items are unfinished queues a completion reminder and jumps back to the
//!   model — at most twice per run, so a stuck model can still finish, and never after a guard
//!   (token budget, loop detection) set the run's `stop_reason` and forced that answer.
//!
//! The visible `write_todos` call (or reminder) is remembered per run by message id and re-checked
//! in O(1); the history is searched again only when that message was removed or rewritten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use antler_protocol::markers;
use antler_protocol::{
    AiMessage, Content, HumanMessage, Message, Object, StateUpdate, ThreadState, Todo, TodoStatus,
    ToolMessage,
};
use antler_runtime::{
    keys, HookOutput, HookSet, JumpTo, Middleware, MiddlewareError, ModelNext, ModelRequest,
    RunContext, RunKey,
};
use async_trait::async_trait;
use serde_json::Value;

use crate::hook::{AfterAgentResult, BeforeAgentResult, HookResult, ModelResult};

const NAME: &str = "TodoMiddleware";
/// The planning tool's name.
pub const WRITE_TODOS: &str = "write_todos";
/// Name of the persisted context-loss reminder.
pub const TODO_REMINDER: &str = markers::TODO_REMINDER;
/// Name of the request-only completion reminder.
pub const COMPLETION_REMINDER: &str = "todo_completion_reminder";
/// Bookkeeping keys kept at once (oldest dropped).
const MAX_KEYS: usize = 4096;
/// Run-context key remembering where the visible todo anchor sits.
const ANCHOR_KEY: RunKey<String> = RunKey::new("TodoMiddleware.anchor");

/// The system-prompt section for plan mode.
pub const TODO_SYSTEM_PROMPT: &str = "<todo_list_system>
You have a `write_todos` tool to plan and track multi-step work.
- Use it when a task needs three or more distinct steps, or when the user asks for several things; skip it for simple or purely conversational requests.
- Every call replaces the whole list: send all items, each with its current status (`pending`, `in_progress` or `completed`).
- Keep exactly one item `in_progress` while you work, and mark an item `completed` as soon as it is done instead of batching completions.
- Never mark an item completed while it is partly done, blocked or failing; keep it `in_progress` and add an item for what blocks it.
- Call `write_todos` at most once per response, never in parallel with itself.
- Revise the list as you learn more, and finish every item before you give your final answer.
</todo_list_system>";

/// Settings (DeerFlow has no config keys for this; plan mode is a per-run option).
#[derive(Clone, Debug, PartialEq)]
pub struct TodoSettings {
    /// Appended to the system prompt of every request; `None` when the agent's prompt already
    /// carries it.
    pub system_prompt: Option<String>,
    /// Completion reminders per run before the model may finish anyway.
    pub max_completion_reminders: usize,
}

impl Default for TodoSettings {
    fn default() -> Self {
        TodoSettings {
            system_prompt: Some(TODO_SYSTEM_PROMPT.to_owned()),
            max_completion_reminders: 2,
        }
    }
}

type Key = (String, String);

#[derive(Default)]
struct Book {
    pending: HashMap<Key, Vec<String>>,
    counts: HashMap<Key, usize>,
    touched: HashMap<Key, u64>,
    clock: u64,
}

impl Book {
    fn touch(&mut self, key: &Key) {
        self.clock += 1;
        self.touched.insert(key.clone(), self.clock);
        if self.touched.len() > MAX_KEYS {
            let mut keys: Vec<(u64, Key)> = self
                .touched
                .iter()
                .filter(|(k, _)| *k != key)
                .map(|(k, t)| (*t, k.clone()))
                .collect();
            keys.sort();
            let excess = self.touched.len() - MAX_KEYS;
            for (_, k) in keys.into_iter().take(excess) {
                self.drop_key(&k);
            }
        }
    }

    fn drop_key(&mut self, key: &Key) {
        self.pending.remove(key);
        self.counts.remove(key);
        self.touched.remove(key);
    }

    fn len(&self) -> usize {
        self.touched.len()
    }
}

pub struct TodoMiddleware {
    settings: TodoSettings,
    book: Mutex<Book>,
    /// `(base prompt, base + section)` of the last request, so the combined prompt is built once.
    prompt: Mutex<Option<(Arc<str>, Arc<str>)>>,
}

impl TodoMiddleware {
    pub fn new(settings: TodoSettings) -> Self {
        TodoMiddleware {
            settings,
            book: Mutex::new(Book::default()),
            prompt: Mutex::new(None),
        }
    }

    /// Keys with bookkeeping (tests of the size guard).
    pub fn tracked_runs(&self) -> usize {
        self.book.lock().map(|b| b.len()).unwrap_or(0)
    }

    fn key(run: &RunContext) -> Key {
        let t = if run.thread_id.is_empty() {
            "default"
        } else {
            &run.thread_id
        };
        let r = if run.run_id.is_empty() {
            "default"
        } else {
            &run.run_id
        };
        (t.to_owned(), r.to_owned())
    }

    fn system_prompt(&self, base: Option<&Arc<str>>, section: &str) -> Arc<str> {
        let Some(base) = base.filter(|b| !b.is_empty()) else {
            return Arc::from(section);
        };
        if let Ok(mut cached) = self.prompt.lock() {
            if let Some((b, combined)) = cached.as_ref() {
                if Arc::ptr_eq(b, base) || **b == **base {
                    return combined.clone();
                }
            }
            let combined: Arc<str> = Arc::from(format!("{base}\n\n{section}"));
            *cached = Some((base.clone(), combined.clone()));
            return combined;
        }
        Arc::from(format!("{base}\n\n{section}"))
    }
}

fn status_str(s: TodoStatus) -> &'static str {
    match s {
        TodoStatus::Pending => "pending",
        TodoStatus::InProgress => "in_progress",
        TodoStatus::Completed => "completed",
    }
}

/// `- [status] content`, one line per item.
pub fn format_todos<'a>(todos: impl IntoIterator<Item = &'a Todo>) -> String {
    todos
        .into_iter()
        .map(|t| format!("- [{}] {}", status_str(t.status), t.content))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The persisted reminder for a list that scrolled out of the context.
pub fn context_loss_reminder(todos: &[Todo]) -> String {
    format!(
        "<system_reminder>\nYour todo list is no longer visible in the conversation above, but it is still active. Its current state:\n\n{}\n\nKeep it up to date: call `write_todos` whenever an item's status changes.\n</system_reminder>",
        format_todos(todos)
    )
}

/// The completion reminder, listing only unfinished items.
pub fn completion_reminder(todos: &[Todo]) -> String {
    format!(
        "<system_reminder>\nYour todo list still has unfinished items:\n\n{}\n\nKeep working on them before you give your final answer, and call `write_todos` to mark each item completed as you finish it.\n</system_reminder>",
        format_todos(todos.iter().filter(|t| t.status != TodoStatus::Completed))
    )
}

/// An AI message calls `write_todos`.
pub fn calls_write_todos(m: &Message) -> bool {
    m.as_ai()
        .is_some_and(|ai| ai.tool_calls.iter().any(|c| c.name == WRITE_TODOS))
}

/// A persisted context-loss reminder.
pub fn is_todo_reminder(m: &Message) -> bool {
    matches!(m, Message::Human(_)) && m.name().as_deref() == Some(TODO_REMINDER)
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

/// Whether an AI message still intends to call tools (or failed to): structured calls, invalid
/// calls, raw provider `tool_calls`/`function_call`, or a tool-call finish reason.
pub fn has_tool_call_intent(ai: &AiMessage) -> bool {
    !ai.tool_calls.is_empty()
        || !ai.invalid_tool_calls.is_empty()
        || truthy(ai.additional_kwargs.get("tool_calls"))
        || truthy(ai.additional_kwargs.get("function_call"))
        || matches!(ai.finish_reason(), Some("tool_calls" | "function_call"))
}

fn hidden_human(name: &str, text: String, id: Option<String>) -> Message {
    let mut kwargs = Object::new();
    markers::mark_hidden(&mut kwargs);
    Message::Human(HumanMessage {
        content: Content::Text(text),
        additional_kwargs: kwargs.into(),
        name: Some(name.to_owned()),
        id,
        ..Default::default()
    })
}

#[async_trait]
impl Middleware for TodoMiddleware {
    fn name(&self) -> &str {
        NAME
    }

    fn hooks(&self) -> HookSet {
        HookSet::BEFORE_AGENT
            | HookSet::BEFORE_MODEL
            | HookSet::AFTER_MODEL
            | HookSet::WRAP_MODEL
            | HookSet::AFTER_AGENT
    }

    fn deferrable_hooks(&self) -> HookSet {
        HookSet::BEFORE_MODEL | HookSet::AFTER_MODEL
    }

    async fn before_agent(&self, _state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        let (thread, current) = Self::key(run);
        if let Ok(mut b) = self.book.lock() {
            let stale: Vec<Key> = b
                .touched
                .keys()
                .chain(b.counts.keys())
                .chain(b.pending.keys())
                .filter(|(t, r)| *t == thread && *r != current)
                .cloned()
                .collect();
            for k in stale {
                b.drop_key(&k);
            }
        }
        Ok(HookOutput::none())
    }

    async fn before_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let Some(todos) = state.todos.as_ref().filter(|t| !t.is_empty()) else {
            return Ok(HookOutput::none());
        };
        let msgs = &state.messages;
        let anchors = |m: &Message| calls_write_todos(m) || is_todo_reminder(m);
        if let Some(id) = run.get(&ANCHOR_KEY) {
            if msgs.by_id(&id).is_some_and(anchors) {
                return Ok(HookOutput::none());
            }
        }
        if let Some(m) = msgs.iter().rev().find(|m| anchors(m)) {
            if let Some(id) = m.id() {
                run.set(&ANCHOR_KEY, id.to_owned());
            }
            return Ok(HookOutput::none());
        }
        let id = uuid::Uuid::new_v4().to_string();
        run.set(&ANCHOR_KEY, id.clone());
        tracing::debug!(thread = %run.thread_id, "todo list left the context; reminding the model");
        let reminder = hidden_human(TODO_REMINDER, context_loss_reminder(todos), Some(id));
        Ok(HookOutput::update(StateUpdate::message(reminder)))
    }

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let Some(Message::Ai(last)) = state.messages.last() else {
            return Ok(HookOutput::none());
        };
        // Parallel write_todos calls would race on the list: answer each with an error.
        let calls: Vec<_> = last
            .tool_calls
            .iter()
            .filter(|c| c.name == WRITE_TODOS)
            .collect();
        if calls.len() > 1 {
            let n = calls.len();
            let errors = calls
                .into_iter()
                .map(|c| {
                    let mut m = ToolMessage::error(
                        c.id_str(),
                        format!("Error: `write_todos` was called {n} times in one response. Call it once per response, with the complete list."),
                    )
                    .with_name(WRITE_TODOS);
                    m.id = Some(uuid::Uuid::new_v4().to_string());
                    Message::Tool(m)
                })
                .collect();
            return Ok(HookOutput::update(StateUpdate::messages(errors)));
        }
        // A guard that forced the final answer (token budget, loop detection) has the last
        // word: reminding would buy more model calls past its limit.
        if has_tool_call_intent(last) || run.get(&keys::STOP_REASON).is_some() {
            return Ok(HookOutput::none());
        }
        let Some(todos) = state.todos.as_ref() else {
            return Ok(HookOutput::none());
        };
        if todos.iter().all(|t| t.status == TodoStatus::Completed) {
            return Ok(HookOutput::none());
        }
        let key = Self::key(run);
        let mut book = self
            .book
            .lock()
            .map_err(|_| MiddlewareError::new(NAME, "bookkeeping poisoned"))?;
        let count = book.counts.get(&key).copied().unwrap_or(0);
        if count >= self.settings.max_completion_reminders {
            return Ok(HookOutput::none());
        }
        book.pending
            .entry(key.clone())
            .or_default()
            .push(completion_reminder(todos));
        book.counts.insert(key.clone(), count + 1);
        book.touch(&key);
        tracing::info!(thread = %run.thread_id, reminder = count + 1, "final answer with unfinished todos; back to the model");
        Ok(HookOutput::jump(JumpTo::Model))
    }

    async fn after_agent(&self, _state: &ThreadState, run: &RunContext) -> AfterAgentResult {
        if let Ok(mut b) = self.book.lock() {
            b.drop_key(&Self::key(run));
        }
        Ok(HookOutput::none())
    }

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if let Some(section) = &self.settings.system_prompt {
            req.system_prompt = Some(self.system_prompt(req.system_prompt.as_ref(), section));
        }
        let key = Self::key(&req.run);
        let reminders = match self.book.lock() {
            Ok(mut b) => {
                let r = b.pending.remove(&key).unwrap_or_default();
                if !r.is_empty() || b.counts.contains_key(&key) {
                    b.touch(&key);
                }
                r
            }
            Err(_) => Vec::new(),
        };
        if !reminders.is_empty() {
            let mut unique: Vec<String> = Vec::with_capacity(reminders.len());
            for r in reminders {
                if !unique.contains(&r) {
                    unique.push(r);
                }
            }
            let msg = hidden_human(COMPLETION_REMINDER, unique.join("\n\n"), None);
            req.messages_mut().push(Arc::new(msg));
        }
        next.run(req).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_protocol::{InvalidToolCall, ToolCall};
    use serde_json::json;

    fn todo(content: &str, status: TodoStatus) -> Todo {
        Todo {
            content: content.into(),
            status,
        }
    }

    #[test]
    fn formatting_lists_status_and_content() {
        let todos = [
            todo("a", TodoStatus::Completed),
            todo("b", TodoStatus::InProgress),
            todo("c", TodoStatus::Pending),
        ];
        assert_eq!(
            format_todos(&todos),
            "- [completed] a\n- [in_progress] b\n- [pending] c"
        );
        let r = completion_reminder(&todos);
        assert!(r.starts_with("<system_reminder>\n"));
        assert!(r.ends_with("</system_reminder>"));
        assert!(r.contains("- [in_progress] b\n- [pending] c"));
        assert!(!r.contains("[completed] a"));
        assert!(context_loss_reminder(&todos).contains("- [completed] a"));
    }

    #[test]
    fn helpers_detect_write_todos_and_reminders() {
        let ai = Message::Ai(AiMessage {
            tool_calls: vec![ToolCall::new("c", WRITE_TODOS, Object::new())].into(),
            ..Default::default()
        });
        assert!(calls_write_todos(&ai));
        assert!(!calls_write_todos(&Message::ai("x")));
        assert!(is_todo_reminder(&hidden_human(
            TODO_REMINDER,
            "x".into(),
            None
        )));
        assert!(!is_todo_reminder(&Message::human("x")));
    }

    #[test]
    fn tool_call_intent_covers_every_signal() {
        let clean = AiMessage::default();
        assert!(!has_tool_call_intent(&clean));
        let structured = AiMessage {
            tool_calls: vec![ToolCall::new("c", "bash", Object::new())].into(),
            ..Default::default()
        };
        assert!(has_tool_call_intent(&structured));
        let invalid = AiMessage {
            invalid_tool_calls: vec![InvalidToolCall {
                kind: "invalid_tool_call".into(),
                id: Some("c".into()),
                name: Some("bash".into()),
                args: Some("{".into()),
                error: None,
            }]
            .into(),
            ..Default::default()
        };
        assert!(has_tool_call_intent(&invalid));
        let mut raw = AiMessage::default();
        raw.additional_kwargs
            .insert("tool_calls".into(), json!([{"id": "c"}]));
        assert!(has_tool_call_intent(&raw));
        let mut empty_raw = AiMessage::default();
        empty_raw
            .additional_kwargs
            .insert("tool_calls".into(), json!([]));
        assert!(!has_tool_call_intent(&empty_raw));
        let mut legacy = AiMessage::default();
        legacy
            .additional_kwargs
            .insert("function_call".into(), json!({"name": "bash"}));
        assert!(has_tool_call_intent(&legacy));
        for reason in ["tool_calls", "function_call"] {
            let mut f = AiMessage::default();
            f.response_metadata
                .insert("finish_reason".into(), json!(reason));
            assert!(has_tool_call_intent(&f));
        }
        let mut stop = AiMessage::default();
        stop.response_metadata
            .insert("finish_reason".into(), json!("stop"));
        assert!(!has_tool_call_intent(&stop));
    }

    #[test]
    fn the_bookkeeping_is_bounded() {
        let mut b = Book::default();
        for i in 0..(MAX_KEYS + 10) {
            let k = ("t".to_owned(), format!("r{i}"));
            b.counts.insert(k.clone(), 1);
            b.touch(&k);
        }
        assert_eq!(b.len(), MAX_KEYS);
        // The newest key survives, the oldest went.
        assert!(b
            .counts
            .contains_key(&("t".to_owned(), format!("r{}", MAX_KEYS + 9))));
        assert!(!b.counts.contains_key(&("t".to_owned(), "r0".to_owned())));
    }
}
