//! TokenUsage (chain L7, after_model): record what each model call cost and what the step was
//! for (spec 40 part 2 §5.2, spec 60 §4).
//!
//! After every lead model call it
//! 1. folds the usage of subagents (reported by `task` tool messages in
//!    `additional_kwargs.subagent_token_usage`) into the AI message that dispatched them, once —
//!    each folded tool message is marked `subagent_token_usage_attributed`;
//! 2. logs the new AI message's usage and reports it to run observers
//!    (`RunEvent::Middleware{action: "token_usage"}`);
//! 3. stamps the step's attribution (`additional_kwargs.token_usage_attribution`: todo changes,
//!    subagent dispatch, search, final answer …) on the AI message for the UI.
//!
//! It looks only at the new AI message and the tool batch right before it, so a step costs
//! O(that batch), not O(history). Sits after Todo and before Title; the token budget (L16) reads
//! the usage it folds in.

use std::collections::{BTreeMap, VecDeque};

use antler_protocol::hash::{FastMap, FastSet};
use antler_protocol::{
    AiMessage, Message, StateUpdate, ThreadState, Todo, TodoStatus, ToolCall, UsageMetadata,
};
use antler_runtime::{HookOutput, HookSet, Middleware, RunContext, RunEvent};
use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::hook::HookResult;

pub use antler_config::TokenUsageConfig;

const NAME: &str = "TokenUsageMiddleware";

/// Where the step attribution is stored on the AI message.
pub const ATTRIBUTION_KEY: &str = "token_usage_attribution";
/// Where a `task` tool message carries its subagent's cumulative usage.
pub const SUBAGENT_USAGE_KEY: &str = "subagent_token_usage";
/// Set on a tool message once its subagent usage was folded into the dispatching AI message.
pub const SUBAGENT_USAGE_ATTRIBUTED_KEY: &str = "subagent_token_usage_attributed";

/// Logs usage, folds subagent usage into the dispatching message, stamps step attribution.
#[derive(Debug, Default)]
pub struct TokenUsageMiddleware {
    settings: TokenUsageConfig,
}

impl TokenUsageMiddleware {
    pub fn new(settings: TokenUsageConfig) -> Self {
        TokenUsageMiddleware { settings }
    }

    pub fn settings(&self) -> &TokenUsageConfig {
        &self.settings
    }
}

/// A subagent usage map in the contract shape: three non-negative integers (booleans and other
/// types rejected).
pub fn normalize_usage(value: &Value) -> Option<UsageMetadata> {
    let obj = value.as_object()?;
    let field = |k: &str| match obj.get(k) {
        Some(Value::Number(n)) => n.as_u64(),
        _ => None,
    };
    Some(UsageMetadata {
        input_tokens: field("input_tokens")?,
        output_tokens: field("output_tokens")?,
        total_tokens: field("total_tokens")?,
        ..Default::default()
    })
}

fn has_call(ai: &AiMessage, id: &str) -> bool {
    ai.tool_calls.iter().any(|c| c.id.as_deref() == Some(id))
}

