//! LoopDetection (chain L15; before_agent, after_model, wrap_model, after_agent): stop a model
//! that keeps calling tools before the recursion limit kills the run (spec 40 §2).
//!
//! Two detectors run after every model response that calls tools, over per-thread state this
//! middleware keeps itself (so a step costs O(tool calls of the new message), never O(history)):
//!
//! 1. identical call sets — a sliding window of call-set hashes (argument normalisation, order
//!    independence, `read_file` line buckets of 200, full arguments for write tools);
//! 2. one tool type called many times — a windowed per-name counter with per-tool overrides.
//!
//! A warning is never written into the AI message and never inserted between a tool call and its
//! result: it is queued per (thread, run) and appended as a request-only
//! `HumanMessage(name="loop_warning")` to the *next* model request (DESIGN §7). It is dropped only
//! once a model call carrying it succeeded, so an outer retry resends it. A hard stop rewrites the
//! AI message: tool calls (structured and raw provider payloads) cleared, the stop text appended,
//! `finish_reason` `stop`, and `stop_reason: loop_capped` recorded in the run context.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use antler_protocol::hash::{FastMap, FastSet};
use antler_protocol::markers;
use antler_protocol::{
    AiMessage, Content, HumanMessage, Message, Object, StateUpdate, ThreadState, ToolCall,
};
use antler_runtime::{keys, HookOutput, Middleware, ModelNext, ModelRequest, RunContext, RunEvent};
use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::hook::{AfterAgentResult, BeforeAgentResult, HookResult, ModelResult};

const NAME: &str = "LoopDetectionMiddleware";

/// Most warnings queued for one (thread, run); the oldest are dropped.
pub const MAX_PENDING_WARNINGS_PER_RUN: usize = 4;
/// Stop reasons remembered for [`LoopDetectionMiddleware::consume_stop_reason`].
const MAX_STOP_REASONS: usize = 1000;
/// `read_file` ranges within one block of this many lines hash alike.
const READ_FILE_BUCKET: i64 = 200;
/// Arguments that identify a call of a tool other than `read_file`/`write_file`/`str_replace`.
const SALIENT_FIELDS: [&str; 7] = ["path", "url", "query", "command", "pattern", "glob", "cmd"];

/// The run-context value a hard stop leaves behind.
pub const STOP_REASON: &str = "loop_capped";
/// Name of the request-only warning message.
pub const WARNING_NAME: &str = markers::LOOP_WARNING;

/// Queued when one call set repeats `warn_threshold` times.
pub const WARNING_MSG: &str = "[LOOP DETECTED] The same tool calls keep coming back. Do not call more tools: give your final answer now, or summarize what you have done so far if the task cannot be finished.";
/// Appended to the AI message when one call set repeats `hard_limit` times.
pub const HARD_STOP_MSG: &str = "[FORCED STOP] Repeated tool calls went past the safety limit. This is the final answer with the results gathered so far.";

fn tool_freq_warning(name: &str, count: usize) -> String {
    format!("[LOOP DETECTED] {name} has been called {count} times without a final answer. Do not call more tools: give your final answer now, or summarize what you have done so far if the task cannot be finished.")
}

fn tool_freq_hard_stop(name: &str, count: usize) -> String {
    format!("[FORCED STOP] {name} was called {count} times, past its per-tool safety limit. This is the final answer with the results gathered so far.")
}

/// Settings that would make a detector unreachable or meaningless.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopDetectionConfigError {
    #[error("loop_detection.{field} must be >= 1 (got {value})")]
    TooSmall { field: &'static str, value: usize },
    #[error("loop_detection.hard_limit ({hard_limit}) must be greater than or equal to warn_threshold ({warn_threshold})")]
    HardBelowWarn {
        hard_limit: usize,
        warn_threshold: usize,
    },
    #[error("loop_detection.tool_freq_hard_limit ({hard_limit}) must be greater than or equal to tool_freq_warn ({warn})")]
    FreqHardBelowWarn { hard_limit: usize, warn: usize },
    #[error("loop_detection.tool_freq_overrides.{tool}.{field} must be >= 1 (got {value})")]
    OverrideTooSmall {
        tool: String,
        field: &'static str,
        value: usize,
    },
    #[error("loop_detection.tool_freq_overrides.{tool}.hard_limit ({hard_limit}) must be >= warn ({warn})")]
    OverrideHardBelowWarn {
        tool: String,
        hard_limit: usize,
        warn: usize,
    },
}

