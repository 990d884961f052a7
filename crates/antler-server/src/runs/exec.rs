//! Admitting and executing runs: validation → thread → admission → pending record → `metadata`
//! event → a background task that waits for the runs it interrupted, builds the lead agent,
//! drives [`antler_runtime::Agent::run`] with the run's cancel token and a sink that frames
//! events into the run's buffer, applies a rollback when asked, and finalizes.
//!
//! Finalizing persists the run status, error, stop reason, token totals and the thread's title
//! and status *before* the `error`/`end` events are published (spec 70 §5.1), so a client that
//! refetches on `end` sees the final state. A run is executed in its own task under a
//! supervisor: if anything in it panics the run is still finalized as `error` and its streams
//! end — no run is left half-written.

use std::sync::Arc;

use antler_protocol::{Message, StateUpdate, StreamEvent, StreamMessage, StreamModes, ThreadState};
use antler_runtime::{
    CheckpointMeta, CheckpointWrite, Checkpointer, EventSink, RunContext, RunInput, RunOptions,
};
use antler_store::{RunRecord, RunStatus, RunUsage, ThreadRecord, ThreadUpdate};
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::body::{self, OnDisconnect, RunRequest};
use super::{Busy, CancelAction, RunHandle};
use crate::access;
use crate::error::ApiError;
use crate::sse::{Kind, RunBuffer};
use crate::{wire, AppState, User};

/// Frames a run's events into its buffer as they are emitted: O(event size) per event; a full
/// state is serialized only for `values`, which the runtime builds only when asked for.
pub struct BufferSink {
    buffer: Arc<RunBuffer>,
    modes: StreamModes,
}

impl BufferSink {
    pub fn new(buffer: Arc<RunBuffer>, modes: StreamModes) -> Self {
        BufferSink { buffer, modes }
    }
}

/// `{"<node>": <update>|null}` without an intermediate `Value`.
struct UpdatesData<'a> {
    node: &'a str,
    update: &'a StateUpdate,
}

impl Serialize for UpdatesData<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        if self.update.is_empty() {
            m.serialize_entry(self.node, &Value::Null)?;
        } else {
            m.serialize_entry(self.node, self.update)?;
        }
        m.end()
    }
}

fn updates_string(node: &str, update: &StateUpdate) -> String {
    let strip = update.messages.iter().flatten().any(wire::needs_strip);
    if !strip {
        return serde_json::to_string(&UpdatesData { node, update })
            .unwrap_or_else(|_| "null".to_owned());
    }
    let mut v = serde_json::to_value(update).unwrap_or(Value::Null);
    if let (Some(Value::Array(out)), Some(msgs)) = (v.get_mut("messages"), &update.messages) {
        for (o, m) in out.iter_mut().zip(msgs) {
            if wire::needs_strip(m) {
                *o = wire::message_value(m);
            }
        }
    }
    json!({ node: v }).to_string()
}

fn messages_string(message: &StreamMessage, meta: &antler_protocol::MessageMeta) -> String {
    let out = match message {
        StreamMessage::AiChunk(c) => serde_json::to_string(&(c, meta)),
        StreamMessage::Tool(t) => serde_json::to_string(&(Message::Tool(t.clone()), meta)),
    };
    out.unwrap_or_else(|_| "null".to_owned())
}

impl EventSink for BufferSink {
    fn modes(&self) -> StreamModes {
        self.modes
    }

    fn emit(&self, event: StreamEvent) {
        match &event {
            StreamEvent::Values(state) => {
                self.buffer
                    .push(Kind::Values, "values", &wire::state_string(state));
            }
            StreamEvent::Updates { node, update } => {
                self.buffer
                    .push(Kind::Updates, "updates", &updates_string(node, update));
            }
            StreamEvent::Messages { message, meta } => {
                self.buffer
                    .push(Kind::Messages, "messages", &messages_string(message, meta));
            }
            StreamEvent::Custom(v) => {
                self.buffer.push(Kind::Custom, "custom", &v.to_string());
            }
            StreamEvent::Metadata { .. } | StreamEvent::Error { .. } => {
                self.buffer
                    .push(Kind::Control, event.name(), &event.data().to_string());
            }
            // The executor closes the buffer after finalizing.
            StreamEvent::End => {}
        }
    }
}

