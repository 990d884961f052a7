//! Helpers shared by every suite module: messages and states, run contexts, a model request,
//! a middleware-event recorder and a tracing log capture. Group modules re-export what they use
//! and add their own (shadowing a name here when their shape differs).
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use antler_models::ChatModel;
use antler_protocol::{
    HumanMessage, Message, Messages, Object, ThreadState, ToolMessage, ToolSpec,
};
use antler_runtime::{
    Agent, ModelRequest, NullSink, RunContext, RunEvent, RunInput, RunObserver, RunOutcome,
    RunStatus, Tool, ToolContext, ToolError, ToolOutput,
};
use serde_json::Value;

pub fn run_ctx(thread: &str, run: &str) -> Arc<RunContext> {
    Arc::new(RunContext::new(thread, run, Arc::new(NullSink)))
}

pub fn human(id: &str, text: &str) -> Message {
    Message::Human(HumanMessage {
        content: text.into(),
        id: Some(id.to_owned()),
        ..Default::default()
    })
}

/// `h` hidden from the UI (`hide_from_ui: true`), as the framework's own messages are.
pub fn hidden(mut h: HumanMessage) -> HumanMessage {
    h.additional_kwargs
        .insert("hide_from_ui".into(), Value::Bool(true));
    h
}

pub fn state_of(msgs: Vec<Message>) -> ThreadState {
    ThreadState {
        messages: Messages::from_messages(msgs),
        ..Default::default()
    }
}

/// Tool-call arguments from a JSON value (anything but an object means none).
pub fn args_object(args: &Value) -> Object {
    match args {
        Value::Object(o) => o.clone(),
        _ => Object::new(),
    }
}

/// A non-streaming request of `msgs` to `model`, with no tools and an empty state.
pub fn model_request(
    model: Arc<dyn ChatModel>,
    run: Arc<RunContext>,
    msgs: Vec<Message>,
) -> ModelRequest {
    ModelRequest {
        model,
        system_prompt: None,
        messages: Arc::new(msgs.into_iter().map(Arc::new).collect()),
        tools: Vec::new(),
        tool_choice: None,
        settings: Object::new(),
        stream: false,
        message_id: "msg-1".into(),
        state: Arc::new(ThreadState::default()),
        run,
    }
}

/// A non-streaming request of `state`'s messages (sharing its list), with no tools.
pub fn state_request(
    model: Arc<dyn ChatModel>,
    run: Arc<RunContext>,
    state: ThreadState,
) -> ModelRequest {
    ModelRequest {
        messages: state.messages.shared(),
        state: Arc::new(state),
        ..model_request(model, run, Vec::new())
    }
}

/// Every `Middleware` run event, as `(action, payload)`.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<(String, Value)>>);

impl RunObserver for Recorder {
    fn on_event(&self, _run: &RunContext, event: &RunEvent<'_>) {
        if let RunEvent::Middleware {
            action, payload, ..
        } = event
        {
            self.0
                .lock()
                .unwrap()
                .push(((*action).to_owned(), (*payload).clone()));
        }
    }
}

/// Keeps an owned summary of every run event (`kind` names it; `other` for the rest).
#[derive(Default)]
pub struct EventLog {
    pub events: Mutex<Vec<Value>>,
}

impl EventLog {
    pub fn new() -> Arc<EventLog> {
        Arc::new(EventLog::default())
    }

    pub fn all(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    /// Events whose `kind` is `kind`.
    pub fn of(&self, kind: &str) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|e| e["kind"] == kind)
            .collect()
    }
}

