//! The agent loop end to end with a scripted model and in-process tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use antler_models::{ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::{
    Message, Object, StateUpdate, ThreadState, ToolMessage, ToolSpec, ToolStatus,
};
use antler_runtime::*;
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

type Trace = Arc<Mutex<Vec<String>>>;

struct Tracer {
    name: String,
    trace: Trace,
    hooks: HookSet,
    /// Jump once from after_model.
    jump_after_model: Mutex<Option<JumpTo>>,
}

impl Tracer {
    fn new(name: &str, trace: &Trace) -> Arc<Tracer> {
        Arc::new(Tracer {
            name: name.into(),
            trace: trace.clone(),
            hooks: HookSet::BEFORE_AGENT
                | HookSet::BEFORE_MODEL
                | HookSet::AFTER_MODEL
                | HookSet::AFTER_AGENT
                | HookSet::WRAP_MODEL
                | HookSet::WRAP_TOOL,
            jump_after_model: Mutex::new(None),
        })
    }
    fn log(&self, s: String) {
        self.trace.lock().unwrap().push(s);
    }
}

#[async_trait]
impl Middleware for Tracer {
    fn name(&self) -> &str {
        &self.name
    }
    fn hooks(&self) -> HookSet {
        self.hooks
    }
    async fn before_agent(&self, _: &ThreadState, _: &RunContext) -> BeforeAgentResult {
        self.log(format!("{}.before_agent", self.name));
        Ok(HookOutput::none())
    }
    async fn before_model(&self, _: &ThreadState, _: &RunContext) -> HookResult {
        self.log(format!("{}.before_model", self.name));
        Ok(HookOutput::none())
    }
    async fn after_model(&self, _: &ThreadState, _: &RunContext) -> HookResult {
        self.log(format!("{}.after_model", self.name));
        let j = self.jump_after_model.lock().unwrap().take();
        Ok(match j {
            Some(j) => HookOutput::jump(j),
            None => HookOutput::none(),
        })
    }
    async fn after_agent(&self, _: &ThreadState, _: &RunContext) -> AfterAgentResult {
        self.log(format!("{}.after_agent", self.name));
        Ok(HookOutput::none())
    }
    async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        self.log(format!("{}.wrap_model>", self.name));
        let r = next.run(req).await;
        self.log(format!("{}.wrap_model<", self.name));
        r
    }
    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        self.log(format!("{}.wrap_tool>({})", self.name, req.call.id_str()));
        let r = next.run(req).await;
        self.log(format!("{}.wrap_tool<({})", self.name, req_id(&r)));
        r
    }
}

/// The tool messages of `state`, in order.
fn tool_messages(state: &ThreadState) -> Vec<&ToolMessage> {
    state.messages.iter().filter_map(Message::as_tool).collect()
}

fn req_id(r: &Result<ToolOutcome, ToolError>) -> String {
    match r {
        Ok(ToolOutcome::Message(m)) => m.tool_call_id.clone(),
        Ok(ToolOutcome::Command(_)) => "command".into(),
        Err(_) => "err".into(),
    }
}

/// A tool that echoes its `text` arg, optionally waiting on a gate first.
struct Echo {
    spec: Arc<ToolSpec>,
    trace: Option<Trace>,
    direct: bool,
}

fn echo(name: &str) -> Arc<Echo> {
    Arc::new(Echo {
        spec: Arc::new(ToolSpec {
            name: name.into(),
            description: "echo".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        }),
        trace: None,
        direct: false,
    })
}

#[derive(serde::Deserialize)]
struct EchoArgs {
    text: String,
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    fn return_direct(&self) -> bool {
        self.direct
    }
    async fn call(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let a: EchoArgs = parse_args(args)?;
        if let Some(t) = &self.trace {
            t.lock().unwrap().push(format!("[{}]", ctx.call_id));
        }
        if a.text == "fail" {
            return Err(ToolError::Failed("boom".into()));
        }
        Ok(ToolOutput::text(format!("echo:{}", a.text)))
    }
}

fn ctx(limit: usize) -> Arc<RunContext> {
    Arc::new(
        RunContext::new("t1", "r1", Arc::new(NullSink)).with_options(RunOptions {
            recursion_limit: limit,
            ..Default::default()
        }),
    )
}

fn call(id: &str, name: &str, text: &str) -> (String, String, Value) {
    (id.into(), name.into(), json!({"text": text}))
}