/// Fold unattributed subagent usage of the tool batch just before the newest message into the AI
/// message that dispatched each call (nearest earlier AI message with that call id: matching is
/// by position, so a provider reusing call ids in another run never hits an older message).
/// Returns the rewritten messages by position.
fn fold_subagent_usage(state: &ThreadState, run: &RunContext) -> BTreeMap<usize, Message> {
    let msgs = &state.messages;
    let mut updates: BTreeMap<usize, Message> = BTreeMap::new();
    let n = msgs.len();
    if n < 2 {
        return updates;
    }
    for idx in (0..n - 1).rev() {
        let Some(Message::Tool(tool)) = msgs.get(idx) else {
            break;
        };
        if tool.tool_call_id.is_empty() {
            break;
        }
        let attributed = tool
            .additional_kwargs
            .get(SUBAGENT_USAGE_ATTRIBUTED_KEY)
            .and_then(Value::as_bool)
            == Some(true);
        let usage = (!attributed)
            .then(|| tool.additional_kwargs.get(SUBAGENT_USAGE_KEY))
            .flatten()
            .and_then(normalize_usage);
        if let Some(usage) = usage {
            let dispatch = (0..idx).rev().find(|&i| {
                matches!(msgs.get(i), Some(Message::Ai(ai)) if has_call(ai, &tool.tool_call_id))
            });
            if let Some(d) = dispatch {
                let mut ai = match updates.get(&d) {
                    Some(Message::Ai(already)) => already.clone(),
                    _ => match msgs.get(d) {
                        Some(Message::Ai(original)) => original.clone(),
                        _ => break,
                    },
                };
                let prev = ai.usage_metadata.take().unwrap_or_default();
                ai.usage_metadata = Some(UsageMetadata {
                    input_tokens: prev.input_tokens + usage.input_tokens,
                    output_tokens: prev.output_tokens + usage.output_tokens,
                    total_tokens: prev.total_tokens + usage.total_tokens,
                    ..prev
                });
                if run.observed() {
                    let payload = json!({
                        "message_id": ai.id,
                        "tool_call_id": tool.tool_call_id,
                        "input_tokens": usage.input_tokens,
                        "output_tokens": usage.output_tokens,
                        "total_tokens": usage.total_tokens,
                    });
                    run.observe(&RunEvent::Middleware {
                        name: NAME,
                        action: "subagent_usage_attributed",
                        payload: &payload,
                    });
                }
                updates.insert(d, Message::Ai(ai));
                let mut marked = tool.clone();
                marked
                    .additional_kwargs
                    .insert(SUBAGENT_USAGE_ATTRIBUTED_KEY.into(), Value::Bool(true));
                updates.insert(idx, Message::Tool(marked));
            }
        }
    }
    updates
}

/// Log (and report) one model call's usage.
fn record_usage(ai: &AiMessage, run: &RunContext) {
    let Some(usage) = &ai.usage_metadata else {
        return;
    };
    let details = |d: &Option<Map<String, Value>>| {
        d.as_ref()
            .filter(|m| !m.is_empty())
            .map(|m| Value::Object(m.clone()))
    };
    let input_details = details(&usage.input_token_details);
    let output_details = details(&usage.output_token_details);
    let mut suffix = String::new();
    if let Some(d) = &input_details {
        suffix.push_str(&format!(" input_token_details={d}"));
    }
    if let Some(d) = &output_details {
        suffix.push_str(&format!(" output_token_details={d}"));
    }
    tracing::info!(
        thread = %run.thread_id,
        run = %run.run_id,
        "LLM token usage: input={} output={} total={}{suffix}",
        usage.input_tokens,
        usage.output_tokens,
        usage.total_tokens,
    );
    if run.observed() {
        let mut payload = json!({
            "message_id": ai.id,
            "model_name": ai.response_metadata.get("model_name"),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        });
        if let (Some(d), Some(p)) = (input_details, payload.as_object_mut()) {
            p.insert("input_token_details".into(), d);
        }
        if let (Some(d), Some(p)) = (output_details, payload.as_object_mut()) {
            p.insert("output_token_details".into(), d);
        }
        run.observe(&RunEvent::Middleware {
            name: NAME,
            action: "token_usage",
            payload: &payload,
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Step attribution

/// A todo as `write_todos` arguments or the state hold it, normalized: content trimmed (absent
/// when blank), status only when it is one of the three known ones.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NTodo {
    content: Option<String>,
    status: Option<&'static str>,
}

/// `s` trimmed, `None` when blank.
fn trimmed(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// A string argument, trimmed; `None` when absent, blank or not a string.
fn string_arg(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).and_then(trimmed)
}

fn known_status(s: &str) -> Option<&'static str> {
    match s {
        "pending" => Some("pending"),
        "in_progress" => Some("in_progress"),
        "completed" => Some("completed"),
        _ => None,
    }
}

fn todos_from_args(v: Option<&Value>) -> Vec<NTodo> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|o| NTodo {
            content: string_arg(o.get("content")),
            status: o
                .get("status")
                .and_then(Value::as_str)
                .and_then(known_status),
        })
        .collect()
}

fn todos_from_state(todos: &[Todo]) -> Vec<NTodo> {
    todos
        .iter()
        .map(|t| NTodo {
            content: trimmed(&t.content),
            status: Some(match t.status {
                TodoStatus::Pending => "pending",
                TodoStatus::InProgress => "in_progress",
                TodoStatus::Completed => "completed",
            }),
        })
        .collect()
}