/// Which endpoint created the run (decides the default stream modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// R1/R9: the creator streams.
    Stream,
    /// R2: nobody streams at first; joins may.
    Background,
    /// R3/R10: the creator waits for the final values.
    Wait,
}

/// Everything a run task needs.
pub struct RunPlan {
    pub assistant_id: String,
    pub user: User,
    pub options: RunOptions,
    pub input: RunInput,
    pub modes: StreamModes,
    pub resume_only: bool,
}

/// An admitted run.
pub struct Started {
    pub handle: Arc<RunHandle>,
    pub record: RunRecord,
    pub on_disconnect: OnDisconnect,
}

impl Started {
    /// `/api/threads/{thread_id}/runs/{run_id}` — ends exactly at the run id (spec 70 §3.3).
    pub fn content_location(&self) -> String {
        format!(
            "/api/threads/{}/runs/{}",
            self.handle.thread_id, self.handle.run_id
        )
    }
}

/// Validate a run-create body, admit the run on its thread and start it.
/// `thread_id` is `None` for stateless runs (R9/R10).
pub async fn start_run(
    state: &AppState,
    user: &User,
    thread_id: Option<&str>,
    body: Value,
    kind: RunKind,
) -> Result<Started, ApiError> {
    let req = body::parse_run_request(body, thread_id)?;
    let (thread_id, create) = match thread_id {
        Some(t) => (t.to_owned(), req.if_not_exists_create),
        None => (
            req.config_thread_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            true,
        ),
    };
    access::check_thread_id(&thread_id)?;
    let assistant = crate::assistants::find(state, user, &req.assistant_id)
        .ok_or_else(|| ApiError::not_found(format!("Assistant {} not found", req.assistant_id)))?;
    let options = body::resolve_options(&req, &state.app.config, assistant.agent_name())?;

    match state.app.store.get_thread(&thread_id).await? {
        Some(t) if user.owns(&t) => {}
        Some(_) => return Err(ApiError::thread_not_found(&thread_id)),
        None if create => {
            access::create_thread(state, user, &thread_id, Map::new()).await?;
        }
        None => return Err(ApiError::thread_not_found(&thread_id)),
    }
    if let Some(cp) = &req.checkpoint_id {
        if state
            .app
            .store
            .get_checkpoint(&thread_id, cp)
            .await?
            .is_none()
        {
            return Err(ApiError::not_found(format!("Checkpoint {cp} not found")));
        }
    }
    let mode_names: Vec<String> = match (&req.stream_modes, kind) {
        (Some(m), _) => m.clone(),
        (None, RunKind::Background) => ["values", "messages-tuple", "updates", "custom"]
            .map(str::to_owned)
            .to_vec(),
        (None, _) => vec!["values".to_owned()],
    };
    let modes = body::modes_of(&mode_names);

    let run_id = uuid::Uuid::new_v4().to_string();
    let handle = RunHandle::new(
        run_id.clone(),
        thread_id.clone(),
        user.id.clone(),
        state.config.max_buffered_bytes,
    );
    let wait_for = state
        .runs
        .admit(&handle, req.strategy)
        .map_err(|b| match b {
            Busy::RunInFlight | Busy::Operation => {
                ApiError::conflict(format!("Thread {thread_id} already has an active run"))
            }
        })?;

    let mut record = RunRecord::new(run_id.clone(), thread_id.clone(), req.assistant_id.clone());
    record.multitask_strategy = req.strategy.as_str().to_owned();
    record.metadata = Value::Object(req.metadata.clone());
    record.kwargs = kwargs_of(&req, &options, &mode_names);
    let record = match state.app.store.create_run(record).await {
        Ok(r) => r,
        Err(e) => {
            state.runs.withdraw(&handle);
            return Err(ApiError::internal(e));
        }
    };
    handle.buffer.push(
        Kind::Control,
        "metadata",
        &json!({"run_id": run_id, "thread_id": thread_id, "attempt": 1}).to_string(),
    );

    let plan = RunPlan {
        assistant_id: req.assistant_id.clone(),
        user: user.clone(),
        options,
        input: RunInput {
            messages: req.messages,
            update: req.update,
            from_checkpoint: req.checkpoint_id,
            initial_state: None,
        },
        modes,
        resume_only: req.resume_only,
    };
    spawn(state.clone(), handle.clone(), plan, wait_for);
    Ok(Started {
        handle,
        record,
        on_disconnect: req.on_disconnect,
    })
}

