//! Long-term memory: per-user facts across conversations (DeerFlow's default backend, DeerMem;
//! spec 40 §4).
//!
//! One of seed 002's three stores, with its own lifecycle: written asynchronously after runs and
//! before summarization, read when a conversation starts — never the transcript (that is the
//! checkpoint), never the audit trail (that is the journal).
//!
//! ```text
//! MemoryMiddleware.after_agent ──add──▶ MemoryManager ──filter, signals──▶ MemoryQueue (debounce)
//! Summarization hook ──add_nowait──▶        │                                  │
//!                                            │                    MemoryUpdater: memory model,
//!                                            │                    write gate, SQLite (revisioned)
//! DynamicContext ◀──injection (token cap)────┘
//! ```
//!
//! [`MemoryManager`] implements the three interfaces the chain sees: [`MemoryWriter`] (for
//! [`MemoryMiddleware`]), [`MemorySource`] (for DynamicContext) and [`BeforeSummarizationHook`]
//! (for Summarization). `memory.enabled` gates all of them; `memory.injection_enabled` gates only
//! the injection. Memory failures never fail a run: they are logged and journaled as
//! `memory.error` events on the run they came from.
//!
//! With `memory.mode: tool` the lead agent gets the [`tools`] instead of the middleware and
//! the injection carries summaries only.

pub mod document;
pub mod prompt;
pub mod queue;
pub mod review;
pub mod tools;
pub mod updater;

use std::sync::Arc;
use std::time::Duration;

use antler_config::{Config, MemoryConfig, MemoryMode, Provider};
use antler_middleware::dynamic_context::MemorySource;
use antler_middleware::memory::preprocess::{detect_signals, prepare};
use antler_middleware::memory::{MemoryCandidate, MemoryMiddleware, MemoryWriter};
use antler_middleware::summarization::{BeforeSummarizationHook, SummarizationEvent};
use antler_models::ChatModel;
use antler_protocol::Message;
use antler_store::{NewRunEvent, SqliteStore, StoreError};
use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::AgentError;
use document::{content_key, Fact, MemoryDocument, Profile};
use prompt::{format_injection, InjectionBudget, TokenCounting};
use queue::{ItemProcessor, MemoryQueue, QueueItem, QueueSettings, QueueStats};
use updater::MemoryUpdater;

/// The user of unauthenticated runs.
pub const DEFAULT_USER: &str = "default";
/// The fact bucket of the lead agent.
pub const DEFAULT_BUCKET: &str = "__default__";

/// The storage user id for a run's user.
pub fn user_of(user_id: Option<&str>) -> String {
    user_id
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or(DEFAULT_USER)
        .to_owned()
}

/// The fact bucket for an agent: its lowercased name, or `__default__`.
pub fn bucket_of(agent_name: Option<&str>) -> String {
    agent_name
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_lowercase)
        .unwrap_or_else(|| DEFAULT_BUCKET.to_owned())
}

/// Memory settings resolved from `memory:` and `memory.backend_config` (DeerMem keys).
#[derive(Clone, Debug)]
pub struct MemorySettings {
    /// `memory.enabled` (and not the `noop` backend).
    pub enabled: bool,
    /// `memory.injection_enabled`.
    pub injection_enabled: bool,
    pub queue: QueueSettings,
    pub max_facts: usize,
    pub fact_confidence_threshold: f64,
    pub injection: InjectionBudget,
    /// `token_counting`: `tiktoken` | `char`.
    pub token_counting: String,
    pub watermark_max_keys: usize,
    /// `shutdown_flush_timeout_seconds`.
    pub shutdown_flush_timeout: Duration,
    pub strict_user_scope: bool,
    pub staleness_age_days: u64,
    pub staleness_max_lifetime_multiplier: f64,
    /// `confidence` | `hybrid-v1`.
    pub fact_eviction_policy: String,
    /// `fact_eviction_shadow_enabled` (hybrid bookkeeping without hybrid eviction).
    pub eviction_shadow: bool,
    /// `memory.mode`: in tool mode the model reads and writes facts through the memory tools.
    pub mode: MemoryMode,
    /// The staleness review pass (`staleness_*`).
    pub staleness: StalenessSettings,
    /// The consolidation pass (`consolidation_*`).
    pub consolidation: ConsolidationSettings,
}

