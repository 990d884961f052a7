//! The run journal through the agent loop (spec 40 §6.3, `test_run_journal.py`) and recovery of
//! a thread whose head checkpoint is corrupt (seed 002's failure table).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use antler_agent::journal::{recover_thread, RecoveringCheckpointer, RunJournal, FLUSH_EVERY};
use antler_models::{ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, Message, Object, StateUpdate, ToolSpec, UsageMetadata};
use antler_runtime::{
    parse_args, Agent, CancellationToken, Chain, Checkpointer, Middleware, NullSink, RunContext,
    RunEvent, RunInput, RunObserver, RunStatus, Tool, ToolContext, ToolError, ToolOutput,
    ToolRegistry,
};
use antler_store::{EventQuery, RunEventRecord, SqliteStore};
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::Hook;

struct Echo {
    spec: Arc<ToolSpec>,
    gate: Option<Arc<tokio::sync::Notify>>,
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
    async fn call(&self, args: Object, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let a: EchoArgs = parse_args(args)?;
        if let Some(g) = &self.gate {
            g.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(ToolOutput::text(format!("echo:{}", a.text)))
    }
}

fn echo(gate: Option<Arc<tokio::sync::Notify>>) -> Arc<Echo> {
    Arc::new(Echo {
        spec: Arc::new(ToolSpec {
            name: "echo".into(),
            description: "echo".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        }),
        gate,
    })
}

fn text_with_usage(text: &str, input: u64, output: u64) -> ScriptedReply {
    ScriptedReply::Message(AiMessage {
        content: text.into(),
        usage_metadata: Some(UsageMetadata::new(input, output)),
        ..Default::default()
    })
}

fn temp_store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("antler.db")).unwrap();
    (dir, store)
}

struct Harness {
    store: SqliteStore,
    model: Arc<ScriptedModel>,
    agent: Agent,
}

fn harness(store: &SqliteStore, replies: Vec<ScriptedReply>, tools: ToolRegistry) -> Harness {
    let model = Arc::new(ScriptedModel::new(replies));
    let agent = Agent::new(model.clone())
        .with_tools(tools)
        .with_checkpointer(Arc::new(store.clone()));
    Harness {
        store: store.clone(),
        model,
        agent,
    }
}

/// The model calls `echo` with `text` (as `call_1`).
fn echo_call(text: &str) -> ScriptedReply {
    ScriptedReply::tool_call("call_1", "echo", json!({ "text": text }))
}

/// A harness whose agent has the `echo` tool.
fn echo_harness(store: &SqliteStore, replies: Vec<ScriptedReply>) -> Harness {
    harness(store, replies, ToolRegistry::new().with(echo(None)))
}

impl Harness {
    async fn run(
        &self,
        thread: &str,
        run_id: &str,
        text: &str,
        cancel: Option<CancellationToken>,
    ) -> (RunStatus, antler_agent::journal::JournalReport) {
        let journal = Arc::new(RunJournal::new(
            self.store.clone(),
            thread,
            run_id,
            Some("alice".into()),
        ));
        let mut ctx = RunContext::new(thread, run_id, Arc::new(NullSink))
            .with_user(Some("alice".into()))
            .with_observer(journal.clone());
        if let Some(c) = cancel {
            ctx = ctx.with_cancel(c);
        }
        let out = self
            .agent
            .run(RunInput::message(Message::human(text)), Arc::new(ctx))
            .await;
        let report = journal.finish().await;
        (out.status, report)
    }
}

async fn events(store: &SqliteStore, run: &str) -> Vec<RunEventRecord> {
    store
        .list_run_events(run, EventQuery::default())
        .await
        .unwrap()
}

fn kinds(evs: &[RunEventRecord]) -> Vec<&str> {
    evs.iter().map(|e| e.event_type.as_str()).collect()
}

