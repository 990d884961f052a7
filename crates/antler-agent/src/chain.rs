//! The middleware chains in DeerFlow's order (spec 20 §12). Order is semantics: before_* hooks
//! run in list order, after_* hooks in reverse, and the first wrapper is the outermost.
//!
//! - the shared runtime segment (S…), used by the lead agent and by subagents;
//! - the lead-only segment (L…), ending with Clarification, which is always last;
//! - the subagent segment (U…).
//!
//! Entries DeerFlow marks EXTRA that antler does not implement yet are skipped (the
//! authorization guardrail S9); the relative order of everything present is DeerFlow's. The
//! custom and configured middleware slots (L17/L18, U8) hold the Rust extensions registered on
//! the [`App`] ([`crate::extensions`]), which are inserted last, at their placements; DeerFlow's
//! Python entries there are skipped with a warning.

use std::sync::Arc;

use antler_config::Config;
use antler_middleware::clarification::ClarificationMiddleware;
use antler_middleware::dangling_tool_call::DanglingToolCallMiddleware;
use antler_middleware::deferred_tool_filter::DeferredToolFilterMiddleware;
use antler_middleware::durable_context::{DurableContextMiddleware, DurableContextSettings};
use antler_middleware::dynamic_context::{DynamicContextMiddleware, DynamicContextSettings};
use antler_middleware::finish_reason::model_length::ModelLengthFinishReasonMiddleware;
use antler_middleware::finish_reason::safety::SafetyFinishReasonMiddleware;
use antler_middleware::guardrail::{provider_from_config, GuardrailMiddleware};
use antler_middleware::input_sanitization::InputSanitizationMiddleware;
use antler_middleware::llm_error_handling::{CircuitBreaker, LlmErrorHandlingMiddleware};
use antler_middleware::loop_detection::LoopDetectionMiddleware;
use antler_middleware::mcp_routing::McpRoutingMiddleware;
use antler_middleware::read_before_write::ReadBeforeWriteMiddleware;
use antler_middleware::sandbox::SandboxMiddleware;
use antler_middleware::sandbox_audit::{JsonlAuditSink, SandboxAuditMiddleware};
use antler_middleware::skill_activation::SkillActivationMiddleware;
use antler_middleware::skill_registry::{owner_token, SkillRegistry};
use antler_middleware::skill_tool_policy::SkillToolPolicyMiddleware;
use antler_middleware::subagent_limit::SubagentLimitMiddleware;
use antler_middleware::summarization::{BeforeSummarizationHook, DeerFlowSummarizationMiddleware};
use antler_middleware::system_message_coalescing::SystemMessageCoalescingMiddleware;
use antler_middleware::terminal_response::TerminalResponseMiddleware;
use antler_middleware::thread_data::ThreadDataMiddleware;
use antler_middleware::title::TitleMiddleware;
use antler_middleware::todo::{TodoMiddleware, TodoSettings};
use antler_middleware::token_budget::TokenBudgetMiddleware;
use antler_middleware::token_usage::TokenUsageMiddleware;
use antler_middleware::tool_error_handling::ToolErrorHandlingMiddleware;
use antler_middleware::tool_output_budget::ToolOutputBudgetMiddleware;
use antler_middleware::tool_progress::ToolProgressMiddleware;
use antler_middleware::tool_result_sanitization::ToolResultSanitizationMiddleware;
use antler_middleware::uploads::UploadsMiddleware;
use antler_middleware::view_image::ViewImageMiddleware;
use antler_models::ModelInfo;
use antler_runtime::{Chain, Middleware, RunOptions};
use antler_sandbox::{LocalSandboxProvider, SandboxProvider};

use crate::{AgentError, App};

