//! The run-scoped context shared by every hook, wrapper and tool of one run (LangGraph's
//! `runtime.context`), and the emitter through which a run reports events.

use std::any::Any;
use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use antler_protocol::checkpoint::{CheckpointError, CheckpointWrite, Checkpointer};
use antler_protocol::hash::FastMap;
use antler_protocol::{
    AiMessageChunk, MessageMeta, Messages, StateSnapshot, StateUpdate, StreamEvent, StreamMessage,
    StreamModes, ThreadState, ToolMessage,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

/// Receives a run's events. Must not block: render or enqueue, then return.
pub trait EventSink: Send + Sync {
    /// The modes this consumer wants; events of other modes are never built.
    fn modes(&self) -> StreamModes;
    fn emit(&self, event: StreamEvent);

    /// `event` is held back until the run's checkpoint is written, then delivered (or dropped
    /// if the write fails). A held `values` snapshot shares the run's live message list, so
    /// the run's next in-place write (token usage stamping the reply) would copy the whole
    /// list: a sink that keeps snapshots takes them apart here and delivers them later itself.
    fn hold(&self, event: StreamEvent) -> Held {
        Held::Event(event)
    }
}

/// An event held back by a run (see [`EventSink::hold`]).
// Held events were kept unboxed before there was a prepared form; boxing would allocate per event.
#[allow(clippy::large_enum_variant)]
pub enum Held {
    /// Delivered by [`EventSink::emit`].
    Event(StreamEvent),
    /// Prepared by the sink: calling it delivers the event.
    Prepared(Box<dyn FnOnce() + Send>),
}

impl Held {
    fn deliver(self, sink: &dyn EventSink) {
        match self {
            Held::Event(event) => sink.emit(event),
            Held::Prepared(deliver) => deliver(),
        }
    }
}

/// A sink that drops everything (subagents, benchmarks).
pub struct NullSink;

impl EventSink for NullSink {
    fn modes(&self) -> StreamModes {
        StreamModes::NONE
    }
    fn emit(&self, _event: StreamEvent) {}
}

/// A sink that keeps every event (tests).
#[derive(Default)]
pub struct CollectingSink {
    events: Mutex<Vec<StreamEvent>>,
    modes: Option<StreamModes>,
}

impl CollectingSink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_modes(modes: StreamModes) -> Self {
        CollectingSink {
            events: Mutex::new(Vec::new()),
            modes: Some(modes),
        }
    }

    pub fn events(&self) -> Vec<StreamEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// `(name, data)` pairs, for whole-value assertions.
    pub fn json(&self) -> Vec<(String, Value)> {
        self.events()
            .iter()
            .map(|e| (e.name().to_owned(), e.data()))
            .collect()
    }
}

impl EventSink for CollectingSink {
    fn modes(&self) -> StreamModes {
        self.modes.unwrap_or(StreamModes::ALL)
    }
    fn emit(&self, event: StreamEvent) {
        if let Ok(mut e) = self.events.lock() {
            e.push(event);
        }
    }
}

/// A typed key into a run's scratchpad ([`RunContext::get`], [`RunContext::set`]): a name and
/// the type of its value. Middlewares keep their private keys as `const`s of their own; the
/// keys several parts share are in [`keys`].
pub struct RunKey<T> {
    name: &'static str,
    _value: PhantomData<fn() -> T>,
}

impl<T> RunKey<T> {
    pub const fn new(name: &'static str) -> Self {
        RunKey {
            name,
            _value: PhantomData,
        }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// Scratchpad keys shared across crates.
pub mod keys {
    use super::{HashSet, RunKey};

    /// Why a guard ended the run early (`loop_capped`, `token_capped`, …); reported in the
    /// run's outcome and journal.
    pub const STOP_REASON: RunKey<String> = RunKey::new("stop_reason");
    /// Who makes this run's model calls (`lead_agent`, or the subagent's name), for the journal.
    pub const CALLER: RunKey<String> = RunKey::new("caller");
    /// The sandbox id used in this run (DeerFlow's `context.sandbox_id`).
    pub const SANDBOX_ID: RunKey<String> = RunKey::new("sandbox_id");
    /// Set once the thread folders were created in this run.
    pub const THREAD_DIRS_CREATED: RunKey<bool> = RunKey::new("thread_directories_created");
    /// Tool calls that lazily acquired the sandbox; the SandboxMiddleware turns each into a
    /// `sandbox` state update for that call.
    pub const SANDBOX_ACQUIRED_BY: RunKey<HashSet<String>> = RunKey::new("sandbox_acquired_by");
}

/// Per-run options (DeerFlow's run `context`/`configurable`).
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub model_name: Option<String>,
    pub thinking_enabled: bool,
    pub reasoning_effort: Option<String>,
    pub is_plan_mode: bool,
    pub subagent_enabled: bool,
    pub max_concurrent_subagents: usize,
    pub agent_name: Option<String>,
    /// Graph steps allowed (already clamped to `max_recursion_limit`).
    pub recursion_limit: usize,
    /// Other whitelisted keys, passed through.
    pub extra: Map<String, Value>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            model_name: None,
            thinking_enabled: true,
            reasoning_effort: None,
            is_plan_mode: false,
            subagent_enabled: false,
            max_concurrent_subagents: 3,
            agent_name: None,
            recursion_limit: 100,
            extra: Map::new(),
        }
    }
}