/// `staleness_*`: aged facts are shown to the memory model for a keep / remove / extend review.
#[derive(Clone, Debug)]
pub struct StalenessSettings {
    /// `staleness_review_enabled`: whether the review section is put in the prompt.
    pub enabled: bool,
    /// `staleness_min_candidates`: fewer aged facts than this and no review is asked for.
    pub min_candidates: usize,
    /// `staleness_max_removals_per_cycle`.
    pub max_removals_per_cycle: usize,
    /// `staleness_protected_categories`: never reviewed (nor consolidated).
    pub protected_categories: Vec<String>,
    /// `staleness_max_extension_days`: ceiling of a lifetime after an extension.
    pub max_extension_days: i64,
}

impl Default for StalenessSettings {
    fn default() -> Self {
        StalenessSettings {
            enabled: true,
            min_candidates: 3,
            max_removals_per_cycle: 10,
            protected_categories: vec!["correction".to_owned()],
            max_extension_days: 3650,
        }
    }
}

/// `consolidation_*`: fragmented categories are shown to the memory model for merging.
#[derive(Clone, Debug)]
pub struct ConsolidationSettings {
    /// `consolidation_enabled` (off by default: a merge drops the sources' wording).
    pub enabled: bool,
    /// `consolidation_min_facts`: a category needs this many facts to be offered.
    pub min_facts: usize,
    /// `consolidation_max_groups_per_cycle`.
    pub max_groups_per_cycle: usize,
    /// `consolidation_max_sources`: facts per merge (and shown per group).
    pub max_sources: usize,
}

impl Default for ConsolidationSettings {
    fn default() -> Self {
        ConsolidationSettings {
            enabled: false,
            min_facts: 8,
            max_groups_per_cycle: 3,
            max_sources: 8,
        }
    }
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            enabled: true,
            injection_enabled: true,
            queue: QueueSettings::default(),
            max_facts: 100,
            fact_confidence_threshold: 0.7,
            injection: InjectionBudget::default(),
            token_counting: "tiktoken".to_owned(),
            watermark_max_keys: 4096,
            shutdown_flush_timeout: Duration::from_secs(30),
            strict_user_scope: false,
            staleness_age_days: 90,
            staleness_max_lifetime_multiplier: 20.0,
            fact_eviction_policy: "confidence".to_owned(),
            eviction_shadow: false,
            mode: MemoryMode::Middleware,
            staleness: StalenessSettings::default(),
            consolidation: ConsolidationSettings::default(),
        }
    }
}

fn secs(v: f64, lo: f64, hi: f64) -> Duration {
    Duration::from_secs_f64(if v.is_finite() { v.clamp(lo, hi) } else { lo })
}

