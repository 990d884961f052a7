//! The agent loop (spec 20):
//!
//! ```text
//! before_agent* → [ before_model* → model → after_model* (reverse) → tools ]* → after_agent* (reverse)
//! ```
//!
//! Every hook node, the model call and each tool batch is one step counted against the
//! recursion limit, as LangGraph counts graph supersteps. After each step that wrote something
//! the write is folded through the reducers, checkpointed (only what changed) and reported as
//! `updates`/`values` events. Every await observes the run's cancellation token; a cancelled run
//! keeps its last committed checkpoint and never applies half a tool batch.

use std::sync::Arc;

use antler_models::{ChatModel, ModelError};
use antler_protocol::{
    Message, Object, ReducerError, StateUpdate, ThreadState, ToolCall, ToolMessage,
};
use futures::future::join_all;
use serde_json::Value;

use crate::checkpoint::{CheckpointError, CheckpointWrite, Checkpointer};
use crate::context::RunContext;
use crate::middleware::{
    Chain, HookOutput, HookSet, JumpTo, JumpToEnd, Middleware, MiddlewareError, ModelCallError,
    ModelRequest, ToolCallRequest,
};
use crate::observe::RunEvent;
use crate::tool::{Goto, ToolError, ToolOutcome, ToolRegistry};

/// A configured agent: model, prompt, tools, middleware chain, and where it checkpoints.
#[derive(Clone)]
pub struct Agent {
    pub model: Arc<dyn ChatModel>,
    /// The static system prompt (kept byte-identical across turns for provider prefix caches).
    pub system_prompt: Option<Arc<str>>,
    pub tools: Arc<ToolRegistry>,
    pub chain: Arc<Chain>,
    /// `None` runs without persistence (subagents).
    pub checkpointer: Option<Arc<dyn Checkpointer>>,
    /// Default per-call model settings.
    pub model_settings: Object,
}

impl Agent {
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        Agent {
            model,
            system_prompt: None,
            tools: Arc::new(ToolRegistry::new()),
            chain: Arc::new(Chain::empty()),
            checkpointer: None,
            model_settings: Object::new(),
        }
    }

    pub fn with_system_prompt(mut self, prompt: impl Into<Arc<str>>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    pub fn with_tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = Arc::new(tools);
        self
    }

    pub fn with_chain(mut self, chain: Chain) -> Self {
        self.chain = Arc::new(chain);
        self
    }

    pub fn with_checkpointer(mut self, c: Arc<dyn Checkpointer>) -> Self {
        self.checkpointer = Some(c);
        self
    }
}

/// What starts a run.
#[derive(Clone, Debug, Default)]
pub struct RunInput {
    /// New messages (usually one human message), folded with `add_messages`.
    pub messages: Vec<Message>,
    /// Writes to other channels applied with the input.
    pub update: Option<StateUpdate>,
    /// Start from this checkpoint instead of the thread's latest (a fork).
    pub from_checkpoint: Option<String>,
    /// Starting state when the agent has no checkpointer (subagents).
    pub initial_state: Option<ThreadState>,
}

