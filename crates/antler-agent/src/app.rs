//! The application: config, data home, store, sandbox provider and models, and one turn of the
//! lead agent on a thread. The CLI and the server are thin front ends over [`App`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use antler_config::{CheckpointerType, Config, DatabaseBackend};
use antler_models::ChatModel;
use antler_protocol::{Message, ThreadState};
use antler_runtime::{
    Agent, CancellationToken, EventSink, RunContext, RunInput, RunOptions, RunStatus,
};
use antler_sandbox::{ConfinementStatus, LocalSandboxProvider};
use antler_store::runs::DEFAULT_LEASE;
use antler_store::{
    Admission, AdmitOptions, Heartbeat, LeaseOwner, MultitaskStrategy, RunFinish, RunRecord,
    SqliteStore, ThreadRecord, ThreadUpdate,
};
use serde_json::Value;

use crate::journal::{RecoveringCheckpointer, RunJournal};
use crate::memory::MemoryManager;
use crate::{chain, models, prompt, toolset, AgentError};

/// The SQLite file inside the data directory.
pub const DB_FILE: &str = "antler.db";

/// Everything a turn needs, shared across turns and threads.
pub struct App {
    pub config: Arc<Config>,
    /// `$ANTLER_HOME`.
    pub home: PathBuf,
    pub store: SqliteStore,
    pub sandbox: Arc<LocalSandboxProvider>,
    pub confinement: ConfinementStatus,
    /// Host skills root (spec 50 §5.2).
    pub skills_root: PathBuf,
    /// The project root: relative paths in config resolve against it (the working directory).
    pub project_root: PathBuf,
    /// Shared across runs: its per-thread windows outlive a run (LRU of tracked threads).
    pub loop_detection: Option<Arc<antler_middleware::loop_detection::LoopDetectionMiddleware>>,
    models: Mutex<HashMap<(String, bool), Arc<dyn ChatModel>>>,
    /// The process-wide LLM circuit breaker.
    pub breaker: Arc<antler_middleware::llm_error_handling::CircuitBreaker>,
    /// Token counts cached across runs (see [`crate::chain::ChainParts::token_cache`]).
    pub(crate) token_caches:
        Arc<Mutex<HashMap<String, Arc<antler_models::tokens::CachedTokenCounter>>>>,
    /// Replaces every configured model (tests and benchmarks).
    model_override: Option<Arc<dyn ChatModel>>,
    /// Long-term memory (one per process; `memory.enabled` gates it).
    memory: Arc<MemoryManager>,
    /// MCP servers from `extensions_config.json` (one client per process).
    pub mcp: antler_mcp::McpManager,
}

/// One user turn on a thread.
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

/// How a turn ended.
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

fn db_path(config: &Config, home: &Path) -> Option<PathBuf> {
    if let Some(cp) = &config.checkpointer {
        return match cp.kind {
            CheckpointerType::Memory => None,
            CheckpointerType::Sqlite => Some(
                cp.connection_string
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        let p = PathBuf::from(s);
                        if p.is_absolute() {
                            p
                        } else {
                            home.join(p)
                        }
                    })
                    .unwrap_or_else(|| home.join(DB_FILE)),
            ),
            CheckpointerType::Postgres => Some(home.join(DB_FILE)),
        };
    }
    match config.database.backend {
        DatabaseBackend::Memory => None,
        DatabaseBackend::Sqlite | DatabaseBackend::Postgres => Some(
            config
                .database
                .sqlite_dir
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| home.to_path_buf())
                .join(DB_FILE),
        ),
    }
}

impl App {
    /// Open the store and the sandbox provider for `config` under `home`.
    pub fn open(config: Config, home: impl Into<PathBuf>) -> Result<App, AgentError> {
        Self::open_with_config_file(config, home, None)
    }