impl MemorySettings {
    /// Read `memory:`. An unknown `manager_class` is an error (never a silent substitute).
    pub fn from_config(cfg: &MemoryConfig) -> Result<MemorySettings, AgentError> {
        let class = cfg.manager_class.trim();
        let noop = class.eq_ignore_ascii_case("noop");
        if !noop && !cfg.is_deermem() {
            return Err(AgentError::Config(format!(
                "memory.manager_class: '{class}' is not available in antler — use deermem (the default) or noop"
            )));
        }
        if cfg.mode == MemoryMode::Tool && (!cfg.enabled || noop) {
            tracing::warn!(
                "memory.mode is 'tool' but memory is disabled; the memory tools are not registered"
            );
        }
        let d = cfg
            .deermem()
            .map_err(|e| AgentError::Config(format!("memory.backend_config: {e}")))?;
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Ok(MemorySettings {
            enabled: cfg.enabled && !noop,
            injection_enabled: cfg.injection_enabled,
            queue: QueueSettings {
                debounce: secs(d.debounce_seconds, 0.0, 300.0),
                max_depth: to_usize(d.queue_max_depth),
                pause: Duration::from_millis(500),
            },
            max_facts: to_usize(d.max_facts).max(1),
            fact_confidence_threshold: d.fact_confidence_threshold,
            injection: InjectionBudget {
                max_tokens: to_usize(d.max_injection_tokens),
                guaranteed_categories: d.guaranteed_categories.clone(),
                guaranteed_tokens: to_usize(d.guaranteed_token_budget),
            },
            token_counting: d.token_counting.clone(),
            watermark_max_keys: to_usize(d.watermark_max_keys),
            shutdown_flush_timeout: secs(cfg.shutdown_flush_timeout_seconds, 1.0, 300.0),
            strict_user_scope: d.strict_user_scope,
            staleness_age_days: d.staleness_age_days,
            staleness_max_lifetime_multiplier: d.staleness_max_lifetime_multiplier,
            fact_eviction_policy: d.fact_eviction_policy.clone(),
            eviction_shadow: d
                .extra
                .get("fact_eviction_shadow_enabled")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            mode: cfg.mode,
            staleness: StalenessSettings {
                enabled: d.staleness_review_enabled,
                min_candidates: to_usize(d.staleness_min_candidates),
                max_removals_per_cycle: to_usize(d.staleness_max_removals_per_cycle),
                protected_categories: d.staleness_protected_categories.clone(),
                max_extension_days: i64::try_from(d.staleness_max_extension_days)
                    .unwrap_or(i64::MAX),
            },
            consolidation: ConsolidationSettings {
                enabled: d.consolidation_enabled,
                min_facts: to_usize(d.consolidation_min_facts),
                max_groups_per_cycle: to_usize(d.consolidation_max_groups_per_cycle),
                max_sources: to_usize(d.consolidation_max_sources),
            },
        })
    }

    /// Whether the lead agent gets the memory tools instead of the passive writer (`mode: tool`
    /// with memory on).
    pub fn tool_mode(&self) -> bool {
        self.enabled && self.mode == MemoryMode::Tool
    }

    /// Whether confirmations (`lastConfirmedAt`, `confirmationCount`) are recorded.
    pub fn tracks_confirmations(&self) -> bool {
        self.fact_eviction_policy.eq_ignore_ascii_case("hybrid-v1") || self.eviction_shadow
    }
}

/// Where the memory model comes from.
#[derive(Clone)]
pub enum ModelSource {
    /// A given model (tests, `App::with_model_override`).
    Fixed(Arc<dyn ChatModel>),
    /// `memory.backend_config.model`, else the default (first) model entry.
    Config(Arc<Config>),
}

impl ModelSource {
    pub fn resolve(&self) -> Result<Arc<dyn ChatModel>, AgentError> {
        match self {
            ModelSource::Fixed(m) => Ok(m.clone()),
            ModelSource::Config(c) => memory_model(c),
        }
    }
}

/// Build the memory model: `backend_config.model.model` naming a `models:` entry uses that
/// entry; otherwise the default entry with the given model id, endpoint, key and temperature
/// laid over it. Thinking is off (the memory call wants plain JSON).
pub fn memory_model(config: &Config) -> Result<Arc<dyn ChatModel>, AgentError> {
    let d = config
        .memory
        .deermem()
        .map_err(|e| AgentError::Config(format!("memory.backend_config: {e}")))?;
    let m = d.model;
    let named = m.model.as_deref().and_then(|n| config.model(n));
    let base = match named.or_else(|| config.default_model()) {
        Some(b) => b,
        None => return Err(AgentError::Config(
            "memory needs a model: add an entry under `models:` or set memory.backend_config.model"
                .into(),
        )),
    };
    let mut entry = base.clone();
    if named.is_none() {
        if let Some(id) = m.model.filter(|s| !s.is_empty()) {
            entry.model = id;
        }
        if let Some(p) = m.provider.as_deref() {
            entry.provider = match p.to_ascii_lowercase().as_str() {
                "openai" => Some(Provider::Openai),
                "anthropic" => Some(Provider::Anthropic),
                _ => entry.provider,
            };
        }
    }
    if let Some(url) = m.base_url.filter(|s| !s.is_empty()) {
        entry.base_url = Some(url);
    }
    if let Some(key) = m.api_key.filter(|s| !s.is_empty()) {
        entry.api_key = Some(key);
    }
    if m.temperature.is_some() {
        entry.temperature = m.temperature;
    }
    crate::models::build_model(&entry, false)
}

