//! `config.yaml` → typed [`Config`].
//!
//! antler reads DeerFlow's `config.yaml` with DeerFlow's key names and code defaults (spec 60),
//! so existing files work unchanged. Loading ([`Config::load`]) is: find the file
//! ([`resolve_path`]), parse YAML, replace whole-string `$NAME` values from the environment,
//! deserialize (type errors name the key path; unknown keys become warnings), then
//! [`Config::validate`]. Without a file, [`Config::zero_config`] builds a one-model config from
//! `OPENAI_API_KEY` / `OPENAI_BASE_URL` / `ANTLER_MODEL`.
//!
//! ```
//! use std::path::Path;
//! use antler_config::{Config, ProviderKind, TEMPLATE};
//!
//! let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
//! let loaded = Config::load_str(TEMPLATE, Path::new("config.yaml"), &env)?;
//! let model = loaded.config.default_model().expect("the template has a model");
//! assert_eq!(model.api_key.as_deref(), Some("sk-test"));
//! assert!(matches!(model.provider_kind(), Ok(ProviderKind::OpenAiCompat { .. })));
//! assert!(loaded.warnings.is_empty());
//! # Ok::<(), antler_config::ConfigError>(())
//! ```
//!
//! Sections that are free-form by design (`uploads`, tool/model/sandbox extras, DeerFlow-only
//! sections such as `channels` or `scheduler`) are kept as written and never warned about.
//!
//! Deliberate differences from DeerFlow, documented where they live:
//! - a missing `sandbox` section is not an error: the local provider applies, with a warning;
//! - `database.sqlite_dir` unset means antler's data home (`$ANTLER_HOME`, default `./.antler`);
//! - `provider: openai|anthropic|gemini|ollama`, `streaming`, `sandbox.confine` and `subagents.enabled` are
//!   antler extensions.

mod context;
mod de;
mod env;
mod error;
mod load;
mod model;
mod policy;
mod sandbox;
mod storage;
mod subagents;
mod tools;
mod validate;
mod yaml;
mod zero;

#[cfg(test)]
#[path = "defaults_tests.rs"]
mod defaults_tests;
#[cfg(test)]
#[path = "load_tests.rs"]
mod load_tests;
#[cfg(test)]
#[path = "model_tests.rs"]
mod model_tests;
#[cfg(test)]
mod test_util;
#[cfg(test)]
#[path = "validate_tests.rs"]
mod validate_tests;
#[cfg(test)]
#[path = "zero_tests.rs"]
mod zero_tests;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use context::{
    ContextSize, ContextSizeType, DeerMemConfig, DeerMemModelConfig, MemoryConfig, MemoryMode,
    SummarizationConfig, TitleConfig, TokenBudgetConfig, TokenUsageConfig, DEFAULT_TITLE_PROMPT,
    MEMORY_BACKENDS,
};
pub use error::{ConfigError, ModelError, ValidationError};
pub use load::{resolve_path, resolve_path_with_env, Loaded, CONFIG_ENV, DEFAULT_CONFIG_FILE};
pub use model::{
    deep_merge, effective_request_options, ModelConfig, PricingConfig, Provider, ProviderKind,
    DEFAULT_CALL_TIMEOUT_SECS, DEFAULT_STREAM_CHUNK_TIMEOUT_SECS,
};
pub use policy::{
    AuthorizationConfig, CircuitBreakerConfig, GuardrailsConfig, LlmCallConfig,
    DEFAULT_MAX_RETRY_AFTER_SECS,
};
pub use sandbox::{
    ByteSize, Confine, LimitsConfig, MountConfig, NetworkPolicy, OverflowPolicy, OwnershipConfig,
    OwnershipType, PdfConverter, SandboxConfig, SkillEvolutionConfig, SkillScanConfig,
    SkillsConfig, UploadsConfig, LOCAL_SANDBOX_USE, LOCAL_SANDBOX_USE_LONG,
};
pub use storage::{
    CheckpointChannelMode, CheckpointDeltaConfig, CheckpointGraphCacheConfig, CheckpointerConfig,
    CheckpointerType, DatabaseBackend, DatabaseConfig, RunEventsBackend, RunEventsConfig,
    StreamBridgeConfig, StreamBridgeType,
};
pub use subagents::{CustomSubagentConfig, SubagentOverride, SubagentsConfig};
pub use tools::{
    LoopDetectionConfig, PluginRef, ReadBeforeWriteConfig, SafetyFinishReasonConfig, ToolConfig,
    ToolFreqOverride, ToolGroupConfig, ToolOutputConfig, ToolProgressConfig, ToolSearchConfig,
    BASH_TOOL_USE,
};
pub use zero::TEMPLATE;