fn kinds(state: &ThreadState) -> Vec<&'static str> {
    state.messages.iter().map(Message::kind).collect()
}

#[tokio::test]
async fn hook_order_matches_langchain() {
    let trace: Trace = Default::default();
    let tool = Arc::new(Echo {
        trace: Some(trace.clone()),
        ..(*echo("echo")).clone_shallow()
    });
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([call("c1", "echo", "a"), call("c2", "echo", "b")]),
        ScriptedReply::text("done"),
    ]));
    let chain = Chain::new(vec![
        Tracer::new("A", &trace),
        Tracer::new("B", &trace),
        Tracer::new("C", &trace),
    ])
    .unwrap();
    let agent = Agent::new(model)
        .with_chain(chain)
        .with_tools(ToolRegistry::new().with(tool));
    let out = agent
        .run(RunInput::message(Message::human("hi")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let got = trace.lock().unwrap().join(" ");
    let expected = [
        "A.before_agent B.before_agent C.before_agent",
        "A.before_model B.before_model C.before_model",
        "A.wrap_model> B.wrap_model> C.wrap_model> C.wrap_model< B.wrap_model< A.wrap_model<",
        "C.after_model B.after_model A.after_model",
        "A.wrap_tool>(c1) B.wrap_tool>(c1) C.wrap_tool>(c1) [c1] C.wrap_tool<(c1) B.wrap_tool<(c1) A.wrap_tool<(c1)",
        "A.wrap_tool>(c2) B.wrap_tool>(c2) C.wrap_tool>(c2) [c2] C.wrap_tool<(c2) B.wrap_tool<(c2) A.wrap_tool<(c2)",
        "A.before_model B.before_model C.before_model",
        "A.wrap_model> B.wrap_model> C.wrap_model> C.wrap_model< B.wrap_model< A.wrap_model<",
        "C.after_model B.after_model A.after_model",
        "C.after_agent B.after_agent A.after_agent",
    ]
    .join(" ");
    assert_eq!(got, expected);
    assert_eq!(kinds(&out.state), ["human", "ai", "tool", "tool", "ai"]);
}

impl Echo {
    fn clone_shallow(&self) -> Echo {
        Echo {
            spec: self.spec.clone(),
            trace: self.trace.clone(),
            direct: self.direct,
        }
    }
}

#[tokio::test]
async fn jump_from_after_model_skips_earlier_after_model_hooks() {
    let trace: Trace = Default::default();
    let b = Tracer::new("B", &trace);
    *b.jump_after_model.lock().unwrap() = Some(JumpTo::Model);
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::text("first"),
        ScriptedReply::text("second"),
    ]));
    let chain = Chain::new(vec![Tracer::new("A", &trace), b, Tracer::new("C", &trace)]).unwrap();
    let agent = Agent::new(model.clone()).with_chain(chain);
    let out = agent
        .run(RunInput::message(Message::human("hi")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let got: Vec<String> = trace
        .lock()
        .unwrap()
        .iter()
        .filter(|s| !s.contains("wrap"))
        .cloned()
        .collect();
    let after_first_model: Vec<&str> = got.iter().skip(6).take(5).map(String::as_str).collect();
    assert_eq!(
        after_first_model,
        [
            "C.after_model",
            "B.after_model",
            "A.before_model",
            "B.before_model",
            "C.before_model"
        ]
    );
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn jump_to_end_runs_after_agent_and_skips_tools() {
    let trace: Trace = Default::default();
    let c = Tracer::new("C", &trace);
    *c.jump_after_model.lock().unwrap() = Some(JumpTo::End);
    let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_call(
        "c1",
        "echo",
        json!({"text": "x"}),
    )]));
    let agent = Agent::new(model)
        .with_chain(Chain::new(vec![c]).unwrap())
        .with_tools(ToolRegistry::new().with(echo("echo")));
    let out = agent
        .run(RunInput::message(Message::human("hi")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(kinds(&out.state), ["human", "ai"]);
    assert!(trace.lock().unwrap().contains(&"C.after_agent".to_string()));
}

/// A tool whose completion order is controlled by the test, not by timing.
struct Gate {
    spec: Arc<ToolSpec>,
    first_done: Arc<Notify>,
}

#[async_trait]
impl Tool for Gate {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, args: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let text = args["text"].as_str().unwrap().to_owned();
        if text == "slow" {
            // Finishes only after the second call has finished.
            self.first_done.notified().await;
        } else {
            self.first_done.notify_one();
        }
        Ok(ToolOutput::text(text))
    }
}

