//! The validation rules of spec 60 §26 that apply to typed sections. Range rules that a type
//! already enforces (non-negative sizes, enum values, ContextSize types) are reported by
//! deserialization with the key path; §26.7's clamps happen while deserializing.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::context::{TokenBudgetConfig, MEMORY_BACKENDS};
use crate::error::{ModelError, ValidationError};
use crate::storage::{CheckpointerType, DatabaseBackend};
use crate::Config;

type Check = Result<(), ValidationError>;

fn fail(key: impl Into<String>, message: impl Into<String>) -> Check {
    Err(ValidationError::new(key, message))
}

// Comparisons go through `partial_cmp` so that NaN (`.nan` in YAML) fails every range rule.

fn at_least<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T) -> Check {
    match value.partial_cmp(&min) {
        Some(Ordering::Greater | Ordering::Equal) => Ok(()),
        _ => fail(key, format!("must be >= {min}, got {value}")),
    }
}

fn above<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T) -> Check {
    match value.partial_cmp(&min) {
        Some(Ordering::Greater) => Ok(()),
        _ => fail(key, format!("must be > {min}, got {value}")),
    }
}

fn within<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T, max: T) -> Check {
    let low = value.partial_cmp(&min);
    let high = value.partial_cmp(&max);
    match (low, high) {
        (Some(Ordering::Greater | Ordering::Equal), Some(Ordering::Less | Ordering::Equal)) => {
            Ok(())
        }
        _ => fail(key, format!("must be between {min} and {max}, got {value}")),
    }
}

fn not_below_other<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    other_name: &str,
    other: T,
) -> Check {
    match value.partial_cmp(&other) {
        Some(Ordering::Greater | Ordering::Equal) => Ok(()),
        _ => fail(
            key,
            format!("must be >= {other_name} ({other}), got {value}"),
        ),
    }
}

