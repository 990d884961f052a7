//! Context-engineering sections: `token_usage`, `token_budget`, `title`, `summarization`,
//! `memory` (spec 60 §4, §5, §15–§17).

use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::de::strings;

use crate::de::section;

/// `token_usage` (§4): usage logging and attribution middleware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenUsageConfig {
    /// On by default.
    pub enabled: bool,
}

impl Default for TokenUsageConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

section! {
    /// `token_budget` (§5) — also the schema of `subagents.token_budget` and per-agent budgets.
    pub struct TokenBudgetConfig {
        /// Off by default at the top level.
        pub enabled: bool = false,
        /// Total (input+output) tokens per run (≥ 1000).
        pub max_tokens: u64 = 200_000,
        /// Optional input cap (≥ 1).
        pub max_input_tokens: Option<u64> = None,
        /// Optional output cap (≥ 1).
        pub max_output_tokens: Option<u64> = None,
        /// Fraction that queues a one-time warning (0–1).
        pub warn_threshold: f64 = 0.8,
        /// Fraction that forces the final answer (0–1, ≥ `warn_threshold`).
        pub hard_stop_threshold: f64 = 1.0,
    }
}

impl TokenBudgetConfig {
    /// The subagent default (§18): enabled, 1,000,000 tokens when summarization is on else
    /// 2,000,000, warning at 0.7.
    pub fn subagent_default(summarization_enabled: bool) -> Self {
        Self {
            enabled: true,
            max_tokens: if summarization_enabled {
                1_000_000
            } else {
                2_000_000
            },
            warn_threshold: 0.7,
            ..Self::default()
        }
    }
}

/// Built-in title prompt (`{max_words}`, `{user_msg}`, `{assistant_msg}` are filled in).
pub const DEFAULT_TITLE_PROMPT: &str = "Write a short title (at most {max_words} words) for the \
conversation below. Reply with the title only: no quotes, no trailing punctuation.\n\n\
User: {user_msg}\n\nAssistant: {assistant_msg}";

section! {
    /// `title` (§15): thread title after the first exchange.
    pub struct TitleConfig {
        /// On by default.
        pub enabled: bool = true,
        /// Prompt-level word hint (1–20).
        pub max_words: usize = 6,
        /// Hard cut (10–200).
        pub max_chars: usize = 60,
        /// null = local fallback (truncated first user message); set = LLM title via this model.
        pub model_name: Option<String> = None,
        /// Prompt template with `{max_words}`, `{user_msg}`, `{assistant_msg}`.
        pub prompt_template: String = DEFAULT_TITLE_PROMPT.to_owned(),
    }
}

/// Unit of a [`ContextSize`] as written (`type:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextSizeType {
    /// Token count.
    Tokens,
    /// Message count.
    Messages,
    /// Fraction of the model's `context_window`.
    Fraction,
}

/// An amount of context, `{type: tokens|messages|fraction, value}`: a summarization `trigger`
/// threshold or how much recent history to `keep`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(from = "RawContextSize", into = "RawContextSize")]
pub enum ContextSize {
    /// Tokens (a negative value counts as 0).
    Tokens(u64),
    /// Messages (a negative value counts as 0).
    Messages(usize),
    /// A fraction of the model's `context_window`, meaningful in (0, 1].
    Fraction(f64),
}

/// The file's `{type, value}` shape of a [`ContextSize`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct RawContextSize {
    #[serde(rename = "type")]
    kind: ContextSizeType,
    value: f64,
}

impl From<RawContextSize> for ContextSize {
    fn from(raw: RawContextSize) -> Self {
        // Counts are whole and non-negative; the float-to-int cast saturates.
        match raw.kind {
            ContextSizeType::Tokens => ContextSize::Tokens(raw.value.max(0.0) as u64),
            ContextSizeType::Messages => ContextSize::Messages(raw.value.max(0.0) as usize),
            ContextSizeType::Fraction => ContextSize::Fraction(raw.value),
        }
    }
}

impl From<ContextSize> for RawContextSize {
    fn from(size: ContextSize) -> Self {
        let (kind, value) = match size {
            ContextSize::Tokens(n) => (ContextSizeType::Tokens, n as f64),
            ContextSize::Messages(n) => (ContextSizeType::Messages, n as f64),
            ContextSize::Fraction(f) => (ContextSizeType::Fraction, f),
        };
        RawContextSize { kind, value }
    }
}

