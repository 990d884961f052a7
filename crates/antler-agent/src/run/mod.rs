//! THE run lifecycle, shared by `antler run` and `antler serve`:
//! [`RunRequest`] → [`App::start_run`] → [`RunHandle`] `{ cancel, events, outcome }`.
//!
//! ```text
//! start_run:  build the agent → admission (coordinator: reject | interrupt | rollback | enqueue)
//!             → `metadata` event → spawn the driver, return the handle
//! driver:     wait for displaced local runs / the queue → thread busy → journal + heartbeat
//!             → Agent::run (own task: a panic still finishes the run) → finish
//! finish:     status, usage, rollback, release the lease, thread status → `error`? → `end`
//! ```
//!
//! Events go to the request's [`EventSink`] (the CLI's renderers; the server's SSE buffer over
//! its event bus). Every run loads its thread through the store's `RecoveringCheckpointer`, so a
//! corrupt head is repaired whichever front end runs it. The records (run, thread, journal,
//! checkpoints) are written here and in the store only; front ends never write them.

pub mod admission;
pub mod coordinator;
pub mod finish;
pub mod journal;
pub mod state;

use std::sync::Arc;

use antler_protocol::{Message, StateSnapshot, StreamEvent, ThreadState};
use antler_runtime::{
    Agent, CancellationToken, EventSink, RunContext, RunInput, RunObserver, RunOptions, RunStatus,
};
use antler_store::checkpoints::recover::RecoveringCheckpointer;
use antler_store::{Heartbeat, MultitaskStrategy, RunRecord};
use serde_json::{json, Map, Value};

pub use coordinator::{CancelAction, RunCoordinator, RunSignal, SqliteCoordinator};
pub use finish::{fallback_error, run_usage};

use crate::{AgentError, App};
use finish::Ending;
use journal::RunJournal;

/// A run's shared state stays usable after a panic elsewhere (it holds no invariant a panic
/// could break halfway).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Rewrites the lead agent before a run (tests add tools here).
pub type AgentHook = Arc<dyn Fn(Agent, &RunOptions) -> Agent + Send + Sync>;

/// One run to start: the thread, the input, resolved options, and how to admit it.
#[derive(Clone)]
pub struct RunRequest {
    /// `None` starts a new thread.
    pub thread_id: Option<String>,
    /// `None` = a fresh run id.
    pub run_id: Option<String>,
    pub assistant_id: String,
    pub input: RunInput,
    pub options: RunOptions,
    /// The user the run belongs to (file layout, custom agents, memory); `None` = the default.
    pub user_id: Option<String>,
    /// What to do when the thread already has an active run (DeerFlow's `multitask_strategy`).
    pub strategy: MultitaskStrategy,
    /// The run record's `metadata`.
    pub metadata: Map<String, Value>,
    /// The run record's `kwargs` (`None`: the options).
    pub kwargs: Option<Map<String, Value>>,
    /// `command: {resume}` with nothing pending: the run changes nothing.
    pub resume_only: bool,
    /// The caller's cancel switch (Ctrl-C); `None` = a fresh one.
    pub cancel: Option<CancellationToken>,
    /// Extra observers besides the run journal.
    pub observers: Vec<Arc<dyn RunObserver>>,
    pub agent_hook: Option<AgentHook>,
    /// When the agent cannot be built (unknown custom agent, bad chain): `false` refuses to
    /// start (`Err`, the CLI); `true` admits the run and ends it `error` with an `AgentError`
    /// event (the server: the run exists, as LangGraph reports graph errors).
    pub agent_errors_end_the_run: bool,
}

impl RunRequest {
    pub fn new(input: RunInput, options: RunOptions) -> RunRequest {
        RunRequest {
            thread_id: None,
            run_id: None,
            assistant_id: "lead_agent".to_owned(),
            input,
            options,
            user_id: None,
            strategy: MultitaskStrategy::Reject,
            metadata: Map::new(),
            kwargs: None,
            resume_only: false,
            cancel: None,
            observers: Vec::new(),
            agent_hook: None,
            agent_errors_end_the_run: false,
        }
    }
}

/// One user turn on a thread, as the CLI asks for it (options not yet resolved).
#[derive(Clone, Debug, Default)]
pub struct TurnRequest {
    /// `None` starts a new thread.
    pub thread_id: Option<String>,
    /// `None` = a fresh run id.
    pub run_id: Option<String>,
    pub message: Option<Message>,
    /// Config model name; `None` = the default (first) model.
    pub model_name: Option<String>,
    pub plan_mode: bool,
    /// `None` = `subagents.enabled` from config.
    pub subagents: Option<bool>,
    /// Client-requested limit, clamped to `max_recursion_limit`.
    pub recursion_limit: Option<i64>,
    pub user_id: Option<String>,
    /// A custom agent (`{home}/agents/{name}`).
    pub agent_name: Option<String>,
    pub cancel: Option<CancellationToken>,
    /// What to do when the thread already has an active run (DeerFlow's `multitask_strategy`).
    pub multitask_strategy: MultitaskStrategy,
}