fn todo_action_kind(previous: Option<&NTodo>, current: &NTodo) -> &'static str {
    let by_status = || match current.status {
        Some("completed") => "todo_complete",
        Some("in_progress") => "todo_start",
        _ => "todo_update",
    };
    match previous {
        None => by_status(),
        Some(p) if p.content != current.content => "todo_update",
        Some(_) => by_status(),
    }
}

/// The todo changes a `write_todos` call makes: matched by content (first unmatched occurrence),
/// else by position when that content was never in the list; unmatched old entries are removals.
fn todo_actions(previous: &[NTodo], next: &[NTodo]) -> Vec<(&'static str, String)> {
    let mut by_content: FastMap<&str, VecDeque<usize>> = FastMap::default();
    for (i, t) in previous.iter().enumerate() {
        if let Some(c) = t.content.as_deref() {
            by_content.entry(c).or_default().push_back(i);
        }
    }
    let mut matched: FastSet<usize> = FastSet::default();
    let mut actions = Vec::new();
    for (index, todo) in next.iter().enumerate() {
        let Some(content) = todo.content.as_deref() else {
            continue;
        };
        let mut prev: Option<&NTodo> = None;
        if let Some(queue) = by_content.get_mut(content) {
            while queue.front().is_some_and(|i| matched.contains(i)) {
                queue.pop_front();
            }
            if let Some(i) = queue.pop_front() {
                matched.insert(i);
                prev = previous.get(i);
            }
        }
        if prev.is_none()
            && !by_content.contains_key(content)
            && index < previous.len()
            && !matched.contains(&index)
        {
            prev = previous.get(index);
            matched.insert(index);
        }
        if let Some(p) = prev {
            if p.content.as_deref() == Some(content) && p.status == todo.status {
                continue;
            }
        }
        actions.push((todo_action_kind(prev, todo), content.to_owned()));
    }
    for (i, t) in previous.iter().enumerate() {
        if matched.contains(&i) {
            continue;
        }
        if let Some(c) = &t.content {
            actions.push(("todo_remove", c.clone()));
        }
    }
    actions
}

/// A JSON object of exactly these entries, allocated once at its final size (`json!` grows the
/// map as it inserts; one is kept per AI message for the whole thread's life).
fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let mut map = Map::with_capacity(N);
    for (k, v) in entries {
        map.insert(k.to_owned(), v);
    }
    Value::Object(map)
}

fn describe_call(call: &ToolCall, todos: &[NTodo]) -> Vec<Value> {
    let name = trimmed(&call.name).unwrap_or_else(|| "unknown".into());
    let args = &call.args;
    let id = call.id.as_deref().and_then(trimmed);
    match name.as_str() {
        "write_todos" => {
            let actions = todo_actions(todos, &todos_from_args(args.get("todos")));
            if actions.is_empty() {
                return vec![object([
                    ("kind", json!("tool")),
                    ("tool_name", json!(name)),
                    ("tool_call_id", json!(id)),
                ])];
            }
            actions
                .into_iter()
                .map(|(kind, content)| {
                    object([
                        ("kind", json!(kind)),
                        ("content", json!(content)),
                        ("tool_call_id", json!(id)),
                    ])
                })
                .collect()
        }
        "task" => vec![object([
            ("kind", json!("subagent")),
            ("description", json!(string_arg(args.get("description")))),
            (
                "subagent_type",
                json!(string_arg(args.get("subagent_type"))),
            ),
            ("tool_call_id", json!(id)),
        ])],
        "web_search" | "image_search" => vec![object([
            ("kind", json!("search")),
            ("tool_name", json!(name)),
            ("query", json!(string_arg(args.get("query")))),
            ("tool_call_id", json!(id)),
        ])],
        "present_files" => vec![object([
            ("kind", json!("present_files")),
            ("tool_call_id", json!(id)),
        ])],
        "ask_clarification" => vec![object([
            ("kind", json!("clarification")),
            ("tool_call_id", json!(id)),
        ])],
        _ => vec![object([
            ("kind", json!("tool")),
            ("tool_name", json!(name)),
            ("description", json!(string_arg(args.get("description")))),
            ("tool_call_id", json!(id)),
        ])],
    }
}

