//! DanglingToolCall (chain S7, wrap_model): make the model-bound transcript protocol-valid —
//! every tool call of an assistant message followed by exactly one result, orphan results gone,
//! malformed call names, ids and argument strings repaired (spec 30
//! §DanglingToolCallMiddleware).
//!
//! A run interrupted mid-tool leaves an AI message whose calls have no results; strict
//! OpenAI-compatible providers reject such a history with HTTP 400. The fix must land *right
//! after* the offending message, which a state write (appended at the end by the reducer)
//! cannot do, so this is a model-call wrapper and only the request changes: the checkpointed
//! history stays as it happened.
//!
//! Sits outside LLMErrorHandling so every retry sends the repaired transcript. Cost per step: a
//! healthy transcript is recognised by one allocation-free walk ([`is_well_formed`]) and the
//! request's shared message list is forwarded untouched; only a transcript that needs repair
//! pays for [`build_patched`].
//!
//! Which view of a call counts: structured `tool_calls`, then `invalid_tool_calls`; the raw
//! provider copy in `additional_kwargs.tool_calls` only when both are empty (that is when a
//! provider serializes it). Raw argument strings are normalized only in that case too — a
//! shadowed raw copy never reaches the wire, and skipping it keeps the healthy path free of JSON
//! parsing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use antler_protocol::{AiMessage, Content, InvalidToolCall, Message, ToolMessage};
use antler_runtime::{HookSet, Middleware, ModelNext, ModelRequest, RunKey};
use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::hook::ModelResult;

/// The middleware's name in chain listings.
pub const NAME: &str = "DanglingToolCallMiddleware";

/// Name given to calls whose name is missing or blank.
pub const UNKNOWN_TOOL: &str = "unknown_tool";

/// Prefix of ids minted for calls whose id is missing or blank (request-only).
pub const SYNTHETIC_ID_PREFIX: &str = "deerflow_synthetic_tool_call_";

/// Longest parser error quoted back to the model.
const MAX_DETAIL_CHARS: usize = 500;

/// Run-context key: how much of the request's message list is known to be well-formed.
const CHECKED_KEY: RunKey<Checked> = RunKey::new("DanglingToolCallMiddleware.checked");

/// The first `n` messages are well-formed; `id` is the id of the `n`-th (to tell whether the
/// list still starts the same).
#[derive(Clone)]
struct Checked {
    n: usize,
    id: Option<String>,
}

const INTERRUPTED_TEXT: &str = "[Tool call was interrupted and did not return a result.]";
const MISSING_NAME_TEXT: &str = "[Tool call could not be executed because its name was missing or empty. Use one of the available tool names when retrying.]";

/// Inserts placeholder results for unanswered calls and drops orphan results, in the request.
#[derive(Debug, Default)]
pub struct DanglingToolCallMiddleware;

impl DanglingToolCallMiddleware {
    pub fn new() -> Self {
        DanglingToolCallMiddleware
    }
}

#[async_trait]
impl Middleware for DanglingToolCallMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL);

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        // A well-formed prefix stays well-formed when messages are appended (every call in it
        // is answered inside it), so within a run only the new tail needs checking: O(new
        // messages) per model call instead of O(history).
        let msgs = &req.messages;
        let start = req
            .run
            .get(&CHECKED_KEY)
            .and_then(|Checked { n, id }| {
                (n <= msgs.len() && (n == 0 || msgs[n - 1].id() == id.as_deref())).then_some(n)
            })
            .unwrap_or(0);
        if is_well_formed(&msgs[start..]) {
            let last = msgs.last().and_then(|m| m.id()).map(str::to_owned);
            req.run.set(
                &CHECKED_KEY,
                Checked {
                    n: msgs.len(),
                    id: last,
                },
            );
        } else if let Some(patched) = build_patched(msgs) {
            req.messages = Arc::new(patched);
        }
        next.run(req).await
    }
}

// ------------------------------------------------------------------------------ definitions

fn valid(s: &str) -> bool {
    !s.trim().is_empty()
}

fn valid_value(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::String(s)) if valid(s))
}

fn normalize_name(name: Option<&str>) -> String {
    match name {
        Some(n) if valid(n) => n.trim().to_owned(),
        _ => UNKNOWN_TOOL.to_owned(),
    }
}

/// A name that survives normalization unchanged.
fn clean_name(name: &str) -> bool {
    valid(name) && name.trim() == name
}

fn parses_as_object(s: &str) -> bool {
    matches!(serde_json::from_str::<Value>(s), Ok(Value::Object(_)))
}

