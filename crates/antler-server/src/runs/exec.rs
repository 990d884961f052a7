//! Starting runs over HTTP: validation → thread → the run engine (`antler_agent::run`: admission,
//! journal, finish — shared with `antler run`) with a sink that frames the run's events into its
//! stream on the event bus. This module writes no records: the engine persists the run status,
//! error, stop reason, token totals and the thread's title and status *before* the `error`/`end`
//! events are published (spec 70 §5.1), so a client that refetches on `end` sees the final state.

use std::sync::Arc;

use antler_agent::{AgentError, RunRequest as EngineRequest};
use antler_protocol::{Message, StateUpdate, StreamEvent, StreamMessage, StreamModes};
use antler_runtime::{EventSink, Held, RunInput, RunOptions};
use antler_store::{RunRecord, RunStatus};
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::body::{self, OnDisconnect, RunRequest};
use super::bus::RunEvents;
use super::RunHandle;
use crate::access;
use crate::error::ApiError;
use crate::sse::Kind;
use crate::{wire, AppState, User};

/// Frames a run's events into its buffer as they are emitted: O(event size) per event. `values`
/// (built by the runtime only when the modes ask for it) go in as state snapshots, serialized
/// only when a subscriber receives them.
pub struct BufferSink {
    buffer: Arc<dyn RunEvents>,
    modes: StreamModes,
}

impl BufferSink {
    pub fn new(buffer: Arc<dyn RunEvents>, modes: StreamModes) -> Self {
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
        match event {
            // Kept as a snapshot: serialized only if a subscriber that wants `values` reads it.
            // Handed over whole, so the buffer can take the snapshot apart without copying it.
            StreamEvent::Values(state) => {
                self.buffer.publish_values(state);
            }
            StreamEvent::Updates { node, update } => {
                self.buffer
                    .publish(Kind::Updates, "updates", &updates_string(&node, &update));
            }
            StreamEvent::Messages { message, meta } => {
                self.buffer.publish(
                    Kind::Messages,
                    "messages",
                    &messages_string(&message, &meta),
                );
            }
            StreamEvent::Custom(v) => {
                self.buffer.publish(Kind::Custom, "custom", &v.to_string());
            }
            control @ (StreamEvent::Metadata { .. } | StreamEvent::Error { .. }) => {
                self.buffer
                    .publish(Kind::Control, control.name(), &control.data().to_string());
            }
            // The engine emits `end` once everything is persisted: the streams end.
            StreamEvent::End => self.buffer.close(),
        }
    }

    fn hold(&self, event: StreamEvent) -> Held {
        match event {
            StreamEvent::Values(state) => Held::Prepared(self.buffer.clone().stage_values(state)),
            other => Held::Event(other),
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
    let busy = || ApiError::conflict(format!("Thread {thread_id} already has an active run"));
    if state.runs.op_in_progress(&thread_id) {
        return Err(busy());
    }

    let run_id = uuid::Uuid::new_v4().to_string();
    let buffer = state.bus.open(&run_id);
    let sink = Arc::new(BufferSink::new(buffer.clone(), modes));
    let kwargs = kwargs_of(&req, &options, &mode_names);
    let run = EngineRequest {
        thread_id: Some(thread_id.clone()),
        run_id: Some(run_id),
        assistant_id: req.assistant_id.clone(),
        user_id: user.fs_id().map(str::to_owned),
        strategy: req.strategy,
        metadata: req.metadata.clone(),
        kwargs: Some(kwargs),
        resume_only: req.resume_only,
        observers: state.observers.clone(),
        agent_hook: state.agent_hook.clone(),
        agent_errors_end_the_run: true,
        ..EngineRequest::new(
            RunInput {
                messages: req.messages,
                update: req.update,
                from_checkpoint: req.checkpoint_id,
                initial_state: None,
            },
            options,
        )
    };
    let started = state.app.start_run(run, sink).await.map_err(|e| match e {
        AgentError::ThreadBusy { .. } => busy(),
        AgentError::Store(e) => ApiError::from(e),
        other if other.is_usage() => ApiError::bad_request(other.to_string()),
        other => ApiError::internal(other),
    })?;
    if kind == RunKind::Wait {
        // The waiter answers with the final state; handed over, it need not be read back.
        started.cancel.want_final_state();
    }
    let handle = RunHandle::new(user.id.clone(), buffer, started.cancel.clone());
    state.runs.track(&handle);
    // A just-created run is reported `pending` (LangGraph's shape): it starts in the background.
    let mut record = started.record;
    record.status = RunStatus::Pending;
    Ok(Started {
        handle,
        record,
        on_disconnect: req.on_disconnect,
    })
}

fn kwargs_of(req: &RunRequest, options: &RunOptions, modes: &[String]) -> Map<String, Value> {
    let v = json!({
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
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
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
    use crate::sse::RunBuffer;
    use antler_protocol::{AiMessageChunk, MessageMeta, ThreadState, ToolMessage};

    #[test]
    fn sink_frames_each_mode_on_one_line() {
        let buf = RunBuffer::new("r", usize::MAX);
        let sink = BufferSink::new(buf.clone(), StreamModes::ALL);
        let mut state = ThreadState::default();
        state.messages.push(Message::human("line one\nline two"));
        sink.emit(StreamEvent::Values(state.snapshot()));
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
            let s = buf.subscribe(crate::runs::bus::Subscribe {
                cursor: crate::sse::Cursor::Earliest,
                filter: None,
                heartbeat: std::time::Duration::from_secs(5),
                on_disconnect: None,
            });
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
}
