//! The subagent executor (spec 50 §4.12 "Tool call flow" and "Executor"): runs one delegation
//! as a child agent inside the parent's `task` tool call and reports how it ended.
//!
//! The child is an ordinary [`Agent`] built by a [`SubagentFactory`] (the chain assembly lives
//! with the lead agent's), then narrowed here: its tools are the factory's minus the type's
//! denylist (`task` always), its system prompt is the type's prompt (plus any sections the
//! factory put in `system_prompt`), and it runs without a checkpointer from an initial state
//! that shares the parent's `thread_data` and `sandbox` — the child works in the parent's files.
//! (Those two are records: the child's tools derive the same sandbox from the thread and user
//! it shares with the parent, not from them.)
//! Its recursion limit is the type's `max_turns`; the type's timeout bounds it in wall-clock
//! time; its cancellation token is a child of the parent run's, so cancelling the parent stops
//! it at its next await.
//!
//! The child's events never reach the parent's stream. Instead its step messages (AI turns and
//! tool results) become `task_running` custom events on the parent's stream, framed by
//! `task_started` and one terminal event (`task_completed`, `task_failed`, `task_cancelled`,
//! `task_timed_out`). The child's model calls are reported to the parent run's observers with
//! `caller: "subagent:<type>"` and summed into the result's token usage.
//!
//! Why inline rather than a background registry as DeerFlow has: the delegation lives exactly
//! as long as the tool call that awaits it. Cancelling the parent drops the tool call, which
//! drops the child mid-await; a drop guard then reports `task_cancelled` with the usage so far.
//! A timeout drops the child the same way, so nothing is left running to poll or clean up.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use antler_models::{ChatModel, ModelError};
use antler_protocol::{AiMessage, Message, StateUpdate, StreamEvent, StreamModes, ThreadState};
use antler_runtime::{
    Agent, Chain, ChainError, EventSink, Middleware, RunContext, RunError, RunEvent, RunInput,
    RunObserver, RunOptions, RunOutcome, RunStatus, ToolRegistry,
};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, Semaphore};

use super::registry::{
    merge_skill_allowlists, SubagentRegistry, SubagentSpec, BASH, BASH_DISABLED_MESSAGE,
};
use super::types::{StopReason, SubagentResult, SubagentStatus, TokenUsage};

/// What a factory is asked to build.
pub struct SubagentRequest<'a> {
    /// The type's effective settings.
    pub spec: &'a SubagentSpec,
    /// Model to run on: the type's, else the parent run's; `None` = the default model. The
    /// model should be built with thinking disabled.
    pub model_name: Option<&'a str>,
    /// Skill allowlist under the parent's (`None` = all enabled skills).
    pub skills: Option<&'a [String]>,
    /// The parent run (tool groups, identity, options).
    pub parent: &'a RunContext,
}

/// A child agent could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SubagentError {
    #[error("{0}")]
    Build(String),
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// Builds the child agent of a delegation: model, tools (the parent's; the executor removes the
/// denied ones) and middleware chain (the shared runtime segment plus the subagent segment).
/// A `system_prompt` it sets is appended to the type's prompt (skills, deferred-tool sections).
pub trait SubagentFactory: Send + Sync {
    fn build(&self, req: &SubagentRequest<'_>) -> Result<Agent, SubagentError>;
}

impl<F> SubagentFactory for F
where
    F: Fn(&SubagentRequest<'_>) -> Result<Agent, SubagentError> + Send + Sync,
{
    fn build(&self, req: &SubagentRequest<'_>) -> Result<Agent, SubagentError> {
        self(req)
    }
}

/// A factory that hands out copies of one prepared agent (see [`default_factory`]).
#[derive(Clone)]
pub struct TemplateFactory {
    agent: Agent,
}

impl SubagentFactory for TemplateFactory {
    fn build(&self, _req: &SubagentRequest<'_>) -> Result<Agent, SubagentError> {
        Ok(self.agent.clone())
    }
}

/// A factory over one model, one middleware list and one tool set (the parent's tools; `task`,
/// `ask_clarification` and `present_files` are removed per type by the executor). The model is
/// used whatever the type's `model` says, and the middleware instances are shared by every
/// delegation, so they must keep per-run state keyed by run, or none.
pub fn default_factory(
    model: Arc<dyn ChatModel>,
    middlewares: Vec<Arc<dyn Middleware>>,
    tools: ToolRegistry,
) -> Result<TemplateFactory, ChainError> {
    let agent = Agent::new(model)
        .with_tools(tools)
        .with_chain(Chain::new(middlewares)?);
    Ok(TemplateFactory { agent })
}

/// One `task` call.
#[derive(Clone, Copy, Debug)]
pub struct TaskCall<'a> {
    /// The tool call id (correlates the custom events and the ledger entry).
    pub id: &'a str,
    pub description: &'a str,
    pub prompt: &'a str,
    pub subagent_type: &'a str,
}

/// Runs delegations.
pub struct SubagentExecutor {
    registry: SubagentRegistry,
    factory: Arc<dyn SubagentFactory>,
    bash_available: bool,
    permits: Option<Arc<Semaphore>>,
}

/// Parent run keys copied into the child's options (identity and attribution).
const INHERITED_KEYS: [&str; 6] = [
    "user_role",
    "oauth_provider",
    "oauth_id",
    "channel_user_id",
    "deerflow_trace_id",
    "tool_groups",
];

impl SubagentExecutor {
    /// `bash` delegations are refused until [`with_bash_available`](Self::with_bash_available).
    pub fn new(registry: SubagentRegistry, factory: Arc<dyn SubagentFactory>) -> Self {
        SubagentExecutor {
            registry,
            factory,
            bash_available: false,
            permits: None,
        }
    }