impl ContextSize {
    /// `{type: messages, value: n}`.
    pub fn messages(n: u32) -> Self {
        ContextSize::Messages(n as usize)
    }

    /// `{type: tokens, value: n}`.
    pub fn tokens(n: u32) -> Self {
        ContextSize::Tokens(u64::from(n))
    }
}

/// `trigger`: null (never), one [`ContextSize`], or a list (any satisfied → summarize).
fn one_or_many<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<ContextSize>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<ContextSize>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a {type, value} mapping, a list of them, or null")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
            de.deserialize_any(V)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<ContextSize>()? {
                out.push(item);
            }
            Ok(out)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            let one = ContextSize::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
            Ok(vec![one])
        }
    }
    de.deserialize_any(V)
}

section! {
    /// `summarization` (§16): compress old history when a trigger is reached.
    pub struct SummarizationConfig {
        /// Off by default (the example config turns it on).
        pub enabled: bool = false,
        /// null = the run's own model; set = this model (falling back to the run model on failure).
        pub model_name: Option<String> = None,
        /// Any satisfied → summarize; empty (null in the file) → never auto-triggers.
        #[serde(deserialize_with = "one_or_many")]
        pub trigger: Vec<ContextSize> = Vec::new(),
        /// Retained recent history.
        pub keep: ContextSize = ContextSize::messages(20),
        /// Cap on tokens fed to the summarizer; null = no trim.
        pub trim_tokens_to_summarize: Option<u64> = Some(4_000),
        /// Custom summary prompt; null = built-in.
        pub summary_prompt: Option<String> = None,
        /// Tool names whose calls count as SKILL.md reads; `[]` disables.
        pub skill_file_read_tool_names: Vec<String> = strings(&["read_file", "read", "view", "cat"]),
        /// Skill-file loads kept out of the summarized part (seed key; 0 disables the rescue).
        pub preserve_recent_skill_count: usize = 5,
        /// Token budget for rescued skill files (seed key).
        pub preserve_recent_skill_tokens: u64 = 25_000,
        /// A skill file above this many tokens is not rescued (seed key).
        pub preserve_recent_skill_tokens_per_skill: u64 = 5_000,
    }
}

/// `memory.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryMode {
    /// Passive extraction after each turn.
    #[default]
    Middleware,
    /// The model calls `memory_search/add/update/delete` (experimental).
    Tool,
}

/// Backend names `memory.manager_class` accepts besides class paths.
pub const MEMORY_BACKENDS: &[&str] = &["deermem", "mem0", "noop", "openviking", "honcho"];

/// Keys that DeerMem reads from `backend_config`; found directly under `memory:` they are
/// migrated there at load (legacy layout). `model_name` becomes `backend_config.model.model`.
pub(crate) const DEERMEM_LEGACY_KEYS: &[&str] = &[
    "storage_path",
    "storage_class",
    "strict_user_scope",
    "manifest_filename",
    "file_lock_timeout_seconds",
    "retrieval_adapter",
    "debounce_seconds",
    "queue_max_depth",
    "max_facts",
    "fact_confidence_threshold",
    "fact_eviction_policy",
    "max_injection_tokens",
    "token_counting",
    "guaranteed_categories",
    "guaranteed_token_budget",
    "watermark_max_keys",
    "patterns_dir",
    "prompts_dir",
];

/// Legacy key prefixes migrated like [`DEERMEM_LEGACY_KEYS`].
pub(crate) const DEERMEM_LEGACY_PREFIXES: &[&str] = &["staleness_", "consolidation_"];

section! {
    /// `memory` (§17): per-user facts across threads.
    pub struct MemoryConfig {
        /// Master switch (on by default).
        pub enabled: bool = true,
        /// `middleware` | `tool`.
        pub mode: MemoryMode = MemoryMode::Middleware,
        /// Inject memory into the per-conversation `<system-reminder>`.
        pub injection_enabled: bool = true,
        /// Drain budget at shutdown (1–300 s).
        pub shutdown_flush_timeout_seconds: f64 = 30.0,
        /// Backend name (`deermem`, `mem0`, `noop`, `openviking`, `honcho`) or class path.
        pub manager_class: String = "deermem".to_owned(),
        /// Backend-private options (DeerMem: [`DeerMemConfig`]).
        #[serde(deserialize_with = "crate::de::null_default")]
        pub backend_config: Map<String, Value> = Map::new(),
    }
}