fn plain_identifier(key: &str, value: &str) -> Check {
    let mut chars = value.chars();
    let ok = match chars.next() {
        None => true,
        Some(first) => {
            (first.is_ascii_alphabetic() || first == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
    };
    if !ok {
        return fail(
            key,
            format!("'{value}' is not a plain identifier — use letters, digits and _ only"),
        );
    }
    Ok(())
}

fn budget(prefix: &str, b: &TokenBudgetConfig) -> Check {
    at_least(&format!("{prefix}.max_tokens"), b.max_tokens, 1000)?;
    if let Some(v) = b.max_input_tokens {
        at_least(&format!("{prefix}.max_input_tokens"), v, 1)?;
    }
    if let Some(v) = b.max_output_tokens {
        at_least(&format!("{prefix}.max_output_tokens"), v, 1)?;
    }
    within(
        &format!("{prefix}.warn_threshold"),
        b.warn_threshold,
        0.0,
        1.0,
    )?;
    within(
        &format!("{prefix}.hard_stop_threshold"),
        b.hard_stop_threshold,
        0.0,
        1.0,
    )?;
    not_below_other(
        &format!("{prefix}.hard_stop_threshold"),
        b.hard_stop_threshold,
        "warn_threshold",
        b.warn_threshold,
    )
}

impl Config {
    /// Checks every §26 rule that applies to typed sections. `Ok` carries non-fatal findings
    /// (no models, repeated names, providers antler does not implement); `Err` is the first
    /// broken rule.
    pub fn validate(&self) -> Result<Vec<String>, ValidationError> {
        let mut warnings = Vec::new();
        self.check_models(&mut warnings)?;
        self.check_tools(&mut warnings);
        at_least("max_recursion_limit", self.max_recursion_limit, 1)?;
        budget("token_budget", &self.token_budget)?;
        self.check_loop_detection()?;
        self.check_sandbox()?;
        self.check_tool_output()?;
        self.check_title()?;
        self.check_memory()?;
        self.check_subagents()?;
        self.check_storage()?;
        at_least(
            "llm_call.max_retry_after",
            self.llm_call.max_retry_after,
            0.0,
        )?;
        if self
            .safety_finish_reason
            .detectors
            .as_ref()
            .is_some_and(Vec::is_empty)
        {
            fail(
                "safety_finish_reason.detectors",
                "an empty list is not allowed — use null for the built-in detectors, or enabled: false to turn the check off",
            )?;
        }
        Ok(warnings)
    }

    fn check_models(&self, warnings: &mut Vec<String>) -> Check {
        if self.models.is_empty() {
            warnings.push(
                "no models configured — add an entry under models: (building an agent fails without one)"
                    .to_owned(),
            );
        }
        let mut seen = FirstByName::default();
        for (index, model) in self.models.iter().enumerate() {
            let prefix = format!("models[{index}]");
            seen.note("models", index, &model.name, warnings);
            if let Some(window) = model.context_window {
                above(&format!("{prefix}.context_window"), window, 0)?;
            }
            if let Some(t) = model.call_timeout {
                above(&format!("{prefix}.call_timeout"), t, 0.0)?;
            }
            match model.provider_kind() {
                Ok(_) => {}
                Err(ModelError::UnsupportedProvider { value, .. }) => {
                    warnings.push(format!(
                        "{prefix}.use: '{value}' is a DeerFlow provider antler does not implement; model '{}' cannot be selected",
                        model.name
                    ));
                }
                Err(error) => {
                    let key = match &error {
                        ModelError::MissingProvider { .. } => prefix.clone(),
                        _ => format!("{prefix}.{}", error.key()),
                    };
                    return fail(
                        key,
                        format!(
                            "{} (model '{}') — {}",
                            error.problem(),
                            error.model(),
                            error.fix()
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    fn check_tools(&self, warnings: &mut Vec<String>) {
        let mut seen = FirstByName::default();
        for (index, tool) in self.tools.iter().enumerate() {
            seen.note("tools", index, &tool.name, warnings);
        }
    }

    fn check_loop_detection(&self) -> Check {
        let ld = &self.loop_detection;
        for (name, value) in [
            ("warn_threshold", ld.warn_threshold),
            ("hard_limit", ld.hard_limit),
            ("window_size", ld.window_size),
            ("max_tracked_threads", ld.max_tracked_threads),
            ("tool_freq_warn", ld.tool_freq_warn),
            ("tool_freq_hard_limit", ld.tool_freq_hard_limit),
        ] {
            at_least(&format!("loop_detection.{name}"), value, 1)?;
        }
        not_below_other(
            "loop_detection.hard_limit",
            ld.hard_limit,
            "warn_threshold",
            ld.warn_threshold,
        )?;
        not_below_other(
            "loop_detection.tool_freq_hard_limit",
            ld.tool_freq_hard_limit,
            "tool_freq_warn",
            ld.tool_freq_warn,
        )?;
        for (tool, o) in &ld.tool_freq_overrides {
            let prefix = format!("loop_detection.tool_freq_overrides.{tool}");
            at_least(&format!("{prefix}.warn"), o.warn, 1)?;
            at_least(&format!("{prefix}.hard_limit"), o.hard_limit, 1)?;
            not_below_other(
                &format!("{prefix}.hard_limit"),
                o.hard_limit,
                "warn",
                o.warn,
            )?;
        }
        Ok(())
    }

    fn check_sandbox(&self) -> Check {
        let sb = &self.sandbox;
        if sb.use_.trim().is_empty() {
            fail(
                "sandbox.use",
                format!(
                    "missing — set it to {} (or remove the sandbox section to get the local sandbox)",
                    crate::LOCAL_SANDBOX_USE
                ),
            )?;
        }
        above("sandbox.bash_command_timeout", sb.bash_command_timeout, 0.0)?;
        if let Some(replicas) = sb.replicas {
            above("sandbox.replicas", replicas, 0)?;
        }
        above("sandbox.acquire_timeout", sb.acquire_timeout, 0.0)?;
        at_least("sandbox.burst_limit", sb.burst_limit, 0)?;
        if let Some(skip) = sb.health_check_skip_seconds {
            at_least("sandbox.health_check_skip_seconds", skip, 0.0)?;
        }
        if let Some(ownership) = &sb.ownership {
            above(
                "sandbox.ownership.renewal_interval_seconds",
                ownership.renewal_interval_seconds,
                0.0,
            )?;
            at_least(
                "sandbox.ownership.ttl_multiplier",
                ownership.ttl_multiplier,
                2.0,
            )?;
        }
        Ok(())
    }

    fn check_tool_output(&self) -> Check {
        let dir = self.tool_output.storage_subdir.as_str();
        let single_segment = !dir.trim().is_empty()
            && dir != "."
            && dir != ".."
            && !dir.contains('/')
            && !dir.contains('\\')
            && !std::path::Path::new(dir).is_absolute()
            && !dir.contains(':');
        if !single_segment {
            fail(
                "tool_output.storage_subdir",
                format!("'{dir}' must be a single directory name (not empty, '.', '..', absolute, or containing / or \\)"),
            )?;
        }
        Ok(())
    }

    fn check_title(&self) -> Check {
        within("title.max_words", self.title.max_words, 1, 20)?;
        within("title.max_chars", self.title.max_chars, 10, 200)
    }

    fn check_memory(&self) -> Check {
        let m = &self.memory;
        within(
            "memory.shutdown_flush_timeout_seconds",
            m.shutdown_flush_timeout_seconds,
            1.0,
            300.0,
        )?;
        let class = m.manager_class.trim();
        let known = MEMORY_BACKENDS
            .iter()
            .any(|b| b.eq_ignore_ascii_case(class))
            || class.contains(':')
            || class.contains('.');
        if !known {
            fail(
                "memory.manager_class",
                format!(
                    "unknown memory backend '{class}' — use one of {} or a class path",
                    MEMORY_BACKENDS.join(", ")
                ),
            )?;
        }
        if !m.is_deermem() {
            return Ok(());
        }
        let value = serde_json::Value::Object(m.backend_config.clone());
        let dm: crate::DeerMemConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let key = if path == "." {
                "memory.backend_config".to_owned()
            } else {
                format!("memory.backend_config.{path}")
            };
            ValidationError::new(
                key,
                crate::load::explain_serde_error(&e.inner().to_string()),
            )
        })?;
        let p = "memory.backend_config";
        within(
            &format!("{p}.file_lock_timeout_seconds"),
            dm.file_lock_timeout_seconds,
            1.0,
            120.0,
        )?;
        within(
            &format!("{p}.debounce_seconds"),
            dm.debounce_seconds,
            1.0,
            300.0,
        )?;
        within(&format!("{p}.max_facts"), dm.max_facts, 10, 500)?;
        within(
            &format!("{p}.fact_confidence_threshold"),
            dm.fact_confidence_threshold,
            0.0,
            1.0,
        )?;
        within(
            &format!("{p}.max_injection_tokens"),
            dm.max_injection_tokens,
            100,
            8000,
        )?;
        within(
            &format!("{p}.guaranteed_token_budget"),
            dm.guaranteed_token_budget,
            50,
            2000,
        )?;
        within(
            &format!("{p}.staleness_age_days"),
            dm.staleness_age_days,
            30,
            365,
        )?;
        within(
            &format!("{p}.staleness_max_lifetime_multiplier"),
            dm.staleness_max_lifetime_multiplier,
            1.0,
            100.0,
        )?;
        // DeerMem's bounds for the staleness review and consolidation passes.
        for (key, value, min, max) in [
            (
                "staleness_min_candidates",
                dm.staleness_min_candidates,
                1,
                50,
            ),
            (
                "staleness_max_removals_per_cycle",
                dm.staleness_max_removals_per_cycle,
                1,
                50,
            ),
            (
                "staleness_max_extension_days",
                dm.staleness_max_extension_days,
                90,
                36_500,
            ),
            ("consolidation_min_facts", dm.consolidation_min_facts, 3, 30),
            (
                "consolidation_max_groups_per_cycle",
                dm.consolidation_max_groups_per_cycle,
                1,
                10,
            ),
            (
                "consolidation_max_sources",
                dm.consolidation_max_sources,
                2,
                20,
            ),
        ] {
            within(&format!("{p}.{key}"), value, min, max)?;
        }
        Ok(())
    }

    fn check_subagents(&self) -> Check {
        let s = &self.subagents;
        at_least("subagents.timeout_seconds", s.timeout_seconds, 1)?;
        if let Some(turns) = s.max_turns {
            at_least("subagents.max_turns", turns, 1)?;
        }
        within("subagents.max_total_per_run", s.max_total_per_run, 1, 50)?;
        if let Some(b) = &s.token_budget {
            budget("subagents.token_budget", b)?;
        }
        for (name, o) in &s.agents {
            let prefix = format!("subagents.agents.{name}");
            if let Some(t) = o.timeout_seconds {
                at_least(&format!("{prefix}.timeout_seconds"), t, 1)?;
            }
            if let Some(t) = o.max_turns {
                at_least(&format!("{prefix}.max_turns"), t, 1)?;
            }
            if o.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
                fail(
                    format!("{prefix}.model"),
                    "must not be empty — name a model, or use null to inherit",
                )?;
            }
            if let Some(b) = &o.token_budget {
                budget(&format!("{prefix}.token_budget"), b)?;
            }
        }
        for (name, c) in &s.custom_agents {
            let prefix = format!("subagents.custom_agents.{name}");
            for (field, value) in [
                ("description", &c.description),
                ("system_prompt", &c.system_prompt),
            ] {
                if value.trim().is_empty() {
                    fail(
                        format!("{prefix}.{field}"),
                        "is required — describe the subagent",
                    )?;
                }
            }
            at_least(&format!("{prefix}.max_turns"), c.max_turns, 1)?;
            at_least(&format!("{prefix}.timeout_seconds"), c.timeout_seconds, 1)?;
        }
        Ok(())
    }

    fn check_storage(&self) -> Check {
        let db = &self.database;
        plain_identifier("database.postgres_schema", &db.postgres_schema)?;
        if db.backend == DatabaseBackend::Postgres && db.postgres_url.trim().is_empty() {
            fail(
                "database.postgres_url",
                "required for backend postgres — set it (e.g. postgres_url: $DATABASE_URL)",
            )?;
        }
        above("database.pool_recycle", db.pool_recycle, 0.0)?;
        if let Some(t) = db.command_timeout {
            above("database.command_timeout", t, 0.0)?;
        }
        if let Some(cp) = &self.checkpointer {
            plain_identifier("checkpointer.postgres_schema", &cp.postgres_schema)?;
            if cp.kind == CheckpointerType::Postgres
                && cp
                    .connection_string
                    .as_deref()
                    .is_none_or(|c| c.trim().is_empty())
            {
                fail(
                    "checkpointer.connection_string",
                    "required for type postgres — set it to the database URL",
                )?;
            }
        }
        Ok(())
    }
}

/// The first entry of a section to take each `name`; later ones are warned about (DeerFlow
/// keeps the first).
#[derive(Default)]
struct FirstByName<'a>(HashMap<&'a str, usize>);

impl<'a> FirstByName<'a> {
    fn note(&mut self, section: &str, index: usize, name: &'a str, warnings: &mut Vec<String>) {
        match self.0.get(name) {
            Some(first) => warnings.push(format!(
                "{section}[{index}].name: '{name}' repeats {section}[{first}]; the first entry wins"
            )),
            None => {
                self.0.insert(name, index);
            }
        }
    }
}
