//! Events a run emits, named as LangGraph names its stream modes. The CLI renders them as text
//! or JSON lines; the server frames them as SSE.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::messages::{AiMessageChunk, ToolMessage};
use crate::state::{StateSnapshot, StateUpdate};

/// Stream metadata attached to `messages` events (spec 70 §4.6).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MessageMeta {
    pub langgraph_node: &'static str,
    pub langgraph_step: u64,
    pub langgraph_checkpoint_ns: String,
    pub checkpoint_ns: String,
    pub thread_id: String,
    pub run_id: String,
    pub assistant_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ls_provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ls_model_name: Option<String>,
}

/// The payload of a `messages` event.
#[derive(Clone, Debug, PartialEq)]
// A chunk is built and sent once per token: boxing it would cost an allocation per token.
#[allow(clippy::large_enum_variant)]
pub enum StreamMessage {
    /// One provider delta of an AI message.
    AiChunk(AiMessageChunk),
    /// A complete tool result.
    Tool(ToolMessage),
}

/// Which stream modes a consumer wants; events of other modes are never built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamModes {
    pub values: bool,
    pub updates: bool,
    pub messages: bool,
    pub custom: bool,
}

impl StreamModes {
    pub const ALL: StreamModes = StreamModes {
        values: true,
        updates: true,
        messages: true,
        custom: true,
    };
    pub const NONE: StreamModes = StreamModes {
        values: false,
        updates: false,
        messages: false,
        custom: false,
    };
}

/// One event of a run.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // emitted and consumed once; boxing would cost more
pub enum StreamEvent {
    /// First event: the run was admitted.
    Metadata { run_id: String, thread_id: String },
    /// The full state after a step.
    Values(StateSnapshot),
    /// The partial write of one node (`model`, `tools`, `<Middleware>.<hook>`).
    Updates {
        node: String,
        update: Arc<StateUpdate>,
    },
    /// An AI delta or a tool result, with its stream metadata.
    Messages {
        message: StreamMessage,
        meta: Arc<MessageMeta>,
    },
    /// A custom event written by a tool or middleware (`task_started`, `llm_retry`, …).
    Custom(Value),
    /// The run failed.
    Error { name: String, message: String },
    /// Last event of every stream.
    End,
}

impl StreamEvent {
    /// The LangGraph event name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Metadata { .. } => "metadata",
            StreamEvent::Values(_) => "values",
            StreamEvent::Updates { .. } => "updates",
            StreamEvent::Messages { .. } => "messages",
            StreamEvent::Custom(_) => "custom",
            StreamEvent::Error { .. } => "error",
            StreamEvent::End => "end",
        }
    }

    /// The event's `data` as JSON.
    pub fn data(&self) -> Value {
        match self {
            StreamEvent::Metadata { run_id, thread_id } => {
                json!({"run_id": run_id, "thread_id": thread_id, "attempt": 1})
            }
            StreamEvent::Values(state) => serde_json::to_value(state).unwrap_or(Value::Null),
            StreamEvent::Updates { node, update } => {
                let mut o = serde_json::Map::new();
                let v = if update.is_empty() {
                    Value::Null
                } else {
                    serde_json::to_value(update.as_ref()).unwrap_or(Value::Null)
                };
                o.insert(node.clone(), v);
                Value::Object(o)
            }
            StreamEvent::Messages { message, meta } => {
                let m = match message {
                    StreamMessage::AiChunk(c) => serde_json::to_value(c),
                    StreamMessage::Tool(t) => {
                        serde_json::to_value(crate::messages::Message::Tool(t.clone()))
                    }
                }
                .unwrap_or(Value::Null);
                json!([m, meta.as_ref()])
            }
            StreamEvent::Custom(v) => v.clone(),
            StreamEvent::Error { name, message } => {
                json!({"error": name, "name": name, "message": message})
            }
            StreamEvent::End => Value::Null,
        }
    }

    /// Whether a consumer asking for `modes` should receive this event. Control events always pass.
    pub fn wanted_by(&self, modes: StreamModes) -> bool {
        match self {
            StreamEvent::Values(_) => modes.values,
            StreamEvent::Updates { .. } => modes.updates,
            StreamEvent::Messages { .. } => modes.messages,
            StreamEvent::Custom(_) => modes.custom,
            StreamEvent::Metadata { .. } | StreamEvent::Error { .. } | StreamEvent::End => true,
        }
    }
}
