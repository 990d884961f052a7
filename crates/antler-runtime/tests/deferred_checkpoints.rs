//! The loop writes the checkpoints of the supersteps between two side effects in one
//! transaction (`Checkpointer::put_all`), and holds each superstep's events until its
//! checkpoint is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    Message, Object, StateUpdate, StreamEvent, StreamMessage, StreamModes, ThreadState, ToolSpec,
};
use antler_runtime::*;
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::sync::Notify;

/// A store that records each write call: the nodes it wrote, and how many `values` events the
/// run's consumer had received when the write began.
struct Recorder {
    inner: MemoryCheckpointer,
    sink: Arc<CollectingSink>,
    batches: Mutex<Vec<(Vec<String>, usize)>>,
    /// Fail the write call with this index (0-based).
    fail_at: Option<usize>,
    /// The write call with this index waits for the gate before it stores anything.
    gate: Option<(usize, Arc<Notify>)>,
}

impl Recorder {
    fn new(sink: &Arc<CollectingSink>, fail_at: Option<usize>) -> Arc<Recorder> {
        Arc::new(Recorder {
            inner: MemoryCheckpointer::new(),
            sink: sink.clone(),
            batches: Mutex::default(),
            fail_at,
            gate: None,
        })
    }

    fn nodes(&self) -> Vec<Vec<String>> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Record the call; its index.
    fn record(&self, writes: &[CheckpointWrite]) -> Result<usize, CheckpointError> {
        let nodes = writes
            .iter()
            .map(|w| w.meta.metadata["node"].as_str().unwrap_or("").to_owned())
            .collect();
        let mut b = self.batches.lock().unwrap();
        let index = b.len();
        b.push((nodes, values_count(&self.sink)));
        if self.fail_at == Some(index) {
            return Err(CheckpointError::Store("disk full".into()));
        }
        Ok(index)
    }
}

fn values_count(sink: &CollectingSink) -> usize {
    sink.events()
        .iter()
        .filter(|e| matches!(e, StreamEvent::Values(_)))
        .count()
}

#[async_trait]
impl Checkpointer for Recorder {
    async fn put(&self, write: CheckpointWrite) -> Result<(), CheckpointError> {
        self.record(std::slice::from_ref(&write))?;
        self.inner.put(write).await
    }
    async fn put_all(&self, writes: Vec<CheckpointWrite>) -> Result<(), CheckpointError> {
        let index = self.record(&writes)?;
        if let Some((at, gate)) = &self.gate {
            if *at == index {
                gate.notified().await;
            }
        }
        for w in writes {
            self.inner.put(w).await?;
        }
        Ok(())
    }
    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, CheckpointError> {
        self.inner.latest(thread_id).await
    }
    async fn get(&self, t: &str, id: &str) -> Result<Option<Checkpoint>, CheckpointError> {
        self.inner.get(t, id).await
    }
    async fn list(
        &self,
        t: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Vec<CheckpointMeta>, CheckpointError> {
        self.inner.list(t, limit, before).await
    }
    async fn delete_thread(&self, t: &str) -> Result<(), CheckpointError> {
        self.inner.delete_thread(t).await
    }
}

/// An after_model hook that writes a title, deferrable or not, optionally persisting first.
struct Stamp {
    deferrable: bool,
    persist: bool,
    /// Start a `persist` and give up on it at once (a hook cancelled mid-write).
    abandon: bool,
    /// Whether checkpoints were pending when the hook ran (after its own persist).
    saw_pending: Mutex<Vec<bool>>,
}

#[async_trait]
impl Middleware for Stamp {
    fn name(&self) -> &str {
        "Stamp"
    }
    fn hooks(&self) -> HookSet {
        HookSet::AFTER_MODEL
    }
    fn deferrable_hooks(&self) -> HookSet {
        if self.deferrable {
            HookSet::AFTER_MODEL
        } else {
            HookSet::NONE
        }
    }
    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        if self.persist {
            run.persist().await.unwrap();
        }
        if self.abandon {
            // Given up on while its write runs (a gated write cannot finish in time).
            let _ = tokio::time::timeout(std::time::Duration::ZERO, run.persist()).await;
            // Let the abandoned write take the queue before this hook's own superstep.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
        self.saw_pending
            .lock()
            .unwrap()
            .push(run.has_pending_checkpoints());
        Ok(HookOutput::update(StateUpdate {
            title: Some(Some(format!("{} messages", state.messages.len()))),
            ..Default::default()
        }))
    }
}

struct Echo(Arc<ToolSpec>);

#[derive(serde::Deserialize)]
struct EchoArgs {
    text: String,
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.0
    }
    async fn call(&self, args: Object, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let a: EchoArgs = parse_args(args)?;
        Ok(ToolOutput::text(a.text))
    }
}