    /// As [`App::open`], naming the file `config` came from: confined bash may not read it
    /// (nor the `.env` and `extensions_config.json` beside it), since DeerFlow configs may hold
    /// keys in plain text.
    pub fn open_with_config_file(
        config: Config,
        home: impl Into<PathBuf>,
        config_file: Option<&Path>,
    ) -> Result<App, AgentError> {
        let home = home.into();
        let postgres = matches!(config.database.backend, DatabaseBackend::Postgres)
            || config
                .checkpointer
                .as_ref()
                .is_some_and(|c| matches!(c.kind, CheckpointerType::Postgres));
        if postgres {
            return Err(AgentError::Config(
                "database.backend: postgres is not available in this build yet — use sqlite (the default) or memory".into(),
            ));
        }
        let store = match db_path(&config, &home) {
            Some(path) => SqliteStore::open(&path)?,
            None => SqliteStore::open_in_memory()?,
        };
        store.set_max_trace_content(
            usize::try_from(config.run_events.max_trace_content).unwrap_or(usize::MAX),
        );
        let config = Arc::new(config);
        let memory = MemoryManager::from_config(config.clone(), store.clone(), None)?;
        let loop_detection = chain::loop_detection(&config)?;
        chain::check_guardrail(&config)?;
        let breaker = chain::circuit_breaker(&config);
        let project_root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let skills_root = crate::skills::skills_root(config.skills.path.as_deref(), &project_root);
        let mut settings = toolset::sandbox_settings(&config, &home);
        if skills_root.is_dir() {
            settings.skills_host_path = Some(skills_root.clone());
        }
        settings.deny_read = toolset::secret_files(config_file, &project_root);
        let confinement = antler_sandbox::confinement_status(settings.confine);
        antler_sandbox::confine::log_status(&confinement);
        let sandbox = Arc::new(LocalSandboxProvider::with_status(
            home.clone(),
            settings,
            confinement.clone(),
        ));
        let mcp = antler_mcp::McpManager::new(
            home.clone(),
            antler_mcp::Lookup::new(config_file, &project_root),
        );
        Ok(App {
            mcp,
            config,
            home,
            store,
            sandbox,
            confinement,
            skills_root,
            project_root,
            loop_detection,
            breaker,
            models: Mutex::new(HashMap::new()),
            token_caches: Arc::new(Mutex::new(HashMap::new())),
            model_override: None,
            memory,
        })
    }

    /// Use `model` for every run instead of the configured ones.
    pub fn with_model_override(mut self, model: Arc<dyn ChatModel>) -> Self {
        // Memory updates use it too. The settings were validated by `open`: this cannot fail.
        if let Ok(m) =
            MemoryManager::from_config(self.config.clone(), self.store.clone(), Some(model.clone()))
        {
            self.memory = m;
        }
        self.model_override = Some(model);
        self
    }

    /// Use `mcp` as the MCP client (embedding, tests: another file lookup).
    pub fn with_mcp(mut self, mcp: antler_mcp::McpManager) -> Self {
        self.mcp = mcp;
        self
    }

    /// The long-term memory system.
    pub fn memory(&self) -> &Arc<MemoryManager> {
        &self.memory
    }

    /// Write pending memory updates before the process exits, within
    /// `memory.shutdown_flush_timeout_seconds`. `true` when everything was written.
    pub async fn flush_memory(&self) -> bool {
        self.memory.flush(None).await
    }

    /// Startup recovery: mark runs whose process died (or whose lease expired) `error`, journal
    /// them, and set their threads' status to `error`. Runs of live processes — other `antler`
    /// processes on other threads — are left alone.
    pub async fn reclaim_orphaned_runs(&self) -> Result<Vec<RunRecord>, AgentError> {
        let reclaimed = self.store.reclaim_orphaned_runs(DEFAULT_LEASE).await?;
        for r in &reclaimed {
            let update = ThreadUpdate {
                status: Some(ThreadRecord::ERROR.into()),
                ..Default::default()
            };
            if let Err(e) = self.store.update_thread(&r.thread_id, update).await {
                tracing::debug!(thread = %r.thread_id, error = %e, "no thread record to mark");
            }
        }
        Ok(reclaimed)
    }