impl RunInput {
    pub fn message(m: Message) -> Self {
        RunInput {
            messages: vec![m],
            ..Default::default()
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("Recursion limit of {0} reached without hitting a stop condition. You can increase the limit by setting the `recursion_limit` config key.")]
    RecursionLimit(usize),
    #[error("model call failed: {0}")]
    Model(#[from] ModelError),
    #[error(transparent)]
    Middleware(#[from] MiddlewareError),
    #[error("tool '{tool}' failed: {source}")]
    Tool { tool: String, source: ToolError },
    #[error("invalid state update: {0}")]
    Reducer(#[from] ReducerError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("checkpoint {0} not found")]
    UnknownCheckpoint(String),
}

impl RunError {
    /// The error's name as LangGraph clients expect it in `error` events.
    pub fn name(&self) -> &'static str {
        match self {
            RunError::RecursionLimit(_) => "GraphRecursionError",
            RunError::Model(_) => "ModelError",
            RunError::Middleware(_) => "MiddlewareError",
            RunError::Tool { .. } => "ToolException",
            RunError::Reducer(_) => "InvalidUpdateError",
            RunError::Checkpoint(_) | RunError::UnknownCheckpoint(_) => "CheckpointError",
        }
    }
}

/// The result of [`Agent::run`].
pub struct RunOutcome {
    pub status: RunStatus,
    /// State as last committed.
    pub state: Arc<ThreadState>,
    pub error: Option<RunError>,
    /// Latest checkpoint written (or loaded) for the thread.
    pub checkpoint_id: Option<String>,
    /// Steps executed against the recursion limit.
    pub steps: usize,
    /// `stop_reason` left in the run context by a guard (`loop_capped`, `token_capped`, …).
    pub stop_reason: Option<String>,
}

enum Stop {
    Cancelled,
    Failed(RunError),
}

impl<E: Into<RunError>> From<E> for Stop {
    fn from(e: E) -> Self {
        Stop::Failed(e.into())
    }
}

/// Where control goes after a phase.
enum Flow {
    Next,
    Restart,
    Exit,
}

/// The calls a tools step runs: positions in the last AI message, which it keeps alive.
#[derive(Default)]
struct Pending {
    ai: Option<Arc<Message>>,
    open: Vec<usize>,
}

impl Pending {
    fn calls(&self) -> impl Iterator<Item = &ToolCall> {
        let calls = match self.ai.as_deref() {
            Some(Message::Ai(ai)) => ai.tool_calls.as_slice(),
            _ => &[],
        };
        self.open.iter().filter_map(|&i| calls.get(i))
    }
}

struct Runner<'a> {
    agent: &'a Agent,
    run: Arc<RunContext>,
    state: Arc<ThreadState>,
    /// Shared with the `values` snapshots that name it (see [`StateSnapshot::checkpoint_id`]).
    head: Option<Arc<str>>,
    /// The non-message channels as last seen (`messages` empty): what `values` snapshots share
    /// while the channels do not change. `None` until first needed.
    fields: Option<Arc<ThreadState>>,
    /// Whether `fields` is what the head checkpoint stores (a checkpoint then writes none).
    fields_stored: bool,
    /// Whether `fields` may be stale: a write touched a channel other than `messages`.
    fields_dirty: bool,
    steps: usize,
    limit: usize,
}

impl Agent {
    /// Run one turn on a thread. Never panics on bad model output or tool failures; the outcome
    /// says how the run ended.
    ///
    /// The input is boxed before the run's future starts: a future keeps its arguments for its
    /// whole life, and this one lives as long as the run (a thousand concurrent runs would each
    /// carry a kilobyte of input they no longer need).
    pub fn run(
        &self,
        input: RunInput,
        run: Arc<RunContext>,
    ) -> impl std::future::Future<Output = RunOutcome> + '_ {
        let input = Box::new(input);
        self.run_boxed(input, run)
    }

    /// [`Agent::run`] with the input already boxed.
    pub async fn run_boxed(&self, input: Box<RunInput>, run: Arc<RunContext>) -> RunOutcome {
        let mut r = Runner {
            agent: self,
            limit: run.options.recursion_limit.max(1),
            run,
            state: Arc::new(ThreadState::default()),
            head: None,
            fields: None,
            fields_stored: false,
            fields_dirty: true,
            steps: 0,
        };
        let mut result = r.drive(input).await;
        // Whatever ended the loop, the supersteps it finished are written before the run's end.
        if let Err(e) = r.flush().await {
            if result.is_ok() {
                result = Err(e);
            }
        }
        let stop_reason = r.run.get(&crate::context::keys::STOP_REASON);
        let (status, error) = match result {
            Ok(()) => (RunStatus::Success, None),
            Err(Stop::Cancelled) => (RunStatus::Interrupted, None),
            Err(Stop::Failed(e)) => {
                tracing::warn!(thread = %r.run.thread_id, run = %r.run.run_id, error = %e, "run failed");
                (RunStatus::Error, Some(e))
            }
        };
        if r.run.observed() {
            let msg = error.as_ref().map(|e| e.to_string());
            r.run.observe(&RunEvent::RunEnd {
                status,
                error: msg.as_deref(),
            });
        }
        RunOutcome {
            status,
            state: r.state,
            error,
            checkpoint_id: r.head.as_deref().map(str::to_owned),
            steps: r.steps,
            stop_reason,
        }
    }
}

impl Runner<'_> {
    async fn cancellable<F: std::future::Future>(&self, fut: F) -> Result<F::Output, Stop> {
        tokio::select! {
            biased;
            _ = self.run.cancel.cancelled() => Err(Stop::Cancelled),
            out = fut => Ok(out),
        }
    }