/// Arguments as a JSON-object string safe to replay: an object is encoded, a string that
/// parses as an object is kept, anything else becomes `{}`.
fn normalize_arguments(args: Option<&Value>) -> String {
    match args {
        Some(Value::Object(o)) => serde_json::to_string(o).unwrap_or_else(|_| "{}".to_owned()),
        Some(Value::String(s)) if parses_as_object(s) => s.clone(),
        _ => "{}".to_owned(),
    }
}

/// The name a raw provider entry declares: `name`, else `function.name`.
fn raw_name(entry: &Map<String, Value>) -> Option<&Value> {
    match entry.get("name") {
        Some(n) if valid_value(Some(n)) => Some(n),
        other => match entry.get("function") {
            Some(Value::Object(f)) => f.get("name"),
            _ => other,
        },
    }
}

fn raw_view(ai: &AiMessage) -> Option<&Vec<Value>> {
    match ai.additional_kwargs.get("tool_calls") {
        Some(Value::Array(raw)) => Some(raw),
        _ => None,
    }
}

/// The raw copy is what a provider serializes only when both structured views are empty.
fn raw_is_serialized(ai: &AiMessage) -> bool {
    ai.tool_calls.is_empty() && ai.invalid_tool_calls.is_empty()
}

/// One call of an AI message as pairing sees it.
struct CallView {
    id: Option<String>,
    /// Normalized.
    name: String,
    invalid_name: bool,
    /// From `invalid_tool_calls`: `Some(error)` (possibly empty).
    invalid: Option<String>,
}

/// The calls of an AI message that need results, in DeerFlow's order: structured, raw (only
/// when it is the serialized view), invalid.
fn message_calls(ai: &AiMessage) -> Vec<CallView> {
    let mut out = Vec::new();
    for c in &ai.tool_calls {
        out.push(CallView {
            id: c.id.clone(),
            name: normalize_name(Some(&c.name)),
            invalid_name: !valid(&c.name),
            invalid: None,
        });
    }
    if raw_is_serialized(ai) {
        for entry in raw_view(ai).into_iter().flatten() {
            let Value::Object(entry) = entry else {
                continue;
            };
            let name = raw_name(entry).and_then(Value::as_str);
            out.push(CallView {
                id: entry.get("id").and_then(Value::as_str).map(str::to_owned),
                name: normalize_name(name),
                invalid_name: !name.is_some_and(valid),
                invalid: None,
            });
        }
    }
    for c in &ai.invalid_tool_calls {
        let name = c.name.as_deref();
        out.push(CallView {
            id: c.id.clone(),
            name: normalize_name(name),
            invalid_name: !name.is_some_and(valid),
            invalid: Some(c.error.clone().unwrap_or_default()),
        });
    }
    out
}

fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

/// The text of a placeholder result for a call that has none.
pub fn placeholder_text(name: &str, invalid_name: bool, invalid: Option<&str>) -> String {
    if invalid_name {
        return MISSING_NAME_TEXT.to_owned();
    }
    let Some(error) = invalid else {
        return INTERRUPTED_TEXT.to_owned();
    };
    let error = truncate_chars(error, MAX_DETAIL_CHARS);
    if name == "write_file" {
        let parser = if error.is_empty() {
            String::new()
        } else {
            format!(" Parser error: {error}")
        };
        return format!(
            "[write_file failed before execution: its arguments were not valid JSON, so no file was written. \
             This usually happens when a very large Markdown file in a single tool call carries unescaped quotes, \
             inline JSON, backslashes or code fences in `content`. Do not retry the same large `write_file` payload \
             for this file: give the content as normal assistant text in your next response instead, and if a file \
             is still needed later, split the file into smaller sections written one call at a time.{parser}]"
        );
    }
    if error.is_empty() {
        "[Tool call could not be executed because its arguments were invalid.]".to_owned()
    } else {
        format!("[Tool call could not be executed because its arguments were invalid: {error}]")
    }
}

// ----------------------------------------------------------------------------- fast check