#[tokio::test]
async fn parallel_results_are_applied_in_call_order() {
    let gate = Arc::new(Gate {
        spec: echo("gate").spec.clone(),
        first_done: Arc::new(Notify::new()),
    });
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([call("c1", "gate", "slow"), call("c2", "gate", "fast")]),
        ScriptedReply::text("done"),
    ]));
    let agent = Agent::new(model).with_tools(ToolRegistry::new().with(gate));
    let out = agent
        .run(RunInput::message(Message::human("hi")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let tools: Vec<(String, String)> = tool_messages(&out.state)
        .into_iter()
        .map(|t| (t.tool_call_id.clone(), t.content.text()))
        .collect();
    assert_eq!(
        tools,
        [("c1".into(), "slow".into()), ("c2".into(), "fast".into())]
    );
}

fn looping_model() -> Arc<ScriptedModel> {
    let n = std::sync::atomic::AtomicUsize::new(0);
    Arc::new(ScriptedModel::new([]).with_fallback(move |_| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ScriptedReply::tool_call(&format!("c{i}"), "echo", json!({"text": "again"}))
    }))
}

#[tokio::test]
async fn recursion_limit_counts_steps_like_langgraph() {
    for (limit, model_calls, tool_msgs) in [(1usize, 1usize, 0usize), (2, 1, 1), (10, 5, 5)] {
        let model = looping_model();
        let agent = Agent::new(model.clone()).with_tools(ToolRegistry::new().with(echo("echo")));
        let out = agent
            .run(RunInput::message(Message::human("go")), ctx(limit))
            .await;
        assert_eq!(out.status, RunStatus::Error, "limit {limit}");
        assert!(matches!(out.error, Some(RunError::RecursionLimit(l)) if l == limit));
        assert_eq!(model.requests().len(), model_calls, "limit {limit}");
        assert_eq!(
            out.state
                .messages
                .iter()
                .filter(|m| m.kind() == "tool")
                .count(),
            tool_msgs
        );
        assert_eq!(out.steps, limit);
    }
}

#[tokio::test]
async fn recursion_limit_does_not_fire_when_no_more_steps_are_needed() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("answer")]));
    let out = Agent::new(model)
        .run(RunInput::message(Message::human("q")), ctx(1))
        .await;
    assert_eq!(out.status, RunStatus::Success);
}

#[tokio::test]
async fn after_agent_does_not_run_at_the_recursion_limit() {
    let trace: Trace = Default::default();
    let agent = Agent::new(looping_model())
        .with_chain(Chain::new(vec![Tracer::new("A", &trace)]).unwrap())
        .with_tools(ToolRegistry::new().with(echo("echo")));
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx(20))
        .await;
    assert_eq!(out.status, RunStatus::Error);
    assert!(!trace
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.ends_with("after_agent")));
}

/// A tool that never finishes until cancelled; tells the test when it started.
struct Hang {
    spec: Arc<ToolSpec>,
    started: Mutex<Option<oneshot::Sender<()>>>,
}

#[async_trait]
impl Tool for Hang {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        if let Some(tx) = self.started.lock().unwrap().take() {
            let _ = tx.send(());
        }
        futures::future::pending::<()>().await;
        Ok(ToolOutput::text("never"))
    }
}

#[tokio::test]
async fn cancellation_during_a_tool_call_interrupts_with_consistent_checkpoint() {
    let (tx, rx) = oneshot::channel();
    let hang = Arc::new(Hang {
        spec: echo("hang").spec.clone(),
        started: Mutex::new(Some(tx)),
    });
    let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_calls([
        call("c1", "echo", "quick"),
        call("c2", "hang", "x"),
    ])]));
    let cp = Arc::new(MemoryCheckpointer::new());
    let agent = Agent::new(model)
        .with_tools(ToolRegistry::new().with(echo("echo")).with(hang))
        .with_checkpointer(cp.clone());
    let run = ctx(100);
    let cancel = run.cancel.clone();
    tokio::spawn(async move {
        rx.await.unwrap();
        cancel.cancel();
    });
    let out = agent
        .run(RunInput::message(Message::human("go")), run)
        .await;
    assert_eq!(out.status, RunStatus::Interrupted);
    // The AI message that made the calls is committed; no half batch (echo's result is not).
    assert_eq!(kinds(&out.state), ["human", "ai"]);
    let latest = cp.latest("t1").await.unwrap().unwrap();
    assert_eq!(latest.state.messages.to_vec(), out.state.messages.to_vec());
}