/// Where a run's events leave: the sink, behind a gate that holds them back while the run has
/// checkpoints not yet written (see [`RunContext::persist`]), so a consumer never sees a state
/// that is not durable, and sees every event in the order it was emitted.
struct Outlet {
    sink: Arc<dyn EventSink>,
    /// `Some` while holding: the events emitted since the first unwritten checkpoint.
    held: Mutex<Option<Vec<Held>>>,
}

impl Outlet {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Held>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pass the event on, or keep it while holding. Sinks never block, so emitting under the
    /// lock is cheap and keeps a concurrent release from overtaking it.
    fn emit(&self, event: StreamEvent) {
        let mut held = self.lock();
        match held.as_mut() {
            Some(q) => q.push(self.sink.hold(event)),
            None => self.sink.emit(event),
        }
    }

    fn hold(&self) {
        self.lock().get_or_insert_with(Vec::new);
    }

    /// How many events are held.
    fn held(&self) -> usize {
        self.lock().as_ref().map_or(0, Vec::len)
    }

    /// Deliver the held events (their checkpoints are written) or drop them (the write failed:
    /// what they report is not durable) — all of them, and stop holding, or only the first
    /// `upto`, holding the rest.
    fn open(&self, deliver: bool, upto: Option<usize>) {
        let mut held = self.lock();
        let Some(q) = held.as_mut() else { return };
        let n = upto.map_or(q.len(), |n| n.min(q.len()));
        let out: Vec<Held> = q.drain(..n).collect();
        if upto.is_none() {
            *held = None;
        }
        if deliver {
            for event in out {
                event.deliver(self.sink.as_ref());
            }
        }
    }
}

/// Emits a run's events with the run's identity and step counter attached.
pub struct Emitter {
    sink: Arc<Outlet>,
    modes: StreamModes,
    step: AtomicU64,
    thread_id: String,
    run_id: String,
    assistant_id: String,
}

impl Emitter {
    fn new(sink: Arc<dyn EventSink>, thread_id: &str, run_id: &str, assistant_id: &str) -> Self {
        Emitter {
            modes: sink.modes(),
            sink: Arc::new(Outlet {
                sink,
                held: Mutex::new(None),
            }),
            step: AtomicU64::new(0),
            thread_id: thread_id.to_owned(),
            run_id: run_id.to_owned(),
            assistant_id: assistant_id.to_owned(),
        }
    }

    pub fn modes(&self) -> StreamModes {
        self.modes
    }

    /// Hold events back from now on (a checkpoint was queued, not yet written).
    pub(crate) fn hold(&self) {
        self.sink.hold();
    }

    pub(crate) fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }

    /// A `custom` event (`task_started`, `llm_retry`, …).
    pub fn custom(&self, value: Value) {
        if self.modes.custom {
            self.sink.emit(StreamEvent::Custom(value));
        }
    }

    /// A `'static` handle for `custom` events (for tasks a tool spawns), `None` when the
    /// consumer does not want them.
    pub fn custom_sender(&self) -> Option<CustomSender> {
        self.modes.custom.then(|| CustomSender {
            sink: self.sink.clone(),
        })
    }

    /// A `values` event: the channels the run shares while they do not change and the message
    /// list — not the live state itself, which a consumer holding it for replay would make the
    /// run's next write copy whole (its message index included), every superstep.
    /// `checkpoint`: the stored checkpoint that holds exactly this state, if any.
    pub(crate) fn values(
        &self,
        fields: Arc<ThreadState>,
        messages: &Messages,
        checkpoint: Option<Arc<str>>,
    ) {
        self.sink.emit(StreamEvent::Values(
            StateSnapshot::new(fields, messages).stored_as(checkpoint),
        ));
    }

    /// Whether a subscriber asked for `values` (the loop builds no snapshot otherwise).
    pub fn wants_values(&self) -> bool {
        self.modes.values
    }

    pub(crate) fn updates(&self, node: &str, update: &StateUpdate) {
        if self.modes.updates {
            self.updates_owned(node, update.clone());
        }
    }

    /// [`Emitter::updates`] for an update the caller no longer needs.
    pub(crate) fn updates_owned(&self, node: &str, update: StateUpdate) {
        if self.modes.updates {
            self.sink.emit(StreamEvent::Updates {
                node: node.to_owned(),
                update: Arc::new(update),
            });
        }
    }

    /// Stream metadata for a `messages` event from `node` (`model` or `tools`).
    pub fn message_meta(
        &self,
        node: &'static str,
        task_id: &str,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> Arc<MessageMeta> {
        let ns = format!("{node}:{task_id}");
        Arc::new(MessageMeta {
            langgraph_node: node,
            langgraph_step: self.step.load(Ordering::Relaxed),
            langgraph_checkpoint_ns: ns.clone(),
            checkpoint_ns: ns,
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            assistant_id: self.assistant_id.clone(),
            ls_provider: provider.map(str::to_owned),
            ls_model_name: model.map(str::to_owned),
        })
    }

    pub fn wants_messages(&self) -> bool {
        self.modes.messages
    }

    pub(crate) fn ai_chunk(&self, chunk: AiMessageChunk, meta: &Arc<MessageMeta>) {
        if self.modes.messages {
            self.sink.emit(StreamEvent::Messages {
                message: StreamMessage::AiChunk(chunk),
                meta: meta.clone(),
            });
        }
    }

    pub(crate) fn tool_message(&self, msg: &ToolMessage, task_id: &str) {
        if self.modes.messages {
            let meta = self.message_meta("tools", task_id, None, None);
            self.sink.emit(StreamEvent::Messages {
                message: StreamMessage::Tool(msg.clone()),
                meta,
            });
        }
    }
}