/// Runs the updater for the queue and journals each outcome on the run it came from.
struct Processor {
    updater: MemoryUpdater,
    store: SqliteStore,
}

impl Processor {
    async fn journal(&self, item: &QueueItem, kind: &str, category: &str, content: Value) {
        let mut meta = Map::new();
        meta.insert("caller".into(), json!("memory_agent"));
        meta.insert("bypass_watermark".into(), json!(item.bypass_watermark));
        if let Some(a) = &item.agent_name {
            meta.insert("agent_name".into(), json!(a));
        }
        if let Some(t) = &item.trace_id {
            meta.insert("trace_id".into(), json!(t));
        }
        let event = NewRunEvent::new(
            &item.thread_id,
            item.run_id.clone().unwrap_or_default(),
            kind,
            category,
            content,
        )
        .with_metadata(meta)
        .with_user(item.user_id.clone());
        if let Err(e) = self.store.append_run_events(vec![event]).await {
            tracing::warn!(thread = %item.thread_id, error = %e, "could not journal a memory outcome");
        }
    }
}

#[async_trait]
impl ItemProcessor for Processor {
    async fn process(&self, item: &QueueItem) -> bool {
        match self.updater.update(item).await {
            Ok(report) => {
                if report.called_model {
                    let content = serde_json::to_value(&report).unwrap_or(Value::Null);
                    self.journal(item, "memory.update", "memory", content).await;
                }
                true
            }
            Err(e) => {
                tracing::warn!(thread = %item.thread_id, error = %e, "memory update failed");
                self.journal(item, "memory.error", "error", json!(e.to_string()))
                    .await;
                false
            }
        }
    }
}

/// Why a direct change to memory (API, CLI, tools) was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemoryOpError {
    /// A fact with the same content (case-insensitive) exists.
    #[error("Duplicate fact")]
    Duplicate,
    #[error("Fact not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// Memory is full and the new fact ranks below every kept one.
    #[error("the fact was not stored: memory is full and it ranks below every kept fact")]
    Evicted,
    /// Someone else kept changing the same memory.
    #[error("memory changed concurrently; try again")]
    Conflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn valid_confidence(c: f64) -> Result<f64, MemoryOpError> {
    if c.is_finite() && (0.0..=1.0).contains(&c) {
        Ok(c)
    } else {
        Err(MemoryOpError::Invalid(
            "confidence must be a number from 0 to 1".into(),
        ))
    }
}

/// A conversation arriving at the manager, before filtering.
struct Incoming<'a> {
    thread_id: &'a str,
    run_id: Option<&'a str>,
    user_id: Option<&'a str>,
    agent_name: Option<&'a str>,
    trace_id: Option<&'a str>,
    messages: &'a [Arc<Message>],
    bypass_watermark: bool,
}

/// The memory system of one process (DeerFlow's process-wide `MemoryManager`).
pub struct MemoryManager {
    settings: MemorySettings,
    store: SqliteStore,
    queue: MemoryQueue,
    tokens: TokenCounting,
}

impl MemoryManager {
    pub fn new(store: SqliteStore, settings: MemorySettings, model: ModelSource) -> Arc<Self> {
        let processor = Arc::new(Processor {
            updater: MemoryUpdater::new(store.clone(), settings.clone(), model),
            store: store.clone(),
        });
        Arc::new(MemoryManager {
            queue: MemoryQueue::new(processor, settings.queue.clone()),
            tokens: TokenCounting::from_setting(&settings.token_counting),
            settings,
            store,
        })
    }