/// What chain assembly needs from the app, cheap to clone into a `'static` subagent factory.
#[derive(Clone)]
pub struct ChainParts {
    pub config: Arc<Config>,
    pub home: std::path::PathBuf,
    pub sandbox: Arc<LocalSandboxProvider>,
    /// The process-wide LLM circuit breaker (shared by every run and subagent).
    pub breaker: Arc<CircuitBreaker>,
    /// The MCP client (deferred MCP tools need the filter and routing middlewares).
    pub mcp: antler_mcp::McpManager,
    /// The installed skills (SkillActivation / SkillToolPolicy resolve against it).
    pub skills: Arc<dyn SkillRegistry>,
    /// Token counts cached across runs, one cache per model name.
    pub token_caches: crate::app::TokenCaches,
    /// Rust middlewares registered on the app, inserted at their placements.
    pub extensions: Arc<[crate::extensions::Extension]>,
}

impl ChainParts {
    /// The shared token cache of a model (so a new run does not re-tokenize the history).
    pub fn token_cache(&self, model: &ModelInfo) -> Arc<antler_models::tokens::CachedTokenCounter> {
        let mut caches = match self.token_caches.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        caches
            .entry(model.name.clone())
            .or_insert_with(|| {
                Arc::new(antler_models::tokens::CachedTokenCounter::new(
                    antler_models::TokenCounter::for_model(&model.model),
                ))
            })
            .clone()
    }
}

impl App {
    pub fn chain_parts(&self) -> ChainParts {
        ChainParts {
            config: self.config.clone(),
            home: self.home.clone(),
            sandbox: self.sandbox.clone(),
            breaker: self.breaker.clone(),
            mcp: self.mcp.clone(),
            skills: Arc::new(crate::skills::LiveSkills {
                root: self.skills_root.clone(),
                container_path: self.config.skills.container_path.clone(),
                extensions_config: self.project_root.join("extensions_config.json"),
            }),
            token_caches: self.token_caches.clone(),
            extensions: self.extensions.clone(),
        }
    }
}

/// One middleware with its position label from spec 20 §12 (`S4`, `L15`, `U13`, …).
#[derive(Clone)]
pub struct ChainEntry {
    pub slot: &'static str,
    pub middleware: Arc<dyn Middleware>,
}

fn entry(slot: &'static str, mw: impl Middleware + 'static) -> ChainEntry {
    ChainEntry {
        slot,
        middleware: Arc::new(mw),
    }
}

/// The shared runtime segment (spec 20 §12.1). `include_uploads` is true for the lead agent.
pub fn runtime_segment(app: &ChainParts, include_uploads: bool) -> Vec<ChainEntry> {
    let provider: Arc<dyn SandboxProvider> = app.sandbox.clone();
    let mut out = vec![
        // S1: outermost model wrapper, so retries and inner wrappers see the framed user text.
        entry("S1", InputSanitizationMiddleware::default()),
        // S2: always present; inert when `tool_output.enabled` is false.
        entry(
            "S2",
            ToolOutputBudgetMiddleware::new(app.config.tool_output.clone())
                .with_home(app.home.clone()),
        ),
        // S3: inner of S2, so remote text is neutralized before it is truncated or saved.
        entry("S3", ToolResultSanitizationMiddleware::default()),
        entry("S4", ThreadDataMiddleware::new(app.home.clone())),
    ];
    if include_uploads {
        out.push(entry("S5", UploadsMiddleware::new(app.home.clone())));
    }
    out.push(entry("S6", SandboxMiddleware::new(provider)));
    out.push(entry("S7", DanglingToolCallMiddleware::new()));
    out.push(entry(
        "S8",
        LlmErrorHandlingMiddleware::new(app.config.llm_call.clone(), app.breaker.clone()),
    ));
    if let Some(g) = guardrail(&app.config) {
        out.push(ChainEntry {
            slot: "S10",
            middleware: g,
        });
    }
    out.push(entry(
        "S11",
        SandboxAuditMiddleware::new().with_sink(Arc::new(JsonlAuditSink::new(
            app.home.join("logs").join("sandbox-audit.jsonl"),
        ))),
    ));
    if app.config.read_before_write.enabled {
        out.push(entry(
            "S12",
            ReadBeforeWriteMiddleware::for_sandbox(app.sandbox.clone()),
        ));
    }
    let progress = &app.config.tool_progress;
    if progress.enabled {
        // S13 must stay outer of S14, whose result classification it reads.
        out.push(entry("S13", ToolProgressMiddleware::new(progress.clone())));
    }
    out.push(entry(
        "S14",
        ToolErrorHandlingMiddleware::new().with_result_meta(progress.enabled),
    ));
    out
}