    /// Whether the `bash` type may run (host bash allowed or confined).
    pub fn with_bash_available(mut self, available: bool) -> Self {
        self.bash_available = available;
        self
    }

    /// At most `n` delegations of this executor run at once; the others wait, and their timeout
    /// starts once they run. Without it every call of a batch runs at once (SubagentLimit caps
    /// how many a response may hold).
    pub fn with_max_concurrent(mut self, n: usize) -> Self {
        self.permits = Some(Arc::new(Semaphore::new(n.max(1))));
        self
    }

    pub fn registry(&self) -> &SubagentRegistry {
        &self.registry
    }

    pub fn bash_available(&self) -> bool {
        self.bash_available
    }

    /// The type names the lead may delegate to.
    pub fn available_types(&self) -> Vec<String> {
        self.registry.available_names(self.bash_available)
    }

    /// Run one delegation for the parent run `parent` whose state (before the tool batch) is
    /// `parent_state`. Never fails: every outcome is a [`SubagentResult`].
    pub async fn execute(
        &self,
        call: TaskCall<'_>,
        parent: &RunContext,
        parent_state: &ThreadState,
    ) -> SubagentResult {
        let Some(spec) = self.registry.get(call.subagent_type) else {
            return SubagentResult::failed(format!(
                "Unknown subagent type '{}'. Available: {}",
                call.subagent_type,
                self.available_types().join(", ")
            ));
        };
        if spec.name == BASH && !self.bash_available {
            return SubagentResult::failed(BASH_DISABLED_MESSAGE);
        }
        if let Some(v) = parent.options.extra.get("authz_attributes") {
            if !v.is_object() && !v.is_null() {
                return SubagentResult::failed("authz_attributes must be a mapping");
            }
        }
        let requested_model = spec.resolve_model(parent.options.model_name.as_deref());
        let parent_skills: Option<Vec<String>> = parent
            .options
            .extra
            .get("available_skills")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let skills = merge_skill_allowlists(parent_skills.as_deref(), spec.skills.as_deref());
        let req = SubagentRequest {
            spec: &spec,
            model_name: requested_model.as_deref(),
            skills: skills.as_deref(),
            parent,
        };

        let (tx, rx) = mpsc::unbounded_channel();
        let capture = Arc::new(Capture {
            tx,
            forward: parent.observed(),
            state: Mutex::new(CaptureState::default()),
        });
        let mut progress = Progress {
            run: parent,
            task_id: call.id.to_owned(),
            model_name: requested_model.clone(),
            rx,
            capture: capture.clone(),
            steps: Vec::new(),
            finished: false,
        };
        let agent = match self.factory.build(&req) {
            Ok(agent) => prepare(agent, &spec),
            Err(e) => {
                tracing::warn!(subagent = %spec.name, error = %e, "could not build the subagent");
                progress.started(call.description);
                return progress.finish(SubagentResult::failed(e.to_string()));
            }
        };
        progress.model_name = Some(agent.model.info().name.clone());
        progress.started(call.description);

        // Queue behind other delegations when capped; the timeout starts once running.
        let _permit = match &self.permits {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        };
        let child = child_context(&spec, parent, requested_model, capture.clone());
        let input = RunInput {
            messages: vec![Message::human(call.prompt)],
            initial_state: Some(ThreadState {
                thread_data: parent_state.thread_data.clone(),
                sandbox: parent_state.sandbox.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        tracing::info!(subagent = %spec.name, task = %call.id, max_turns = spec.max_turns, timeout = ?spec.timeout, "subagent started");
        let mut run = pin!(tokio::time::timeout(
            spec.timeout,
            agent.run(input, child.clone())
        ));
        // Forward the child's progress while it runs: every wake-up first drains the channel.
        let timed = std::future::poll_fn(|cx| {
            while let Poll::Ready(Some(sig)) = progress.rx.poll_recv(cx) {
                progress.forward(sig);
            }
            run.as_mut().poll(cx)
        })
        .await;
        progress.drain();
        let mut result = match timed {
            Ok(outcome) => classify(outcome, spec.max_turns),
            Err(_) => {
                child.cancel.cancel();
                tracing::warn!(subagent = %spec.name, task = %call.id, "subagent timed out");
                SubagentResult {
                    error: Some(format!(
                        "Execution timed out after {} seconds",
                        spec.timeout.as_secs()
                    )),
                    ..SubagentResult::new(SubagentStatus::TimedOut)
                }
            }
        };
        result.usage = capture.usage();
        result.model_name = progress.model_name.clone();
        tracing::info!(subagent = %spec.name, task = %call.id, status = %result.status, "subagent finished");
        progress.finish(result)
    }
}

/// Narrow the factory's agent to what the type may have.
fn prepare(mut agent: Agent, spec: &SubagentSpec) -> Agent {
    let mut tools = ToolRegistry::new();
    for name in agent.tools.names() {
        if spec.allows_tool(name) {
            if let Some(t) = agent.tools.get(name) {
                tools.register(t.clone());
            }
        }
    }
    agent.tools = Arc::new(tools);
    let extra = agent.system_prompt.take().filter(|p| !p.trim().is_empty());
    let prompt = match extra {
        Some(extra) if spec.system_prompt.trim().is_empty() => extra.to_string(),
        Some(extra) => format!("{}\n\n{extra}", spec.system_prompt),
        None => spec.system_prompt.clone(),
    };
    agent.system_prompt = (!prompt.trim().is_empty()).then(|| prompt.into());
    agent.checkpointer = None;
    agent
}

/// The child's run context: the parent's thread, run id and identity; its own options,
/// cancellation (a child of the parent's), event sink and observer.
fn child_context(
    spec: &SubagentSpec,
    parent: &RunContext,
    model_name: Option<String>,
    capture: Arc<Capture>,
) -> Arc<RunContext> {
    let mut extra = Map::new();
    for key in INHERITED_KEYS {
        if let Some(v) = parent.options.extra.get(key).filter(|v| !v.is_null()) {
            extra.insert(key.to_owned(), v.clone());
        }
    }
    let internal = parent.options.extra.get("is_internal") == Some(&Value::Bool(true));
    extra.insert("is_internal".into(), Value::Bool(internal));
    let attrs = parent
        .options
        .extra
        .get("authz_attributes")
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    extra.insert("authz_attributes".into(), attrs);
    extra.insert("is_subagent".into(), Value::Bool(true));
    let options = RunOptions {
        model_name,
        thinking_enabled: false,
        reasoning_effort: None,
        is_plan_mode: false,
        subagent_enabled: false,
        max_concurrent_subagents: parent.options.max_concurrent_subagents,
        agent_name: Some(spec.name.clone()),
        recursion_limit: spec.max_turns.max(1),
        extra,
    };
    let caller = format!("subagent:{}", spec.name);
    let assistant = format!(
        "subagent:{}",
        spec.name.trim().to_lowercase().replace('_', "-")
    );
    let sink: Arc<dyn EventSink> = Arc::new(StepSink(capture.clone()));
    let ctx = RunContext::new(parent.thread_id.clone(), parent.run_id.clone(), sink)
        .with_options(options)
        .with_user(parent.user_id.clone())
        .with_assistant(assistant)
        .with_cancel(parent.cancel.child_token())
        .with_observer(Arc::new(UsageObserver(capture)));
    ctx.set(&antler_runtime::keys::CALLER, caller);
    Arc::new(ctx)
}

/// Map the child's outcome to the status contract.
pub fn classify(outcome: RunOutcome, max_turns: usize) -> SubagentResult {
    let guard = outcome
        .stop_reason
        .as_deref()
        .and_then(|s| s.parse::<StopReason>().ok());
    let state = &outcome.state;
    let mut r = SubagentResult::new(SubagentStatus::Failed);
    match (outcome.status, &outcome.error) {
        (RunStatus::Interrupted, _) => {
            r.status = SubagentStatus::Cancelled;
            r.error = Some("Cancelled by user".into());
        }
        (RunStatus::Error, Some(RunError::RecursionLimit(_))) => {
            r.stop_reason = Some(guard.unwrap_or(StopReason::TurnCapped));
            if let Some(e) = llm_error_fallback(state) {
                r.error = Some(e);
            } else if let Some(partial) = last_ai_text(state).filter(|t| !t.trim().is_empty()) {
                r.status = SubagentStatus::Completed;
                r.result = Some(partial.trim().to_owned());
            } else {
                r.error = Some(format!("Reached max_turns={max_turns}"));
            }
        }
        (RunStatus::Error, e) => {
            r.error = Some(
                e.as_ref()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "subagent run failed".into()),
            );
        }
        (RunStatus::Success, _) => {
            if let Some(e) = llm_error_fallback(state) {
                r.error = Some(e);
            } else {
                r.status = SubagentStatus::Completed;
                r.result = Some(final_text(state));
                r.stop_reason = guard.filter(|g| *g != StopReason::TurnCapped);
            }
        }
    }
    r
}

fn last_ai(state: &ThreadState) -> Option<&AiMessage> {
    state.last_ai()
}

fn last_ai_text(state: &ThreadState) -> Option<String> {
    last_ai(state).map(|m| m.content.text())
}

/// The answer: the last AI message's text, else the last message's; never empty.
fn final_text(state: &ThreadState) -> String {
    let text = match last_ai(state) {
        Some(ai) => ai.content.text(),
        None => state.messages.last().map(Message::text).unwrap_or_default(),
    };
    if text.is_empty() {
        "No response generated".to_owned()
    } else {
        text
    }
}

/// The error text when the last AI message is the LLM error handler's fallback answer (only the
/// last one counts: a fallback ends the run, so it is always the child's own last message).
fn llm_error_fallback(state: &ThreadState) -> Option<String> {
    let ai = last_ai(state)?;
    if ai.additional_kwargs.get("deerflow_error_fallback") != Some(&Value::Bool(true)) {
        return None;
    }
    let text = ai.content.text();
    if !text.trim().is_empty() {
        return Some(text.trim().to_owned());
    }
    Some(
        ai.additional_kwargs
            .get("error_detail")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("LLM request failed")
            .to_owned(),
    )
}

/// What the child reports to the parent's tool call.
enum Signal {
    Step {
        message: Value,
        usage: Option<TokenUsage>,
    },
    Model {
        caller: String,
        model: String,
        request_messages: usize,
        response: Box<AiMessage>,
        latency: Duration,
    },
    ModelError {
        caller: String,
        model: String,
        error: ModelError,
        latency: Duration,
    },
}

#[derive(Default)]
struct CaptureState {
    seen_ids: std::collections::HashSet<String>,
    /// Id-less step messages already captured (compared by content).
    idless: Vec<Value>,
    counted_calls: std::collections::HashSet<String>,
    usage: Option<TokenUsage>,
}

/// Shared by the child's event sink and observer.
struct Capture {
    tx: mpsc::UnboundedSender<Signal>,
    /// Forward model events (only when the parent has observers).
    forward: bool,
    state: Mutex<CaptureState>,
}

impl Capture {
    fn usage(&self) -> Option<TokenUsage> {
        self.state.lock().ok().and_then(|s| s.usage)
    }

    /// Capture the step messages of one node's write (AI turns and tool results), each once.
    fn capture(&self, update: &StateUpdate) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        for m in update.messages.iter().flatten() {
            if !matches!(m, Message::Ai(_) | Message::Tool(_)) {
                continue;
            }
            let value = m.to_value();
            match m.id() {
                Some(id) => {
                    if !st.seen_ids.insert(id.to_owned()) {
                        continue;
                    }
                }
                None => {
                    if st.idless.contains(&value) {
                        continue;
                    }
                    st.idless.push(value.clone());
                }
            }
            let _ = self.tx.send(Signal::Step {
                message: value,
                usage: st.usage,
            });
        }
    }
}

/// The child's event sink: `updates` only, turned into step signals.
struct StepSink(Arc<Capture>);

impl EventSink for StepSink {
    fn modes(&self) -> StreamModes {
        StreamModes {
            updates: true,
            ..StreamModes::NONE
        }
    }

