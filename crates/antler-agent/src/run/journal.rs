//! The run journal: every run's events, appended to the store's `run_events` table and never
//! fed to a model (seed 002: the journal is audit and UI history, not context).
//!
//! [`RunJournal`] is a [`RunObserver`] attached to one run. The loop calls it inline, so it only
//! turns each [`RunEvent`] into a record and buffers it; every [`FLUSH_EVERY`] events a batch
//! goes to a background flusher (one transaction per batch), and [`RunJournal::finish`] writes the
//! rest and the delivery receipt once the run is over. A failed batch goes back to the buffer
//! and is retried at the next flush; without a runtime, events stay buffered.
//!
//! | event | category | content | metadata |
//! |---|---|---|---|
//! | `run.start` | trace | chain, model, options | caller |
//! | `llm.human.input` | message | the user's message as sent (before middlewares stamp it) | |
//! | `llm.ai.response` | message | the AI message, for every caller | caller, model, request_messages, usage, latency_ms, llm_call_index |
//! | `llm.error` | trace | the error | caller, model, latency_ms, status, transient |
//! | `llm.tool.result` | message | the tool message | tool, tool_call_id, args, status, duration_ms, result_bytes |
//! | `state.messages_removed` | middleware | removed ids (what a summarization dropped) | node |
//! | `middleware:<action>` | middleware | the middleware's payload | name, action |
//! | `run.error` | error | the error | status |
//! | `run.end` | outputs | status, error, stop_reason, token totals | |
//! | `run.delivery` | outputs | presented, paths, by_tool (once per run, put-if-absent) | |
//!
//! Repairing a corrupt checkpoint head from the journal lives in the store
//! (`antler_store::checkpoints::recover`), re-exported here.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use antler_protocol::{Message, MessageRef};
use antler_runtime::{RunContext, RunEvent, RunObserver};
use antler_store::journal::CATEGORY_MESSAGE;
use antler_store::{
    EncodedRunEvent, EventContent, NewRunEvent, RunEventIds, RunUsage, SqliteStore,
};
use serde_json::{json, Map, Value};

pub use antler_store::checkpoints::recover::{recover_thread, RecoveringCheckpointer, Recovery};
use tokio::sync::{mpsc, oneshot};

use super::lock;

/// Events per batch (DeerFlow's flush threshold).
pub const FLUSH_EVERY: usize = 20;

/// Token totals of a run, by caller kind and by model.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct JournalUsage {
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub total_tokens: u64,
    pub llm_call_count: u64,
    pub lead_agent_tokens: u64,
    pub subagent_tokens: u64,
    pub middleware_tokens: u64,
    pub by_model: BTreeMap<String, u64>,
}

impl JournalUsage {
    /// The run record's totals.
    pub fn run_usage(&self) -> RunUsage {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        RunUsage {
            total_input_tokens: i(self.total_input_tokens),
            total_output_tokens: i(self.total_output_tokens),
            total_tokens: i(self.total_tokens),
            llm_call_count: i(self.llm_call_count),
        }
    }
}

/// What [`RunJournal::finish`] reports.
#[derive(Clone, Debug, Default)]
pub struct JournalReport {
    /// Events stored for this run by this journal.
    pub events_written: usize,
    /// Events that could not be stored (the store stayed unavailable).
    pub events_lost: usize,
    /// The last store error, if any write failed.
    pub error: Option<String>,
    pub usage: JournalUsage,
    /// Paths the run presented to the user.
    pub delivered: Vec<String>,
    /// Outputs were produced but no receipt could be stored.
    pub delivery_failed: bool,
}

#[derive(Default)]
struct State {
    buffer: Vec<EncodedRunEvent>,
    /// The run's input, journaled right after `run.start`.
    pending_input: Vec<EncodedRunEvent>,
    started: bool,
    llm_calls: u64,
    usage: JournalUsage,
    tool_messages: HashSet<String>,
    paths: Vec<String>,
    by_tool: BTreeMap<String, Vec<String>>,
}

enum Cmd {
    Batch(Vec<EncodedRunEvent>),
    Barrier(oneshot::Sender<()>),
}

#[derive(Default)]
struct Shared {
    /// Batches the flusher could not store, oldest first.
    failed: Vec<EncodedRunEvent>,
    written: usize,
    /// Events that could not be encoded.
    unencodable: usize,
    error: Option<String>,
}