/// How a run ended.
pub struct TurnOutcome {
    pub thread_id: String,
    pub run_id: String,
    pub status: RunStatus,
    pub state: Arc<ThreadState>,
    /// One-line reason when the run's status is `error`.
    pub error: Option<String>,
    /// LangGraph error name (`GraphRecursionError`, …) when the run failed with an error the
    /// agent did not answer itself (then an `error` event was emitted). `None` for graceful
    /// fallbacks (e.g. an LLM error the agent apologised for).
    pub error_name: Option<String>,
    pub stop_reason: Option<String>,
}

/// A started run.
pub struct RunHandle {
    /// The run record as admitted (`running`, or `pending` when queued).
    pub record: RunRecord,
    /// Cancel switch and completion.
    pub cancel: RunSignal,
    /// Where the run's events go (the request's sink).
    pub events: Arc<dyn EventSink>,
    /// The outcome, once everything is persisted and `end` was emitted.
    pub outcome: tokio::task::JoinHandle<TurnOutcome>,
}

impl RunHandle {
    pub fn run_id(&self) -> &str {
        &self.record.run_id
    }

    pub fn thread_id(&self) -> &str {
        &self.record.thread_id
    }

    /// Wait for the outcome.
    pub async fn outcome(self) -> TurnOutcome {
        let run_id = self.record.run_id.clone();
        let thread_id = self.record.thread_id.clone();
        match self.outcome.await {
            Ok(o) => o,
            // The driver catches the agent's panics; this is the driver's own.
            Err(e) => {
                tracing::error!(run = %run_id, error = %e, "the run task failed");
                TurnOutcome {
                    thread_id,
                    run_id,
                    status: RunStatus::Error,
                    state: Default::default(),
                    error: Some("The run stopped unexpectedly".into()),
                    error_name: Some("InternalError".into()),
                    stop_reason: None,
                }
            }
        }
    }
}

/// Everything the driver task owns.
struct Drive {
    /// `None`: a resume with nothing pending; `Err`: the agent could not be built.
    agent: Result<Option<Agent>, String>,
    input: RunInput,
    options: RunOptions,
    assistant_id: String,
    user_id: Option<String>,
    observers: Vec<Arc<dyn RunObserver>>,
    signal: RunSignal,
    sink: Arc<dyn EventSink>,
    queued: bool,
    wait_for: Vec<RunSignal>,
    /// What a rollback cancel restores: the fork point, else the head before the run.
    base: Option<String>,
}

impl App {
    /// Run options for a CLI turn (config defaults + request overrides).
    pub fn run_options(&self, req: &TurnRequest) -> RunOptions {
        RunOptions {
            model_name: req.model_name.clone(),
            is_plan_mode: req.plan_mode,
            subagent_enabled: req.subagents.unwrap_or(self.config.subagents.enabled),
            recursion_limit: self.config.clamp_recursion_limit(req.recursion_limit),
            agent_name: req.agent_name.clone(),
            ..Default::default()
        }
    }

    /// Run one turn of the lead agent and wait for it. Errors before the run starts (unknown
    /// model, bad thread id, busy thread, unreachable store) are `Err`; a run that starts always
    /// yields an outcome.
    pub async fn run_turn(
        &self,
        req: TurnRequest,
        sink: Arc<dyn EventSink>,
    ) -> Result<TurnOutcome, AgentError> {
        let options = self.run_options(&req);
        let mut metadata = Map::new();
        metadata.insert("user_id".into(), json!(req.user_id));
        let run = RunRequest {
            thread_id: req.thread_id,
            run_id: req.run_id,
            user_id: req.user_id,
            strategy: req.multitask_strategy,
            metadata,
            cancel: req.cancel,
            ..RunRequest::new(
                RunInput {
                    messages: req.message.into_iter().collect(),
                    ..Default::default()
                },
                options,
            )
        };
        Ok(self.start_run(run, sink).await?.outcome().await)
    }