fn echo() -> Arc<dyn Tool> {
    Arc::new(Echo(Arc::new(ToolSpec {
        name: "echo".into(),
        description: "echo".into(),
        parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
    })))
}

struct Outcome {
    run: RunOutcome,
    cp: Arc<Recorder>,
    sink: Arc<CollectingSink>,
    stamp: Arc<Stamp>,
}

/// One tool step, then a text answer; `Stamp` writes after each model call.
async fn run(deferrable: bool, persist: bool, fail_at: Option<usize>) -> Outcome {
    let sink = Arc::new(CollectingSink::new());
    run_into(sink.clone(), sink, deferrable, persist, fail_at).await
}

/// [`run`], the run's events going to `to`, which delivers them to `sink`.
async fn run_into(
    to: Arc<dyn EventSink>,
    sink: Arc<CollectingSink>,
    deferrable: bool,
    persist: bool,
    fail_at: Option<usize>,
) -> Outcome {
    let cp = Recorder::new(&sink, fail_at);
    let stamp = Arc::new(Stamp {
        deferrable,
        persist,
        abandon: false,
        saw_pending: Mutex::default(),
    });
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "echo", json!({"text": "hi"})),
        ScriptedReply::text("done"),
    ]));
    let agent = Agent::new(model)
        .with_tools(ToolRegistry::new().with(echo()))
        .with_chain(Chain::new(vec![stamp.clone() as Arc<dyn Middleware>]).unwrap())
        .with_checkpointer(cp.clone());
    let ctx = Arc::new(RunContext::new("t1", "r1", to));
    let run = agent
        .run(RunInput::message(Message::human("go")), ctx)
        .await;
    Outcome {
        run,
        cp,
        sink,
        stamp,
    }
}

fn nodes(batches: &[&[&str]]) -> Vec<Vec<String>> {
    batches
        .iter()
        .map(|b| b.iter().map(|s| (*s).to_owned()).collect())
        .collect()
}

#[tokio::test]
async fn supersteps_between_side_effects_are_written_together() {
    let out = run(true, false, None).await;
    assert_eq!(out.run.status, RunStatus::Success);
    // Written before the model call, before the tool call, before the next model call, and
    // at the end: the model's answer and the hook after it share one write.
    assert_eq!(
        out.cp.nodes(),
        nodes(&[
            &["__input__"],
            &["model", "Stamp.after_model"],
            &["tools"],
            &["model", "Stamp.after_model"],
        ])
    );
    assert_eq!(*out.stamp.saw_pending.lock().unwrap(), [true, true]);
    // Every superstep is a checkpoint of its own, chained, and the head is the run's state.
    let all = out.cp.list("t1", 100, None).await.unwrap();
    assert_eq!(all.len(), 6);
    for pair in all.windows(2) {
        assert_eq!(
            pair[0].parent_id.as_deref(),
            Some(pair[1].checkpoint_id.as_str())
        );
    }
    let head = out.cp.latest("t1").await.unwrap().unwrap();
    assert_eq!(head.state.title.as_deref(), Some("4 messages"));
    assert_eq!(
        head.state.messages.to_vec(),
        out.run.state.messages.to_vec()
    );
    assert_eq!(
        out.run.checkpoint_id.as_deref(),
        Some(head.meta.checkpoint_id.as_str())
    );
}

/// Every superstep written on its own, and the hook never saw a queued one.
fn assert_one_write_each(out: &Outcome) {
    assert_eq!(out.run.status, RunStatus::Success);
    assert_eq!(
        out.cp.nodes(),
        nodes(&[
            &["__input__"],
            &["model"],
            &["Stamp.after_model"],
            &["tools"],
            &["model"],
            &["Stamp.after_model"],
        ])
    );
    assert_eq!(*out.stamp.saw_pending.lock().unwrap(), [false, false]);
}