#[tokio::test]
async fn unknown_tool_and_bad_args_become_error_tool_messages() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([
            ("c1".into(), "nope".into(), json!({})),
            ("c2".into(), "echo".into(), json!({"wrong": 1})),
        ]),
        ScriptedReply::text("ok"),
    ]));
    let agent =
        Agent::new(model).with_tools(ToolRegistry::new().with(echo("echo")).with(echo("other")));
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let tools = tool_messages(&out.state);
    assert_eq!(tools[0].status, ToolStatus::Error);
    assert_eq!(
        tools[0].content.text(),
        "Error: nope is not a valid tool, try one of [echo, other]."
    );
    assert_eq!(tools[1].status, ToolStatus::Error);
    let t = tools[1].content.text();
    assert!(t.starts_with("Error invoking tool 'echo' with kwargs {\"wrong\":1} with error:\n missing field `text`"), "{t}");
    assert!(t.ends_with("Please fix the error and try again."));
}

#[tokio::test]
async fn tool_failure_without_a_handler_fails_the_run() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_call(
        "c1",
        "echo",
        json!({"text": "fail"}),
    )]));
    let agent = Agent::new(model).with_tools(ToolRegistry::new().with(echo("echo")));
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Error);
    assert!(matches!(out.error, Some(RunError::Tool { ref tool, .. }) if tool == "echo"));
}

/// Ends the run from a tool wrapper (the clarification pattern).
struct Stopper;

#[async_trait]
impl Middleware for Stopper {
    antler_runtime::middleware_identity!("Stopper", HookSet::WRAP_TOOL);
    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        if req.call.name != "ask" {
            return next.run(req).await;
        }
        let msg = tool_message_for(&req.call, "question?");
        Ok(ToolOutcome::Command(Command {
            update: StateUpdate::message(msg),
            goto: Some(Goto::End),
        }))
    }
}

/// Converts every tool error into an error message; must leave commands untouched.
struct CatchAll;

#[async_trait]
impl Middleware for CatchAll {
    antler_runtime::middleware_identity!("CatchAll", HookSet::WRAP_TOOL);
    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let call = req.call.clone();
        match next.run(req).await {
            Err(e) => Ok(ToolOutcome::Message(antler_protocol::ToolMessage::error(
                call.id_str(),
                format!("Error: {e}"),
            ))),
            ok => ok,
        }
    }
}

#[tokio::test]
async fn command_goto_end_stops_after_the_batch_through_error_handlers() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_calls([
        call("c1", "echo", "sibling"),
        ("c2".into(), "ask".into(), json!({})),
        call("c3", "echo", "fail"),
    ])]));
    let chain = Chain::new(vec![Arc::new(CatchAll), Arc::new(Stopper)]).unwrap();
    let agent = Agent::new(model.clone())
        .with_chain(chain)
        .with_tools(ToolRegistry::new().with(echo("echo")).with(echo("ask")));
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(model.requests().len(), 1, "no model call after the stop");
    let tools: Vec<_> = tool_messages(&out.state)
        .into_iter()
        .map(|t| (t.tool_call_id.as_str(), t.status))
        .collect();
    assert_eq!(
        tools,
        [
            ("c1", ToolStatus::Success),
            ("c2", ToolStatus::Success),
            ("c3", ToolStatus::Error)
        ]
    );
}

#[tokio::test]
async fn return_direct_ends_only_when_every_registered_call_is_direct() {
    let direct = Arc::new(Echo {
        direct: true,
        ..echo("direct").clone_shallow()
    });
    let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_calls([
        call("c1", "direct", "q"),
        ("c2".into(), "unknown".into(), json!({})),
    ])]));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(direct.clone()).with(echo("echo")));
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(model.requests().len(), 1);
    assert_eq!(out.state.messages.last().unwrap().kind(), "tool");

    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([call("c1", "direct", "q"), call("c2", "echo", "x")]),
        ScriptedReply::text("answer"),
    ]));
    let agent =
        Agent::new(model.clone()).with_tools(ToolRegistry::new().with(direct).with(echo("echo")));
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx(100))
        .await;
    assert_eq!(model.requests().len(), 2);
    assert_eq!(out.state.messages.last().unwrap().text(), "answer");
}