fn kwargs_of(req: &RunRequest, options: &RunOptions, modes: &[String]) -> Value {
    json!({
        "input": req.raw_input,
        "config": wire::redact(&Value::Object(req.config.clone())),
        "context": {
            "model_name": options.model_name,
            "thinking_enabled": options.thinking_enabled,
            "reasoning_effort": options.reasoning_effort,
            "agent_name": options.agent_name,
            "is_plan_mode": options.is_plan_mode,
            "subagent_enabled": options.subagent_enabled,
            "recursion_limit": options.recursion_limit,
        },
        "stream_mode": modes,
    })
}

/// How a run ended, as it will be persisted and published.
struct Final {
    status: RunStatus,
    /// Stored on the run record.
    error: Option<String>,
    /// Published as an `error` event (`name`, `message`): failures only, never cancels.
    event: Option<(String, String)>,
    stop_reason: Option<String>,
    usage: Option<RunUsage>,
    title: Option<String>,
}

impl Final {
    fn status(status: RunStatus) -> Final {
        Final {
            status,
            error: None,
            event: None,
            stop_reason: None,
            usage: None,
            title: None,
        }
    }

    fn failed(name: &str, message: String) -> Final {
        Final {
            error: Some(message.clone()),
            event: Some((name.to_owned(), message)),
            ..Final::status(RunStatus::Error)
        }
    }
}

/// Run the plan in its own task; a panic inside still finalizes the run.
fn spawn(state: AppState, handle: Arc<RunHandle>, plan: RunPlan, wait_for: Vec<Arc<RunHandle>>) {
    tokio::spawn(async move {
        let inner = tokio::spawn(execute(state.clone(), handle.clone(), plan, wait_for));
        if let Err(e) = inner.await {
            if handle.finished().is_none() {
                tracing::error!(run = %handle.run_id, error = %e, "run task failed");
                finalize(
                    &state,
                    &handle,
                    Final::failed("InternalError", "The run stopped unexpectedly".into()),
                )
                .await;
            }
        }
    });
}