#[tokio::test]
async fn a_hook_that_is_not_deferrable_runs_after_the_write() {
    assert_one_write_each(&run(false, false, None).await);
}

#[tokio::test]
async fn a_deferrable_hook_can_write_before_its_own_side_effect() {
    assert_one_write_each(&run(true, true, None).await);
}

#[tokio::test]
async fn values_events_wait_for_their_checkpoint() {
    let out = run(true, false, None).await;
    let batches = out.cp.batches.lock().unwrap().clone();
    let mut written = 0;
    for (nodes, values_seen) in &batches {
        // A consumer has seen exactly the states already written, none of this batch's.
        assert_eq!(*values_seen, written, "before writing {nodes:?}");
        written += nodes.len();
    }
    assert_eq!(values_count(&out.sink), written);
    // The order of events is the order they were emitted: each node's update, then its state.
    assert_eq!(
        order(&out.sink),
        [
            "v:1",
            "u:model",
            "v:2",
            "u:Stamp.after_model",
            "v:2",
            "u:tools",
            "v:3",
            "u:model",
            "v:4",
            "u:Stamp.after_model",
            "v:4",
        ]
    );
}

/// The `updates` and `values` events a consumer received: node names and list lengths.
fn order(sink: &CollectingSink) -> Vec<String> {
    sink.events()
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Updates { node, .. } => Some(format!("u:{node}")),
            StreamEvent::Values(v) => Some(format!("v:{}", v.messages.len())),
            _ => None,
        })
        .collect()
}

/// A sink that takes a held `values` snapshot apart at once, as the server's replay buffer
/// does (here: a list of its own), and delivers it when the run releases it.
struct Preparing {
    inner: Arc<CollectingSink>,
    /// The values events prepared while held.
    prepared: Mutex<usize>,
}

impl EventSink for Preparing {
    fn modes(&self) -> StreamModes {
        self.inner.modes()
    }
    fn emit(&self, event: StreamEvent) {
        self.inner.emit(event);
    }
    fn hold(&self, event: StreamEvent) -> Held {
        let StreamEvent::Values(mut snapshot) = event else {
            return Held::Event(event);
        };
        *self.prepared.lock().unwrap() += 1;
        snapshot.messages = Arc::new(snapshot.messages.as_ref().clone());
        let inner = self.inner.clone();
        Held::Prepared(Box::new(move || inner.emit(StreamEvent::Values(snapshot))))
    }
}

/// A sink's prepared events are delivered in their place among the others, once their
/// checkpoint is written, and never when the write fails.
#[tokio::test]
async fn events_a_sink_prepares_while_held_keep_their_place() {
    let prepared = |sink: &Arc<CollectingSink>| {
        Arc::new(Preparing {
            inner: sink.clone(),
            prepared: Mutex::new(0),
        })
    };
    let plain = run(true, false, None).await;
    let sink = Arc::new(CollectingSink::new());
    let to = prepared(&sink);
    let out = run_into(to.clone(), sink, true, false, None).await;
    assert_eq!(out.run.status, RunStatus::Success);
    assert_eq!(order(&out.sink), order(&plain.sink));
    // Every `values` event was emitted while its checkpoint was pending.
    assert_eq!(*to.prepared.lock().unwrap(), values_count(&out.sink));
    let batches = out.cp.batches.lock().unwrap().clone();
    let mut written = 0;
    for (nodes, values_seen) in &batches {
        assert_eq!(*values_seen, written, "before writing {nodes:?}");
        written += nodes.len();
    }

    // The second write fails: the states it held are dropped, prepared or not.
    let sink = Arc::new(CollectingSink::new());
    let to = prepared(&sink);
    let out = run_into(to.clone(), sink, true, false, Some(1)).await;
    assert_eq!(out.run.status, RunStatus::Error);
    assert_eq!(values_count(&out.sink), 1);
    assert!(*to.prepared.lock().unwrap() > 1);
}