    /// Count one graph step; fails when the limit would be exceeded.
    fn tick(&mut self) -> Result<(), Stop> {
        if self.steps >= self.limit {
            return Err(Stop::Failed(RunError::RecursionLimit(self.limit)));
        }
        self.steps += 1;
        self.run.events.set_step(self.steps as u64);
        Ok(())
    }

    async fn load(&mut self, input: &mut RunInput) -> Result<(), Stop> {
        let Some(cp) = &self.agent.checkpointer else {
            if let Some(s) = input.initial_state.take() {
                self.state = Arc::new(s);
            }
            return Ok(());
        };
        let loaded = match &input.from_checkpoint {
            Some(id) => Some(
                self.cancellable(cp.get(&self.run.thread_id, id))
                    .await??
                    .ok_or_else(|| RunError::UnknownCheckpoint(id.clone()))?,
            ),
            None => self.cancellable(cp.latest(&self.run.thread_id)).await??,
        };
        if let Some(c) = loaded {
            self.head = Some(c.meta.checkpoint_id.into());
            self.fields = Some(Arc::new(c.state.fields_only()));
            self.fields_stored = true;
            self.fields_dirty = false;
            self.state = Arc::new(c.state);
        } else if let Some(s) = input.initial_state.take() {
            self.state = Arc::new(s);
        }
        Ok(())
    }

    /// Fold a write into state, checkpoint it and report it.
    fn commit(&mut self, node: &str, mut update: StateUpdate, source: &str) -> Result<(), Stop> {
        update.assign_message_ids();
        if update.is_empty() {
            return Ok(());
        }
        if self.run.observed() {
            self.run.observe(&RunEvent::Update {
                node,
                update: &update,
            });
        }
        self.fields_dirty |= !update.only_messages();
        Arc::make_mut(&mut self.state).apply(update)?;
        self.checkpoint(node, source);
        self.values();
        Ok(())
    }

    /// Bring `fields` up to date with the state: compared only after a write that touched a
    /// channel other than `messages`, copied only when one of them really changed.
    fn sync_fields(&mut self) -> &Arc<ThreadState> {
        let fields = match self.fields.take() {
            Some(f) if !self.fields_dirty || self.state.same_fields(&f) => f,
            _ => {
                self.fields_stored = false;
                Arc::new(self.state.fields_only())
            }
        };
        self.fields_dirty = false;
        self.fields.insert(fields)
    }

    /// Emit a `values` event of the state as it stands, if a subscriber wants one.
    fn values(&mut self) {
        if self.run.events.wants_values() {
            let fields = self.sync_fields().clone();
            // The head is the checkpoint of this very state (queued; durable before the run's
            // `end`), unless nothing is stored.
            let stored = self.agent.checkpointer.as_ref().and(self.head.clone());
            self.run.events.values(fields, &self.state.messages, stored);
        }
    }

    /// Write the queued checkpoints (before a side effect); not cancellable, it is short and a
    /// finished superstep stays finished.
    async fn flush(&self) -> Result<(), Stop> {
        Ok(self.run.flush_checkpoints().await?)
    }

    /// Queue the checkpoint of the superstep just applied (see [`RunContext::persist`]).
    fn checkpoint(&mut self, node: &str, source: &str) {
        let changes = Arc::make_mut(&mut self.state).messages.take_changes();
        let Some(cp) = self.agent.checkpointer.clone() else {
            return;
        };
        self.sync_fields();
        let fields_changed = !self.fields_stored;
        let state = &self.state;
        let step = if source == "input" {
            -1
        } else {
            self.steps as i64
        };
        let write = CheckpointWrite::new(
            self.run.thread_id.clone(),
            self.head.as_deref().map(str::to_owned),
            step,
            loop_metadata(source, step, node, &self.run.run_id, &self.run.thread_id),
            changes,
            // Changed channels are rare (title, todos, sandbox): their `Value` is built then only.
            fields_changed.then(|| state.fields_value()),
        );
        self.head = Some(write.meta.checkpoint_id.as_str().into());
        self.run.defer_checkpoint(&cp, write);
        self.fields_stored = true;
    }