/// Emits `custom` events from anywhere (see [`Emitter::custom_sender`]).
#[derive(Clone)]
pub struct CustomSender {
    sink: Arc<Outlet>,
}

impl CustomSender {
    pub fn emit(&self, value: Value) {
        self.sink.emit(StreamEvent::Custom(value));
    }
}

/// Everything one run shares across hooks, wrappers and tools.
pub struct RunContext {
    pub thread_id: String,
    pub run_id: String,
    pub assistant_id: String,
    pub user_id: Option<String>,
    pub options: RunOptions,
    /// Cancelled when the run must stop (Ctrl-C, API cancel, parent timeout).
    pub cancel: CancellationToken,
    pub events: Emitter,
    /// The run's scratchpad: typed values under [`RunKey`]s (`stop_reason`, `sandbox_id`, …).
    values: Mutex<FastMap<&'static str, Box<dyn Any + Send + Sync>>>,
    observers: Vec<Arc<dyn crate::observe::RunObserver>>,
    checkpoints: Arc<PendingCheckpoints>,
    /// The run's model-request encodings, kept across its model calls.
    encodings: antler_models::EncodingCache,
}

/// Checkpoints of supersteps the loop has finished but not yet written. The loop writes them
/// in one transaction before anything a client or the outside world can observe — a model
/// call, a tool call, a hook that did not declare itself deferrable, the run's end — instead of
/// one transaction per superstep; the events of those supersteps are held until then.
#[derive(Default)]
struct PendingCheckpoints {
    queue: Mutex<Queue>,
    /// One write at a time, in order.
    turn: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct Queue {
    store: Option<Arc<dyn Checkpointer>>,
    writes: Vec<CheckpointWrite>,
    /// A failed write: every later one would name a parent that was never written.
    failed: Option<CheckpointError>,
}

impl PendingCheckpoints {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nothing queued and no failure to report: a write would do nothing.
    fn idle(&self) -> bool {
        let q = self.lock();
        q.writes.is_empty() && q.failed.is_none()
    }

    /// Write what is queued (the caller holds the turn); deliver or drop the held events.
    async fn write(&self, outlet: &Outlet) -> Result<(), CheckpointError> {
        let (store, writes, covered) = {
            let mut q = self.lock();
            if let Some(e) = &q.failed {
                return Err(e.clone());
            }
            // The events held so far belong to these writes; later ones to later writes.
            (
                q.store.clone(),
                std::mem::take(&mut q.writes),
                outlet.held(),
            )
        };
        let result = match store {
            Some(store) if !writes.is_empty() => store.put_all(writes).await,
            _ => Ok(()),
        };
        let mut q = self.lock();
        if let Err(e) = &result {
            q.failed = Some(e.clone());
        }
        // A superstep queued meanwhile (only possible when a dropped `persist` finished in its
        // own task) keeps its events held until its own write.
        let upto = (!q.writes.is_empty()).then_some(covered);
        outlet.open(result.is_ok(), upto);
        result
    }
}

impl RunContext {
    pub fn new(
        thread_id: impl Into<String>,
        run_id: impl Into<String>,
        sink: Arc<dyn EventSink>,
    ) -> Self {
        let thread_id = thread_id.into();
        let run_id = run_id.into();
        let assistant_id = "lead_agent".to_owned();
        RunContext {
            events: Emitter::new(sink, &thread_id, &run_id, &assistant_id),
            thread_id,
            run_id,
            assistant_id,
            user_id: None,
            options: RunOptions::default(),
            cancel: CancellationToken::new(),
            values: Mutex::new(FastMap::default()),
            observers: Vec::new(),
            checkpoints: Arc::default(),
            encodings: antler_models::EncodingCache::default(),
        }
    }