/// SkillActivation and SkillToolPolicy (L2/L3, U1/U2), sharing one fresh owner token.
fn skill_entries(
    parts: &ChainParts,
    allowlist: Option<&[String]>,
    activation_slot: &'static str,
    policy_slot: &'static str,
) -> Result<Vec<ChainEntry>, AgentError> {
    let token = owner_token();
    let allow = allowlist.map(<[String]>::to_vec);
    let bad = |e: antler_middleware::skill_activation::MissingOwnerToken| {
        AgentError::Config(e.to_string())
    };
    Ok(vec![
        entry(
            activation_slot,
            SkillActivationMiddleware::new(parts.skills.clone(), allow.clone(), token.clone())
                .map_err(bad)?,
        ),
        entry(
            policy_slot,
            SkillToolPolicyMiddleware::new(parts.skills.clone(), allow, token).map_err(bad)?,
        ),
    ])
}

/// The lead agent's middlewares (spec 20 §12.1 + §12.2), in order. `skills`: the custom
/// agent's skill allowlist (`None` = every skill).
pub fn lead_entries(
    app: &App,
    model: &ModelInfo,
    opts: &RunOptions,
    skills: Option<&[String]>,
) -> Result<Vec<ChainEntry>, AgentError> {
    let config = &app.config;
    let parts = app.chain_parts();
    let mut out = runtime_segment(&parts, true);
    out.push(entry(
        "L1",
        DynamicContextMiddleware::new(
            DynamicContextSettings {
                injection_enabled: config.memory.enabled && config.memory.injection_enabled,
                ..Default::default()
            },
            app.memory_source(),
        ),
    ));
    out.extend(skill_entries(&parts, skills, "L2", "L3")?);
    out.push(entry("L4", durable_context(&parts)));
    if let Some(s) = summarization(
        &parts,
        app.model(Some(&model.name), false).ok(),
        model,
        app.summarization_hooks(),
    )? {
        out.push(entry("L5", s));
    }
    if opts.is_plan_mode {
        out.push(entry("L6", TodoMiddleware::new(TodoSettings::default())));
    }
    if config.token_usage.enabled {
        out.push(entry(
            "L7",
            TokenUsageMiddleware::new(config.token_usage.clone()),
        ));
    }
    out.push(entry("L8", title_middleware(app)));
    // L9: queue the finished conversation for long-term memory (self-gates on memory.enabled);
    // absent in tool mode, where the model writes memory through the memory tools.
    if !app.memory().settings().tool_mode() {
        out.push(entry(
            "L9",
            app.memory().middleware(opts.agent_name.clone()),
        ));
    }
    if model.supports_vision {
        out.push(entry("L10", ViewImageMiddleware::new(app.home.clone())));
    }
    out.extend(deferred_entries(&parts, "L11", "L12"));
    out.push(entry("L13", SystemMessageCoalescingMiddleware::new()));
    if opts.subagent_enabled {
        out.push(entry(
            "L14",
            SubagentLimitMiddleware::new()
                .with_max_total(config.subagents.max_total_per_run as i64)
                .with_max_concurrent(opts.max_concurrent_subagents as i64),
        ));
    }
    if let Some(ld) = &app.loop_detection {
        out.push(ChainEntry {
            slot: "L15",
            middleware: ld.clone(),
        });
    }
    if config.token_budget.enabled {
        out.push(entry(
            "L16",
            TokenBudgetMiddleware::new(config.token_budget.clone()),
        ));
    }
    // L17/L18: extensions, inserted below. L19-L21 run first in after_model (reverse order), on
    // the raw terminal message; SafetyFinishReason before every other guard.
    out.push(entry("L19", TerminalResponseMiddleware::new()));
    out.push(entry("L20", ModelLengthFinishReasonMiddleware::new()));
    if let Some(s) = safety_finish_reason(config)? {
        out.push(entry("L21", s));
    }
    // L22: always last.
    out.push(entry("L22", ClarificationMiddleware::new()));
    with_extensions(out, &parts, crate::extensions::Segment::Lead)
}