    /// Run one node hook of `mw`.
    async fn hook(
        &mut self,
        mw: &Arc<dyn Middleware>,
        kind: HookKind,
    ) -> Result<Option<JumpTo>, Stop> {
        self.tick()?;
        if !mw.deferrable_hooks().contains(kind.set()) {
            self.flush().await?;
        }
        let state = self.state.clone();
        // Each hook's own jump type, widened to the loop's one.
        let fut = async {
            Ok::<_, MiddlewareError>(match kind {
                HookKind::BeforeAgent => {
                    let out = mw.before_agent(&state, &self.run).await?;
                    let jump = out.jump_to.map(|JumpToEnd::End| JumpTo::End);
                    (out.update, jump)
                }
                HookKind::BeforeModel => {
                    let HookOutput { update, jump_to } = mw.before_model(&state, &self.run).await?;
                    (update, jump_to)
                }
                HookKind::AfterModel => {
                    let HookOutput { update, jump_to } = mw.after_model(&state, &self.run).await?;
                    (update, jump_to)
                }
                HookKind::AfterAgent => {
                    let out = mw.after_agent(&state, &self.run).await?;
                    (out.update, out.jump_to.map(|never| match never {}))
                }
            })
        };
        let (update, jump_to) = self.cancellable(fut).await??;
        drop(state);
        let mut update = update.unwrap_or_default();
        update.assign_message_ids();
        // Most hooks change nothing: then only an `updates` subscriber needs the node's name.
        if update.is_empty() && !self.run.events.modes().updates {
            return Ok(jump_to);
        }
        let node = format!("{}.{}", mw.name(), kind.as_str());
        self.run.events.updates(&node, &update);
        self.commit(&node, update, "loop")?;
        Ok(jump_to)
    }

    async fn drive(&mut self, input: Box<RunInput>) -> Result<(), Stop> {
        // Boxed: a future's size is its largest state's, and the start is short; a thousand
        // runs waiting on a model or a tool would each carry it inline otherwise.
        Box::pin(self.start(input)).await?;
        self.turns().await
    }

    /// Load the thread and apply the input.
    async fn start(&mut self, mut input: Box<RunInput>) -> Result<(), Stop> {
        self.load(&mut input).await?;

        let mut first = StateUpdate::default();
        if let Some(u) = input.update.take() {
            first = u;
        }
        if !input.messages.is_empty() {
            first
                .messages
                .get_or_insert_with(Vec::new)
                .extend(std::mem::take(&mut input.messages));
        }
        if first.is_empty() {
            self.values();
        } else {
            self.commit("__input__", first, "input")?;
        }
        if self.run.observed() {
            self.run.observe(&RunEvent::RunStart);
        }
        Ok(())
    }

    /// The before_agent hooks, the model→tools loop, the after_agent hooks.
    async fn turns(&mut self) -> Result<(), Stop> {
        let chain = self.agent.chain.clone();
        let mut flow = Flow::Next;
        for mw in &chain.before_agent {
            if self.hook(mw, HookKind::BeforeAgent).await?.is_some() {
                // JumpToEnd::End, the only jump a before_agent hook can make.
                flow = Flow::Exit;
                break;
            }
        }

        if !matches!(flow, Flow::Exit) {
            'turn: loop {
                for mw in &chain.before_model {
                    match self.hook(mw, HookKind::BeforeModel).await? {
                        Some(JumpTo::End) => break 'turn,
                        Some(JumpTo::Model) => continue 'turn,
                        None => {}
                    }
                }

                // Boxed (see `drive`): each holds what the other never needs.
                Box::pin(self.model_step()).await?;

                for mw in &chain.after_model {
                    match self.hook(mw, HookKind::AfterModel).await? {
                        Some(JumpTo::End) => break 'turn,
                        Some(JumpTo::Model) => continue 'turn,
                        None => {}
                    }
                }

                let pending = match self.route_after_model() {
                    Flow::Exit => break 'turn,
                    Flow::Restart => continue 'turn,
                    Flow::Next => self.pending_calls(),
                };
                if let Flow::Exit = Box::pin(self.tools_step(pending)).await? {
                    break 'turn;
                }
            }
        }