#[tokio::test]
async fn model_error_fails_the_run_with_error_status() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::Error(
        ModelError::Http {
            status: 401,
            retry_after: None,
            message: "bad key".into(),
            code: Some("invalid_api_key".into()),
            body: String::new(),
        },
    )]));
    let out = Agent::new(model)
        .run(RunInput::message(Message::human("q")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Error);
    assert!(out.error.unwrap().to_string().contains("401"));
}

/// Retries once: inner wrappers run once per attempt.
struct RetryOnce(Trace);

#[async_trait]
impl Middleware for RetryOnce {
    antler_runtime::middleware_identity!("RetryOnce", HookSet::WRAP_MODEL);
    async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        match next.run(req.clone()).await {
            Err(ModelCallError::Model(e)) if e.is_transient() => {
                self.0.lock().unwrap().push("retry".into());
                next.run(req).await
            }
            other => other,
        }
    }
}

#[tokio::test]
async fn model_wrappers_can_call_next_again() {
    let trace: Trace = Default::default();
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::Error(ModelError::Timeout(std::time::Duration::from_secs(1))),
        ScriptedReply::text("second try"),
    ]));
    let chain = Chain::new(vec![
        Arc::new(RetryOnce(trace.clone())) as Arc<dyn Middleware>,
        Tracer::new("Inner", &trace),
    ])
    .unwrap();
    let out = Agent::new(model)
        .with_chain(chain)
        .run(RunInput::message(Message::human("q")), ctx(100))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let wraps = trace
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.as_str() == "Inner.wrap_model>")
        .count();
    assert_eq!(wraps, 2);
    assert_eq!(out.state.messages.last().unwrap().text(), "second try");
}

#[tokio::test]
async fn duplicate_middleware_names_are_rejected() {
    let trace: Trace = Default::default();
    let err = Chain::new(vec![Tracer::new("A", &trace), Tracer::new("A", &trace)])
        .err()
        .unwrap();
    assert_eq!(err, ChainError::DuplicateName("A".into()));
}

#[tokio::test]
async fn a_thread_resumes_from_its_checkpoint() {
    let cp = Arc::new(MemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::text("one"),
        ScriptedReply::text("two"),
    ]));
    let agent = Agent::new(model.clone()).with_checkpointer(cp.clone());
    agent
        .run(RunInput::message(Message::human("first")), ctx(100))
        .await;
    let out = agent
        .run(RunInput::message(Message::human("second")), ctx(100))
        .await;
    assert_eq!(
        out.state
            .messages
            .iter()
            .map(|m| m.text())
            .collect::<Vec<_>>(),
        ["first", "one", "second", "two"]
    );
    // The second request carried the whole history.
    assert_eq!(model.requests()[1].messages.len(), 3);
    let history = cp.list("t1", 100, None).await.unwrap();
    assert!(history.len() >= 4);
    assert_eq!(
        history[0].parent_id.as_deref(),
        Some(history[1].checkpoint_id.as_str())
    );
}

#[tokio::test]
async fn events_share_one_message_id_and_follow_langgraph_names() {
    let sink = Arc::new(CollectingSink::new());
    let run = Arc::new(RunContext::new("t1", "r1", sink.clone()));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "echo", json!({"text": "x"})),
        ScriptedReply::text("hello there world"),
    ]));
    let out = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(echo("echo")))
        .run(RunInput::message(Message::human("q")), run)
        .await;
    assert_eq!(out.status, RunStatus::Success);
    // messages mode was wanted → the model streamed.
    assert!(model.requests().iter().all(|r| r.streamed));
    let events = sink.json();
    let final_ai = out.state.messages.last().unwrap().id().unwrap().to_owned();
    let chunks: Vec<&Value> = events
        .iter()
        .filter(|(n, d)| {
            n == "messages" && d[0]["type"] == "AIMessageChunk" && d[0]["id"] == final_ai.as_str()
        })
        .map(|(_, d)| d)
        .collect();
    let text: String = chunks
        .iter()
        .map(|d| d[0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "hello there world");
    assert_eq!(chunks[0][1]["langgraph_node"], "model");
    let tool_events: Vec<&Value> = events
        .iter()
        .filter(|(n, d)| n == "messages" && d[0]["type"] == "tool")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(tool_events.len(), 1);
    assert_eq!(tool_events[0][1]["langgraph_node"], "tools");
    let nodes: Vec<String> = events
        .iter()
        .filter(|(n, _)| n == "updates")
        .map(|(_, d)| d.as_object().unwrap().keys().next().unwrap().clone())
        .collect();
    assert_eq!(nodes, ["model", "tools", "model"]);
    let last_values = events.iter().rev().find(|(n, _)| n == "values").unwrap();
    assert_eq!(last_values.1["messages"].as_array().unwrap().len(), 4);
}