    fn emit(&self, event: StreamEvent) {
        if let StreamEvent::Updates { update, .. } = event {
            self.0.capture(&update);
        }
    }
}

/// The child's observer: sums usage (one record per model call, zero usage skipped) and relays
/// model events to the parent.
struct UsageObserver(Arc<Capture>);

impl RunObserver for UsageObserver {
    fn on_event(&self, _run: &RunContext, event: &RunEvent<'_>) {
        let c = &self.0;
        match event {
            RunEvent::ModelResponse {
                caller,
                model,
                request_messages,
                response,
                latency,
            } => {
                if let Ok(mut st) = c.state.lock() {
                    let first = match &response.id {
                        Some(id) => st.counted_calls.insert(id.clone()),
                        None => true,
                    };
                    if let Some(rec) = response
                        .usage_metadata
                        .as_ref()
                        .and_then(TokenUsage::record)
                        .filter(|_| first)
                    {
                        st.usage = Some(st.usage.unwrap_or_default().plus(rec));
                    }
                }
                if c.forward {
                    let _ = c.tx.send(Signal::Model {
                        caller: (*caller).to_owned(),
                        model: (*model).to_owned(),
                        request_messages: *request_messages,
                        response: Box::new((*response).clone()),
                        latency: *latency,
                    });
                }
            }
            RunEvent::ModelError {
                caller,
                model,
                error,
                latency,
            } if c.forward => {
                let _ = c.tx.send(Signal::ModelError {
                    caller: (*caller).to_owned(),
                    model: (*model).to_owned(),
                    error: (*error).clone(),
                    latency: *latency,
                });
            }
            _ => {}
        }
    }
}

/// Reports one delegation on the parent run; reports `task_cancelled` if dropped unfinished
/// (the parent run was cancelled while the child ran).
struct Progress<'a> {
    run: &'a RunContext,
    task_id: String,
    model_name: Option<String>,
    rx: mpsc::UnboundedReceiver<Signal>,
    capture: Arc<Capture>,
    steps: Vec<Value>,
    finished: bool,
}

impl Progress<'_> {
    fn started(&self, description: &str) {
        self.run.events.custom(json!({
            "type": "task_started",
            "task_id": self.task_id,
            "description": description,
            "model_name": self.model_name,
        }));
    }