#[tokio::test]
async fn a_tool_round_trip_is_journaled_in_order_with_details() {
    let (_d, store) = temp_store();
    let h = echo_harness(
        &store,
        vec![echo_call("hi"), text_with_usage("done: echo:hi", 30, 7)],
    );
    let (status, report) = h.run("t1", "run-1", "say hi", None).await;
    assert_eq!(status, RunStatus::Success);
    assert_eq!(report.error, None);
    let evs = events(&store, "run-1").await;
    assert_eq!(
        kinds(&evs),
        [
            "run.start",
            "llm.human.input",
            "llm.ai.response",
            "llm.tool.result",
            "llm.ai.response",
            "run.end",
            "run.delivery"
        ]
    );
    assert_eq!(report.events_written, evs.len());
    // seq strictly increasing, user stamped.
    assert!(evs.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(evs.iter().all(|e| e.user_id.as_deref() == Some("alice")));

    let human = &evs[1];
    assert_eq!(human.category, "message");
    assert_eq!(human.content["type"], "human");
    assert_eq!(human.content["content"], "say hi");

    let call = &evs[2];
    assert_eq!(call.content["tool_calls"][0]["name"], "echo");
    assert_eq!(call.metadata["caller"], "lead_agent");
    assert_eq!(call.metadata["llm_call_index"], 0);
    assert_eq!(call.metadata["request_messages"], 1);
    assert!(call.metadata["latency_ms"].is_u64());

    let tool = &evs[3];
    assert_eq!(tool.content["type"], "tool");
    assert_eq!(tool.content["content"], "echo:hi");
    assert_eq!(
        (
            &tool.metadata["tool"],
            &tool.metadata["tool_call_id"],
            &tool.metadata["args"],
            &tool.metadata["status"],
            &tool.metadata["result_bytes"]
        ),
        (
            &json!("echo"),
            &json!("call_1"),
            &json!({"text": "hi"}),
            &json!("success"),
            &json!(7)
        )
    );
    assert!(tool.metadata["duration_ms"].is_u64());

    let answer = &evs[4];
    assert_eq!(answer.metadata["llm_call_index"], 1);
    assert_eq!(answer.metadata["request_messages"], 3);
    assert_eq!(answer.metadata["usage"]["total_tokens"], 37);

    let end = &evs[5];
    assert_eq!(end.content["status"], "success");
    assert_eq!(end.content["usage"]["total_tokens"], 37);
    assert_eq!(end.content["usage"]["lead_agent_tokens"], 37);
    assert_eq!(end.content["usage"]["llm_call_count"], 2);
    assert_eq!(
        evs[6].content,
        json!({"presented": false, "paths": [], "by_tool": {}})
    );
    assert_eq!(report.usage.run_usage().total_tokens, 37);

    // Journal messages carry the same ids the checkpoint holds.
    let cp = store.latest_checkpoint("t1").await.unwrap().unwrap();
    let ids: Vec<String> = cp
        .state
        .messages
        .iter()
        .map(|m| m.id().unwrap().to_owned())
        .collect();
    let journaled: Vec<String> = evs
        .iter()
        .filter(|e| e.category == "message")
        .map(|e| e.content["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(journaled, ids);
}

#[tokio::test]
async fn the_journal_is_never_fed_to_the_model() {
    let (_d, store) = temp_store();
    let h = echo_harness(
        &store,
        vec![
            echo_call("x"),
            ScriptedReply::text("first"),
            ScriptedReply::text("second"),
        ],
    );
    h.run("t", "r1", "one", None).await;
    h.run("t", "r2", "two", None).await;
    let reqs = h.model.requests();
    let last = &reqs[2];
    // Exactly the checkpointed conversation: no run.start/run.end/usage records, nothing else.
    let cp = store.latest_checkpoint("t").await.unwrap().unwrap();
    let sent: Vec<Message> = last.messages.clone();
    let stored: Vec<Message> = cp.state.messages.iter().take(sent.len()).cloned().collect();
    assert_eq!(sent, stored);
    let dump = serde_json::to_string(&sent).unwrap();
    for marker in ["run.start", "llm.ai.response", "run.delivery", "latency_ms"] {
        assert!(
            !dump.contains(marker),
            "{marker} leaked into a model request"
        );
    }
    // …while the journal holds both runs.
    assert_eq!(events(&store, "r1").await.len(), 7);
    assert_eq!(events(&store, "r2").await.len(), 5);
}

#[tokio::test]
async fn failures_and_cancellation_are_journaled_as_terminal_events() {
    let (_d, store) = temp_store();
    let h = harness(
        &store,
        vec![ScriptedReply::Error(ModelError::Http {
            status: 400,
            retry_after: None,
            message: "context_length_exceeded".into(),
            code: None,
            body: String::new(),
        })],
        ToolRegistry::new(),
    );
    let (status, _) = h.run("t", "bad", "hello", None).await;
    assert_eq!(status, RunStatus::Error);
    let evs = events(&store, "bad").await;
    assert_eq!(
        kinds(&evs),
        [
            "run.start",
            "llm.human.input",
            "llm.error",
            "run.error",
            "run.end",
            "run.delivery"
        ]
    );
    assert_eq!(evs[2].metadata["status"], 400);
    assert_eq!(evs[2].metadata["transient"], false);
    assert!(evs[3]
        .content
        .as_str()
        .unwrap()
        .contains("context_length_exceeded"));
    assert_eq!(evs[4].content["status"], "error");

    // Cancelled mid-tool: `interrupted`, never `cancelled`.
    let gate = Arc::new(tokio::sync::Notify::new());
    let h = harness(
        &store,
        vec![ScriptedReply::tool_call("c", "echo", json!({"text": "x"}))],
        ToolRegistry::new().with(echo(Some(gate.clone()))),
    );
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        gate.notified().await;
        c2.cancel();
    });
    let (status, _) = h.run("t2", "cancelled", "go", Some(cancel)).await;
    assert_eq!(status, RunStatus::Interrupted);
    let evs = events(&store, "cancelled").await;
    assert_eq!(evs.last().unwrap().event_type, "run.delivery");
    let end = evs.iter().find(|e| e.event_type == "run.end").unwrap();
    assert_eq!(end.content["status"], "interrupted");
    assert!(!kinds(&evs).contains(&"llm.tool.result"));
}

#[tokio::test]
async fn events_are_flushed_in_batches_during_the_run() {
    let (_d, store) = temp_store();
    let journal = RunJournal::new(store.clone(), "t", "r", None);
    let ctx = RunContext::new("t", "r", Arc::new(NullSink));
    let payload = json!({"n": 1});
    for _ in 0..(2 * FLUSH_EVERY + 5) {
        journal.on_event(
            &ctx,
            &RunEvent::Middleware {
                name: "LoopDetectionMiddleware",
                action: "loop_warning",
                payload: &payload,
            },
        );
    }
    // Two full batches go out on their own, before the run ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = events(&store, "r").await.len();
        if n == 2 * FLUSH_EVERY {
            break;
        }
        assert!(n < 2 * FLUSH_EVERY, "{n}");
        assert!(
            std::time::Instant::now() < deadline,
            "batches never flushed"
        );
        tokio::task::yield_now().await;
    }
    let report = journal.finish().await;
    let evs = events(&store, "r").await;
    assert_eq!(evs.len(), 2 * FLUSH_EVERY + 5 + 1);
    assert_eq!(report.events_written, evs.len());
    assert_eq!(evs[0].event_type, "middleware:loop_warning");
    assert_eq!(evs[0].metadata["name"], "LoopDetectionMiddleware");
}