        for mw in &chain.after_agent {
            // An after_agent hook cannot jump (NoJump); the result is always None.
            self.hook(mw, HookKind::AfterAgent).await?;
        }
        Ok(())
    }

    async fn model_step(&mut self) -> Result<(), Stop> {
        self.tick()?;
        let agent = self.agent;
        let info = agent.model.info();
        let stream = match info.streaming {
            Some(s) => s,
            None => self.run.events.wants_messages(),
        };
        let req = ModelRequest {
            model: agent.model.clone(),
            system_prompt: agent.system_prompt.clone(),
            messages: self.state.messages.shared(),
            tools: agent.tools.specs().to_vec(),
            tool_choice: None,
            settings: agent.model_settings.clone(),
            stream,
            message_id: format!("lc_run--{}", uuid::Uuid::new_v4()),
            state: self.state.clone(),
            run: self.run.clone(),
        };
        self.flush().await?;
        let resp = match self.cancellable(agent.chain.call_model(req)).await? {
            Ok(r) => r,
            Err(ModelCallError::Model(e)) => return Err(Stop::Failed(RunError::Model(e))),
            Err(ModelCallError::Middleware(e)) => {
                return Err(Stop::Failed(RunError::Middleware(e)))
            }
        };
        let mut update = StateUpdate::message(Message::Ai(resp.message));
        if let Some(extra) = resp.update {
            update.merge(extra)?;
        }
        self.run.events.updates("model", &update);
        self.commit("model", update, "loop")
    }

    /// The model→tools router (spec 20 §4), after the last after_model hook.
    fn route_after_model(&self) -> Flow {
        let Some(ai) = self.state.last_ai() else {
            return Flow::Exit;
        };
        if ai.tool_calls.is_empty() {
            return Flow::Exit;
        }
        if self.pending_calls().open.is_empty() {
            // Every call already answered (e.g. a middleware injected results).
            return Flow::Restart;
        }
        Flow::Next
    }

    /// Calls of the last AI message with no tool message after it (by position in that message,
    /// which the batch holds on to: no call is copied to find them).
    fn pending_calls(&self) -> Pending {
        let msgs = &self.state.messages;
        let Some((pos, ai)) = msgs
            .arcs()
            .enumerate()
            .rev()
            .find(|(_, m)| matches!(m.as_ref(), Message::Ai(_)))
        else {
            return Pending::default();
        };
        let Message::Ai(last) = ai.as_ref() else {
            return Pending::default();
        };
        // The messages after it are this turn's results: a handful, scanned in place.
        let answered = |id: &str| {
            msgs.iter()
                .skip(pos + 1)
                .filter_map(Message::as_tool)
                .any(|t| t.tool_call_id == id)
        };
        let open = (0..last.tool_calls.len())
            .filter(|&i| !answered(last.tool_calls[i].id_str()))
            .collect();
        Pending {
            ai: Some(ai.clone()),
            open,
        }
    }

    async fn tools_step(&mut self, pending: Pending) -> Result<Flow, Stop> {
        self.tick()?;
        self.flush().await?;
        let agent = self.agent;
        let calls: Vec<&ToolCall> = pending.calls().collect();
        let names = agent.tools.shared_names();
        let futures = calls.iter().map(|&call| {
            let fut = agent.chain.call_tool(ToolCallRequest {
                call: call.clone(),
                tool: agent.tools.get(&call.name).cloned(),
                state: self.state.clone(),
                run: self.run.clone(),
                tool_names: names.clone(),
            });
            async move {
                let started = std::time::Instant::now();
                let out = fut.await;
                (out, started.elapsed())
            }
        });
        let timed = self.cancellable(join_all(futures)).await?;
        let mut results = Vec::with_capacity(timed.len());
        let mut durations = Vec::with_capacity(timed.len());
        for (out, d) in timed {
            results.push(out);
            durations.push(d);
        }

        // Results are applied in call order, whatever order they completed in; one failed call
        // fails the whole batch and nothing of it is applied (nor reported). Each call's
        // messages are a contiguous run of the merged list; its own update is kept apart only
        // for an `updates` subscriber.
        let wants_updates = self.run.events.modes().updates;
        let mut merged = StateUpdate::default();
        let mut end = false;
        let mut per_call = Vec::with_capacity(results.len());
        for (call, res) in calls.iter().zip(results) {
            let mut update = match res {
                Ok(ToolOutcome::Message(tm)) => StateUpdate::message(tm),
                Ok(ToolOutcome::Command(cmd)) => {
                    end |= cmd.goto == Some(Goto::End);
                    cmd.update
                }
                Err(source) => {
                    return Err(Stop::Failed(RunError::Tool {
                        tool: call.name.clone(),
                        source,
                    }))
                }
            };
            update.assign_message_ids();
            let own = wants_updates.then(|| update.clone());
            let start = merged.messages.as_ref().map_or(0, Vec::len);
            merged.merge(update)?;
            let stop = merged.messages.as_ref().map_or(0, Vec::len);
            per_call.push((start..stop, own));
        }
        let written = merged.messages.as_deref().unwrap_or_default();
        for ((range, own), (call, duration)) in
            per_call.into_iter().zip(calls.iter().zip(&durations))
        {
            let task = call.id_str();
            for m in &written[range] {
                if let Message::Tool(t) = m {
                    self.run.events.tool_message(t, task);
                    if self.run.observed() && t.tool_call_id == task {
                        self.run.observe(&RunEvent::ToolResult {
                            call,
                            message: t,
                            duration: *duration,
                        });
                    }
                }
            }
            if let Some(update) = own {
                self.run.events.updates_owned("tools", update);
            }
        }
        self.commit("tools", merged, "loop")?;

        // tools→model router (spec 20 §5): end when asked to, or when every registered call of
        // the turn is to a return_direct tool.
        let registered: Vec<bool> = calls
            .iter()
            .filter_map(|c| agent.tools.get(&c.name).map(|t| t.return_direct()))
            .collect();
        if end || (!registered.is_empty() && registered.iter().all(|d| *d)) {
            return Ok(Flow::Exit);
        }
        Ok(Flow::Next)
    }
}