/// `loop_detection:` (spec 60 §10) and its per-tool thresholds.
pub use antler_config::{LoopDetectionConfig, ToolFreqOverride};

/// DeerFlow's validation: every count ≥ 1, every hard limit ≥ its warning threshold.
pub fn validate(config: &LoopDetectionConfig) -> Result<(), LoopDetectionConfigError> {
    for (field, value) in [
        ("warn_threshold", config.warn_threshold),
        ("hard_limit", config.hard_limit),
        ("window_size", config.window_size),
        ("max_tracked_threads", config.max_tracked_threads),
        ("tool_freq_warn", config.tool_freq_warn),
        ("tool_freq_hard_limit", config.tool_freq_hard_limit),
    ] {
        if value < 1 {
            return Err(LoopDetectionConfigError::TooSmall { field, value });
        }
    }
    if config.hard_limit < config.warn_threshold {
        return Err(LoopDetectionConfigError::HardBelowWarn {
            hard_limit: config.hard_limit,
            warn_threshold: config.warn_threshold,
        });
    }
    if config.tool_freq_hard_limit < config.tool_freq_warn {
        return Err(LoopDetectionConfigError::FreqHardBelowWarn {
            hard_limit: config.tool_freq_hard_limit,
            warn: config.tool_freq_warn,
        });
    }
    for (tool, o) in &config.tool_freq_overrides {
        for (field, value) in [("warn", o.warn), ("hard_limit", o.hard_limit)] {
            if value < 1 {
                return Err(LoopDetectionConfigError::OverrideTooSmall {
                    tool: tool.clone(),
                    field,
                    value,
                });
            }
        }
        if o.hard_limit < o.warn {
            return Err(LoopDetectionConfigError::OverrideHardBelowWarn {
                tool: tool.clone(),
                hard_limit: o.hard_limit,
                warn: o.warn,
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Call-set hash (spec 40 §2.2)

/// JSON with object keys sorted at every level: the canonical form two equal argument maps share.
fn canonical(v: &Value) -> String {
    antler_runtime::canonical_json(v, (",", ":"))
}

fn canonical_object(o: &Object) -> String {
    antler_runtime::canonical_json_object(o, (",", ":"))
}

/// Arguments as a map plus, for payloads that are not a map, a stable fallback key. Never fails.
fn normalize_args(raw: &Value) -> (Cow<'_, Object>, Option<String>) {
    match raw {
        Value::Object(o) => (Cow::Borrowed(o), None),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(o)) => (Cow::Owned(o), None),
            Ok(other) => (Cow::Owned(Object::new()), Some(canonical(&other))),
            Err(_) => (Cow::Owned(Object::new()), Some(s.clone())),
        },
        Value::Null => (Cow::Owned(Object::new()), None),
        other => (Cow::Owned(Object::new()), Some(canonical(other))),
    }
}

/// Python's `int(x)` for the values a line argument can hold; `None` where it would raise.
fn py_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite())
                .map(|f| f.trunc() as i64)
        }),
        Value::String(s) => s.trim().replace('_', "").parse::<i64>().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

fn stable_key(name: &str, args: &Object, fallback: Option<String>) -> String {
    if name == "read_file" && fallback.is_none() {
        let path = match args.get("path") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) | Some(Value::Bool(false)) => String::new(),
            Some(other) => other.to_string(),
        };
        let line = |key: &str| args.get(key).filter(|v| !v.is_null());
        let start = line("start_line").map_or(Some(1), py_int).unwrap_or(1);
        let end = line("end_line")
            .map_or(Some(start), py_int)
            .unwrap_or(start);
        let (lo, hi) = if start <= end {
            (start, end)
        } else {
            (end, start)
        };
        let bucket = |l: i64| (l.max(1) - 1) / READ_FILE_BUCKET;
        return format!("{path}:{}-{}", bucket(lo), bucket(hi));
    }
    // Content matters for writes: the same path with a new payload is progress, not a loop.
    if name == "write_file" || name == "str_replace" {
        return fallback.unwrap_or_else(|| canonical_object(args));
    }
    let mut salient: Vec<(&str, &Value)> = SALIENT_FIELDS
        .iter()
        .filter_map(|&field| Some((field, args.get(field).filter(|v| !v.is_null())?)))
        .collect();
    if !salient.is_empty() {
        return antler_runtime::canonical_json_entries(&mut salient, (",", ":"));
    }
    fallback.unwrap_or_else(|| canonical_object(args))
}