    /// From config: settings from `memory:`, the model from `backend_config.model` (resolved on
    /// first use, so `antler memory show` works without a reachable model) unless `model`
    /// replaces it.
    pub fn from_config(
        config: Arc<Config>,
        store: SqliteStore,
        model: Option<Arc<dyn ChatModel>>,
    ) -> Result<Arc<Self>, AgentError> {
        let settings = MemorySettings::from_config(&config.memory)?;
        let source = match model {
            Some(m) => ModelSource::Fixed(m),
            None => ModelSource::Config(config),
        };
        Ok(Self::new(store, settings, source))
    }

    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    pub fn queue(&self) -> &MemoryQueue {
        &self.queue
    }

    pub fn stats(&self) -> QueueStats {
        self.queue.stats()
    }

    /// The lead chain's L9 middleware, writing to this manager.
    pub fn middleware(self: &Arc<Self>, agent_name: Option<String>) -> MemoryMiddleware {
        MemoryMiddleware::new(self.clone())
            .with_enabled(self.settings.enabled)
            .with_agent_name(agent_name)
    }

    fn item(&self, c: Incoming<'_>) -> Option<QueueItem> {
        if !self.settings.enabled || c.thread_id.is_empty() {
            return None;
        }
        if self.settings.strict_user_scope && c.user_id.is_none() {
            tracing::warn!(
                thread = c.thread_id,
                "memory: strict_user_scope and no user id; skipped"
            );
            return None;
        }
        let kept = prepare(c.messages)?;
        let signals = detect_signals(&kept);
        Some(QueueItem {
            thread_id: c.thread_id.to_owned(),
            run_id: c.run_id.map(str::to_owned),
            user_id: c.user_id.map(str::to_owned),
            agent_name: c.agent_name.map(|a| bucket_of(Some(a))),
            trace_id: c.trace_id.map(str::to_owned),
            messages: kept,
            signals,
            bypass_watermark: c.bypass_watermark,
        })
    }

    /// Queue a conversation (debounced). `false` when nothing was queued (disabled, nothing worth
    /// remembering, or the queue refused it).
    pub fn add(&self, candidate: &MemoryCandidate) -> bool {
        self.item(Incoming {
            thread_id: &candidate.thread_id,
            run_id: Some(&candidate.run_id),
            user_id: candidate.user_id.as_deref(),
            agent_name: candidate.agent_name.as_deref(),
            trace_id: candidate.trace_id.as_deref(),
            messages: &candidate.messages,
            bypass_watermark: false,
        })
        .is_some_and(|item| self.queue.add(item))
    }

    /// Queue messages for immediate extraction, past the watermark (summarization flush).
    pub fn add_nowait(
        &self,
        thread_id: &str,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        messages: &[Arc<Message>],
    ) -> bool {
        self.item(Incoming {
            thread_id,
            run_id: None,
            user_id,
            agent_name,
            trace_id: None,
            messages,
            bypass_watermark: true,
        })
        .is_some_and(|item| self.queue.add_nowait(item))
    }

    /// The injection text for a user and agent (without `<memory>` tags); `None` when memory or
    /// injection is off or there is nothing to say.
    pub async fn context(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        if !self.settings.enabled || !self.settings.injection_enabled {
            return Ok(None);
        }
        let loaded = updater::load(&self.store, &user_of(user_id), &bucket_of(agent_name)).await?;
        // Tool mode injects the summaries only: facts stay behind `memory_search`.
        let facts: &[Fact] = if self.settings.tool_mode() {
            &[]
        } else {
            &loaded.facts
        };
        let text = format_injection(
            &loaded.profile,
            facts,
            &self.settings.injection,
            &self.tokens,
        );
        Ok((!text.is_empty()).then_some(text))
    }