impl MemoryConfig {
    /// Whether the backend is DeerMem (antler's built-in memory).
    pub fn is_deermem(&self) -> bool {
        let class = self.manager_class.trim();
        class.eq_ignore_ascii_case("deermem") || class.to_ascii_lowercase().contains("deermem")
    }

    /// `backend_config` read as DeerMem options (defaults for absent keys).
    pub fn deermem(&self) -> Result<DeerMemConfig, serde_json::Error> {
        serde_json::from_value(Value::Object(self.backend_config.clone()))
    }
}

/// `memory.backend_config.model` for DeerMem: all null = the host's default model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeerMemModelConfig {
    /// `openai` | `anthropic` (antler) or a DeerFlow provider name.
    pub provider: Option<String>,
    /// Model name (a `models[].name`) or provider model id.
    pub model: Option<String>,
    /// API key.
    pub api_key: Option<String>,
    /// Endpoint.
    pub base_url: Option<String>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
}

section! {
    /// DeerMem options in `memory.backend_config` (spec 40 part 2 §4.10). Unknown keys are kept in
    /// `extra` (e.g. hybrid eviction weights).
    pub struct DeerMemConfig {
        /// Root directory; "" = runtime home.
        pub storage_path: String = String::new(),
        /// Alternative storage class; "" = file.
        pub storage_class: String = String::new(),
        /// Require `user_id` everywhere.
        pub strict_user_scope: bool = false,
        /// Per-user file name.
        pub manifest_filename: String = "memory.json".to_owned(),
        /// 1–120 s.
        pub file_lock_timeout_seconds: f64 = 10.0,
        /// `fts5`; "" disables.
        pub retrieval_adapter: String = "fts5".to_owned(),
        /// 1–300 s.
        pub debounce_seconds: f64 = 30.0,
        /// 0 = unbounded.
        pub queue_max_depth: u64 = 1000,
        /// Extraction model.
        #[serde(deserialize_with = "crate::de::null_default")]
        pub model: DeerMemModelConfig = DeerMemModelConfig::default(),
        /// 10–500.
        pub max_facts: u64 = 100,
        /// 0–1.
        pub fact_confidence_threshold: f64 = 0.7,
        /// `confidence` | `hybrid-v1`.
        pub fact_eviction_policy: String = "confidence".to_owned(),
        /// 100–8000.
        pub max_injection_tokens: u64 = 2000,
        /// `tiktoken` | `char`.
        pub token_counting: String = "tiktoken".to_owned(),
        /// Categories always injected.
        pub guaranteed_categories: Vec<String> = strings(&["correction"]),
        /// 50–2000.
        pub guaranteed_token_budget: u64 = 500,
        /// Periodic stale-fact review.
        pub staleness_review_enabled: bool = true,
        /// 30–365.
        pub staleness_age_days: u64 = 90,
        /// Minimum candidates per review.
        pub staleness_min_candidates: u64 = 3,
        /// Removals per review.
        pub staleness_max_removals_per_cycle: u64 = 10,
        /// Never reviewed.
        pub staleness_protected_categories: Vec<String> = strings(&["correction"]),
        /// 1–100.
        pub staleness_max_lifetime_multiplier: f64 = 20.0,
        /// Cap on lifetime extension.
        pub staleness_max_extension_days: u64 = 3650,
        /// Merge similar facts.
        pub consolidation_enabled: bool = false,
        /// Facts needed before consolidating.
        pub consolidation_min_facts: u64 = 8,
        /// Groups per cycle.
        pub consolidation_max_groups_per_cycle: u64 = 3,
        /// Sources per group.
        pub consolidation_max_sources: u64 = 8,
        /// Extraction watermark cache size; 0 = unbounded.
        pub watermark_max_keys: u64 = 4096,
        /// Override bundled signal patterns.
        pub patterns_dir: Option<String> = None,
        /// Override bundled prompt templates.
        pub prompts_dir: Option<String> = None,
        /// Other keys, kept.
        #[serde(flatten)]
        pub extra: Map<String, Value> = Map::new(),
    }
}