/// Digest of a multiset of `(tool name, raw arguments)`: equal for the same calls in any order,
/// for JSON-string arguments equal to their parsed map, and for `read_file` reads of one
/// 200-line block. Twelve hex characters; never empty.
pub fn call_set_hash<'a>(calls: impl IntoIterator<Item = (&'a str, &'a Value)>) -> String {
    let mut entries: Vec<String> = calls
        .into_iter()
        .map(|(name, raw)| {
            let (args, fallback) = normalize_args(raw);
            format!("{name}:{}", stable_key(name, &args, fallback))
        })
        .collect();
    digest_entries(&mut entries)
}

/// [`call_set_hash`] of an AI message's structured tool calls.
pub fn tool_calls_hash(calls: &[ToolCall]) -> String {
    let mut entries: Vec<String> = calls
        .iter()
        .map(|c| format!("{}:{}", c.name, stable_key(&c.name, &c.args, None)))
        .collect();
    digest_entries(&mut entries)
}

fn digest_entries(entries: &mut [String]) -> String {
    entries.sort();
    // The JSON array of the sorted entries (as `Value::from(entries).to_string()` writes it),
    // serialized from the borrow.
    let blob = serde_json::to_string(&*entries).unwrap_or_default();
    let digest = Sha256::digest(blob.as_bytes());
    let mut hex = String::with_capacity(12);
    for b in digest.iter().take(6) {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

// ---------------------------------------------------------------------------------------------
// Hard-stop rewrite (spec 40 §2.5)

/// Append `text` to message content: a string gets `"\n\n" + text`, a block list a new text
/// block (the original list is not touched).
pub fn append_text(content: &Content, text: &str) -> Content {
    match content {
        Content::Text(s) => Content::Text(format!("{s}\n\n{text}")),
        Content::Blocks(blocks) => {
            let mut blocks = blocks.clone();
            blocks.push(json!({"type": "text", "text": format!("\n\n{text}")}));
            Content::Blocks(blocks)
        }
    }
}

/// A copy of `msg` (same id) that ends the run: no tool calls anywhere, not even in the raw
/// provider payloads that would be re-serialized as calls, `finish_reason` `stop`, `text`
/// appended.
pub fn hard_stop_message(msg: &AiMessage, text: &str) -> AiMessage {
    let mut out = msg.clone();
    out.content = append_text(&msg.content, text);
    out.set_tool_calls(Vec::new());
    out.additional_kwargs.remove("tool_calls");
    out.additional_kwargs.remove("function_call");
    out
}

// ---------------------------------------------------------------------------------------------
// Bookkeeping

/// A map that remembers insertion (or touch) order, with O(log n) touch and oldest-first pops.
struct Ordered<K, V> {
    entries: FastMap<K, (u64, V)>,
    order: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Clone + Eq + Hash, V> Ordered<K, V> {
    fn new() -> Self {
        Ordered {
            entries: FastMap::default(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.entries.get(k).map(|(_, v)| v)
    }

    fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.entries.get_mut(k).map(|(_, v)| v)
    }

    /// Move `k` to the newest position, creating it with `make` when absent.
    fn touch_or_insert_with(&mut self, k: &K, make: impl FnOnce() -> V) -> &mut V {
        self.tick += 1;
        let tick = self.tick;
        let slot = self
            .entries
            .entry(k.clone())
            .or_insert_with(|| (tick, make()));
        if slot.0 != tick {
            self.order.remove(&slot.0);
            slot.0 = tick;
        }
        self.order.insert(tick, k.clone());
        &mut slot.1
    }

    /// Insert keeping an existing key's position (Python's `OrderedDict.__setitem__`).
    fn insert_keep_position(&mut self, k: K, v: V) {
        if let Some(slot) = self.entries.get_mut(&k) {
            slot.1 = v;
            return;
        }
        self.tick += 1;
        self.order.insert(self.tick, k.clone());
        self.entries.insert(k, (self.tick, v));
    }

    fn remove(&mut self, k: &K) -> Option<V> {
        let (tick, v) = self.entries.remove(k)?;
        self.order.remove(&tick);
        Some(v)
    }

    fn oldest(&self) -> impl Iterator<Item = &K> {
        self.order.values()
    }

    fn pop_oldest(&mut self) -> Option<(K, V)> {
        let (_, k) = self.order.pop_first()?;
        let (_, v) = self.entries.remove(&k)?;
        Some((k, v))
    }

    fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
    }
}

/// What one thread's recent tool calls look like.
#[derive(Default)]
struct ThreadTrack {
    /// Call-set hashes, newest last, at most `window_size`.
    history: VecDeque<String>,
    /// Hashes already warned about (always a subset of `history`).
    warned: FastSet<String>,
    /// Tool names, newest last, at most the frequency window.
    names: VecDeque<Arc<str>>,
    /// Occurrences of each name in `names` (O(1) counts however wide the window).
    name_counts: FastMap<Arc<str>, usize>,
    /// Names already frequency-warned about while above their threshold.
    freq_warned: FastSet<Arc<str>>,
}

/// Pending-warning key: (thread id, run key).
type PendingKey = (String, String);

struct Inner {
    threads: Ordered<String, ThreadTrack>,
    pending: Ordered<PendingKey, Vec<String>>,
    stop_reasons: Ordered<String, &'static str>,
}

/// What the detectors decided for one AI message.
enum Verdict {
    Nothing,
    Warn(String),
    HardStop(String),
}

/// Detects repeated tool calls and forces a final answer. One instance may serve many threads
/// and runs concurrently; all state sits behind one lock.
pub struct LoopDetectionMiddleware {
    settings: LoopDetectionConfig,
    /// Frequency window: never shorter than the largest hard limit, or that limit is unreachable.
    freq_window: usize,
    max_pending_keys: usize,
    inner: Mutex<Inner>,
}

impl Default for LoopDetectionMiddleware {
    fn default() -> Self {
        Self::build(LoopDetectionConfig::default())
    }
}

impl LoopDetectionMiddleware {
    /// Build from validated settings.
    pub fn new(settings: LoopDetectionConfig) -> Result<Self, LoopDetectionConfigError> {
        validate(&settings)?;
        Ok(Self::build(settings))
    }

    fn build(settings: LoopDetectionConfig) -> Self {
        let freq_window = settings
            .tool_freq_overrides
            .values()
            .map(|o| o.hard_limit)
            .chain([settings.window_size, settings.tool_freq_hard_limit])
            .max()
            .unwrap_or(settings.window_size);
        LoopDetectionMiddleware {
            max_pending_keys: (settings.max_tracked_threads * 2).max(1),
            freq_window,
            settings,
            inner: Mutex::new(Inner {
                threads: Ordered::new(),
                pending: Ordered::new(),
                stop_reasons: Ordered::new(),
            }),
        }
    }

    pub fn settings(&self) -> &LoopDetectionConfig {
        &self.settings
    }

    /// Length of the per-tool-name frequency window.
    pub fn tool_freq_window(&self) -> usize {
        self.freq_window
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-update; the maps stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn thread_key(run: &RunContext) -> String {
        if run.thread_id.is_empty() {
            "default".to_owned()
        } else {
            run.thread_id.clone()
        }
    }

    /// The run id, or — for a run without one — the identity of its context, so concurrent
    /// run-less invocations never share a key.
    fn run_key(run: &RunContext) -> String {
        if run.run_id.is_empty() {
            format!("context@{run:p}")
        } else {
            run.run_id.clone()
        }
    }

    fn pending_key(run: &RunContext) -> PendingKey {
        (Self::thread_key(run), Self::run_key(run))
    }

    fn thresholds(&self, name: &str) -> (usize, usize) {
        match self.settings.tool_freq_overrides.get(name) {
            Some(o) => (o.warn, o.hard_limit),
            None => (
                self.settings.tool_freq_warn,
                self.settings.tool_freq_hard_limit,
            ),
        }
    }

    fn drop_thread_pending(inner: &mut Inner, thread: &str) {
        let keys: Vec<PendingKey> = inner
            .pending
            .keys()
            .filter(|k| k.0 == thread)
            .cloned()
            .collect();
        for k in keys {
            inner.pending.remove(&k);
        }
    }

    /// Track the calls of one AI message of `thread` and decide (spec 40 §2.3).
    fn track(&self, thread: &str, calls: &[ToolCall], hash: String) -> Verdict {
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner
            .threads
            .touch_or_insert_with(&thread.to_owned(), ThreadTrack::default);
        while inner.threads.len() > self.settings.max_tracked_threads {
            let Some((evicted, _)) = inner.threads.pop_oldest() else {
                break;
            };
            Self::drop_thread_pending(inner, &evicted);
            tracing::debug!(thread = %evicted, "loop tracking evicted (LRU)");
        }
        let Some(track) = inner.threads.get_mut(&thread.to_owned()) else {
            return Verdict::Nothing;
        };

        // Layer 1: identical call sets.
        track.history.push_back(hash.clone());
        while track.history.len() > self.settings.window_size {
            track.history.pop_front();
        }
        let history = &track.history;
        track.warned.retain(|h| history.contains(h));
        let count = history.iter().filter(|h| **h == hash).count();
        if count >= self.settings.hard_limit {
            tracing::error!(thread, hash = %hash, count, tools = ?names(calls), "loop hard limit reached; forcing a final answer");
            return Verdict::HardStop(HARD_STOP_MSG.to_owned());
        }
        if count >= self.settings.warn_threshold && track.warned.insert(hash.clone()) {
            tracing::warn!(thread, hash = %hash, count, tools = ?names(calls), "repeated tool calls; queueing a loop warning");
            return Verdict::Warn(WARNING_MSG.to_owned());
        }

        // Layer 2: one tool type, windowed.
        for call in calls {
            if call.name.is_empty() {
                continue;
            }
            let name: Arc<str> = Arc::from(call.name.as_str());
            track.names.push_back(name.clone());
            *track.name_counts.entry(name.clone()).or_insert(0) += 1;
            while track.names.len() > self.freq_window {
                if let Some(old) = track.names.pop_front() {
                    if let Some(c) = track.name_counts.get_mut(&old) {
                        *c -= 1;
                        if *c == 0 {
                            track.name_counts.remove(&old);
                        }
                    }
                }
            }
            let count = track.name_counts.get(&name).copied().unwrap_or(0);
            let (warn, hard) = self.thresholds(&name);
            if count >= hard {
                tracing::error!(thread, tool = %name, count, "tool frequency hard limit reached; forcing a final answer");
                return Verdict::HardStop(tool_freq_hard_stop(&name, count));
            }
            if count >= warn {
                if track.freq_warned.insert(name.clone()) {
                    tracing::warn!(thread, tool = %name, count, "one tool called too often; queueing a loop warning");
                    return Verdict::Warn(tool_freq_warning(&name, count));
                }
            } else {
                // Decayed below the threshold: a later burst may warn again.
                track.freq_warned.remove(&name);
            }
        }
        Verdict::Nothing
    }

    /// Queue a warning for the next model request of `run` (deduplicated, at most
    /// [`MAX_PENDING_WARNINGS_PER_RUN`], keys bounded to twice `max_tracked_threads`).
    pub fn queue_warning(&self, run: &RunContext, warning: impl Into<String>) {
        let warning = warning.into();
        let key = Self::pending_key(run);
        let mut inner = self.lock();
        let list = inner.pending.touch_or_insert_with(&key, Vec::new);
        if !list.contains(&warning) {
            list.push(warning);
        }
        if list.len() > MAX_PENDING_WARNINGS_PER_RUN {
            let excess = list.len() - MAX_PENDING_WARNINGS_PER_RUN;
            list.drain(..excess);
        }
        let overflow = inner.pending.len().saturating_sub(self.max_pending_keys);
        if overflow > 0 {
            let victims: Vec<PendingKey> = inner
                .pending
                .oldest()
                .filter(|k| **k != key)
                .take(overflow)
                .cloned()
                .collect();
            for k in victims {
                inner.pending.remove(&k);
            }
        }
    }

    /// Warnings queued for `thread_id`/`run_id` (empty when none).
    pub fn pending_warnings(&self, thread_id: &str, run_id: &str) -> Vec<String> {
        self.lock()
            .pending
            .get(&(thread_id.to_owned(), run_id.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Warnings queued for `run`.
    pub fn pending_for(&self, run: &RunContext) -> Vec<String> {
        self.lock()
            .pending
            .get(&Self::pending_key(run))
            .cloned()
            .unwrap_or_default()
    }

    /// Number of (thread, run) keys holding queued warnings.
    pub fn pending_key_count(&self) -> usize {
        self.lock().pending.len()
    }

    /// Tracked thread ids, least recently used first.
    pub fn tracked_threads(&self) -> Vec<String> {
        self.lock().threads.oldest().cloned().collect()
    }

    /// The call-set hashes in a thread's window, oldest first.
    pub fn thread_window(&self, thread_id: &str) -> Option<Vec<String>> {
        self.lock()
            .threads
            .get(&thread_id.to_owned())
            .map(|t| t.history.iter().cloned().collect())
    }

    /// Hashes already warned about in a thread.
    pub fn warned_hashes(&self, thread_id: &str) -> Vec<String> {
        self.lock()
            .threads
            .get(&thread_id.to_owned())
            .map(|t| t.warned.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Calls of `tool` in a thread's frequency window (0 for an untracked thread).
    pub fn tool_count(&self, thread_id: &str, tool: &str) -> usize {
        self.lock()
            .threads
            .get(&thread_id.to_owned())
            .and_then(|t| t.name_counts.get(tool).copied())
            .unwrap_or(0)
    }

    /// Pop the stop reason a hard stop recorded for `run_id` (`loop_capped`), once.
    pub fn consume_stop_reason(&self, run_id: &str) -> Option<String> {
        self.lock()
            .stop_reasons
            .remove(&run_id.to_owned())
            .map(str::to_owned)
    }

    /// Forget one thread (both detectors and its queued warnings), or everything, stop reasons
    /// included.
    pub fn reset(&self, thread_id: Option<&str>) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        match thread_id {
            Some(t) => {
                inner.threads.remove(&t.to_owned());
                Self::drop_thread_pending(inner, t);
            }
            None => {
                inner.threads.clear();
                inner.pending.clear();
                inner.stop_reasons.clear();
            }
        }
    }

    fn observe(run: &RunContext, action: &str, payload: Value) {
        if run.observed() {
            run.observe(&RunEvent::Middleware {
                name: NAME,
                action,
                payload: &payload,
            });
        }
    }
}

fn names(calls: &[ToolCall]) -> Vec<&str> {
    calls.iter().map(|c| c.name.as_str()).collect()
}

#[async_trait]
impl Middleware for LoopDetectionMiddleware {
    middleware_identity!(NAME, crate::hook::RUN_GUARD_HOOKS, deferrable: antler_runtime::HookSet::AFTER_MODEL);

    /// Warnings of earlier runs of this thread never reach this run.
    async fn before_agent(&self, _state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        let (thread, current) = Self::pending_key(run);
        let mut inner = self.lock();
        let stale: Vec<PendingKey> = inner
            .pending
            .keys()
            .filter(|k| k.0 == thread && k.1 != current)
            .cloned()
            .collect();
        for k in stale {
            inner.pending.remove(&k);
        }
        Ok(HookOutput::none())
    }

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let Some(Message::Ai(ai)) = state.messages.last() else {
            return Ok(HookOutput::none());
        };
        if ai.tool_calls.is_empty() {
            return Ok(HookOutput::none());
        }
        let thread = Self::thread_key(run);
        let hash = tool_calls_hash(&ai.tool_calls);
        match self.track(&thread, &ai.tool_calls, hash.clone()) {
            Verdict::Nothing => Ok(HookOutput::none()),
            Verdict::Warn(warning) => {
                Self::observe(
                    run,
                    markers::LOOP_WARNING,
                    json!({"hash": hash, "warning": warning}),
                );
                self.queue_warning(run, warning);
                Ok(HookOutput::none())
            }
            Verdict::HardStop(text) => {
                {
                    let mut inner = self.lock();
                    inner
                        .stop_reasons
                        .insert_keep_position(Self::run_key(run), STOP_REASON);
                    while inner.stop_reasons.len() > MAX_STOP_REASONS {
                        inner.stop_reasons.pop_oldest();
                    }
                }
                run.set(&keys::STOP_REASON, STOP_REASON.to_owned());
                Self::observe(
                    run,
                    "loop_hard_stop",
                    json!({"hash": hash, "message": text, "tools": names(&ai.tool_calls)}),
                );
                let stopped = hard_stop_message(ai, &text);
                Ok(HookOutput::update(StateUpdate::message(Message::Ai(
                    stopped,
                ))))
            }
        }
    }

    /// A run's unsent warnings die with it.
    async fn after_agent(&self, _state: &ThreadState, run: &RunContext) -> AfterAgentResult {
        self.lock().pending.remove(&Self::pending_key(run));
        Ok(HookOutput::none())
    }

    /// Append the queued warnings as one request-only message after everything else (after the
    /// tool messages answering the previous calls, so pairing stays intact). They are dropped
    /// once a call carrying them succeeds; a failed call leaves them for the retry.
    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        let key = Self::pending_key(&req.run);
        let sent = self.lock().pending.get(&key).cloned().unwrap_or_default();
        if sent.is_empty() {
            return next.run(req).await;
        }
        let mut unique: Vec<&str> = Vec::with_capacity(sent.len());
        for w in &sent {
            if !unique.contains(&w.as_str()) {
                unique.push(w);
            }
        }
        let warning = HumanMessage {
            content: Content::Text(unique.join("\n\n")),
            name: Some(WARNING_NAME.to_owned()),
            ..Default::default()
        };
        req.messages_mut().push(Arc::new(Message::Human(warning)));
        let out = next.run(req).await;
        if out.is_ok() {
            let mut inner = self.lock();
            let emptied = match inner.pending.get_mut(&key) {
                Some(list) => {
                    list.retain(|w| !sent.contains(w));
                    list.is_empty()
                }
                None => false,
            };
            if emptied {
                inner.pending.remove(&key);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_digest_is_the_sorted_entries_json_hashed_and_cut_to_six_bytes() {
        let mut entries = vec![
            "read_file:{\"path\":\"/a\"}".to_owned(),
            "bash:ls \"x\"".to_owned(),
        ];
        let mut sorted = entries.clone();
        sorted.sort();
        let blob = Value::from(sorted).to_string();
        let expected: String = Sha256::digest(blob.as_bytes())
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest_entries(&mut entries), expected);
        assert_eq!(expected.len(), 12);
        assert_eq!(digest_entries(&mut []), {
            let d = Sha256::digest(b"[]");
            d.iter()
                .take(6)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        });
    }

    #[test]
    fn a_call_is_keyed_by_its_salient_fields_sorted_without_nulls() {
        let args = json!({"path": "/x", "description": "list", "command": "ls \"a\"", "url": null});
        let Value::Object(args) = args else {
            unreachable!()
        };
        assert_eq!(
            stable_key("bash", &args, None),
            r#"{"command":"ls \"a\"","path":"/x"}"#
        );
        // No salient field: the whole arguments, canonical.
        let Value::Object(other) = json!({"b": 1, "a": [true]}) else {
            unreachable!()
        };
        assert_eq!(stable_key("tool", &other, None), r#"{"a":[true],"b":1}"#);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let v = json!({"b": 1, "a": {"d": [1, {"z": 1, "y": 2}], "c": "x"}});
        assert_eq!(
            canonical(&v),
            r#"{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}"#
        );
    }

    #[test]
    fn python_int_coercion() {
        assert_eq!(py_int(&json!("150")), Some(150));
        assert_eq!(py_int(&json!(" 7 ")), Some(7));
        assert_eq!(py_int(&json!(3.9)), Some(3));
        assert_eq!(py_int(&json!(true)), Some(1));
        assert_eq!(py_int(&json!("1.5")), None);
        assert_eq!(py_int(&json!([1])), None);
    }

    #[test]
    fn read_file_keys_bucket_by_200_lines() {
        let key = |a: Value| {
            let (args, fb) = normalize_args(&a);
            stable_key("read_file", &args, fb)
        };
        assert_eq!(key(json!({"path": "/a"})), "/a:0-0");
        assert_eq!(
            key(json!({"path": "/a", "start_line": 1, "end_line": 200})),
            "/a:0-0"
        );
        assert_eq!(key(json!({"path": "/a", "start_line": 201})), "/a:1-1");
        assert_eq!(
            key(json!({"path": "/a", "start_line": 300, "end_line": 10})),
            "/a:0-1"
        );
        assert_eq!(key(json!({"path": "/a", "start_line": "x"})), "/a:0-0");
        assert_eq!(key(json!({"path": "/a", "start_line": -5})), "/a:0-0");
    }

    #[test]
    fn ordered_map_touch_and_keep_position() {
        let mut m: Ordered<String, u32> = Ordered::new();
        m.touch_or_insert_with(&"a".into(), || 1);
        m.touch_or_insert_with(&"b".into(), || 2);
        m.touch_or_insert_with(&"a".into(), || 9);
        assert_eq!(m.oldest().cloned().collect::<Vec<_>>(), ["b", "a"]);
        m.insert_keep_position("b".into(), 5);
        assert_eq!(m.oldest().cloned().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(m.pop_oldest(), Some(("b".into(), 5)));
        assert_eq!(m.get(&"a".into()), Some(&1));
    }
}
