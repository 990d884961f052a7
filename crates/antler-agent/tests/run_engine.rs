//! The run engine's admission within one process: `reject` refuses while a run holds the
//! thread, `interrupt` stops the holder at once and starts after it finished, `rollback` drops
//! the holder's input, other threads are independent, and an `enqueue`d run cancelled while
//! waiting never runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_agent::{AgentError, App, RunHandle, TurnRequest};
use antler_config::Config;
use antler_models::ScriptedReply;
use antler_models::{ChatModel, ChatRequest, ChunkSink, ModelError, ModelInfo, ScriptedModel};
use antler_protocol::{AiMessage, Message};
use antler_runtime::{NullSink, RunStatus};
use antler_store::MultitaskStrategy;
use serde_json::json;
use tokio::sync::Semaphore;

/// A scripted model whose calls each wait for a permit.
struct Gated {
    inner: ScriptedModel,
    gate: Semaphore,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ChatModel for Gated {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    async fn invoke(&self, req: ChatRequest<'_>) -> Result<AiMessage, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.map(|p| p.forget()).ok();
        self.inner.invoke(req).await
    }
    async fn stream(
        &self,
        req: ChatRequest<'_>,
        on_chunk: ChunkSink<'_>,
    ) -> Result<AiMessage, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.map(|p| p.forget()).ok();
        self.inner.stream(req, on_chunk).await
    }
}

fn setup(replies: Vec<ScriptedReply>) -> (tempfile::TempDir, App, Arc<Gated>) {
    let home = tempfile::tempdir().unwrap();
    let mut config = Config {
        models: vec![serde_json::from_value(json!({"name": "main", "model": "scripted", "api_key": "k", "base_url": "http://127.0.0.1:9/v1"})).unwrap()],
        ..Config::default()
    };
    // Only the lead agent calls the model: each gate permit is one lead-agent call.
    config.title.enabled = false;
    config.memory.enabled = false;
    let model = Arc::new(Gated {
        inner: ScriptedModel::new(replies),
        gate: Semaphore::new(0),
        calls: AtomicUsize::new(0),
    });
    let app = App::open(config, home.path())
        .unwrap()
        .with_model_override(model.clone());
    (home, app, model)
}

async fn start(
    app: &App,
    thread: &str,
    text: &str,
    strategy: MultitaskStrategy,
) -> Result<RunHandle, AgentError> {
    let turn = TurnRequest {
        thread_id: Some(thread.to_owned()),
        message: Some(Message::human(text)),
        multitask_strategy: strategy,
        ..Default::default()
    };
    let mut req = antler_agent::RunRequest::new(
        antler_runtime::RunInput {
            messages: turn.message.clone().into_iter().collect(),
            ..Default::default()
        },
        app.run_options(&turn),
    );
    req.thread_id = turn.thread_id;
    req.strategy = strategy;
    app.start_run(req, Arc::new(NullSink)).await
}

async fn calls_reach(model: &Gated, n: usize) {
    while model.calls.load(Ordering::SeqCst) < n {
        tokio::task::yield_now().await;
    }
}

fn texts(state: &antler_protocol::ThreadState) -> Vec<String> {
    state
        .messages
        .iter()
        .filter(|m| !m.is_hidden())
        .map(Message::text)
        .collect()
}

#[tokio::test]
async fn reject_interrupt_and_rollback_at_admission() {
    let (_home, app, model) = setup(vec![
        ScriptedReply::text("a"),
        ScriptedReply::text("b"),
        ScriptedReply::text("c"),
        ScriptedReply::text("d"),
    ]);
    let first = start(&app, "t", "first", MultitaskStrategy::Reject)
        .await
        .unwrap();
    calls_reach(&model, 1).await;
    // reject: refused while the first run holds the thread; nothing recorded for it.
    let busy = start(&app, "t", "second", MultitaskStrategy::Reject).await;
    match busy {
        Err(AgentError::ThreadBusy { thread, run }) => {
            assert_eq!((thread.as_str(), run.as_str()), ("t", first.run_id()));
        }
        other => panic!("expected ThreadBusy, got {:?}", other.err()),
    }
    assert!(!first.cancel.is_cancelled());
    assert_eq!(app.store.list_runs("t", 10).await.unwrap().len(), 1);
    // Other threads are independent.
    let other = start(&app, "t2", "elsewhere", MultitaskStrategy::Reject)
        .await
        .unwrap();
    calls_reach(&model, 2).await;
    other
        .cancel
        .cancel(antler_agent::run::CancelAction::Interrupt);
    assert_eq!(other.outcome().await.status, RunStatus::Interrupted);
    assert!(
        !first.cancel.is_cancelled(),
        "cancelling another thread's run"
    );
    // interrupt: the first run is stopped at once; the new one runs after it finished.
    let third = start(&app, "t", "third", MultitaskStrategy::Interrupt)
        .await
        .unwrap();
    assert!(first.cancel.is_cancelled());
    let first_id = first.run_id().to_owned();
    let out = first.outcome().await;
    assert_eq!(out.status, RunStatus::Interrupted);
    let rec = app.store.get_run(&first_id).await.unwrap().unwrap();
    assert_eq!(rec.status, antler_store::RunStatus::Interrupted);
    model.gate.add_permits(1);
    let out = third.outcome().await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(texts(&out.state), ["first", "third", "a"]);

    // rollback: the holder's input is dropped; the new run starts from before it.
    let calls = model.calls.load(Ordering::SeqCst);
    let held = start(&app, "t", "dropped", MultitaskStrategy::Reject)
        .await
        .unwrap();
    calls_reach(&model, calls + 1).await;
    let held_id = held.run_id().to_owned();
    let redo = start(&app, "t", "redo", MultitaskStrategy::Rollback)
        .await
        .unwrap();
    assert_eq!(held.outcome().await.status, RunStatus::Interrupted);
    let rec = app.store.get_run(&held_id).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.error.as_deref()),
        (antler_store::RunStatus::Error, Some("Rolled back by user"))
    );
    model.gate.add_permits(1);
    let out = redo.outcome().await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(texts(&out.state), ["first", "third", "a", "redo", "b"]);
}

#[tokio::test]
async fn an_enqueued_run_cancelled_while_waiting_never_runs() {
    let (_home, app, model) = setup(vec![ScriptedReply::text("a"), ScriptedReply::text("b")]);
    let first = start(&app, "q", "first", MultitaskStrategy::Reject)
        .await
        .unwrap();
    calls_reach(&model, 1).await;
    let queued = start(&app, "q", "queued", MultitaskStrategy::Enqueue)
        .await
        .unwrap();
    assert_eq!(queued.record.status, antler_store::RunStatus::Pending);
    queued
        .cancel
        .cancel(antler_agent::run::CancelAction::Interrupt);
    let queued_id = queued.run_id().to_owned();
    assert_eq!(queued.outcome().await.status, RunStatus::Interrupted);
    let rec = app.store.get_run(&queued_id).await.unwrap().unwrap();
    assert_eq!(rec.status, antler_store::RunStatus::Interrupted);
    assert!(rec.started_at.is_none(), "it never started");
    model.gate.add_permits(1);
    assert_eq!(first.outcome().await.status, RunStatus::Success);
    assert_eq!(
        model.calls.load(Ordering::SeqCst),
        1,
        "only the first run called the model"
    );
}