/// The journal of one run (see the module doc).
pub struct RunJournal {
    store: SqliteStore,
    ids: RunEventIds,
    track_usage: bool,
    state: Mutex<State>,
    shared: Arc<Mutex<Shared>>,
    flusher: Mutex<Option<mpsc::UnboundedSender<Cmd>>>,
}

fn now() -> String {
    antler_runtime::now_rfc3339()
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RunJournal {
    /// A journal for one run; `run_events.track_token_usage` is on.
    pub fn new(
        store: SqliteStore,
        thread_id: impl Into<String>,
        run_id: impl Into<String>,
        user_id: Option<String>,
    ) -> Self {
        RunJournal {
            store,
            ids: RunEventIds {
                thread_id: thread_id.into().into(),
                run_id: run_id.into().into(),
                user_id: user_id.map(Into::into),
            },
            track_usage: true,
            state: Mutex::new(State::default()),
            shared: Arc::new(Mutex::new(Shared::default())),
            flusher: Mutex::new(None),
        }
    }

    /// `run_events.track_token_usage`.
    pub fn with_token_tracking(mut self, on: bool) -> Self {
        self.track_usage = on;
        self
    }

    pub fn run_id(&self) -> &str {
        &self.ids.run_id
    }

    /// One event, encoded now (stamped when it happened, not when the batch is written);
    /// `None`, counted and logged, if it does not encode.
    fn event(
        &self,
        kind: impl Into<std::borrow::Cow<'static, str>>,
        category: &'static str,
        content: EventContent,
        meta: Map<String, Value>,
    ) -> Option<EncodedRunEvent> {
        self.event_with(kind, category, content, &meta)
    }

    /// [`RunJournal::event`] with any metadata that serializes to an object: the per-step
    /// events pass typed borrows, so no map of owned keys and cloned values is built for them.
    fn event_with<M: serde::Serialize>(
        &self,
        kind: impl Into<std::borrow::Cow<'static, str>>,
        category: &'static str,
        content: EventContent,
        meta: &M,
    ) -> Option<EncodedRunEvent> {
        let max = self.store.max_trace_content();
        let encoded =
            EncodedRunEvent::with_metadata(&self.ids, kind, category, content, meta, max, now());
        match encoded {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!(run = %self.ids.run_id, error = %e, "a journal event does not encode");
                let mut shared = lock(&self.shared);
                shared.unencodable += 1;
                shared.error = Some(e.to_string());
                None
            }
        }
    }

    /// Journal an event that is not a [`RunEvent`] (recovery, admission, …).
    pub fn record(
        &self,
        kind: &str,
        category: &'static str,
        content: Value,
        meta: Map<String, Value>,
    ) {
        self.push(self.event(kind.to_owned(), category, content_of(&content), meta));
    }

    fn push(&self, events: impl IntoIterator<Item = EncodedRunEvent>) {
        let batch = {
            let mut st = lock(&self.state);
            st.buffer.extend(events);
            if st.buffer.len() < FLUSH_EVERY {
                return;
            }
            std::mem::take(&mut st.buffer)
        };
        self.send(batch);
    }

    /// Hand a batch to the flusher task (started on first use inside a runtime).
    fn send(&self, batch: Vec<EncodedRunEvent>) {
        let mut flusher = lock(&self.flusher);
        if flusher.is_none() {
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                // No runtime: keep the events; finish() writes them.
                lock(&self.state).buffer.splice(0..0, batch);
                return;
            };
            let (tx, rx) = mpsc::unbounded_channel();
            handle.spawn(flush_loop(self.store.clone(), self.shared.clone(), rx));
            *flusher = Some(tx);
        }
        if let Some(tx) = flusher.as_ref() {
            if let Err(mpsc::error::SendError(Cmd::Batch(b))) = tx.send(Cmd::Batch(batch)) {
                lock(&self.shared).failed.extend(b);
            }
        }
    }

    /// Token totals so far.
    pub fn usage(&self) -> JournalUsage {
        lock(&self.state).usage.clone()
    }

    /// Write everything still buffered and the delivery receipt; call once the run is over.
    pub async fn finish(&self) -> JournalReport {
        // Let the flusher settle what it was given.
        let tx = lock(&self.flusher).take();
        if let Some(tx) = tx {
            let (done, wait) = oneshot::channel();
            if tx.send(Cmd::Barrier(done)).is_ok() {
                let _ = wait.await;
            }
        }
        let (rest, usage, paths, by_tool) = {
            let mut st = lock(&self.state);
            let mut rest = std::mem::take(&mut lock(&self.shared).failed);
            rest.append(&mut st.pending_input);
            rest.append(&mut st.buffer);
            (rest, st.usage.clone(), st.paths.clone(), st.by_tool.clone())
        };
        let mut report = JournalReport {
            usage,
            delivered: paths.clone(),
            ..Default::default()
        };
        let n = rest.len();
        // The receipt: at most once per run.
        let mut receipt = NewRunEvent::new(
            &*self.ids.thread_id,
            &*self.ids.run_id,
            "run.delivery",
            "outputs",
            json!({"presented": !paths.is_empty(), "paths": paths, "by_tool": by_tool}),
        )
        .with_user(self.ids.user_id.as_deref().map(str::to_owned));
        receipt.created_at = now();
        let rest = Arc::new(rest);
        // The last batch and the receipt in one commit; if that fails, each on its own as
        // below (the batch once, the receipt retried a little).
        let together = self
            .store
            .append_encoded_run_events_then_if_absent(rest.clone(), receipt.clone())
            .await;
        let mut stored = false;
        match together {
            Ok(created) => {
                lock(&self.shared).written += n + usize::from(created);
                stored = true;
            }
            Err(e) => {
                tracing::warn!(run = %self.ids.run_id, error = %e, "the run's last journal batch failed; retrying it apart from the receipt");
                match self.store.append_encoded_run_events(rest).await {
                    Ok(_) => lock(&self.shared).written += n,
                    Err(e) => {
                        tracing::error!(run = %self.ids.run_id, error = %e, "could not write the run journal");
                        report.events_lost = n;
                        lock(&self.shared).error = Some(e.to_string());
                    }
                }
                for _ in 0..3 {
                    match self.store.put_run_event_if_absent(receipt.clone()).await {
                        Ok((_, created)) => {
                            if created {
                                lock(&self.shared).written += 1;
                            }
                            stored = true;
                            break;
                        }
                        Err(e) => lock(&self.shared).error = Some(e.to_string()),
                    }
                }
            }
        }
        report.delivery_failed = !stored && !report.delivered.is_empty();
        let shared = lock(&self.shared);
        report.events_lost += shared.unencodable;
        report.events_written = shared.written;
        report.error = shared.error.clone();
        report
    }

    fn on_input(&self, messages: &[Message]) {
        let mut events = Vec::new();
        for m in messages {
            let keep = match m {
                Message::Human(h) => {
                    h.name.as_deref() != Some(antler_protocol::markers::SUMMARY)
                        && (!m.is_hidden()
                            || antler_middleware::memory::preprocess::is_human_input_response(
                                &h.additional_kwargs,
                            ))
                }
                _ => false,
            };
            if keep {
                events.extend(self.event(
                    "llm.human.input",
                    CATEGORY_MESSAGE,
                    message_content(m.into()),
                    Map::new(),
                ));
            }
        }
        if events.is_empty() {
            return;
        }
        {
            // The input is committed before the run starts; it follows `run.start`.
            let mut st = lock(&self.state);
            if !st.started {
                st.pending_input.extend(events);
                return;
            }
        }
        self.push(events);
    }
}