impl RunObserver for EventLog {
    fn on_event(&self, _run: &RunContext, event: &RunEvent<'_>) {
        let v = match event {
            RunEvent::ModelResponse {
                caller,
                model,
                request_messages,
                response,
                ..
            } => serde_json::json!({
                "kind": "model_response",
                "caller": caller,
                "model": model,
                "request_messages": request_messages,
                "text": response.content.text(),
            }),
            RunEvent::ModelError {
                caller,
                model,
                error,
                ..
            } => {
                serde_json::json!({"kind": "model_error", "caller": caller, "model": model, "error": error.to_string()})
            }
            RunEvent::Middleware {
                name,
                action,
                payload,
            } => {
                serde_json::json!({"kind": "middleware", "name": name, "action": action, "payload": payload})
            }
            _ => serde_json::json!({"kind": "other"}),
        };
        self.events.lock().unwrap().push(v);
    }
}

/// Captures the formatted `message` of every tracing event on this thread while alive.
pub struct LogCapture {
    lines: Arc<Mutex<Vec<String>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    pub fn start() -> LogCapture {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let guard = tracing::subscriber::set_default(Capture(lines.clone()));
        LogCapture {
            lines,
            _guard: guard,
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

struct Capture(Arc<Mutex<Vec<String>>>);

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut v = MessageVisitor(String::new());
        event.record(&mut v);
        self.0.lock().unwrap().push(v.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A `{"type": "object"}` tool spec (what most test tools declare).
pub fn object_spec(name: &str, description: &str) -> Arc<ToolSpec> {
    Arc::new(ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters: serde_json::json!({"type": "object"}),
    })
}

/// A tool whose answer is a plain function of its arguments and call context.
pub struct FnTool<F> {
    spec: Arc<ToolSpec>,
    answer: F,
}

impl<F> FnTool<F>
where
    F: Fn(Object, ToolContext<'_>) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
{
    pub fn with_spec(spec: Arc<ToolSpec>, answer: F) -> Arc<dyn Tool> {
        Arc::new(FnTool { spec, answer })
    }

    /// An object-spec tool named `name` with no description.
    pub fn named(name: &str, answer: F) -> Arc<dyn Tool> {
        Self::with_spec(object_spec(name, ""), answer)
    }
}

#[async_trait::async_trait]
impl<F> Tool for FnTool<F>
where
    F: Fn(Object, ToolContext<'_>) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
{
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        (self.answer)(args, ctx)
    }
}

/// A tool that blocks until cancelled (to leave a dangling call behind, or a run to
/// interrupt); `entered` is notified when a call starts.
pub struct Blocker {
    spec: Arc<ToolSpec>,
    pub entered: Arc<tokio::sync::Notify>,
}

impl Blocker {
    pub fn new(name: &str) -> Arc<Blocker> {
        Arc::new(Blocker {
            spec: object_spec(name, "blocks"),
            entered: Arc::new(tokio::sync::Notify::new()),
        })
    }
}

#[async_trait::async_trait]
impl Tool for Blocker {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        self.entered.notify_one();
        std::future::pending::<()>().await;
        Ok(ToolOutput::text("never"))
    }
}

/// Run `agent` on one human message and check the run succeeded.
pub async fn run_ok(agent: &Agent, text: &str, run: Arc<RunContext>) -> RunOutcome {
    let out = agent
        .run(RunInput::message(Message::human(text)), run)
        .await;
    assert_eq!(out.status, RunStatus::Success, "{:?}", out.error);
    out
}

/// The first message of `state` that `pick` accepts.
pub fn first<'a, T>(state: &'a ThreadState, pick: fn(&'a Message) -> Option<&'a T>) -> &'a T {
    state
        .messages
        .iter()
        .find_map(pick)
        .expect("a matching message")
}

/// The first tool message of `state`.
/// The tool messages of `state`, in order.
pub fn tool_messages(state: &ThreadState) -> Vec<&ToolMessage> {
    state.messages.iter().filter_map(Message::as_tool).collect()
}

/// The ids the tool messages of `state` answer, in order.
pub fn answered_ids(state: &ThreadState) -> Vec<&str> {
    tool_messages(state)
        .into_iter()
        .map(|t| t.tool_call_id.as_str())
        .collect()
}

pub fn first_tool(state: &ThreadState) -> &ToolMessage {
    first(state, Message::as_tool)
}