/// Whether [`build_patched`] would leave `messages` unchanged, decided without allocating:
/// every AI message's calls (valid ids, clean names, no invalid calls, no raw-only view) are
/// answered by the tool messages directly after it, in call order, and no other tool message
/// exists. Conservative: `false` only means the full repair must look.
pub fn is_well_formed(messages: &[Arc<Message>]) -> bool {
    let mut i = 0;
    while i < messages.len() {
        match &*messages[i] {
            Message::Tool(_) => return false,
            Message::Ai(ai) => {
                if !ai.invalid_tool_calls.is_empty() {
                    return false;
                }
                if let Some(raw) = raw_view(ai) {
                    if ai.tool_calls.is_empty() && !raw.is_empty() {
                        return false;
                    }
                    // Shadowed raw copies still get their names normalized.
                    let dirty = raw
                        .iter()
                        .any(|e| matches!(e, Value::Object(o) if raw_entry_needs_fix(o, false)));
                    if dirty {
                        return false;
                    }
                }
                for (j, call) in ai.tool_calls.iter().enumerate() {
                    let Some(id) = call.id.as_deref().filter(|id| valid(id)) else {
                        return false;
                    };
                    if !clean_name(&call.name) {
                        return false;
                    }
                    match messages.get(i + 1 + j).map(|m| &**m) {
                        Some(Message::Tool(t)) if t.tool_call_id == id => {}
                        _ => return false,
                    }
                }
                i += ai.tool_calls.len();
            }
            Message::Human(_) | Message::System(_) | Message::Remove(_) => {}
        }
        i += 1;
    }
    true
}

// ---------------------------------------------------------------------------- id recovery

/// A call whose missing id was replaced, still waiting for its result.
struct OpenCall {
    /// The original id as a tool message would carry it (`null` → `""`).
    original: String,
    synthetic: String,
    name: Option<String>,
}

fn synthetic_id(msg_index: usize, source: &str, position: usize) -> String {
    format!("{SYNTHETIC_ID_PREFIX}{msg_index}_{source}_{position}")
}

/// Either side missing a usable name cannot contradict the other.
fn names_can_pair(call: Option<&str>, result: Option<&str>) -> bool {
    match (call.filter(|n| valid(n)), result.filter(|n| valid(n))) {
        (Some(a), Some(b)) => a.trim() == b.trim(),
        _ => true,
    }
}

/// Tool messages with a malformed id between the AI message at `start` and the next AI message.
fn malformed_results_in_turn(messages: &[Arc<Message>], start: usize) -> usize {
    messages[start + 1..]
        .iter()
        .take_while(|m| !matches!(***m, Message::Ai(_)))
        .filter(|m| matches!(&***m, Message::Tool(t) if !valid(&t.tool_call_id)))
        .count()
}

/// Replace malformed call ids in the serialized views with synthetic ones and re-point the
/// turn's malformed results at them (spec 30 step 1). Unchanged messages keep their `Arc`.
fn recover_ids(messages: &[Arc<Message>]) -> Vec<Arc<Message>> {
    let mut out: Vec<Arc<Message>> = Vec::with_capacity(messages.len());
    // The malformed calls of the most recent AI message (results answer their own turn only).
    let mut open: Vec<OpenCall> = Vec::new();
    let mut positional = false;
    for (index, msg) in messages.iter().enumerate() {
        match &**msg {
            Message::Ai(ai) => {
                let (copy, assigned) = relabel(ai, index);
                positional = !assigned.is_empty()
                    && malformed_results_in_turn(messages, index) == assigned.len();
                open = assigned;
                out.push(match copy {
                    Some(c) => Arc::new(Message::Ai(c)),
                    None => msg.clone(),
                });
            }
            Message::Tool(t) if !valid(&t.tool_call_id) => {
                let mut candidates = open.iter().enumerate().filter(|(_, c)| {
                    c.original == t.tool_call_id
                        && names_can_pair(c.name.as_deref(), t.name.as_deref())
                });
                let first = candidates.next().map(|(i, _)| i);
                let several = candidates.next().is_some();
                // One compatible call, or several that line up one-to-one with this turn's
                // results; anything else is unattributable and dropped as an orphan below.
                match first.filter(|_| !several || positional) {
                    Some(i) => {
                        let call = open.remove(i);
                        let mut t = t.clone();
                        t.tool_call_id = call.synthetic;
                        out.push(Arc::new(Message::Tool(t)));
                    }
                    None => out.push(msg.clone()),
                }
            }
            _ => out.push(msg.clone()),
        }
    }
    out
}