async fn flush_loop(
    store: SqliteStore,
    shared: Arc<Mutex<Shared>>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Batch(batch) => {
                // Earlier failures go first, so a recovered store keeps the original order.
                let mut todo = std::mem::take(&mut lock(&shared).failed);
                todo.extend(batch);
                let n = todo.len();
                // Shared with the writer, kept here for a retry (no copy unless it failed while
                // the writer still held it).
                let todo = Arc::new(todo);
                match store.append_encoded_run_events(todo.clone()).await {
                    Ok(()) => lock(&shared).written += n,
                    Err(e) => {
                        tracing::warn!(error = %e, "journal batch failed; kept for retry");
                        let mut s = lock(&shared);
                        s.failed = Arc::try_unwrap(todo).unwrap_or_else(|t| (*t).clone());
                        s.error = Some(e.to_string());
                    }
                }
            }
            Cmd::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// `value` as stored: a JSON string as text, anything else as JSON.
fn content_of(value: &Value) -> EventContent {
    EventContent::from_value(value).unwrap_or_else(|_| EventContent::Json("null".into()))
}

/// A message as an event's content, serialized from the borrow.
fn message_content(message: MessageRef<'_>) -> EventContent {
    EventContent::Json(serde_json::to_string(&message).unwrap_or_else(|_| "null".into()))
}

fn caller_bucket(caller: &str) -> u8 {
    if caller.starts_with("subagent:") {
        1
    } else if caller.starts_with("middleware:") {
        2
    } else {
        0
    }
}

/// `llm.ai.response` metadata, in the order the journal has always written its keys.
#[derive(serde::Serialize)]
struct ResponseMeta<'a> {
    caller: &'a str,
    model: &'a str,
    request_messages: usize,
    usage: &'a Option<antler_protocol::UsageMetadata>,
    latency_ms: u64,
    llm_call_index: u64,
}