#[tokio::test]
async fn a_failing_store_never_fails_the_run_and_events_are_retried() {
    let (_d, store) = temp_store();
    let h = harness(
        &store,
        vec![ScriptedReply::text("fine")],
        ToolRegistry::new(),
    );
    // The journal's store refuses writes while the run goes on (the checkpointer is the same
    // file here, so lift the block before the run writes a checkpoint: use a second handle).
    let dir = tempfile::tempdir().unwrap();
    let journal_store = SqliteStore::open(&dir.path().join("j.db")).unwrap();
    let journal = Arc::new(RunJournal::new(journal_store.clone(), "t", "r", None));
    journal_store.set_read_only(true).await.unwrap();
    let ctx = RunContext::new("t", "r", Arc::new(NullSink)).with_observer(journal.clone());
    let out = h
        .agent
        .run(RunInput::message(Message::human("hi")), Arc::new(ctx))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let report = journal.finish().await;
    assert!(report.events_lost > 0);
    assert!(
        report.error.as_deref().unwrap().contains("read-only"),
        "{report:?}"
    );
    assert!(events(&journal_store, "r").await.is_empty());

    // A batch that failed mid-run is written by the next flush once the store is back.
    let journal = RunJournal::new(journal_store.clone(), "t", "r2", None);
    let ctx = RunContext::new("t", "r2", Arc::new(NullSink));
    let payload = json!(null);
    for _ in 0..FLUSH_EVERY {
        journal.on_event(
            &ctx,
            &RunEvent::Middleware {
                name: "m",
                action: "a",
                payload: &payload,
            },
        );
    }
    journal_store.set_read_only(false).await.unwrap();
    let report = journal.finish().await;
    assert_eq!(report.events_lost, 0);
    assert_eq!(events(&journal_store, "r2").await.len(), FLUSH_EVERY + 1);
}

/// Adds a hidden note to the thread in before_agent (checkpointed, but not a journal message).
fn note() -> Arc<dyn Middleware> {
    Arc::new(Hook::before_agent("Note", |_, _| {
        let mut m = Message::human("CORRUPT-TARGET note");
        m.additional_kwargs_mut()
            .insert("hide_from_ui".into(), json!(true));
        Some(StateUpdate::message(m))
    }))
}

/// Overwrite `from` with `to` (same length) in the database file, in place.
fn patch_file(path: &Path, from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(path).unwrap();
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(path, bytes).unwrap();
    n
}