    /// Facts of a user's agent bucket matching `query`, best first, at most `limit`; `category`
    /// (exact match) filters before the cut. See [`tools::rank`] for the matching.
    pub async fn search(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        query: &str,
        category: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Fact>, StoreError> {
        if query.trim().is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let loaded = updater::load(&self.store, &user_of(user_id), &bucket_of(agent_name)).await?;
        Ok(tools::rank(loaded.facts, query, category, limit))
    }

    /// A user's memory as one document (summaries plus the agent's facts).
    pub async fn document(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
    ) -> Result<MemoryDocument, StoreError> {
        let loaded = updater::load(&self.store, &user_of(user_id), &bucket_of(agent_name)).await?;
        Ok(MemoryDocument::new(
            loaded.profile,
            loaded.facts,
            loaded.updated_at,
        ))
    }

    /// Forget a user's memory: everything, or one agent's facts. Returns facts removed.
    pub async fn clear(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
    ) -> Result<usize, StoreError> {
        let bucket = agent_name.map(|a| bucket_of(Some(a)));
        self.store
            .clear_memory(&user_of(user_id), bucket.as_deref())
            .await
    }

    /// Apply `change` to a user's memory and save it, reloading and re-applying on a concurrent
    /// change (at most 3 attempts).
    async fn modify<T>(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        mut change: impl FnMut(&mut Profile, &mut Vec<Fact>) -> Result<T, MemoryOpError>,
    ) -> Result<T, MemoryOpError> {
        let (user, bucket) = (user_of(user_id), bucket_of(agent_name));
        for _ in 0..3 {
            let loaded = updater::load(&self.store, &user, &bucket).await?;
            let (mut profile, mut facts) = (loaded.profile, loaded.facts);
            let out = change(&mut profile, &mut facts)?;
            let change = antler_store::MemoryChange {
                profile: Some(
                    serde_json::to_value(&profile)
                        .map_err(|e| MemoryOpError::Invalid(e.to_string()))?,
                ),
                facts: Some(
                    facts
                        .iter()
                        .map(serde_json::to_value)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| MemoryOpError::Invalid(e.to_string()))?,
                ),
            };
            match self
                .store
                .save_memory(&user, &bucket, loaded.revision, change)
                .await?
            {
                antler_store::MemorySave::Saved { .. } => return Ok(out),
                antler_store::MemorySave::Conflict { .. } => continue,
            }
        }
        Err(MemoryOpError::Conflict)
    }

    /// Add a fact written by the user (`source: manual`). Duplicates (case-insensitive content)
    /// are refused; at capacity the least confident fact goes, unless that is the new one.
    pub async fn create_fact(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        content: &str,
        category: &str,
        confidence: f64,
    ) -> Result<Fact, MemoryOpError> {
        let key = content_key(content)
            .ok_or_else(|| MemoryOpError::Invalid("content must not be empty".into()))?;
        let confidence = valid_confidence(confidence)?;
        let max = self.settings.max_facts;
        self.modify(user_id, agent_name, |_, facts| {
            if facts
                .iter()
                .any(|f| f.text().and_then(content_key).as_ref() == Some(&key))
            {
                return Err(MemoryOpError::Duplicate);
            }
            let fact = Fact {
                id: format!("fact_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
                content: Value::from(content.trim()),
                category: Some(if category.trim().is_empty() {
                    "context".to_owned()
                } else {
                    category.trim().to_owned()
                }),
                confidence: Value::from(confidence),
                created_at: antler_runtime::now_rfc3339(),
                source: Value::from("manual"),
                ..Default::default()
            };
            if facts.len() >= max {
                let weakest = facts
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.confidence().total_cmp(&b.1.confidence()))
                    .map(|(i, f)| (i, f.confidence()));
                match weakest {
                    Some((i, c)) if c < confidence => {
                        facts.remove(i);
                    }
                    _ => return Err(MemoryOpError::Evicted),
                }
            }
            facts.push(fact.clone());
            Ok(fact)
        })
        .await
    }