    fn forward(&mut self, sig: Signal) {
        match sig {
            Signal::Step { message, usage } => {
                self.steps.push(message.clone());
                let n = self.steps.len();
                self.run.events.custom(json!({
                    "type": "task_running",
                    "task_id": self.task_id,
                    "message": message,
                    "message_index": n,
                    "total_messages": n,
                    "usage": usage.map(TokenUsage::to_value),
                    "model_name": self.model_name,
                }));
            }
            Signal::Model {
                caller,
                model,
                request_messages,
                response,
                latency,
            } => self.run.observe(&RunEvent::ModelResponse {
                caller: &caller,
                model: &model,
                request_messages,
                response: &response,
                latency,
            }),
            Signal::ModelError {
                caller,
                model,
                error,
                latency,
            } => self.run.observe(&RunEvent::ModelError {
                caller: &caller,
                model: &model,
                error: &error,
                latency,
            }),
        }
    }

    fn drain(&mut self) {
        while let Ok(sig) = self.rx.try_recv() {
            self.forward(sig);
        }
    }

    fn terminal_event(
        &self,
        status: SubagentStatus,
        detail: Option<&str>,
        usage: Option<TokenUsage>,
    ) {
        let mut ev = json!({
            "type": status.event_type(),
            "task_id": self.task_id,
            "usage": usage.map(TokenUsage::to_value),
            "model_name": self.model_name,
        });
        let key = if status == SubagentStatus::Completed {
            "result"
        } else {
            "error"
        };
        ev[key] = detail.map(Value::from).unwrap_or(Value::Null);
        self.run.events.custom(ev);
    }

    fn finish(mut self, mut result: SubagentResult) -> SubagentResult {
        self.drain();
        let detail = match result.status {
            SubagentStatus::Completed => result.result.as_deref(),
            _ => result.error.as_deref(),
        };
        self.terminal_event(result.status, detail, result.usage);
        self.finished = true;
        result.steps = std::mem::take(&mut self.steps);
        result
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.drain();
        tracing::info!(task = %self.task_id, "parent run cancelled; subagent stopped");
        let usage = self.capture.usage();
        self.terminal_event(SubagentStatus::Cancelled, Some("Cancelled by user"), usage);
    }
}