/// Default ceiling for a client-supplied `recursion_limit` (§6).
pub const DEFAULT_MAX_RECURSION_LIMIT: usize = 1000;
/// `recursion_limit` used when the client's value is missing or not a positive integer (§6).
pub const DEFAULT_RECURSION_LIMIT: usize = 100;

/// The whole configuration. Field names are DeerFlow's top-level keys; a present-but-null
/// section takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Schema version of the file; missing or non-integer → 0 (only compared with
    /// `config.example.yaml`, never an error).
    #[serde(default, deserialize_with = "de::lenient_version")]
    pub config_version: i64,
    /// App log level: `debug` | `info` | `warning` | `error` (EXTRA).
    #[serde(default = "d_log_level", deserialize_with = "d_null_log_level")]
    pub log_level: String,
    /// Chat models; the first is the default.
    #[serde(default, deserialize_with = "de::null_default")]
    pub models: Vec<ModelConfig>,
    /// Token-usage middleware.
    #[serde(default, deserialize_with = "de::null_default")]
    pub token_usage: TokenUsageConfig,
    /// Per-run token budget of the lead agent.
    #[serde(default, deserialize_with = "de::null_default")]
    pub token_budget: TokenBudgetConfig,
    /// Ceiling for a client-supplied `recursion_limit` (≥ 1).
    #[serde(
        default = "d_max_recursion_limit",
        deserialize_with = "de::recursion_limit"
    )]
    pub max_recursion_limit: usize,
    /// Tool groups custom agents may select.
    #[serde(default, deserialize_with = "de::null_default")]
    pub tool_groups: Vec<ToolGroupConfig>,
    /// Configured tools; the first entry of a name wins.
    #[serde(default, deserialize_with = "de::null_default")]
    pub tools: Vec<ToolConfig>,
    /// Deferred MCP tool schemas.
    #[serde(default, deserialize_with = "de::null_default")]
    pub tool_search: ToolSearchConfig,
    /// Oversized tool result handling.
    #[serde(default, deserialize_with = "de::null_default")]
    pub tool_output: ToolOutputConfig,
    /// Repetition detection.
    #[serde(default, deserialize_with = "de::null_default")]
    pub loop_detection: LoopDetectionConfig,
    /// Read-before-write gate (EXTRA).
    #[serde(default, deserialize_with = "de::null_default")]
    pub read_before_write: ReadBeforeWriteConfig,
    /// Safety finish-reason handling (EXTRA).
    #[serde(default, deserialize_with = "de::null_default")]
    pub safety_finish_reason: SafetyFinishReasonConfig,
    /// Tool progress / stagnation detection (EXTRA).
    #[serde(default, deserialize_with = "de::null_default")]
    pub tool_progress: ToolProgressConfig,
    /// Upload limits (read leniently).
    #[serde(default, deserialize_with = "de::null_default")]
    pub uploads: UploadsConfig,
    /// Sandbox provider; missing → local provider (antler; DeerFlow errors).
    #[serde(default, deserialize_with = "de::null_default")]
    pub sandbox: SandboxConfig,
    /// Skills storage and mount.
    #[serde(default, deserialize_with = "de::null_default")]
    pub skills: SkillsConfig,
    /// Skill self-evolution (EXTRA).
    #[serde(default, deserialize_with = "de::null_default")]
    pub skill_evolution: SkillEvolutionConfig,
    /// Install-time skill scanning (EXTRA).
    #[serde(default, deserialize_with = "de::null_default")]
    pub skill_scan: SkillScanConfig,
    /// Thread titles.
    #[serde(default, deserialize_with = "de::null_default")]
    pub title: TitleConfig,
    /// History summarization.
    #[serde(default, deserialize_with = "de::null_default")]
    pub summarization: SummarizationConfig,
    /// Long-term memory.
    #[serde(default, deserialize_with = "de::null_default")]
    pub memory: MemoryConfig,
    /// Subagents (`task`).
    #[serde(default, deserialize_with = "de::null_default")]
    pub subagents: SubagentsConfig,
    /// Pre-tool-call guardrails.
    #[serde(default, deserialize_with = "de::null_default")]
    pub guardrails: GuardrailsConfig,
    /// RBAC (EXTRA).
    #[serde(default, deserialize_with = "de::null_default")]
    pub authorization: AuthorizationConfig,
    /// Deprecated checkpointer section; wins over `database` for checkpoints when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpointer: Option<CheckpointerConfig>,
    /// Application database; absent → sqlite.
    #[serde(default, deserialize_with = "de::null_default")]
    pub database: DatabaseConfig,
    /// Run journal.
    #[serde(default, deserialize_with = "de::null_default")]
    pub run_events: RunEventsConfig,
    /// Streaming bridge; None = in-memory (unless the Redis env var says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_bridge: Option<StreamBridgeConfig>,
    /// LLM circuit breaker.
    #[serde(default, deserialize_with = "de::null_default")]
    pub circuit_breaker: CircuitBreakerConfig,
    /// LLM call concurrency and retries.
    #[serde(default, deserialize_with = "de::null_default")]
    pub llm_call: LlmCallConfig,
    /// EXTRA (kept as written): `logging.enhance.{enabled,format}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<Value>,
    /// EXTRA: ACP agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_agents: Option<Value>,
    /// EXTRA: overrides of `extensions_config.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
    /// EXTRA: plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Value>,
    /// EXTRA: follow-up suggestions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestions: Option<Value>,
    /// EXTRA: input polishing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_polish: Option<Value>,
    /// EXTRA: custom-agent CRUD API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_api: Option<Value>,
    /// EXTRA: custom-agent storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_storage: Option<Value>,
    /// EXTRA: scheduled runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<Value>,
    /// EXTRA: MCP task polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tasks: Option<Value>,
    /// EXTRA: run ownership leases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ownership: Option<Value>,
    /// EXTRA: dedupe storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_storage: Option<Value>,
    /// EXTRA: IM channel connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_connections: Option<Value>,
    /// EXTRA: IM channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Value>,
    /// EXTRA: auth providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
    /// Unknown top-level keys: kept (DeerFlow allows them) and reported as load warnings.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn d_log_level() -> String {
    "info".to_owned()
}