/// SafetyFinishReason (L21/U9) when `safety_finish_reason.enabled`.
fn safety_finish_reason(
    config: &Config,
) -> Result<Option<SafetyFinishReasonMiddleware>, AgentError> {
    SafetyFinishReasonMiddleware::from_config(&config.safety_finish_reason)
        .map_err(AgentError::Config)
}

/// A `safety_finish_reason.detectors` antler cannot build is a config error at App start.
pub fn check_safety_finish_reason(config: &Config) -> Result<(), AgentError> {
    safety_finish_reason(config).map(|_| ())
}

fn with_extensions(
    entries: Vec<ChainEntry>,
    parts: &ChainParts,
    segment: crate::extensions::Segment,
) -> Result<Vec<ChainEntry>, AgentError> {
    crate::extensions::apply(entries, &parts.extensions, segment)
        .map_err(|e| AgentError::Config(e.to_string()))
}

/// McpRouting and DeferredToolFilter (L11/L12, U4/U5) when `tool_search` defers MCP tools;
/// routing only when some deferred tool has `prefer` keywords. Routing always precedes the
/// filter, whose hidden set it changes.
fn deferred_entries(
    parts: &ChainParts,
    routing_slot: &'static str,
    filter_slot: &'static str,
) -> Vec<ChainEntry> {
    let setup = crate::mcp::setup(&parts.config, &parts.mcp.snapshot());
    let Some(d) = setup.deferred else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let top_k = antler_tools::tool_search::clamp_auto_promote_top_k(
        parts.config.tool_search.auto_promote_top_k as i64,
    );
    if let Some(r) = McpRoutingMiddleware::new(d.routing, d.hash.clone(), top_k) {
        out.push(entry(routing_slot, r));
    }
    out.push(entry(
        filter_slot,
        DeferredToolFilterMiddleware::new(d.names, Some(d.hash)),
    ));
    out
}

/// The circuit breaker from `circuit_breaker:`.
pub fn circuit_breaker(config: &Config) -> Arc<CircuitBreaker> {
    Arc::new(CircuitBreaker::new(config.circuit_breaker.clone()))
}

/// S10: the configured guardrail provider, when `guardrails.enabled` and a provider is set.
/// Config problems are reported at App start (see [`check_guardrail`]).
fn guardrail(config: &Config) -> Option<Arc<dyn Middleware>> {
    let g = &config.guardrails;
    let p = g.provider.as_ref().filter(|_| g.enabled)?;
    let provider = provider_from_config(&p.use_, &p.config).ok()?;
    Some(Arc::new(GuardrailMiddleware::new(provider, g)))
}

/// An enabled guardrail with a provider antler cannot build is a config error.
pub fn check_guardrail(config: &Config) -> Result<(), AgentError> {
    let g = &config.guardrails;
    if let Some(p) = g.provider.as_ref().filter(|_| g.enabled) {
        provider_from_config(&p.use_, &p.config)
            .map_err(|e| AgentError::Config(format!("guardrails.provider: {e}")))?;
    }
    Ok(())
}

/// Summarization (L5/U11) when `summarization.enabled`. A middleware that cannot be built is
/// left out with a warning (the agent still runs), as DeerFlow does.
fn summarization(
    parts: &ChainParts,
    run_model: Option<Arc<dyn antler_models::ChatModel>>,
    model: &ModelInfo,
    hooks: Vec<Arc<dyn BeforeSummarizationHook>>,
) -> Result<Option<DeerFlowSummarizationMiddleware>, AgentError> {
    let c = &parts.config.summarization;
    if !c.enabled {
        return Ok(None);
    }
    let Some(run_model) = run_model else {
        tracing::warn!("summarization is enabled but the run model cannot be built; skipped");
        return Ok(None);
    };
    let summary_model = c.model_name.as_deref().and_then(|name| {
        let cfg = parts.config.model(name)?;
        match crate::models::build_model(cfg, false) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(model = %name, error = %e, "summarization.model_name cannot be built; using the run model");
                None
            }
        }
    });
    match DeerFlowSummarizationMiddleware::new(
        c.clone(),
        run_model,
        summary_model,
        model.context_window,
        hooks,
    ) {
        Ok(m) => Ok(Some(
            m.with_token_cache(parts.token_cache(model))
                .with_skills_container_path(parts.config.skills.container_path.clone()),
        )),
        Err(e) => Err(AgentError::Config(format!("summarization: {e}"))),
    }
}

