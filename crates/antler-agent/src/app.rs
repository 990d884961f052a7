//! The application's resources: config, data home, store, run coordinator, sandbox provider,
//! models and memory, and the lead agent's assembly from them. Runs are [`crate::run`]; the CLI
//! and the server are thin front ends over both.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use antler_config::{CheckpointerType, Config, DatabaseBackend};
use antler_models::ChatModel;
use antler_runtime::{Agent, RunOptions};
use antler_sandbox::{ConfinementStatus, LocalSandboxProvider};
use antler_store::SqliteStore;

use crate::memory::MemoryManager;
use crate::run::{RunCoordinator, SqliteCoordinator};
use crate::{chain, models, prompt, toolset, AgentError};

/// The SQLite file inside the data directory.
pub const DB_FILE: &str = "antler.db";

/// Token counts cached across runs, one cache per model name.
pub type TokenCaches =
    Arc<std::sync::Mutex<HashMap<String, Arc<antler_models::tokens::CachedTokenCounter>>>>;

/// Everything a turn needs, shared across turns and threads.
pub struct App {
    pub config: Arc<Config>,
    /// `$ANTLER_HOME`.
    pub home: PathBuf,
    pub store: SqliteStore,
    /// Which run holds which thread, across processes (admission, leases, cancel signals).
    pub runs: Arc<dyn RunCoordinator>,
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
    pub(crate) token_caches: TokenCaches,
    /// Replaces every configured model (tests and benchmarks).
    model_override: Option<Arc<dyn ChatModel>>,
    /// Long-term memory (one per process; `memory.enabled` gates it).
    memory: Arc<MemoryManager>,
    /// MCP servers from `extensions_config.json` (one client per process).
    pub mcp: antler_mcp::McpManager,
    /// Rust middlewares inserted into every chain built (see [`crate::extensions`]).
    pub(crate) extensions: Arc<[crate::extensions::Extension]>,
    /// What [`App::lead_agent_for`] builds per configuration rather than per turn.
    lead_cache: Mutex<LeadCache>,
}

/// Entries kept per kind in [`LeadCache`]; configurations are few, a miss only rebuilds.
const LEAD_CACHE_ENTRIES: usize = 32;

/// The lead agent's per-configuration parts, shared (`Arc`) by every run with that
/// configuration instead of rebuilt, and held, once per concurrent run.
#[derive(Default)]
struct LeadCache {
    prompts: HashMap<prompt::PromptOptions, Arc<str>>,
    /// Tool sets, valid for the MCP catalog they were built from (compared by identity: a
    /// changed `extensions_config.json` gives a new catalog, hence a rebuild).
    tools: Vec<(
        ToolsKey,
        Arc<antler_mcp::Catalog>,
        antler_runtime::ToolRegistry,
    )>,
}

/// Everything [`toolset::lead_tools`] reads besides the app's fixed config and the MCP catalog.
#[derive(Clone, PartialEq, Eq)]
struct ToolsKey {
    supports_vision: bool,
    plan_mode: bool,
    non_interactive: bool,
    tool_groups: Option<Vec<String>>,
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
        chain::check_safety_finish_reason(&config)?;
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
        let app = App {
            extensions: Arc::from(Vec::new()),
            mcp,
            config,
            home,
            runs: Arc::new(SqliteCoordinator::new(store.clone())),
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
            lead_cache: Mutex::new(LeadCache::default()),
        };
        for skipped in app.skipped_python_middlewares() {
            tracing::warn!("{skipped}");
        }
        Ok(app)
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