    /// Start a run: build its agent, admit it, emit `metadata`, and drive it in the background.
    /// `Err` when it cannot start (nothing was recorded for it then, except orphans reclaimed).
    pub async fn start_run(
        &self,
        req: RunRequest,
        sink: Arc<dyn EventSink>,
    ) -> Result<RunHandle, AgentError> {
        let thread_id = req
            .thread_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        if !antler_sandbox::paths::is_valid_thread_id(&thread_id) {
            return Err(AgentError::BadThreadId(thread_id));
        }
        let run_id = req
            .run_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let agent = if req.resume_only {
            Ok(None)
        } else {
            // MCP tools: cached until extensions_config.json changes (first build discovers).
            self.mcp.refresh().await;
            match self.lead_agent_for(&req.options, req.user_id.as_deref()) {
                Ok(mut agent) => {
                    if let Some(hook) = &req.agent_hook {
                        agent = hook(agent, &req.options);
                    }
                    // A corrupt head is rebuilt from the last good checkpoint and the journal
                    // on load.
                    agent.checkpointer = Some(Arc::new(RecoveringCheckpointer::new(
                        self.store.clone(),
                        run_id.clone(),
                    )));
                    Ok(Some(agent))
                }
                Err(e) if req.agent_errors_end_the_run => Err(e.to_string()),
                Err(e) => return Err(e),
            }
        };
        let head = match self.store.list_checkpoints(&thread_id, 1, None).await {
            Err(antler_store::StoreError::CorruptCheckpoint { .. }) => {
                // The head's own row does not decode: repair first, so the rollback point is
                // the repaired head.
                antler_store::checkpoints::recover::recover_thread(
                    &self.store,
                    &thread_id,
                    &run_id,
                )
                .await?;
                self.store.list_checkpoints(&thread_id, 1, None).await?
            }
            other => other?,
        }
        .into_iter()
        .next()
        .map(|m| m.checkpoint_id);
        let base = req.input.from_checkpoint.clone().or(head);

        let mut record =
            RunRecord::new(run_id.clone(), thread_id.clone(), req.assistant_id.clone());
        let mut kwargs = req
            .kwargs
            .clone()
            .unwrap_or_else(|| default_kwargs(&req.options));
        kwargs.insert(admission::ROLLBACK_POINT.into(), json!(base));
        record.kwargs = Value::Object(kwargs);
        record.metadata = Value::Object(req.metadata.clone());
        let signal = RunSignal::new(
            run_id.clone(),
            thread_id.clone(),
            req.cancel.unwrap_or_default(),
        );
        // Registered before admission: a run admitted right after may displace this one.
        self.runs.register(signal.clone());
        let admitted = match admission::admit(
            &self.runs,
            record,
            req.strategy,
            req.user_id.as_deref(),
        )
        .await
        {
            Ok(a) => a,
            Err(e) => {
                self.runs.forget(&run_id);
                return Err(e);
            }
        };
        sink.emit(StreamEvent::Metadata {
            run_id: run_id.clone(),
            thread_id: thread_id.clone(),
        });
        let mut input = req.input;
        if admitted.from_checkpoint.is_some() {
            input.from_checkpoint = admitted.from_checkpoint;
        }
        let drive = Drive {
            agent,
            input,
            options: req.options,
            assistant_id: req.assistant_id,
            user_id: req.user_id,
            observers: req.observers,
            signal: signal.clone(),
            sink: sink.clone(),
            queued: admitted.queued,
            wait_for: admitted.wait_for,
            base,
        };
        let resources = RunResources {
            store: self.store.clone(),
            runs: self.runs.clone(),
            track_usage: self.config.run_events.track_token_usage,
            token_caches: self.token_caches.clone(),
        };
        // Boxed: the task keeps its arguments for the run's whole life (see `drive_run`).
        let outcome = tokio::spawn(drive_run(resources, Box::new(drive)));
        Ok(RunHandle {
            record: admitted.record,
            cancel: signal,
            events: sink,
            outcome,
        })
    }
}