#[tokio::test]
async fn a_corrupt_head_is_rebuilt_from_the_last_good_checkpoint_and_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        let model = Arc::new(ScriptedModel::new([
            echo_call("a"),
            ScriptedReply::text("answer one"),
        ]));
        let agent = Agent::new(model)
            .with_tools(ToolRegistry::new().with(echo(None)))
            .with_chain(Chain::new(vec![note()]).unwrap())
            .with_checkpointer(Arc::new(store.clone()));
        let journal = Arc::new(RunJournal::new(store.clone(), "t", "r1", None));
        let ctx = RunContext::new("t", "r1", Arc::new(NullSink)).with_observer(journal.clone());
        let out = agent
            .run(
                RunInput::message(Message::human("question one")),
                Arc::new(ctx),
            )
            .await;
        assert_eq!(out.status, RunStatus::Success);
        journal.finish().await;
        store.checkpoint_wal().await.unwrap();
    }
    // Break the note's body (a control character inside a JSON string): every checkpoint from
    // the one that wrote it on is undecodable.
    let hits = patch_file(&path, b"CORRUPT-TARGET note\"", b"CORRUPT-TARGET note\x01");
    assert_eq!(hits, 1);

    let store = SqliteStore::open(&path).unwrap();
    assert!(store.latest_checkpoint("t").await.is_err());
    let good = store.latest_good("t").await.unwrap();
    let good_cp = good.checkpoint.clone().unwrap();
    assert_eq!(good_cp.state.messages.len(), 1, "the input checkpoint");

    // The loop's checkpointer repairs the thread on load; the next run continues from it.
    let cp = RecoveringCheckpointer::new(store.clone(), "r2");
    let head = cp.latest("t").await.unwrap().unwrap();
    let texts: Vec<String> = head.state.messages.iter().map(|m| m.text()).collect();
    assert_eq!(
        texts,
        ["question one", "", "echo:a", "answer one"],
        "good checkpoint + the journal's complete round; the unjournaled note is not invented"
    );
    let rec = cp.recovery().unwrap();
    assert_eq!(
        rec.from_checkpoint.as_deref(),
        Some(good_cp.meta.checkpoint_id.as_str())
    );
    assert_eq!(rec.skipped.len(), good.skipped.len());
    assert_eq!(rec.replayed.len(), 3);
    assert!(rec.dropped.is_empty());
    // Pairing holds.
    let call_id = head
        .state
        .messages
        .get(1)
        .unwrap()
        .as_ai()
        .unwrap()
        .tool_calls[0]
        .id_str()
        .to_owned();
    assert_eq!(
        head.state
            .messages
            .get(2)
            .unwrap()
            .as_tool()
            .unwrap()
            .tool_call_id,
        call_id
    );
    // Recorded in the journal; a second load is a no-op.
    let evs = events(&store, "r2").await;
    assert_eq!(kinds(&evs), ["checkpoint.recovered"]);
    assert_eq!(recover_thread(&store, "t", "r3").await.unwrap(), None);
}

#[tokio::test]
async fn recovery_drops_an_unfinished_tool_round() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        let gate = Arc::new(tokio::sync::Notify::new());
        let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_call(
            "call_1",
            "echo",
            json!({"text": "a"}),
        )]));
        let agent = Agent::new(model)
            .with_tools(ToolRegistry::new().with(echo(Some(gate.clone()))))
            .with_chain(Chain::new(vec![note()]).unwrap())
            .with_checkpointer(Arc::new(store.clone()));
        let journal = Arc::new(RunJournal::new(store.clone(), "t", "r1", None));
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        tokio::spawn(async move {
            gate.notified().await;
            c2.cancel();
        });
        let ctx = RunContext::new("t", "r1", Arc::new(NullSink))
            .with_observer(journal.clone())
            .with_cancel(cancel);
        let out = agent
            .run(RunInput::message(Message::human("q")), Arc::new(ctx))
            .await;
        assert_eq!(out.status, RunStatus::Interrupted);
        journal.finish().await;
        store.checkpoint_wal().await.unwrap();
    }
    patch_file(&path, b"CORRUPT-TARGET note\"", b"CORRUPT-TARGET note\x01");
    let store = SqliteStore::open(&path).unwrap();
    let rec = recover_thread(&store, "t", "r2").await.unwrap().unwrap();
    // The AI message that called the tool has no result: left out, so pairing stays valid.
    assert_eq!(rec.replayed.len(), 0);
    assert_eq!(rec.dropped.len(), 1);
    let head = store.latest_checkpoint("t").await.unwrap().unwrap();
    let kinds: Vec<&str> = head.state.messages.iter().map(|m| m.kind()).collect();
    assert_eq!(kinds, ["human"]);
    let _: Value = json!(null);
}