    /// Before the process exits: fold the write-ahead log into the database file and truncate
    /// it, so a stopped home holds its data in `antler.db` alone (the log otherwise stays at
    /// its high-water mark, ~4 MiB, because background tasks keep the store open until exit).
    /// Never waits for another process on the same file: then the log stays for later.
    pub async fn close_store(&self) {
        match self.store.try_truncate_wal().await {
            Ok(true) => {}
            Ok(false) => tracing::debug!("write-ahead log in use by another process; left as is"),
            Err(e) => {
                tracing::warn!(error = %e, "could not checkpoint the write-ahead log at exit")
            }
        }
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
        let custom = self.custom_agent(opts, user)?;
        let opts = self.resolved_options(opts, user)?;
        let model = self.model(opts.model_name.as_deref(), opts.thinking_enabled)?;
        let skills = custom.as_ref().and_then(|a| a.skills.as_deref());
        crate::chain::lead_entries(self, model.info(), &opts, skills)
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
        let tools = self.lead_tools_cached(model.info(), opts, tool_groups)?;
        let chain = chain::lead_chain(
            self,
            model.info(),
            opts,
            custom.as_ref().and_then(|a| a.skills.as_deref()),
        )?;
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
            memory_tools: self.memory.settings().tool_mode(),
        };
        let mut agent = Agent::new(model)
            .with_system_prompt(self.system_prompt_cached(prompt_opts))
            .with_tools(tools)
            .with_chain(chain)
            .with_checkpointer(Arc::new(self.store.clone()));
        agent.model_settings = custom.map(|a| a.model_settings).unwrap_or_default();
        Ok(agent)
    }

    fn lead_cache(&self) -> std::sync::MutexGuard<'_, LeadCache> {
        self.lead_cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rendered prompt for `opts`, one shared copy per distinct prompt.
    fn system_prompt_cached(&self, opts: prompt::PromptOptions) -> Arc<str> {
        if let Some(p) = self.lead_cache().prompts.get(&opts) {
            return p.clone();
        }
        let p: Arc<str> = prompt::system_prompt(&opts).into();
        let mut cache = self.lead_cache();
        if cache.prompts.len() >= LEAD_CACHE_ENTRIES {
            cache.prompts.clear();
        }
        cache.prompts.insert(opts, p.clone());
        p
    }

    /// The lead tool set, shared between runs of one configuration. Runs with subagents build
    /// their own: the `task` tool's executor is per run.
    fn lead_tools_cached(
        &self,
        model: &antler_models::ModelInfo,
        opts: &RunOptions,
        tool_groups: Option<Vec<String>>,
    ) -> Result<antler_runtime::ToolRegistry, AgentError> {
        if opts.subagent_enabled {
            return toolset::lead_tools(self, model, opts, tool_groups.as_deref());
        }
        let key = ToolsKey {
            supports_vision: model.supports_vision,
            plan_mode: opts.is_plan_mode,
            non_interactive: opts
                .extra
                .get("non_interactive")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            tool_groups,
        };
        let catalog = self.mcp.snapshot();
        let hit = self
            .lead_cache()
            .tools
            .iter()
            .find(|(k, c, _)| *k == key && Arc::ptr_eq(c, &catalog))
            .map(|(_, _, reg)| reg.clone());
        if let Some(reg) = hit {
            return Ok(reg);
        }
        let reg = toolset::lead_tools(self, model, opts, key.tool_groups.as_deref())?;
        let mut cache = self.lead_cache();
        // Entries for a replaced catalog can never hit again.
        cache.tools.retain(|(_, c, _)| Arc::ptr_eq(c, &catalog));
        if cache.tools.len() >= LEAD_CACHE_ENTRIES {
            cache.tools.remove(0);
        }
        cache.tools.push((key, catalog, reg.clone()));
        Ok(reg)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_models::{ScriptedModel, ScriptedReply};

    fn app(home: &Path) -> App {
        let mut config = Config {
            models: vec![serde_json::from_value(serde_json::json!({"name": "main", "model": "scripted", "api_key": "k", "base_url": "http://127.0.0.1:9/v1"})).unwrap()],
            ..Config::default()
        };
        config.memory.enabled = false;
        App::open(config, home)
            .unwrap()
            .with_model_override(Arc::new(ScriptedModel::new(vec![ScriptedReply::text("x")])))
    }

    fn names(a: &Agent) -> Vec<String> {
        a.tools.names().map(str::to_owned).collect()
    }

    #[test]
    fn runs_of_one_configuration_share_prompt_and_tools() {
        let home = tempfile::tempdir().unwrap();
        let app = app(home.path());
        let opts = RunOptions::default();
        let a = app.lead_agent(&opts).unwrap();
        let b = app.lead_agent(&opts).unwrap();
        let (pa, pb) = (
            a.system_prompt.clone().unwrap(),
            b.system_prompt.clone().unwrap(),
        );
        assert!(Arc::ptr_eq(&pa, &pb), "one prompt copy");
        assert!(a
            .tools
            .specs()
            .iter()
            .zip(b.tools.specs())
            .all(|(x, y)| Arc::ptr_eq(x, y)));
        // What varies gets its own parts, as a fresh build would.
        let plan = RunOptions {
            is_plan_mode: true,
            ..RunOptions::default()
        };
        let p = app.lead_agent(&plan).unwrap();
        assert!(names(&p).iter().any(|n| n == "write_todos"));
        assert!(!names(&a).iter().any(|n| n == "write_todos"));
        let fresh = toolset::lead_tools(&app, a.model.info(), &plan, None).unwrap();
        assert_eq!(
            names(&p),
            fresh.names().map(str::to_owned).collect::<Vec<_>>()
        );
        let sub = RunOptions {
            subagent_enabled: true,
            ..RunOptions::default()
        };
        let s = app.lead_agent(&sub).unwrap();
        assert!(names(&s).iter().any(|n| n == "task"));
        assert!(!Arc::ptr_eq(&s.system_prompt.clone().unwrap(), &pa));
    }
}