    /// Resolve a model by config name (`None` = the default). An unknown name is an error.
    pub fn model(
        &self,
        name: Option<&str>,
        thinking: bool,
    ) -> Result<Arc<dyn ChatModel>, AgentError> {
        if let Some(m) = &self.model_override {
            return Ok(m.clone());
        }
        let cfg = match name {
            Some(n) => self.config.model(n).ok_or_else(|| {
                let known: Vec<&str> = self.config.models.iter().map(|m| m.name.as_str()).collect();
                AgentError::UnknownModel(n.to_owned(), known.join(", "))
            })?,
            None => self.config.default_model().ok_or_else(|| {
                AgentError::Config(
                    "no chat models are configured — add an entry under `models:`".into(),
                )
            })?,
        };
        let key = (cfg.name.clone(), thinking);
        if let Some(m) = self.models.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(m);
        }
        let model = models::build_model(cfg, thinking)?;
        if let Ok(mut cache) = self.models.lock() {
            cache.insert(key, model.clone());
        }
        Ok(model)
    }

    /// The prompt's `<skill_system>` block for the skills enabled now (`allowlist` from a custom
    /// agent's `skills`).
    pub fn skills_section(&self, allowlist: Option<&[String]>) -> String {
        let skills = crate::skills::discover(&self.skills_root, &self.config.skills.container_path);
        let enabled =
            crate::skills::enabled_states(&self.project_root.join("extensions_config.json"));
        crate::skills::skills_section(
            &skills,
            &enabled,
            &self.config.skills.container_path,
            allowlist,
        )
    }

    /// Where DynamicContext reads the user's memory from (`None` while memory is off).
    pub fn memory_source(
        &self,
    ) -> Option<Arc<dyn antler_middleware::dynamic_context::MemorySource>> {
        let source: Arc<dyn antler_middleware::dynamic_context::MemorySource> = self.memory.clone();
        self.memory.settings().enabled.then_some(source)
    }

    /// Hooks run before a summary replaces old messages (the long-term memory flush).
    pub fn summarization_hooks(
        &self,
    ) -> Vec<Arc<dyn antler_middleware::summarization::BeforeSummarizationHook>> {
        let hook: Arc<dyn antler_middleware::summarization::BeforeSummarizationHook> =
            self.memory.clone();
        if self.memory.settings().enabled {
            vec![hook]
        } else {
            Vec::new()
        }
    }

    /// Whether `bash` is offered (allow_host_bash, or active confinement).
    pub fn bash_available(&self) -> bool {
        antler_sandbox::bash_available(self.sandbox.settings(), &self.confinement)
    }

    /// Run options for a request (config defaults + request overrides).
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

    /// The custom agent a run asked for (`agent_name`), if any. Unknown names are an error.
    pub fn custom_agent(
        &self,
        opts: &RunOptions,
        user: Option<&str>,
    ) -> Result<Option<crate::agents::CustomAgent>, AgentError> {
        let Some(name) = opts.agent_name.as_deref().filter(|n| *n != "lead_agent") else {
            return Ok(None);
        };
        crate::agents::CustomAgent::load(&self.home, name, user)?
            .map(Some)
            .ok_or_else(|| AgentError::Config(format!("unknown agent '{name}'")))
    }

    /// Assemble the lead agent for one run. Model: the requested one, else the custom agent's,
    /// else the default.
    pub fn lead_agent(&self, opts: &RunOptions) -> Result<Agent, AgentError> {
        self.lead_agent_for(opts, None)
    }

    /// The lead chain's entries for a run (what `antler chain` prints).
    pub fn lead_entries(
        &self,
        opts: &RunOptions,
        user: Option<&str>,
    ) -> Result<Vec<crate::chain::ChainEntry>, AgentError> {
        let opts = self.resolved_options(opts, user)?;
        let model = self.model(opts.model_name.as_deref(), opts.thinking_enabled)?;
        crate::chain::lead_entries(self, model.info(), &opts)
    }

    /// Options with a custom agent's defaults applied (model, reasoning effort).
    fn resolved_options(
        &self,
        opts: &RunOptions,
        user: Option<&str>,
    ) -> Result<RunOptions, AgentError> {
        let mut opts = opts.clone();
        if let Some(a) = self.custom_agent(&opts, user)? {
            if opts.model_name.is_none() {
                opts.model_name = a.model.clone();
            }
            if opts.reasoning_effort.is_none() {
                opts.reasoning_effort = a.reasoning_effort.clone();
            }
        }
        Ok(opts)
    }

    /// [`App::lead_agent`] for a user (custom agents may be per user).
    pub fn lead_agent_for(
        &self,
        opts: &RunOptions,
        user: Option<&str>,
    ) -> Result<Agent, AgentError> {
        let custom = self.custom_agent(opts, user)?;
        let opts = &self.resolved_options(opts, user)?;
        let model = self.model(opts.model_name.as_deref(), opts.thinking_enabled)?;
        let tool_groups = custom.as_ref().and_then(|a| a.tool_groups.clone());
        let tools = toolset::lead_tools(self, model.info(), opts, tool_groups.as_deref())?;
        let chain = chain::lead_chain(self, model.info(), opts)?;
        let prompt_opts = prompt::PromptOptions {
            agent_name: custom.as_ref().map(|a| a.name.clone()),
            subagents_enabled: opts.subagent_enabled,
            max_concurrent_subagents: opts.max_concurrent_subagents,
            max_total_subagents: self.config.subagents.max_total_per_run as usize,
            mounts: self
                .config
                .sandbox
                .mounts
                .iter()
                .map(|m| (m.container_path.clone(), m.read_only))
                .collect(),
            skills_section: self.skills_section(custom.as_ref().and_then(|a| a.skills.as_deref())),
            soul: custom.as_ref().and_then(|a| a.soul.clone()),
            mcp_section: crate::mcp::setup(&self.config, &self.mcp.snapshot()).prompt_section,
            subagent_types: if opts.subagent_enabled {
                crate::subagents::SubagentRegistry::from_config(&self.config.subagents)
                    .available_description(self.bash_available())
            } else {
                String::new()
            },
        };
        let mut agent = Agent::new(model)
            .with_system_prompt(prompt::system_prompt(&prompt_opts))
            .with_tools(tools)
            .with_chain(chain)
            .with_checkpointer(Arc::new(self.store.clone()));
        agent.model_settings = custom.map(|a| a.model_settings).unwrap_or_default();
        Ok(agent)
    }

    /// Run one turn of the lead agent. Errors before the run starts (unknown model, bad thread
    /// id, unreachable store) are `Err`; a run that starts always yields an outcome.
    pub async fn run_turn(
        &self,
        req: TurnRequest,
        sink: Arc<dyn EventSink>,
    ) -> Result<TurnOutcome, AgentError> {
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
        let opts = self.run_options(&req);
        // MCP tools: cached until extensions_config.json changes (first build discovers).
        self.mcp.refresh().await;
        let mut agent = self.lead_agent_for(&opts, req.user_id.as_deref())?;
        // A corrupt head is rebuilt from the last good checkpoint and the journal on load.
        agent.checkpointer = Some(Arc::new(RecoveringCheckpointer::new(
            self.store.clone(),
            run_id.clone(),
        )));

        // Admission: one active run per thread, across processes (DeerFlow's multitask rules).
        let rollback_point = self
            .store
            .list_checkpoints(&thread_id, 1, None)
            .await?
            .into_iter()
            .next()
            .map(|m| m.checkpoint_id);
        let mut record = RunRecord::new(run_id.clone(), thread_id.clone(), "lead_agent");
        record.kwargs = serde_json::json!({
            "context": {
                "model_name": opts.model_name,
                "is_plan_mode": opts.is_plan_mode,
                "subagent_enabled": opts.subagent_enabled,
            },
            "config": {"recursion_limit": opts.recursion_limit},
        });
        record.metadata = serde_json::json!({
            "rollback_checkpoint_id": rollback_point,
            "user_id": req.user_id,
        });
        let owner = LeaseOwner::current().clone();
        let admit = AdmitOptions {
            strategy: req.multitask_strategy,
            owner: owner.clone(),
            lease: DEFAULT_LEASE,
        };
        let admitted = self.store.admit_run(record, admit).await?;
        for r in &admitted.reclaimed {
            tracing::warn!(run = %r.run_id, thread = %thread_id, "an earlier run of this thread was orphaned (its process exited); marked error");
        }
        let cancel = req.cancel.clone().unwrap_or_default();
        match &admitted.admission {
            Admission::Rejected { active } => {
                return Err(AgentError::ThreadBusy {
                    thread: thread_id,
                    run: active.run_id.clone(),
                })
            }
            Admission::Queued(_) => {
                // Wait our turn, keeping the lease alive; Ctrl-C while waiting ends the run.
                loop {
                    if cancel.is_cancelled() {
                        break;
                    }
                    if self
                        .store
                        .try_start_run(&run_id, &owner, DEFAULT_LEASE)
                        .await?
                        .is_some()
                    {
                        break;
                    }
                    let _ = self
                        .store
                        .heartbeat_run(&run_id, &owner, DEFAULT_LEASE)
                        .await;
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                    }
                }
            }
            Admission::Started(_) => {}
        }
        // `rollback`: restart from the stopped run's rollback point.
        let from_checkpoint = match req.multitask_strategy {
            MultitaskStrategy::Rollback => admitted.displaced.first().and_then(|d| {
                d.metadata["rollback_checkpoint_id"]
                    .as_str()
                    .map(str::to_owned)
            }),
            _ => None,
        };

        let mut thread = match self.store.get_thread(&thread_id).await? {
            Some(t) => t,
            None => ThreadRecord::new(thread_id.clone()),
        };
        thread.status = ThreadRecord::BUSY.into();
        if thread.owner.is_none() {
            thread.owner = req.user_id.clone();
        }
        self.store.upsert_thread(thread).await?;

        sink.emit(antler_protocol::StreamEvent::Metadata {
            run_id: run_id.clone(),
            thread_id: thread_id.clone(),
        });
        let journal = Arc::new(
            RunJournal::new(
                self.store.clone(),
                thread_id.clone(),
                run_id.clone(),
                req.user_id.clone(),
            )
            .with_token_tracking(self.config.run_events.track_token_usage),
        );
        let run = RunContext::new(thread_id.clone(), run_id.clone(), sink.clone())
            .with_options(opts)
            .with_user(req.user_id.clone())
            .with_cancel(cancel.clone())
            .with_observer(journal.clone());
        let run = Arc::new(run);
        // Renew the lease while the run lasts; losing it (another process interrupted or
        // reclaimed the run) stops the run.
        let heartbeat = {
            let store = self.store.clone();
            let run_id = run_id.clone();
            let owner = owner.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(DEFAULT_LEASE / 3).await;
                    match store.heartbeat_run(&run_id, &owner, DEFAULT_LEASE).await {
                        Ok(Heartbeat::Held) => {}
                        Ok(Heartbeat::Lost(now)) => {
                            tracing::warn!(run = %run_id, status = ?now.map(|r| r.status), "the run was taken over; stopping it");
                            cancel.cancel();
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(run = %run_id, error = %e, "could not renew the run lease")
                        }
                    }
                }
            })
        };
        let input = RunInput {
            messages: req.message.into_iter().collect(),
            from_checkpoint,
            ..Default::default()
        };
        let outcome = agent.run(input, run).await;
        heartbeat.abort();
        let report = journal.finish().await;
        if let Some(e) = &report.error {
            tracing::warn!(run = %run_id, error = %e, lost = report.events_lost, "the run journal is incomplete");
        }

        let mut error = outcome.error.as_ref().map(|e| e.to_string());
        let error_name = outcome.error.as_ref().map(|e| e.name().to_owned());
        let mut status = outcome.status;
        // A model failure the agent answered gracefully (LLMErrorHandling's fallback message)
        // still marks the run `error`, as DeerFlow's run worker does; no `error` event follows.
        if status == RunStatus::Success {
            if let Some(detail) = fallback_error(&outcome.state, &run_id) {
                status = RunStatus::Error;
                error = Some(detail);
            }
        }
        if report.delivery_failed && status == RunStatus::Success {
            status = RunStatus::Error;
            error =
                Some("the run presented files but its delivery receipt could not be stored".into());
        }
        let usage = if report.usage.llm_call_count > 0 {
            report.usage.run_usage()
        } else {
            run_usage(&outcome.state, &run_id)
        };
        let finish = RunFinish {
            error: error.clone(),
            stop_reason: outcome.stop_reason.clone(),
            usage: Some(usage),
        };
        // Bookkeeping failures must not hide the run's own outcome; they are logged. A run that
        // lost its lease (interrupted or reclaimed elsewhere) leaves the records to the new owner.
        let held = match self
            .store
            .finish_run(
                &run_id,
                &owner,
                antler_store::RunStatus::from(status),
                finish,
            )
            .await
        {
            Ok(r) => r.is_some(),
            Err(e) => {
                tracing::error!(run = %run_id, error = %e, "could not record the run status");
                true
            }
        };
        if !held {
            tracing::warn!(run = %run_id, "the run was taken over; its final status stays as recorded");
        }
        let thread_status = match status {
            RunStatus::Success => ThreadRecord::IDLE,
            RunStatus::Error => ThreadRecord::ERROR,
            RunStatus::Interrupted => ThreadRecord::INTERRUPTED,
        };
        let update = ThreadUpdate {
            title: outcome.state.title.clone().map(Some),
            status: Some(thread_status.into()),
            metadata: None,
        };
        if held {
            if let Err(e) = self.store.update_thread(&thread_id, update).await {
                tracing::error!(thread = %thread_id, error = %e, "could not update the thread record");
            }
        }
        if let (Some(name), Some(message)) = (&error_name, &error) {
            sink.emit(antler_protocol::StreamEvent::Error {
                name: name.clone(),
                message: message.clone(),
            });
        }
        sink.emit(antler_protocol::StreamEvent::End);
        Ok(TurnOutcome {
            thread_id,
            run_id,
            status,
            state: outcome.state,
            error,
            error_name,
            stop_reason: outcome.stop_reason,
        })
    }
}