/// Records event kinds.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl RunObserver for Recorder {
    fn on_event(&self, _run: &RunContext, event: &RunEvent<'_>) {
        let s = match event {
            RunEvent::RunStart => "start".to_string(),
            RunEvent::ModelResponse {
                caller,
                request_messages,
                ..
            } => format!("model({caller},{request_messages})"),
            RunEvent::ModelError { .. } => "model_error".into(),
            RunEvent::ToolResult { call, message, .. } => {
                format!("tool({},{:?})", call.name, message.status)
            }
            RunEvent::Update { node, .. } => format!("update({node})"),
            RunEvent::Middleware { name, .. } => format!("mw({name})"),
            RunEvent::RunEnd { status, .. } => format!("end({})", status.as_str()),
        };
        self.0.lock().unwrap().push(s);
    }
}

#[tokio::test]
async fn observers_see_model_calls_tool_results_updates_and_the_end() {
    let rec = Arc::new(Recorder::default());
    let run = Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)).with_observer(rec.clone()));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "echo", json!({"text": "x"})),
        ScriptedReply::text("done"),
    ]));
    let out = Agent::new(model)
        .with_tools(ToolRegistry::new().with(echo("echo")))
        .run(RunInput::message(Message::human("q")), run)
        .await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(
        rec.0.lock().unwrap().join(" "),
        "update(__input__) start model(lead_agent,1) update(model) tool(echo,Success) update(tools) model(lead_agent,3) update(model) end(success)"
    );
}

/// A typed tool: arguments parsed once into `ShoutArgs`, schema derived from it.
struct Shout {
    spec: TypedSpec<ShoutArgs>,
}

/// Arguments of `shout`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ShoutArgs {
    /// What to shout.
    text: String,
    /// How many exclamation marks.
    #[serde(default)]
    marks: Option<i64>,
}

#[async_trait]
impl TypedTool for Shout {
    type Args = ShoutArgs;

    antler_runtime::typed_spec!(spec);

    async fn invoke(&self, a: ShoutArgs, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let marks = "!".repeat(a.marks.unwrap_or(1).max(0) as usize);
        Ok(ToolOutput::text(format!(
            "{}{marks}",
            a.text.to_uppercase()
        )))
    }
}

#[test]
fn a_typed_tool_offers_the_schema_of_its_arguments() {
    let tool: Arc<dyn Tool> = Arc::new(Shout {
        spec: TypedSpec::new("shout", "Shout a text."),
    });
    assert_eq!(tool.name(), "shout");
    assert_eq!(
        tool.spec().parameters,
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "What to shout."},
                "marks": {
                    "anyOf": [{"type": "integer"}, {"type": "null"}],
                    "default": null,
                    "description": "How many exclamation marks.",
                },
            },
            "required": ["text"],
        })
    );
}