/// `llm.tool.result` metadata.
#[derive(serde::Serialize)]
struct ToolResultMeta<'a> {
    tool: &'a str,
    tool_call_id: &'a str,
    args: &'a Map<String, Value>,
    status: antler_protocol::ToolStatus,
    duration_ms: u64,
    result_bytes: usize,
}

/// `middleware:*` metadata.
#[derive(serde::Serialize)]
struct MiddlewareMeta<'a> {
    name: &'a str,
    action: &'a str,
}

/// Event metadata from `(key, value)` pairs.
fn fields<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

impl RunObserver for RunJournal {
    fn on_event(&self, run: &RunContext, event: &RunEvent<'_>) {
        match event {
            RunEvent::RunStart => {
                let meta = fields([("caller", json!("lead_agent"))]);
                let o = &run.options;
                let start = json!({
                        "chain": run.assistant_id,
                        "model": o.model_name,
                        "options": {
                            "is_plan_mode": o.is_plan_mode,
                            "subagent_enabled": o.subagent_enabled,
                            "recursion_limit": o.recursion_limit,
                            "agent_name": o.agent_name,
                        },
                });
                let start = self.event("run.start", "trace", content_of(&start), meta);
                let input = {
                    let mut st = lock(&self.state);
                    st.started = true;
                    std::mem::take(&mut st.pending_input)
                };
                self.push(start.into_iter().chain(input));
            }
            RunEvent::Update { node, update } => {
                if let Some(msgs) = &update.messages {
                    if *node == "__input__" {
                        self.on_input(msgs);
                    }
                    let removed: Vec<&str> = msgs
                        .iter()
                        .filter_map(|m| match m {
                            Message::Remove(r) => r.id.as_deref(),
                            _ => None,
                        })
                        .collect();
                    if !removed.is_empty() {
                        let added: Vec<&str> = msgs
                            .iter()
                            .filter(|m| !matches!(m, Message::Remove(_)))
                            .filter_map(Message::id)
                            .collect();
                        let meta = fields([("node", json!(node))]);
                        self.record(
                            "state.messages_removed",
                            "middleware",
                            json!({
                                "removed": removed,
                                "remove_all": removed.contains(&antler_protocol::REMOVE_ALL_MESSAGES),
                                "added": added,
                            }),
                            meta,
                        );
                    }
                }
                if let Some(paths) = &update.artifacts {
                    let mut st = lock(&self.state);
                    for p in paths {
                        if !st.paths.contains(p) {
                            st.paths.push(p.clone());
                        }
                    }
                }
            }
            RunEvent::ModelResponse {
                caller,
                model,
                request_messages,
                response,
                latency,
            } => {
                let index = {
                    let mut st = lock(&self.state);
                    let i = st.llm_calls;
                    st.llm_calls += 1;
                    if self.track_usage {
                        let u = &mut st.usage;
                        u.llm_call_count += 1;
                        if let Some(m) = &response.usage_metadata {
                            let total = if m.total_tokens == 0 {
                                m.input_tokens + m.output_tokens
                            } else {
                                m.total_tokens
                            };
                            u.total_input_tokens += m.input_tokens;
                            u.total_output_tokens += m.output_tokens;
                            u.total_tokens += total;
                            match caller_bucket(caller) {
                                1 => u.subagent_tokens += total,
                                2 => u.middleware_tokens += total,
                                _ => u.lead_agent_tokens += total,
                            }
                            *u.by_model.entry((*model).to_owned()).or_default() += total;
                        }
                    }
                    i
                };
                let meta = ResponseMeta {
                    caller,
                    model,
                    request_messages: *request_messages,
                    usage: &response.usage_metadata,
                    latency_ms: millis(*latency),
                    llm_call_index: index,
                };
                let content = message_content(MessageRef::Ai(response));
                self.push(self.event_with("llm.ai.response", CATEGORY_MESSAGE, content, &meta));
            }
            RunEvent::ModelError {
                caller,
                model,
                error,
                latency,
            } => {
                let meta = fields([
                    ("caller", json!(caller)),
                    ("model", json!(model)),
                    ("latency_ms", json!(millis(*latency))),
                    ("status", json!(error.status())),
                    ("transient", json!(error.is_transient())),
                ]);
                self.record("llm.error", "trace", json!(error.to_string()), meta);
            }
            RunEvent::ToolResult {
                call,
                message,
                duration,
            } => {
                let id = message.id.clone().unwrap_or_default();
                {
                    let mut st = lock(&self.state);
                    if !id.is_empty() && !st.tool_messages.insert(id) {
                        return;
                    }
                    if call.name == "present_files" {
                        let files: Vec<String> = call
                            .args
                            .get("filepaths")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(Value::as_str)
                                    .map(str::to_owned)
                                    .collect()
                            })
                            .unwrap_or_default();
                        if !files.is_empty()
                            && message.status == antler_protocol::ToolStatus::Success
                        {
                            st.by_tool
                                .entry(call.name.clone())
                                .or_default()
                                .extend(files);
                        }
                    }
                }
                let meta = ToolResultMeta {
                    tool: &call.name,
                    tool_call_id: call.id_str(),
                    args: &call.args,
                    status: message.status,
                    duration_ms: millis(*duration),
                    result_bytes: message.content.approx_len(),
                };
                let content = message_content(MessageRef::Tool(message));
                self.push(self.event_with("llm.tool.result", CATEGORY_MESSAGE, content, &meta));
            }
            RunEvent::Middleware {
                name,
                action,
                payload,
            } => {
                let meta = MiddlewareMeta { name, action };
                let content = content_of(payload);
                self.push(self.event_with(
                    format!("middleware:{action}"),
                    "middleware",
                    content,
                    &meta,
                ));
            }
            RunEvent::RunEnd { status, error } => {
                let usage = lock(&self.state).usage.clone();
                let stop_reason = run.get(&antler_runtime::keys::STOP_REASON).map(Value::from);
                let mut events = Vec::new();
                if let Some(err) = error {
                    let meta = fields([("status", json!(status.as_str()))]);
                    let content = EventContent::Text(err.to_string());
                    events.extend(self.event("run.error", "error", content, meta));
                }
                let end = json!({
                    "status": status.as_str(),
                    "error": error,
                    "stop_reason": stop_reason,
                    "usage": usage,
                });
                events.extend(self.event("run.end", "outputs", content_of(&end), Map::new()));
                self.push(events);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use antler_protocol::{ToolStatus, UsageMetadata};

    /// The typed per-step metadata writes the very JSON the key/value maps wrote (same keys,
    /// same order, same values): readers of `run_events.metadata` see no change.
    #[test]
    fn typed_metadata_encodes_as_the_maps_did() {
        let usage = Some(UsageMetadata {
            input_tokens: 10,
            output_tokens: 2,
            total_tokens: 12,
            ..Default::default()
        });
        let typed = ResponseMeta {
            caller: "lead_agent",
            model: "m",
            request_messages: 3,
            usage: &usage,
            latency_ms: 7,
            llm_call_index: 1,
        };
        let mapped = fields([
            ("caller", json!("lead_agent")),
            ("model", json!("m")),
            ("request_messages", json!(3_usize)),
            ("usage", serde_json::to_value(&usage).unwrap()),
            ("latency_ms", json!(7_u64)),
            ("llm_call_index", json!(1_u64)),
        ]);
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&mapped).unwrap()
        );
        let none: Option<UsageMetadata> = None;
        let typed = ResponseMeta {
            usage: &none,
            ..typed
        };
        assert!(serde_json::to_string(&typed)
            .unwrap()
            .contains(r#""usage":null,"#));

        let args = json!({"command": "echo \"hi\"", "n": 1});
        let args = args.as_object().unwrap();
        let typed = ToolResultMeta {
            tool: "bash",
            tool_call_id: "call_1",
            args,
            status: ToolStatus::Error,
            duration_ms: 5,
            result_bytes: 42,
        };
        let mapped = fields([
            ("tool", json!("bash")),
            ("tool_call_id", json!("call_1")),
            ("args", Value::Object(args.clone())),
            ("status", json!(ToolStatus::Error)),
            ("duration_ms", json!(5_u64)),
            ("result_bytes", json!(42_usize)),
        ]);
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&mapped).unwrap()
        );

        let typed = MiddlewareMeta {
            name: "TokenUsageMiddleware",
            action: "token_usage",
        };
        let mapped = fields([
            ("name", json!("TokenUsageMiddleware")),
            ("action", json!("token_usage")),
        ]);
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&mapped).unwrap()
        );
    }
}