#[tokio::test]
async fn a_failed_write_fails_the_run_and_its_states_are_never_reported() {
    // The second write (the model's answer and the hook after it) fails.
    let out = run(true, false, Some(1)).await;
    assert_eq!(out.run.status, RunStatus::Error);
    assert!(
        matches!(out.run.error, Some(RunError::Checkpoint(_))),
        "{:?}",
        out.run.error
    );
    // The tool never ran: the failure stopped the run at the write before it.
    assert_eq!(
        out.cp.nodes(),
        nodes(&[&["__input__"], &["model", "Stamp.after_model"]])
    );
    assert_eq!(values_count(&out.sink), 1);
    let head = out.cp.latest("t1").await.unwrap().unwrap();
    assert_eq!(head.state.messages.len(), 1);
    // Nor did the tool run (its result would stream as a `messages` event).
    let tool_events = out
        .sink
        .events()
        .iter()
        .filter(|e| {
            matches!(
                e,
                StreamEvent::Messages {
                    message: StreamMessage::Tool(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(tool_events, 0);
}

#[tokio::test]
async fn an_abandoned_write_releases_only_the_events_it_wrote() {
    // A hook starts a write and is dropped from it (as when its run is cancelled); the write
    // goes on, and the hook's own superstep is queued before it lands. That superstep's events
    // must wait for its own write.
    let sink = Arc::new(CollectingSink::new());
    let gate = Arc::new(Notify::new());
    let cp = Arc::new(Recorder {
        gate: Some((1, gate.clone())),
        ..Arc::into_inner(Recorder::new(&sink, None)).unwrap()
    });
    let stamp = Arc::new(Stamp {
        deferrable: true,
        persist: false,
        abandon: true,
        saw_pending: Mutex::default(),
    });
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "echo", json!({"text": "hi"})),
        ScriptedReply::text("done"),
    ]));
    let agent = Agent::new(model)
        .with_tools(ToolRegistry::new().with(echo()))
        .with_chain(Chain::new(vec![stamp.clone() as Arc<dyn Middleware>]).unwrap())
        .with_checkpointer(cp.clone());
    let ctx = Arc::new(RunContext::new("t1", "r1", sink.clone()));
    // Open the gate once the gated write has begun and the hook's superstep is queued.
    let (watch, writes) = (ctx.clone(), cp.clone());
    let opener = tokio::spawn(async move {
        while writes.batches.lock().unwrap().len() < 2 || !watch.has_pending_checkpoints() {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
    });
    let out = agent
        .run(RunInput::message(Message::human("go")), ctx)
        .await;
    opener.await.unwrap();
    assert_eq!(out.status, RunStatus::Success);
    let batches = cp.batches.lock().unwrap().clone();
    assert_eq!(
        batches.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        nodes(&[
            &["__input__"],
            &["model"],
            &["Stamp.after_model"],
            &["tools"],
            &["model"],
            &["Stamp.after_model"],
        ])
    );
    let mut written = 0;
    for (nodes, values_seen) in &batches {
        assert_eq!(*values_seen, written, "before writing {nodes:?}");
        written += nodes.len();
    }
    assert_eq!(values_count(&sink), written);
}

/// Consecutive `values` snapshots share one copy of the non-message channels until a write
/// changes one of them; each still shows the state of its own superstep.
#[tokio::test]
async fn values_snapshots_share_the_channels_until_one_changes() {
    let out = run(true, false, None).await;
    let snaps: Vec<_> = out
        .sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Values(v) => Some(v),
            _ => None,
        })
        .collect();
    let titles: Vec<Option<String>> = snaps.iter().map(|s| s.to_state().title).collect();
    let two = Some("2 messages".to_owned());
    let four = Some("4 messages".to_owned());
    assert_eq!(
        titles,
        [None, None, two.clone(), two.clone(), two, four.clone()]
    );
    let lens: Vec<usize> = snaps.iter().map(|s| s.messages.len()).collect();
    assert_eq!(lens, [1, 2, 2, 3, 4, 4]);
    // Shared while only messages were written (input → model, Stamp → tools → model); a new
    // copy where the title changed.
    let shared: Vec<bool> = snaps
        .windows(2)
        .map(|w| Arc::ptr_eq(&w[0].fields, &w[1].fields))
        .collect();
    assert_eq!(shared, [true, false, true, true, false]);
    // What a snapshot serializes is the state it was taken at.
    let last = snaps.last().unwrap();
    assert_eq!(
        serde_json::to_value(last).unwrap(),
        serde_json::to_value(out.run.state.as_ref()).unwrap()
    );
    assert_eq!(last.fields.title, four);
}