#[tokio::test]
async fn a_typed_tool_parses_once_and_bad_args_read_as_before() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([
            (
                "c1".into(),
                "shout".into(),
                json!({"text": "hi", "marks": null}),
            ),
            (
                "c2".into(),
                "shout".into(),
                json!({"text": "hey", "marks": 3}),
            ),
            ("c3".into(), "shout".into(), json!({"wrong": 1})),
            ("c4".into(), "shout".into(), json!({"text": 7})),
        ]),
        ScriptedReply::text("ok"),
    ]));
    let shout = Arc::new(Shout {
        spec: TypedSpec::new("shout", "Shout a text."),
    });
    let agent = Agent::new(model).with_tools(ToolRegistry::new().with(shout));
    let run = agent.run(RunInput::message(Message::human("go")), ctx(100));
    let out = run.await;
    assert_eq!(out.status, RunStatus::Success);
    let answers = |i: usize| {
        let t = tool_messages(&out.state).into_iter().nth(i);
        t.map(|t| (t.status, t.content.text().to_owned()))
            .unwrap_or_default()
    };
    // A null counts as an absent optional value.
    assert_eq!(answers(0), (ToolStatus::Success, "HI!".to_owned()));
    assert_eq!(answers(1), (ToolStatus::Success, "HEY!!!".to_owned()));
    let (status, t) = answers(2);
    assert_eq!(status, ToolStatus::Error);
    assert!(t.starts_with("Error invoking tool 'shout' with kwargs {\"wrong\":1} with error:\n missing field `text`"), "{t}");
    assert!(t.ends_with("Please fix the error and try again."));
    let (_, t) = answers(3);
    assert!(t.starts_with("Error invoking tool 'shout' with kwargs {\"text\":7} with error:\n invalid type: integer `7`, expected a string"), "{t}");
}

/// The registry's shared name list (what an unknown-tool answer lists) follows every change:
/// a duplicate keeps the first, a removal drops the name, order is registration order.
#[test]
fn shared_tool_names_follow_registration_and_removal() {
    let mut reg = ToolRegistry::new()
        .with(echo("echo"))
        .with(echo("other"))
        .with(echo("echo"));
    assert_eq!(&*reg.shared_names(), ["echo", "other"]);
    reg.register(echo("third"));
    assert_eq!(&*reg.shared_names(), ["echo", "other", "third"]);
    reg.remove("other");
    assert_eq!(&*reg.shared_names(), ["echo", "third"]);
    assert!(reg
        .names()
        .eq(reg.shared_names().iter().map(String::as_str)));
}

/// A batch of calls reports each call's result under that call: its `messages` event (task id),
/// its own `updates` event, and the observer's tool result — in call order.
#[tokio::test]
async fn each_call_of_a_batch_reports_its_own_result() {
    let sink = Arc::new(CollectingSink::new());
    let rec = Arc::new(Recorder::default());
    let run = Arc::new(RunContext::new("t1", "r1", sink.clone()).with_observer(rec.clone()));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([
            ("c1".into(), "echo".into(), json!({"text": "first"})),
            ("c2".into(), "other".into(), json!({"text": "second"})),
        ]),
        ScriptedReply::text("ok"),
    ]));
    let out = Agent::new(model)
        .with_tools(ToolRegistry::new().with(echo("echo")).with(echo("other")))
        .run(RunInput::message(Message::human("q")), run)
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let events = sink.json();
    let tool_events: Vec<(String, String)> = events
        .iter()
        .filter(|(n, d)| n == "messages" && d[0]["type"] == "tool")
        .map(|(_, d)| {
            (
                d[0]["content"].as_str().unwrap().to_owned(),
                d[1]["langgraph_checkpoint_ns"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        tool_events,
        [
            ("echo:first".to_owned(), "tools:c1".to_owned()),
            ("echo:second".to_owned(), "tools:c2".to_owned())
        ]
    );
    let tool_updates: Vec<Vec<String>> = events
        .iter()
        .filter_map(|(n, d)| (n == "updates").then(|| d.get("tools")).flatten())
        .map(|u| {
            u["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(tool_updates, [["echo:first"], ["echo:second"]]);
    let log = rec.0.lock().unwrap().join(" ");
    assert!(
        log.contains("tool(echo,Success) tool(other,Success) update(tools)"),
        "{log}"
    );
}

/// A run's future lives as long as the run, so with a thousand runs in flight its size is paid
/// a thousand times: it must not carry the input (boxed before the future starts) nor the
/// state of the short steps (loading, the model call, the tool step: boxed while they run).
#[test]
fn a_run_future_carries_neither_its_input_nor_its_steps() {
    let agent = Agent::new(Arc::new(ScriptedModel::new(vec![ScriptedReply::text("x")])));
    let fut = agent.run(RunInput::message(Message::human("hi")), ctx(10));
    let size = std::mem::size_of_val(&fut);
    drop(fut);
    assert!(
        size < std::mem::size_of::<RunInput>(),
        "the run's future is {size} bytes; its input alone is {}",
        std::mem::size_of::<RunInput>()
    );
}