/// Give every call of `ai` without a usable id a synthetic one, in the views a provider
/// serializes. Returns the rewritten message (if anything changed) and the relabelled calls.
/// `calls` with a synthetic id (`synthetic_id(index, kind, pos)`) on every call whose id is
/// missing or invalid, each swap recorded in `assigned`; `None` when every id is valid.
fn relabel_ids<C: Clone>(
    calls: &[C],
    index: usize,
    kind: &str,
    id: impl Fn(&mut C) -> &mut Option<String>,
    name: impl Fn(&C) -> Option<String>,
    assigned: &mut Vec<OpenCall>,
) -> Option<Vec<C>> {
    let mut calls = calls.to_vec();
    let mut changed = false;
    for (pos, c) in calls.iter_mut().enumerate() {
        if id(c).as_deref().is_some_and(valid) {
            continue;
        }
        let synthetic = synthetic_id(index, kind, pos);
        assigned.push(OpenCall {
            original: id(c).clone().unwrap_or_default(),
            synthetic: synthetic.clone(),
            name: name(c),
        });
        *id(c) = Some(synthetic);
        changed = true;
    }
    changed.then_some(calls)
}

fn relabel(ai: &AiMessage, index: usize) -> (Option<AiMessage>, Vec<OpenCall>) {
    let mut assigned = Vec::new();
    let mut copy: Option<AiMessage> = None;

    let fresh = relabel_ids(
        &ai.tool_calls,
        index,
        "call",
        |c| &mut c.id,
        |c| Some(c.name.clone()),
        &mut assigned,
    );
    if let Some(calls) = fresh {
        // Keep the provider mirrors consistent with the new ids (spec 10 §1.5).
        copy.get_or_insert_with(|| ai.clone()).set_tool_calls(calls);
    }
    let fresh = relabel_ids(
        &ai.invalid_tool_calls,
        index,
        "invalid",
        |c| &mut c.id,
        |c| c.name.clone(),
        &mut assigned,
    );
    if let Some(invalid) = fresh {
        copy.get_or_insert_with(|| ai.clone()).invalid_tool_calls = invalid.into();
    }

    let raw_needs_ids = raw_is_serialized(ai)
        && raw_view(ai).is_some_and(|raw| {
            raw.iter()
                .any(|e| matches!(e, Value::Object(o) if !valid_value(o.get("id"))))
        });
    if raw_needs_ids {
        let mut raw = raw_view(ai).cloned().unwrap_or_default();
        for (pos, entry) in raw.iter_mut().enumerate() {
            let Value::Object(entry) = entry else {
                continue;
            };
            if valid_value(entry.get("id")) {
                continue;
            }
            let synthetic = synthetic_id(index, "raw", pos);
            assigned.push(OpenCall {
                original: entry
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                synthetic: synthetic.clone(),
                name: raw_name(entry).and_then(Value::as_str).map(str::to_owned),
            });
            entry.insert("id".into(), Value::String(synthetic));
        }
        copy.get_or_insert_with(|| ai.clone())
            .additional_kwargs
            .insert("tool_calls".into(), Value::Array(raw));
    }
    (copy, assigned)
}

// ---------------------------------------------------------------------------- sanitizing

fn invalid_call_needs_fix(c: &InvalidToolCall) -> bool {
    !c.name.as_deref().is_some_and(clean_name) || !c.args.as_deref().is_some_and(parses_as_object)
}

/// Whether sanitizing would change a raw provider entry: its name (`function.name` when there
/// is a `function` object, else `name`), and its argument string when the raw view is the one
/// serialized.
fn raw_entry_needs_fix(entry: &Map<String, Value>, serialized: bool) -> bool {
    let name_ok = |v: Option<&Value>| matches!(v, Some(Value::String(n)) if clean_name(n));
    match entry.get("function") {
        Some(Value::Object(f)) => {
            !name_ok(f.get("name"))
                || (serialized
                    && !matches!(f.get("arguments"), Some(Value::String(a)) if parses_as_object(a)))
        }
        _ => !name_ok(entry.get("name")),
    }
}

fn fix_raw_entry(entry: &mut Map<String, Value>, serialized: bool) {
    if let Some(Value::Object(function)) = entry.get_mut("function") {
        let name = normalize_name(function.get("name").and_then(Value::as_str));
        function.insert("name".into(), Value::String(name));
        if serialized {
            let args = normalize_arguments(function.get("arguments"));
            function.insert("arguments".into(), Value::String(args));
        }
    } else {
        let name = normalize_name(entry.get("name").and_then(Value::as_str));
        entry.insert("name".into(), Value::String(name));
    }
}