/// The record's `kwargs` when the caller gives none: the resolved options.
fn default_kwargs(o: &RunOptions) -> Map<String, Value> {
    let v = json!({
        "context": {
            "model_name": o.model_name,
            "is_plan_mode": o.is_plan_mode,
            "subagent_enabled": o.subagent_enabled,
        },
        "config": {"recursion_limit": o.recursion_limit},
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// What the driver needs from the [`App`] (owned: the driver outlives the call).
struct RunResources {
    store: antler_store::SqliteStore,
    runs: Arc<dyn RunCoordinator>,
    track_usage: bool,
    token_caches: crate::app::TokenCaches,
}

impl RunResources {
    /// The thread's token tallies stop holding its messages once the run is over (see
    /// `CachedTokenCounter::release_thread`).
    fn release_tallies(&self, thread_id: &str) {
        let caches: Vec<_> = lock(&self.token_caches).values().cloned().collect();
        for c in caches {
            c.release_thread(thread_id);
        }
    }
}

/// `d` comes boxed: an async fn's arguments stay in its future for its whole life (twice, once
/// moved), and this one lives as long as the run.
async fn drive_run(res: RunResources, d: Box<Drive>) -> TurnOutcome {
    let fin = |end: Ending, base: Option<String>| {
        let res = &res;
        let signal = d.signal.clone();
        let sink = d.sink.clone();
        // Boxed, like the other short steps here: the task waits on the agent loop for the
        // run's whole life and should not carry their state inline meanwhile.
        Box::pin(async move {
            finish::finish(
                &res.store,
                res.runs.as_ref(),
                &signal,
                sink.as_ref(),
                end,
                base,
            )
            .await
        })
    };
    // Displaced runs of this process finish writing first; queued runs wait their turn.
    for prev in &d.wait_for {
        prev.wait_done().await;
    }
    if d.queued {
        match Box::pin(admission::wait_turn(
            &res.runs,
            &d.signal,
            d.user_id.as_deref(),
        ))
        .await
        {
            Ok(true) => {}
            Ok(false) => return fin(Ending::bare(RunStatus::Interrupted), None).await,
            Err(e) => return fin(Ending::failed("StoreError", e.to_string()), None).await,
        }
    }
    if d.signal.is_cancelled() {
        // Cancelled before it started: it never runs.
        return fin(Ending::bare(RunStatus::Interrupted), None).await;
    }
    let thread_id = d.signal.thread_id().to_owned();
    let run_id = d.signal.run_id().to_owned();

    let agent = match d.agent {
        Ok(a) => a,
        Err(e) => return fin(Ending::failed("AgentError", e), None).await,
    };
    let Some(agent) = agent else {
        // A resume with nothing pending (antler raises no LangGraph interrupts) is ignored.
        if d.sink.modes().values {
            if let Ok(Some(cp)) = Box::pin(res.store.latest_checkpoint(&thread_id)).await {
                d.sink.emit(StreamEvent::Values(
                    StateSnapshot::from_state(cp.state)
                        .stored_as(Some(cp.meta.checkpoint_id.into())),
                ));
            }
        }
        return fin(Ending::bare(RunStatus::Success), None).await;
    };

    // The run journal (spec 40 part 2 §6.3): every model call, tool call and summarization of
    // the run, appended in batches; its rows are durable before the run's `end`.
    let journal = Arc::new(
        RunJournal::new(
            res.store.clone(),
            thread_id.clone(),
            run_id.clone(),
            d.user_id.clone(),
        )
        .with_token_tracking(res.track_usage),
    );
    let mut ctx = RunContext::new(thread_id.clone(), run_id.clone(), d.sink.clone())
        .with_options(d.options)
        .with_user(d.user_id.clone())
        .with_cancel(d.signal.token())
        .with_assistant(d.assistant_id);
    for o in d.observers {
        ctx = ctx.with_observer(o);
    }
    let ctx = Arc::new(ctx.with_observer(journal.clone()));
    let heartbeat = spawn_heartbeat(res.runs.clone(), d.signal.clone());
    let input = Box::new(d.input);
    let joined = tokio::spawn(async move { agent.run_boxed(input, ctx).await }).await;
    heartbeat.abort();
    let report = Box::pin(journal.finish()).await;
    if let Some(e) = &report.error {
        tracing::warn!(run = %run_id, error = %e, lost = report.events_lost, "the run journal is incomplete");
    }
    let end = match joined {
        Ok(outcome) => Ending::of(outcome, &report, &run_id),
        Err(e) => {
            tracing::error!(run = %run_id, error = %e, "the agent loop panicked");
            Ending::failed("InternalError", "The run stopped unexpectedly".into())
        }
    };
    let outcome = fin(end, d.base).await;
    res.release_tallies(&thread_id);
    outcome
}

/// Renew the lease while the run lasts; losing it (another process interrupted or reclaimed the
/// run) stops the run.
fn spawn_heartbeat(
    runs: Arc<dyn RunCoordinator>,
    signal: RunSignal,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = runs.heartbeat_every();
        loop {
            tokio::time::sleep(every).await;
            match runs.heartbeat(signal.run_id()).await {
                Ok(Heartbeat::Held) => {}
                Ok(Heartbeat::Lost(now)) => {
                    tracing::warn!(run = %signal.run_id(), status = ?now.map(|r| r.status), "the run was taken over; stopping it");
                    signal.cancel(CancelAction::Interrupt);
                    break;
                }
                Err(e) => {
                    tracing::warn!(run = %signal.run_id(), error = %e, "could not renew the run lease")
                }
            }
        }
    })
}