    /// Change a fact's content, category or confidence.
    pub async fn update_fact(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        fact_id: &str,
        content: Option<&str>,
        category: Option<&str>,
        confidence: Option<f64>,
    ) -> Result<Fact, MemoryOpError> {
        if let Some(c) = content {
            content_key(c)
                .ok_or_else(|| MemoryOpError::Invalid("content must not be empty".into()))?;
        }
        let confidence = confidence.map(valid_confidence).transpose()?;
        self.modify(user_id, agent_name, |_, facts| {
            let f = facts
                .iter_mut()
                .find(|f| f.id == fact_id)
                .ok_or_else(|| MemoryOpError::NotFound(fact_id.to_owned()))?;
            if let Some(c) = content {
                f.content = Value::from(c.trim());
            }
            if let Some(c) = category {
                f.category = Some(c.trim().to_owned());
            }
            if let Some(c) = confidence {
                f.confidence = Value::from(c);
            }
            f.extra.insert(
                "updatedAt".into(),
                Value::from(antler_runtime::now_rfc3339()),
            );
            Ok(f.clone())
        })
        .await
    }

    /// Delete a fact (physically).
    pub async fn delete_fact(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        fact_id: &str,
    ) -> Result<(), MemoryOpError> {
        self.modify(user_id, agent_name, |_, facts| {
            let before = facts.len();
            facts.retain(|f| f.id != fact_id);
            if facts.len() == before {
                return Err(MemoryOpError::NotFound(fact_id.to_owned()));
            }
            Ok(())
        })
        .await
    }

    /// Replace a user's summaries and an agent's facts with an exported document.
    pub async fn import(
        &self,
        user_id: Option<&str>,
        agent_name: Option<&str>,
        doc: MemoryDocument,
    ) -> Result<(), MemoryOpError> {
        if let Some(bad) = doc.facts.iter().find(|f| {
            f.id.is_empty()
                || !f
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        }) {
            return Err(MemoryOpError::Invalid(format!(
                "fact ids use letters, digits, '_' and '-': {:?}",
                bad.id
            )));
        }
        self.modify(user_id, agent_name, |profile, facts| {
            profile.user = doc.user.clone();
            profile.history = doc.history.clone();
            *facts = doc.facts.clone();
            Ok(())
        })
        .await
    }

    /// Users with stored memory.
    pub async fn users(&self) -> Result<Vec<String>, StoreError> {
        self.store.memory_users().await
    }

    /// Drain pending updates within `timeout` (default `shutdown_flush_timeout_seconds`).
    /// `true` when everything was written.
    pub async fn flush(&self, timeout: Option<Duration>) -> bool {
        if self.queue.stats().pending == 0 && !self.queue.stats().processing {
            return true;
        }
        self.queue
            .flush(timeout.unwrap_or(self.settings.shutdown_flush_timeout))
            .await
    }
}

impl MemoryWriter for MemoryManager {
    fn add(&self, candidate: MemoryCandidate) {
        MemoryManager::add(self, &candidate);
    }
}

#[async_trait]
impl MemorySource for MemoryManager {
    async fn injection(&self, user_id: Option<&str>, agent_name: Option<&str>) -> Option<String> {
        match self.context(user_id, agent_name).await {
            Ok(text) => text,
            Err(e) => {
                // A read failure injects nothing; the run goes on.
                tracing::warn!(error = %e, "could not read memory for injection");
                None
            }
        }
    }
}

#[async_trait]
impl BeforeSummarizationHook for MemoryManager {
    async fn before_summarization(&self, event: &SummarizationEvent) -> Result<(), String> {
        let messages: Vec<Arc<Message>> = event.messages.iter().cloned().map(Arc::new).collect();
        // Only what is about to be compressed away; a refused flush is logged by the queue and
        // summarization goes on regardless.
        self.add_nowait(
            &event.thread_id,
            event.user_id.as_deref(),
            event.agent_name.as_deref(),
            &messages,
        );
        Ok(())
    }

    fn name(&self) -> &str {
        "memory_flush"
    }
}