async fn execute(
    state: AppState,
    handle: Arc<RunHandle>,
    plan: RunPlan,
    wait_for: Vec<Arc<RunHandle>>,
) {
    for prev in &wait_for {
        prev.wait_done().await;
    }
    if handle.is_cancelled() {
        // Cancelled while pending: it never starts.
        finalize(&state, &handle, Final::status(RunStatus::Interrupted)).await;
        return;
    }
    let store = &state.app.store;
    if let Err(e) = store
        .set_run_status(&handle.run_id, RunStatus::Running, None)
        .await
    {
        tracing::warn!(run = %handle.run_id, error = %e, "could not mark the run running");
    }
    // Clients see `busy` from the run manager at once; the record is for other readers and
    // for start-up recovery after a crash.
    let busy = ThreadUpdate {
        status: Some(ThreadRecord::BUSY.to_owned()),
        ..Default::default()
    };
    if let Err(e) = store.update_thread(&handle.thread_id, busy).await {
        tracing::warn!(thread = %handle.thread_id, error = %e, "could not mark the thread busy");
    }
    let sink = Arc::new(BufferSink::new(handle.buffer.clone(), plan.modes));

    if plan.resume_only {
        // Nothing is ever pending (antler raises no LangGraph interrupts): the resume is ignored.
        if plan.modes.values {
            if let Ok(Some(cp)) = store.latest_checkpoint(&handle.thread_id).await {
                sink.emit(StreamEvent::Values(Arc::new(cp.state)));
            }
        }
        finalize(&state, &handle, Final::status(RunStatus::Success)).await;
        return;
    }

    // MCP tools: cached until extensions_config.json changes (first build discovers).
    state.app.mcp.refresh().await;
    // Custom agents are looked up for the authenticated user (their own folder, then shared).
    let agent = match state.app.lead_agent_for(&plan.options, plan.user.fs_id()) {
        Ok(a) => a,
        Err(e) => {
            finalize(&state, &handle, Final::failed("AgentError", e.to_string())).await;
            return;
        }
    };
    let agent = match &state.agent_hook {
        Some(hook) => hook(agent, &plan.options),
        None => agent,
    };
    // The state a rollback restores: the fork point, else the head before the run.
    let base = match &plan.input.from_checkpoint {
        Some(id) => Some(id.clone()),
        None => match Checkpointer::list(store, &handle.thread_id, 1, None).await {
            Ok(list) => list.into_iter().next().map(|m| m.checkpoint_id),
            Err(e) => {
                finalize(
                    &state,
                    &handle,
                    Final::failed("CheckpointError", e.to_string()),
                )
                .await;
                return;
            }
        },
    };

    let mut ctx = RunContext::new(handle.thread_id.clone(), handle.run_id.clone(), sink)
        .with_options(plan.options.clone())
        .with_user(plan.user.fs_id().map(str::to_owned))
        .with_cancel(handle.cancel_token())
        .with_assistant(plan.assistant_id.clone());
    for o in &state.observers {
        ctx = ctx.with_observer(o.clone());
    }
    // The run journal (spec 40 part 2 §6.3): every model call, tool call and summarization of
    // the run, appended in batches; its rows are durable before the run's `end`.
    let journal = Arc::new(
        antler_agent::journal::RunJournal::new(
            store.clone(),
            handle.thread_id.clone(),
            handle.run_id.clone(),
            plan.user.fs_id().map(str::to_owned),
        )
        .with_token_tracking(state.app.config.run_events.track_token_usage),
    );
    ctx = ctx.with_observer(journal.clone());
    let ctx = Arc::new(ctx);
    let input = plan.input;
    let joined = tokio::spawn(async move { agent.run(input, ctx).await }).await;
    let outcome = match joined {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(run = %handle.run_id, error = %e, "the agent loop panicked");
            finalize(
                &state,
                &handle,
                Final::failed("InternalError", "The run stopped unexpectedly".into()),
            )
            .await;
            return;
        }
    };

    let report = journal.finish().await;
    if report.events_lost > 0 {
        tracing::warn!(run = %handle.run_id, lost = report.events_lost, error = ?report.error, "journal events were lost");
    }
    let mut fin = match outcome.status {
        // A model failure the agent answered gracefully still makes the run `error` (no
        // `error` event: the stream ends normally with the friendly message).
        antler_runtime::RunStatus::Success => {
            match antler_agent::app::fallback_error(&outcome.state, &handle.run_id) {
                Some(detail) => {
                    let mut f = Final::status(RunStatus::Error);
                    f.error = Some(detail);
                    f
                }
                None => Final::status(RunStatus::Success),
            }
        }
        antler_runtime::RunStatus::Interrupted => Final::status(RunStatus::Interrupted),
        antler_runtime::RunStatus::Error => {
            let (name, msg) = outcome
                .error
                .as_ref()
                .map(|e| (e.name().to_owned(), e.to_string()))
                .unwrap_or_else(|| ("RunError".into(), "The run failed".into()));
            Final::failed(&name, msg)
        }
    };
    fin.stop_reason = outcome.stop_reason.clone();
    fin.usage = Some(run_usage(&outcome.state, &handle.run_id));
    fin.title = outcome.state.title.clone();

    if outcome.status == antler_runtime::RunStatus::Interrupted
        && handle.cancel_action() == Some(CancelAction::Rollback)
    {
        match rollback(&state, &handle, base).await {
            Ok(title) => {
                fin.title = title;
                fin.status = RunStatus::Error;
                fin.error = Some("Rolled back by user".into());
            }
            Err(e) => {
                tracing::error!(run = %handle.run_id, error = %e, "rollback failed");
                fin.status = RunStatus::Error;
                fin.error = Some(format!("Rollback failed: {e}"));
            }
        }
    }
    finalize(&state, &handle, fin).await;
}