/// `{version: 1, kind, shared_attribution, tool_call_ids, actions}` for one AI message, given the
/// todos in state before it.
pub fn build_attribution(ai: &AiMessage, todos: &[Todo]) -> Value {
    let mut current = todos_from_state(todos);
    let mut actions: Vec<Value> = Vec::new();
    for call in &ai.tool_calls {
        actions.extend(describe_call(call, &current));
        if call.name == "write_todos" {
            current = todos_from_args(call.args.get("todos"));
        }
    }
    let ids: Vec<String> = ai
        .tool_calls
        .iter()
        .filter_map(|c| c.id.as_deref().and_then(trimmed))
        .collect();
    let first_kind = actions
        .first()
        .and_then(|a| a.get("kind"))
        .and_then(Value::as_str);
    let kind = match (actions.len(), first_kind) {
        (1, Some("todo_start" | "todo_complete" | "todo_update" | "todo_remove")) => "todo_update",
        (1, Some("subagent")) => "subagent_dispatch",
        (0, _) if !ai.content.is_empty() => "final_answer",
        (0, _) => "thinking",
        _ => "tool_batch",
    };
    let shared = actions.len() > 1;
    object([
        ("version", Value::from(1)),
        ("kind", Value::from(kind)),
        ("shared_attribution", Value::Bool(shared)),
        ("tool_call_ids", Value::from(ids)),
        ("actions", Value::Array(actions)),
    ])
}

#[async_trait]
impl Middleware for TokenUsageMiddleware {
    middleware_identity!(NAME, HookSet::AFTER_MODEL, deferrable: HookSet::AFTER_MODEL);

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        if state.messages.is_empty() {
            return Ok(HookOutput::none());
        }
        let mut updates = fold_subagent_usage(state, run);
        let last = state.messages.len() - 1;
        if let Some(Message::Ai(ai)) = state.messages.get(last) {
            record_usage(ai, run);
            let todos = state.todos.as_deref().unwrap_or_default();
            let attribution = build_attribution(ai, todos);
            if ai.additional_kwargs.get(ATTRIBUTION_KEY) != Some(&attribution) {
                let mut stamped = ai.clone();
                stamped
                    .additional_kwargs
                    .insert(ATTRIBUTION_KEY.into(), attribution);
                updates.insert(last, Message::Ai(stamped));
            }
        }
        if updates.is_empty() {
            return Ok(HookOutput::none());
        }
        // Same ids, list order: the reducer replaces each in place.
        Ok(HookOutput::update(StateUpdate::messages(
            updates.into_values().collect(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(content: &str, status: &'static str) -> NTodo {
        NTodo {
            content: Some(content.to_owned()),
            status: Some(status),
        }
    }

    #[test]
    fn duplicate_content_emits_a_remove() {
        let previous = [t("A", "pending"), t("B", "pending")];
        let next = [t("A", "in_progress"), t("A", "completed")];
        let actions = todo_actions(&previous, &next);
        assert!(
            actions.contains(&("todo_remove", "B".to_owned())),
            "{actions:?}"
        );
    }

    #[test]
    fn positional_match_when_content_changed() {
        let previous = [t("Draft plan", "in_progress")];
        let next = [t("Draft the plan", "in_progress")];
        assert_eq!(
            todo_actions(&previous, &next),
            [("todo_update", "Draft the plan".to_owned())]
        );
    }

    #[test]
    fn unchanged_todos_yield_nothing() {
        let previous = [t("A", "pending")];
        assert!(todo_actions(&previous, &previous).is_empty());
    }

    #[test]
    fn usage_validation_rejects_booleans_negatives_and_missing_fields() {
        assert!(normalize_usage(
            &json!({"input_tokens": 1, "output_tokens": 2, "total_tokens": 3})
        )
        .is_some());
        assert!(normalize_usage(
            &json!({"input_tokens": true, "output_tokens": 2, "total_tokens": 3})
        )
        .is_none());
        assert!(normalize_usage(
            &json!({"input_tokens": -1, "output_tokens": 2, "total_tokens": 3})
        )
        .is_none());
        assert!(normalize_usage(
            &json!({"input_tokens": 1.5, "output_tokens": 2, "total_tokens": 3})
        )
        .is_none());
        assert!(normalize_usage(&json!({"input_tokens": 1, "output_tokens": 2})).is_none());
        assert!(normalize_usage(&json!([1, 2, 3])).is_none());
    }
}