/// The AI message with names (and serialized argument strings) safe to replay, or `None` when
/// nothing changes. Checks before it copies: a clean message costs no allocation.
fn sanitize_ai(ai: &AiMessage) -> Option<AiMessage> {
    let structured = ai.tool_calls.iter().any(|c| !clean_name(&c.name));
    let invalid = ai.invalid_tool_calls.iter().any(invalid_call_needs_fix);
    let serialized = raw_is_serialized(ai);
    let raw = raw_view(ai).is_some_and(|raw| {
        raw.iter()
            .any(|e| matches!(e, Value::Object(o) if raw_entry_needs_fix(o, serialized)))
    });
    if !(structured || invalid || raw) {
        return None;
    }
    let mut m = ai.clone();
    if structured {
        let calls = ai
            .tool_calls
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.name = normalize_name(Some(&c.name));
                c
            })
            .collect();
        m.set_tool_calls(calls);
    }
    if invalid {
        for c in m.invalid_tool_calls.iter_mut() {
            c.name = Some(normalize_name(c.name.as_deref()));
            c.args = Some(normalize_arguments(
                c.args.clone().map(Value::String).as_ref(),
            ));
        }
    }
    if let Some(Value::Array(entries)) = m.additional_kwargs.get_mut("tool_calls") {
        for entry in entries.iter_mut() {
            if let Value::Object(entry) = entry {
                if raw_entry_needs_fix(entry, serialized) {
                    fix_raw_entry(entry, serialized);
                }
            }
        }
    }
    Some(m)
}

// -------------------------------------------------------------------------------- repair

/// The repaired transcript, or `None` when `messages` is already valid (spec 30 algorithm):
/// ids recovered, orphan results dropped, results regrouped right after their call (FIFO per
/// id), a placeholder error result for every call without one, names and argument strings
/// sanitized. Unchanged messages keep their `Arc`.
pub fn build_patched(messages: &[Arc<Message>]) -> Option<Vec<Arc<Message>>> {
    let normalized = recover_ids(messages);

    let mut results: HashMap<&str, VecDeque<&Arc<Message>>> = HashMap::new();
    let mut call_ids: HashSet<String> = HashSet::new();
    let mut calls_of: Vec<Option<Vec<CallView>>> = Vec::with_capacity(normalized.len());
    for m in &normalized {
        match &**m {
            Message::Tool(t) => {
                results
                    .entry(t.tool_call_id.as_str())
                    .or_default()
                    .push_back(m);
                calls_of.push(None);
            }
            Message::Ai(ai) => {
                let calls = message_calls(ai);
                call_ids.extend(
                    calls
                        .iter()
                        .filter_map(|c| c.id.clone())
                        .filter(|id| !id.is_empty()),
                );
                calls_of.push(Some(calls));
            }
            _ => calls_of.push(None),
        }
    }

    let mut out: Vec<Arc<Message>> = Vec::with_capacity(normalized.len() + 1);
    let mut dropped = 0usize;
    let mut injected = 0usize;
    for (m, calls) in normalized.iter().zip(calls_of) {
        match &**m {
            Message::Tool(t) => {
                if !call_ids.contains(&t.tool_call_id) {
                    dropped += 1;
                }
                continue;
            }
            Message::Ai(ai) => match sanitize_ai(ai) {
                Some(clean) => out.push(Arc::new(Message::Ai(clean))),
                None => out.push(m.clone()),
            },
            _ => {
                out.push(m.clone());
                continue;
            }
        }
        for call in calls.into_iter().flatten() {
            let Some(id) = call.id.filter(|id| !id.is_empty()) else {
                continue;
            };
            match results.get_mut(id.as_str()).and_then(VecDeque::pop_front) {
                Some(existing) => {
                    let unnamed = existing
                        .as_tool()
                        .is_some_and(|t| !t.name.as_deref().is_some_and(valid));
                    if call.invalid_name && unnamed {
                        let mut t = existing.as_tool().cloned().unwrap_or_default();
                        t.name = Some(call.name.clone());
                        out.push(Arc::new(Message::Tool(t)));
                    } else {
                        out.push(existing.clone());
                    }
                }
                None => {
                    injected += 1;
                    let text =
                        placeholder_text(&call.name, call.invalid_name, call.invalid.as_deref());
                    out.push(Arc::new(Message::Tool(ToolMessage {
                        content: Content::Text(text),
                        ..ToolMessage::error(id, "").with_name(call.name)
                    })));
                }
            }
        }
    }

    let unchanged = dropped == 0
        && out.len() == messages.len()
        && out.iter().zip(messages).all(|(a, b)| Arc::ptr_eq(a, b));
    if unchanged {
        return None;
    }
    if dropped > 0 || injected > 0 {
        tracing::warn!(
            dropped_orphans = dropped,
            placeholders = injected,
            "repaired the model-bound transcript"
        );
    }
    Some(out)
}