/// Write a new head equal to checkpoint `base` (or an empty state); returns its title.
async fn rollback(
    state: &AppState,
    handle: &RunHandle,
    base: Option<String>,
) -> Result<Option<String>, antler_runtime::CheckpointError> {
    let store = &state.app.store;
    let head = Checkpointer::list(store, &handle.thread_id, 1, None)
        .await?
        .into_iter()
        .next();
    if head.as_ref().map(|h| &h.checkpoint_id) == base.as_ref() {
        // Nothing was committed since.
        return Ok(match &base {
            Some(b) => Checkpointer::get(store, &handle.thread_id, b)
                .await?
                .and_then(|c| c.state.title),
            None => None,
        });
    }
    let (fields, title) = match &base {
        Some(b) => (
            None,
            Checkpointer::get(store, &handle.thread_id, b)
                .await?
                .and_then(|c| c.state.title),
        ),
        None => (Some(ThreadState::default().fields_value()), None),
    };
    let step = head.map_or(0, |h| h.step + 1);
    store
        .put(CheckpointWrite {
            meta: CheckpointMeta {
                thread_id: handle.thread_id.clone(),
                checkpoint_id: uuid::Uuid::now_v7().to_string(),
                parent_id: base,
                step,
                created_at: antler_runtime::now_rfc3339(),
                metadata: json!({
                    "source": "update",
                    "step": step,
                    "writer": "rollback",
                    "run_id": handle.run_id,
                    "thread_id": handle.thread_id,
                }),
            },
            changes: Vec::new(),
            fields,
        })
        .await?;
    Ok(title)
}

/// Token totals of the AI messages this run produced (those after its human message).
fn run_usage(state: &ThreadState, run_id: &str) -> RunUsage {
    let start = state.messages.iter().rposition(|m| {
        m.as_human().is_some_and(|h| {
            h.additional_kwargs.get("run_id").and_then(Value::as_str) == Some(run_id)
        })
    });
    let mut usage = RunUsage::default();
    let Some(start) = start else {
        return usage;
    };
    for m in state.messages.iter().skip(start) {
        if let Some(ai) = m.as_ai() {
            usage.llm_call_count += 1;
            if let Some(u) = &ai.usage_metadata {
                usage.total_input_tokens += u.input_tokens as i64;
                usage.total_output_tokens += u.output_tokens as i64;
                usage.total_tokens += u.total_tokens as i64;
            }
        }
    }
    usage
}

/// Persist the outcome, then publish `error` (failures only) and `end`.
async fn finalize(state: &AppState, handle: &Arc<RunHandle>, fin: Final) {
    let store = &state.app.store;
    if let Err(e) = store
        .set_run_status(&handle.run_id, fin.status, fin.error.clone())
        .await
    {
        tracing::error!(run = %handle.run_id, error = %e, "could not record the run status");
    }
    if fin.stop_reason.is_some() {
        if let Err(e) = store
            .set_run_stop_reason(&handle.run_id, fin.stop_reason.clone())
            .await
        {
            tracing::warn!(run = %handle.run_id, error = %e, "could not record the stop reason");
        }
    }
    if let Some(u) = fin.usage {
        if let Err(e) = store.update_run_usage(&handle.run_id, u).await {
            tracing::warn!(run = %handle.run_id, error = %e, "could not record token usage");
        }
    }
    // A run admitted meanwhile (multitask interrupt) keeps the thread busy.
    let others = state
        .runs
        .active_on(&handle.thread_id)
        .iter()
        .any(|h| !Arc::ptr_eq(h, handle));
    let thread_status = if others {
        ThreadRecord::BUSY
    } else {
        match fin.status {
            RunStatus::Error | RunStatus::Timeout => ThreadRecord::ERROR,
            RunStatus::Interrupted => ThreadRecord::INTERRUPTED,
            RunStatus::Success | RunStatus::Pending | RunStatus::Running => ThreadRecord::IDLE,
        }
    };
    let update = ThreadUpdate {
        title: fin.title.clone().map(Some),
        status: Some(thread_status.to_owned()),
        metadata: None,
    };
    if let Err(e) = store.update_thread(&handle.thread_id, update).await {
        tracing::warn!(thread = %handle.thread_id, error = %e, "could not update the thread record");
    }
    if let Some((name, message)) = &fin.event {
        handle.buffer.push(
            Kind::Control,
            "error",
            &json!({"error": name, "name": name, "message": message}).to_string(),
        );
    }
    handle.buffer.close();
    state.runs.finish(handle);
    handle.mark_done(fin.status);
}