fn d_null_log_level<'de, D: serde::Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(de)?.unwrap_or_else(d_log_level))
}

fn d_max_recursion_limit() -> usize {
    DEFAULT_MAX_RECURSION_LIMIT
}

impl Default for Config {
    /// Every section at its default: no models, no tools, local sandbox, sqlite database.
    fn default() -> Self {
        Self {
            config_version: 0,
            log_level: d_log_level(),
            models: Vec::new(),
            token_usage: TokenUsageConfig::default(),
            token_budget: TokenBudgetConfig::default(),
            max_recursion_limit: DEFAULT_MAX_RECURSION_LIMIT,
            tool_groups: Vec::new(),
            tools: Vec::new(),
            tool_search: ToolSearchConfig::default(),
            tool_output: ToolOutputConfig::default(),
            loop_detection: LoopDetectionConfig::default(),
            read_before_write: ReadBeforeWriteConfig::default(),
            safety_finish_reason: SafetyFinishReasonConfig::default(),
            tool_progress: ToolProgressConfig::default(),
            uploads: UploadsConfig::default(),
            sandbox: SandboxConfig::default(),
            skills: SkillsConfig::default(),
            skill_evolution: SkillEvolutionConfig::default(),
            skill_scan: SkillScanConfig::default(),
            title: TitleConfig::default(),
            summarization: SummarizationConfig::default(),
            memory: MemoryConfig::default(),
            subagents: SubagentsConfig::default(),
            guardrails: GuardrailsConfig::default(),
            authorization: AuthorizationConfig::default(),
            checkpointer: None,
            database: DatabaseConfig::default(),
            run_events: RunEventsConfig::default(),
            stream_bridge: None,
            circuit_breaker: CircuitBreakerConfig::default(),
            llm_call: LlmCallConfig::default(),
            logging: None,
            acp_agents: None,
            extensions: None,
            plugins: None,
            suggestions: None,
            input_polish: None,
            agents_api: None,
            agent_storage: None,
            scheduler: None,
            mcp_tasks: None,
            run_ownership: None,
            dedupe_storage: None,
            channel_connections: None,
            channels: None,
            auth: None,
            extra: Map::new(),
        }
    }
}

impl Config {
    /// The model entry named `name` (the first one when names repeat).
    pub fn model(&self, name: &str) -> Option<&ModelConfig> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The default model: the first entry of `models`.
    pub fn default_model(&self) -> Option<&ModelConfig> {
        self.models.first()
    }

    /// The tool entry named `name` (the first one when names repeat).
    pub fn tool(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The run's `recursion_limit` (§6): missing, zero or negative → 100; otherwise the value
    /// capped at `max_recursion_limit`.
    pub fn clamp_recursion_limit(&self, requested: Option<i64>) -> usize {
        match requested.and_then(|v| usize::try_from(v).ok()) {
            Some(v) if v > 0 => v.min(self.max_recursion_limit),
            _ => DEFAULT_RECURSION_LIMIT,
        }
    }

    /// The subagent token budget: `subagents.token_budget` as written, else the default that
    /// tracks `summarization.enabled` (§18).
    pub fn subagent_token_budget(&self) -> TokenBudgetConfig {
        self.subagents
            .token_budget
            .clone()
            .unwrap_or_else(|| TokenBudgetConfig::subagent_default(self.summarization.enabled))
    }

    /// The stream bridge settings, in-memory when the section is absent.
    pub fn stream_bridge_or_default(&self) -> StreamBridgeConfig {
        self.stream_bridge.clone().unwrap_or_default()
    }
}