#[derive(Clone, Copy)]
enum HookKind {
    BeforeAgent,
    BeforeModel,
    AfterModel,
    AfterAgent,
}

impl HookKind {
    fn set(self) -> HookSet {
        match self {
            HookKind::BeforeAgent => HookSet::BEFORE_AGENT,
            HookKind::BeforeModel => HookSet::BEFORE_MODEL,
            HookKind::AfterModel => HookSet::AFTER_MODEL,
            HookKind::AfterAgent => HookSet::AFTER_AGENT,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            HookKind::BeforeAgent => "before_agent",
            HookKind::BeforeModel => "before_model",
            HookKind::AfterModel => "after_model",
            HookKind::AfterAgent => "after_agent",
        }
    }
}

pub use antler_protocol::checkpoint::{now_rfc3339, RunStatus};

/// A tool message answering `call` (helper for middlewares that answer calls themselves).
pub fn tool_message_for(
    call: &ToolCall,
    content: impl Into<antler_protocol::Content>,
) -> ToolMessage {
    let mut m = ToolMessage::new(call.id_str(), content).with_name(call.name.clone());
    m.id = Some(uuid::Uuid::new_v4().to_string());
    m
}

/// A loop checkpoint's metadata, built at its final size (`json!` grows the map as it inserts,
/// and three checkpoints are written per step).
fn loop_metadata(source: &str, step: i64, node: &str, run_id: &str, thread_id: &str) -> Value {
    let mut m = serde_json::Map::with_capacity(5);
    m.insert("source".into(), source.into());
    m.insert("step".into(), step.into());
    m.insert("node".into(), node.into());
    m.insert("run_id".into(), run_id.into());
    m.insert("thread_id".into(), thread_id.into());
    Value::Object(m)
}