/// The final values of a finished run for R3/R8 (`__error__` added when it failed).
pub async fn final_values(
    state: &AppState,
    thread_id: &str,
    run_id: &str,
) -> Result<Value, ApiError> {
    let record = state.app.store.get_run(run_id).await?;
    let cp = state.app.store.latest_checkpoint(thread_id).await?;
    let Some(cp) = cp else {
        return Ok(json!({
            "status": record.as_ref().map(|r| r.status.as_str()),
            "error": record.as_ref().and_then(|r| r.error.clone()),
        }));
    };
    let mut values = wire::state_value(&cp.state);
    if let Some(r) = record {
        if r.status == RunStatus::Error {
            if let Value::Object(o) = &mut values {
                o.insert(
                    "__error__".into(),
                    json!({"error": "RunError", "message": r.error.unwrap_or_default()}),
                );
            }
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_protocol::{AiMessageChunk, MessageMeta, ToolMessage};

    #[test]
    fn sink_frames_each_mode_on_one_line() {
        let buf = RunBuffer::new("r", usize::MAX);
        let sink = BufferSink::new(buf.clone(), StreamModes::ALL);
        let mut state = ThreadState::default();
        state.messages.push(Message::human("line one\nline two"));
        sink.emit(StreamEvent::Values(Arc::new(state)));
        sink.emit(StreamEvent::Updates {
            node: "model".into(),
            update: Arc::new(StateUpdate::default()),
        });
        let meta = Arc::new(MessageMeta {
            langgraph_node: "model",
            langgraph_step: 2,
            langgraph_checkpoint_ns: "model:x".into(),
            checkpoint_ns: "model:x".into(),
            thread_id: "t".into(),
            run_id: "r".into(),
            assistant_id: "lead_agent".into(),
            ls_provider: None,
            ls_model_name: None,
        });
        sink.emit(StreamEvent::Messages {
            message: StreamMessage::AiChunk(AiMessageChunk {
                content: "Hel".into(),
                id: Some("lc_run--1".into()),
                ..Default::default()
            }),
            meta: meta.clone(),
        });
        sink.emit(StreamEvent::Messages {
            message: StreamMessage::Tool(ToolMessage::new("call_1", "ok").with_name("ls")),
            meta,
        });
        sink.emit(StreamEvent::End);
        assert_eq!(buf.emitted(), 4);
        buf.close();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let text = rt.block_on(async {
            use futures::StreamExt;
            let s = buf.subscribe(
                crate::sse::Cursor::Earliest,
                None,
                std::time::Duration::from_secs(5),
                None,
            );
            futures::pin_mut!(s);
            let mut out = String::new();
            while let Some(Ok(b)) = s.next().await {
                out.push_str(std::str::from_utf8(&b).unwrap());
            }
            out
        });
        let datas: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(datas.len(), 5);
        assert_eq!(datas[0]["messages"][0]["content"], "line one\nline two");
        assert_eq!(datas[1], json!({"model": null}));
        assert_eq!(datas[2][0]["type"], "AIMessageChunk");
        assert_eq!(datas[2][1]["langgraph_node"], "model");
        assert_eq!(datas[3][0]["type"], "tool");
        assert_eq!(datas[3][0]["tool_call_id"], "call_1");
        assert_eq!(datas[4], Value::Null);
    }

    #[test]
    fn usage_counts_only_this_runs_messages() {
        let mut state = ThreadState::default();
        let old = antler_protocol::AiMessage {
            usage_metadata: Some(antler_protocol::UsageMetadata::new(100, 1)),
            ..Default::default()
        };
        state.messages.push(Message::human("old"));
        state.messages.push(Message::Ai(old));
        let mut h = antler_protocol::HumanMessage::default();
        h.additional_kwargs.insert("run_id".into(), json!("r2"));
        state.messages.push(Message::Human(h));
        let new = antler_protocol::AiMessage {
            usage_metadata: Some(antler_protocol::UsageMetadata::new(10, 2)),
            ..Default::default()
        };
        state.messages.push(Message::Ai(new));
        let u = run_usage(&state, "r2");
        assert_eq!(u.total_tokens, 12);
        assert_eq!(u.llm_call_count, 1);
        assert_eq!(run_usage(&state, "zzz"), RunUsage::default());
    }
}