    /// Wire encodings of this run's history, reused across its model calls (see
    /// [`antler_models::EncodingCache`]).
    pub fn encodings(&self) -> &antler_models::EncodingCache {
        &self.encodings
    }

    /// Queue a superstep's checkpoint for the next [`RunContext::persist`]; the run's events
    /// are held from now until it is written.
    pub(crate) fn defer_checkpoint(&self, store: &Arc<dyn Checkpointer>, write: CheckpointWrite) {
        let mut q = self.checkpoints.lock();
        q.store = Some(store.clone());
        q.writes.push(write);
        drop(q);
        self.events.hold();
    }

    /// Whether checkpoints are waiting to be written.
    pub fn has_pending_checkpoints(&self) -> bool {
        !self.checkpoints.lock().writes.is_empty()
    }

    /// Write the checkpoints of the supersteps finished so far (one transaction) and release
    /// the events held since. Middlewares call it before a side effect of their own inside a
    /// deferrable hook (a model call: `side_model::invoke_observed` does). Safe to drop: the
    /// write goes on, and what it holds back is released when it lands.
    pub async fn persist(&self) -> Result<(), CheckpointError> {
        if self.checkpoints.idle() {
            return Ok(());
        }
        let turn = self.checkpoints.turn.clone().lock_owned().await;
        let pending = self.checkpoints.clone();
        let outlet = self.events.sink.clone();
        let task = tokio::spawn(async move {
            let _turn = turn;
            pending.write(&outlet).await
        });
        task.await.unwrap_or_else(|e| {
            Err(CheckpointError::Store(format!(
                "checkpoint write failed: {e}"
            )))
        })
    }

    /// [`RunContext::persist`] on the caller's task (the loop's own flushes, never cancelled).
    pub(crate) async fn flush_checkpoints(&self) -> Result<(), CheckpointError> {
        if self.checkpoints.idle() {
            return Ok(());
        }
        let _turn = self.checkpoints.turn.lock().await;
        self.checkpoints.write(&self.events.sink).await
    }

    /// Add an observer (the run journal, usage accounting …).
    pub fn with_observer(mut self, observer: Arc<dyn crate::observe::RunObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// Whether anyone observes this run (skip building events otherwise).
    pub fn observed(&self) -> bool {
        !self.observers.is_empty()
    }

    /// Report an event to every observer.
    pub fn observe(&self, event: &crate::observe::RunEvent<'_>) {
        for o in &self.observers {
            o.on_event(self, event);
        }
    }

    pub fn with_options(mut self, options: RunOptions) -> Self {
        self.options = options;
        self
    }

    pub fn with_user(mut self, user_id: Option<String>) -> Self {
        self.user_id = user_id;
        self
    }

    pub fn with_assistant(mut self, assistant_id: impl Into<String>) -> Self {
        self.assistant_id = assistant_id.into();
        self.events.assistant_id = self.assistant_id.clone();
        self
    }

    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// The value under `key`, if set.
    pub fn get<T: Clone + 'static>(&self, key: &RunKey<T>) -> Option<T> {
        let values = self.values.lock().ok()?;
        values.get(key.name)?.downcast_ref::<T>().cloned()
    }

    pub fn set<T: Send + Sync + 'static>(&self, key: &RunKey<T>, value: T) {
        if let Ok(mut v) = self.values.lock() {
            v.insert(key.name, Box::new(value));
        }
    }

    /// Set only when unset; returns whether it was set.
    pub fn set_if_absent<T: Send + Sync + 'static>(&self, key: &RunKey<T>, value: T) -> bool {
        match self.values.lock() {
            Ok(mut v) if !v.contains_key(key.name) => {
                v.insert(key.name, Box::new(value));
                true
            }
            _ => false,
        }
    }

    pub fn remove<T: 'static>(&self, key: &RunKey<T>) -> Option<T> {
        let boxed = self.values.lock().ok()?.remove(key.name)?;
        boxed.downcast::<T>().ok().map(|b| *b)
    }

    /// Change the value under `key` in place, starting from `T::default()` when unset.
    pub fn update<T: Default + Send + Sync + 'static, R>(
        &self,
        key: &RunKey<T>,
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        let mut values = self.values.lock().ok()?;
        let slot = values
            .entry(key.name)
            .or_insert_with(|| Box::new(T::default()));
        if !slot.is::<T>() {
            *slot = Box::new(T::default());
        }
        slot.downcast_mut::<T>().map(f)
    }
}