fn durable_context(parts: &ChainParts) -> DurableContextMiddleware {
    DurableContextMiddleware::new(DurableContextSettings {
        skills_container_path: parts.config.skills.container_path.clone(),
        skill_file_read_tool_names: parts
            .config
            .summarization
            .skill_file_read_tool_names
            .clone(),
        // The contract is part of the static system prompt instead, so coalescing its system
        // message would not change the prompt once a thread has durable data.
        inject_authority_contract: false,
    })
}

fn title_middleware(app: &App) -> TitleMiddleware {
    let t = &app.config.title;
    let model = t.model_name.as_deref().and_then(|name| match app.model(Some(name), false) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(model = %name, error = %e, "title.model_name cannot be used; titles fall back to the first user message");
            None
        }
    });
    TitleMiddleware::new(t.clone(), model)
}

/// The process-wide LoopDetection (its per-thread windows and LRU live across runs).
pub fn loop_detection(
    app_config: &antler_config::Config,
) -> Result<Option<Arc<LoopDetectionMiddleware>>, AgentError> {
    let c = &app_config.loop_detection;
    if !c.enabled {
        return Ok(None);
    }
    LoopDetectionMiddleware::new(c.clone())
        .map(|m| Some(Arc::new(m)))
        .map_err(|e| AgentError::Config(format!("loop_detection: {e}")))
}

/// A subagent's middlewares (spec 20 §12.3): the shared segment without Uploads, then the
/// subagent segment. Built fresh per delegation: a child shares its parent's thread and run ids,
/// so per-run state must not be shared with the lead's instances.
pub fn subagent_entries(
    parts: &ChainParts,
    model: &ModelInfo,
    run_model: Option<Arc<dyn antler_models::ChatModel>>,
) -> Result<Vec<ChainEntry>, AgentError> {
    let mut out = runtime_segment(parts, false);
    out.extend(skill_entries(parts, None, "U1", "U2")?);
    if model.supports_vision {
        out.push(entry("U3", ViewImageMiddleware::new(parts.home.clone())));
    }
    out.extend(deferred_entries(parts, "U4", "U5"));
    if let Some(ld) = loop_detection(&parts.config)? {
        out.push(ChainEntry {
            slot: "U6",
            middleware: ld,
        });
    }
    // U7: on by default for subagents (its default tracks summarization.enabled).
    let budget = parts.config.subagent_token_budget();
    if budget.enabled {
        out.push(entry("U7", TokenBudgetMiddleware::new(budget)));
    }
    // U8: extensions, inserted below. U9: after the loop and budget guards.
    if let Some(s) = safety_finish_reason(&parts.config)? {
        out.push(entry("U9", s));
    }
    out.push(entry("U10", durable_context(parts)));
    // U11: the subagent's own model; no memory flush (subagents share the parent thread id).
    if let Some(s) = summarization(parts, run_model.clone(), model, Vec::new())? {
        out.push(entry("U11", s));
    }
    out.push(entry("U13", SystemMessageCoalescingMiddleware::new()));
    with_extensions(out, parts, crate::extensions::Segment::Subagent)
}

/// The lead agent's chain.
pub fn lead_chain(
    app: &App,
    model: &ModelInfo,
    opts: &RunOptions,
    skills: Option<&[String]>,
) -> Result<Chain, AgentError> {
    let entries = lead_entries(app, model, opts, skills)?;
    Ok(Chain::new(
        entries.into_iter().map(|e| e.middleware).collect(),
    )?)
}