/// The error detail of this run's LLM error-fallback answer, if its last AI message is one.
pub fn fallback_error(state: &ThreadState, run_id: &str) -> Option<String> {
    let start = state
        .messages
        .iter()
        .rposition(|m| {
            m.as_human().is_some_and(|h| {
                h.additional_kwargs.get("run_id").and_then(Value::as_str) == Some(run_id)
            })
        })
        .unwrap_or(0);
    let ai = state
        .messages
        .iter()
        .skip(start)
        .rev()
        .find_map(|m| m.as_ai())?;
    if !antler_middleware::llm_error_handling::is_error_fallback(ai) {
        return None;
    }
    let kw = &ai.additional_kwargs;
    Some(
        kw.get("error_detail")
            .or_else(|| kw.get("error_reason"))
            .and_then(Value::as_str)
            .unwrap_or("the model call failed")
            .to_owned(),
    )
}

/// Token usage of the AI messages this run produced (those stamped after its human message).
fn run_usage(state: &ThreadState, run_id: &str) -> antler_store::RunUsage {
    let start = state
        .messages
        .iter()
        .rposition(|m| {
            m.as_human().is_some_and(|h| {
                h.additional_kwargs.get("run_id").and_then(Value::as_str) == Some(run_id)
            })
        })
        .unwrap_or(0);
    let mut usage = antler_store::RunUsage::default();
    for m in state.messages.iter().skip(start) {
        if let Some(ai) = m.as_ai() {
            usage.llm_call_count += 1;
            if let Some(u) = &ai.usage_metadata {
                usage.total_input_tokens += u.input_tokens as i64;
                usage.total_output_tokens += u.output_tokens as i64;
                usage.total_tokens += u.total_tokens as i64;
            }
        }
    }
    usage
}
