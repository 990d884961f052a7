//! Shared helpers: requests for one middleware, small models and tools, transcript checks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_models::{ChatModel, ChatRequest, ModelError, ModelInfo};
use antler_protocol::{AiMessage, Message, Object, ThreadState, ToolCall, ToolMessage, ToolSpec};
use antler_runtime::*;
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Notify;

/// A run context collecting every event.
pub fn run_ctx() -> (Arc<RunContext>, Arc<CollectingSink>) {
    let sink = Arc::new(CollectingSink::new());
    let run = Arc::new(RunContext::new("t1", "r1", sink.clone()));
    (run, sink)
}

pub use crate::common::{hidden, model_request, object_spec, Blocker};

pub fn tool_request(
    call: ToolCall,
    tool: Option<Arc<dyn Tool>>,
    run: Arc<RunContext>,
) -> ToolCallRequest {
    ToolCallRequest {
        call,
        tool,
        state: Arc::new(ThreadState::default()),
        run,
        tool_names: Arc::from(vec!["echo".to_owned()]),
    }
}

pub fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args.as_object().cloned().unwrap_or_default())
}

pub fn custom_events(sink: &CollectingSink) -> Vec<Value> {
    sink.json()
        .into_iter()
        .filter(|(n, _)| n == "custom")
        .map(|(_, d)| d)
        .collect()
}

/// A tool that counts its calls and echoes its arguments.
pub struct Echo {
    spec: Arc<ToolSpec>,
    pub calls: AtomicUsize,
}

impl Echo {
    pub fn new(name: &str) -> Arc<Echo> {
        Arc::new(Echo {
            spec: object_spec(name, "echo"),
            calls: AtomicUsize::new(0),
        })
    }

    pub fn count(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, args: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text(format!("echo {}", Value::Object(args))))
    }
}

/// A tool that fails.
pub struct Failing {
    spec: Arc<ToolSpec>,
}

impl Failing {
    pub fn new(name: &str) -> Arc<Failing> {
        Arc::new(Failing {
            spec: object_spec(name, "fails"),
        })
    }
}

#[async_trait]
impl Tool for Failing {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed("disk on fire".into()))
    }
}

/// A model whose calls wait at a gate, counting how many are in flight at once.
pub struct GateModel {
    info: ModelInfo,
    pub gate: Arc<Notify>,
    pub open: std::sync::atomic::AtomicBool,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub started: AtomicUsize,
    /// Fail the first `n` calls with a 503.
    pub fail_first: AtomicUsize,
}

impl GateModel {
    pub fn new() -> Arc<GateModel> {
        Arc::new(GateModel {
            info: ModelInfo {
                name: "gate".into(),
                model: "gate".into(),
                provider: "scripted".into(),
                ..Default::default()
            },
            gate: Arc::new(Notify::new()),
            open: std::sync::atomic::AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            fail_first: AtomicUsize::new(0),
        })
    }

    pub fn release(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.gate.notify_waiters();
    }
}

#[async_trait]
impl ChatModel for GateModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    async fn invoke(&self, _req: ChatRequest<'_>) -> Result<AiMessage, ModelError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        if self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(http(503, "overloaded", None));
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            let notified = self.gate.notified();
            if self.open.load(Ordering::SeqCst) {
                break;
            }
            notified.await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(AiMessage {
            content: "ok".into(),
            ..Default::default()
        })
    }
}

pub fn http(status: u16, message: &str, code: Option<&str>) -> ModelError {
    ModelError::Http {
        status,
        retry_after: None,
        message: message.into(),
        code: code.map(str::to_owned),
        body: String::new(),
    }
}

/// Every tool call of every AI message has exactly one tool message, right after its AI message
/// (the provider-side invariant strict OpenAI-compatible servers enforce), and no tool message
/// answers nothing.
pub fn transcript_violations(msgs: &[Message]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < msgs.len() {
        match &msgs[i] {
            Message::Ai(ai) if !ai.tool_calls.is_empty() => {
                let mut want: HashMap<&str, usize> = HashMap::new();
                for c in &ai.tool_calls {
                    *want.entry(c.id_str()).or_default() += 1;
                }
                let mut j = i + 1;
                while let Some(Message::Tool(t)) = msgs.get(j) {
                    match want.get_mut(t.tool_call_id.as_str()) {
                        Some(n) if *n > 0 => *n -= 1,
                        _ => out.push(format!(
                            "message {j}: unexpected result for '{}'",
                            t.tool_call_id
                        )),
                    }
                    j += 1;
                }
                for (id, n) in want {
                    if n > 0 {
                        out.push(format!("message {i}: call '{id}' has no result"));
                    }
                }
                i = j;
            }
            Message::Tool(t) => {
                out.push(format!(
                    "message {i}: orphan result for '{}'",
                    t.tool_call_id
                ));
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The first tool message answering `id`.
pub fn result_for<'a>(msgs: &'a [Message], id: &str) -> Option<&'a ToolMessage> {
    msgs.iter()
        .filter_map(Message::as_tool)
        .find(|t| t.tool_call_id == id)
}
