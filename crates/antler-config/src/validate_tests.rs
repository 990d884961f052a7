#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;

use crate::test_util::{load_err, load_ok};

/// (YAML, expected error line) for every §26 rule antler checks after deserialization.
fn cases() -> Vec<(&'static str, &'static str)> {
    vec![
        // §26.2 token budgets
        ("token_budget: {max_tokens: 999}", "token_budget.max_tokens: must be >= 1000, got 999"),
        ("token_budget: {max_input_tokens: 0}", "token_budget.max_input_tokens: must be >= 1, got 0"),
        ("token_budget: {max_output_tokens: 0}", "token_budget.max_output_tokens: must be >= 1, got 0"),
        ("token_budget: {warn_threshold: 1.5}", "token_budget.warn_threshold: must be between 0 and 1, got 1.5"),
        ("token_budget: {hard_stop_threshold: -0.1}", "token_budget.hard_stop_threshold: must be between 0 and 1, got -0.1"),
        (
            "token_budget: {warn_threshold: 0.9, hard_stop_threshold: 0.5}",
            "token_budget.hard_stop_threshold: must be >= warn_threshold (0.9), got 0.5",
        ),
        (
            "subagents: {token_budget: {max_tokens: 10}}",
            "subagents.token_budget.max_tokens: must be >= 1000, got 10",
        ),
        (
            "subagents: {agents: {bash: {token_budget: {warn_threshold: 0.9, hard_stop_threshold: 0.8}}}}",
            "subagents.agents.bash.token_budget.hard_stop_threshold: must be >= warn_threshold (0.9), got 0.8",
        ),
        // §26.3 loop detection
        ("loop_detection: {warn_threshold: 0}", "loop_detection.warn_threshold: must be >= 1, got 0"),
        ("loop_detection: {window_size: 0}", "loop_detection.window_size: must be >= 1, got 0"),
        ("loop_detection: {max_tracked_threads: 0}", "loop_detection.max_tracked_threads: must be >= 1, got 0"),
        ("loop_detection: {hard_limit: 2}", "loop_detection.hard_limit: must be >= warn_threshold (3), got 2"),
        (
            "loop_detection: {tool_freq_warn: 60}",
            "loop_detection.tool_freq_hard_limit: must be >= tool_freq_warn (60), got 50",
        ),
        (
            "loop_detection: {tool_freq_overrides: {bash: {warn: 10, hard_limit: 5}}}",
            "loop_detection.tool_freq_overrides.bash.hard_limit: must be >= warn (10), got 5",
        ),
        (
            "loop_detection: {tool_freq_overrides: {bash: {warn: 0, hard_limit: 5}}}",
            "loop_detection.tool_freq_overrides.bash.warn: must be >= 1, got 0",
        ),
        // §26.4
        ("max_recursion_limit: 0", "max_recursion_limit: must be >= 1, got 0"),
        (
            "models: [{name: a, use: 'langchain_openai:ChatOpenAI', model: m, context_window: 0}]",
            "models[0].context_window: must be > 0, got 0",
        ),
        (
            "models: [{name: a, use: 'langchain_openai:ChatOpenAI', model: m, call_timeout: 0}]",
            "models[0].call_timeout: must be > 0, got 0",
        ),
        ("llm_call: {max_retry_after: -1}", "llm_call.max_retry_after: must be >= 0, got -1"),
        // §26.5 sandbox (the section from the helper is replaced by these)
        ("sandbox: {use: 'x:y', bash_command_timeout: 0}", "sandbox.bash_command_timeout: must be > 0, got 0"),
        ("sandbox: {use: 'x:y', bash_command_timeout: .nan}", "sandbox.bash_command_timeout: must be > 0, got NaN"),
        ("title: {max_words: 3}\ntoken_budget: {warn_threshold: .nan}", "token_budget.warn_threshold: must be between 0 and 1, got NaN"),
        ("sandbox: {use: 'x:y', replicas: 0}", "sandbox.replicas: must be > 0, got 0"),
        ("sandbox: {use: 'x:y', acquire_timeout: 0}", "sandbox.acquire_timeout: must be > 0, got 0"),
        ("sandbox: {use: 'x:y', burst_limit: -1}", "sandbox.burst_limit: must be >= 0, got -1"),
        (
            "sandbox: {use: 'x:y', health_check_skip_seconds: -1}",
            "sandbox.health_check_skip_seconds: must be >= 0, got -1",
        ),
        (
            "sandbox: {use: 'x:y', ownership: {renewal_interval_seconds: 0}}",
            "sandbox.ownership.renewal_interval_seconds: must be > 0, got 0",
        ),
        (
            "sandbox: {use: 'x:y', ownership: {ttl_multiplier: 1.5}}",
            "sandbox.ownership.ttl_multiplier: must be >= 2, got 1.5",
        ),
        // §26.6 tool_output
        (
            "tool_output: {storage_subdir: 'a/b'}",
            "tool_output.storage_subdir: 'a/b' must be a single directory name (not empty, '.', '..', absolute, or containing / or \\)",
        ),
        (
            "tool_output: {storage_subdir: '..'}",
            "tool_output.storage_subdir: '..' must be a single directory name (not empty, '.', '..', absolute, or containing / or \\)",
        ),
        (
            "tool_output: {storage_subdir: ''}",
            "tool_output.storage_subdir: '' must be a single directory name (not empty, '.', '..', absolute, or containing / or \\)",
        ),
        // §26.8 title
        ("title: {max_words: 0}", "title.max_words: must be between 1 and 20, got 0"),
        ("title: {max_words: 21}", "title.max_words: must be between 1 and 20, got 21"),
        ("title: {max_chars: 9}", "title.max_chars: must be between 10 and 200, got 9"),
        ("title: {max_chars: 201}", "title.max_chars: must be between 10 and 200, got 201"),
        // §26.9 memory
        (
            "memory: {shutdown_flush_timeout_seconds: 0.5}",
            "memory.shutdown_flush_timeout_seconds: must be between 1 and 300, got 0.5",
        ),
        (
            "memory: {manager_class: redis}",
            "memory.manager_class: unknown memory backend 'redis' — use one of deermem, mem0, noop, openviking, honcho or a class path",
        ),
        (
            "memory: {backend_config: {max_facts: 5}}",
            "memory.backend_config.max_facts: must be between 10 and 500, got 5",
        ),
        (
            "memory: {debounce_seconds: 0}",
            "memory.backend_config.debounce_seconds: must be between 1 and 300, got 0",
        ),
        (
            "memory: {backend_config: {file_lock_timeout_seconds: 121}}",
            "memory.backend_config.file_lock_timeout_seconds: must be between 1 and 120, got 121",
        ),
        (
            "memory: {backend_config: {fact_confidence_threshold: 2}}",
            "memory.backend_config.fact_confidence_threshold: must be between 0 and 1, got 2",
        ),
        (
            "memory: {backend_config: {max_injection_tokens: 50}}",
            "memory.backend_config.max_injection_tokens: must be between 100 and 8000, got 50",
        ),
        (
            "memory: {backend_config: {guaranteed_token_budget: 10}}",
            "memory.backend_config.guaranteed_token_budget: must be between 50 and 2000, got 10",
        ),
        (
            "memory: {backend_config: {staleness_age_days: 10}}",
            "memory.backend_config.staleness_age_days: must be between 30 and 365, got 10",
        ),
        (
            "memory: {backend_config: {staleness_max_lifetime_multiplier: 0.5}}",
            "memory.backend_config.staleness_max_lifetime_multiplier: must be between 1 and 100, got 0.5",
        ),
        (
            "memory: {backend_config: {staleness_min_candidates: 0}}",
            "memory.backend_config.staleness_min_candidates: must be between 1 and 50, got 0",
        ),
        (
            "memory: {backend_config: {staleness_max_removals_per_cycle: 51}}",
            "memory.backend_config.staleness_max_removals_per_cycle: must be between 1 and 50, got 51",
        ),
        (
            "memory: {staleness_max_extension_days: 30}",
            "memory.backend_config.staleness_max_extension_days: must be between 90 and 36500, got 30",
        ),
        (
            "memory: {backend_config: {consolidation_min_facts: 2}}",
            "memory.backend_config.consolidation_min_facts: must be between 3 and 30, got 2",
        ),
        (
            "memory: {backend_config: {consolidation_max_groups_per_cycle: 11}}",
            "memory.backend_config.consolidation_max_groups_per_cycle: must be between 1 and 10, got 11",
        ),
        (
            "memory: {backend_config: {consolidation_max_sources: 1}}",
            "memory.backend_config.consolidation_max_sources: must be between 2 and 20, got 1",
        ),
        (
            "memory: {backend_config: {staleness_protected_categories: correction}}",
            "memory.backend_config.staleness_protected_categories: invalid type: string \"correction\", expected a sequence — change the value to the expected type",
        ),
        (
            "memory: {backend_config: {max_facts: many}}",
            "memory.backend_config.max_facts: invalid type: string \"many\", expected a non-negative integer — change the value to the expected type",
        ),
        // §26.10 subagents
        ("subagents: {timeout_seconds: 0}", "subagents.timeout_seconds: must be >= 1, got 0"),
        ("subagents: {max_turns: 0}", "subagents.max_turns: must be >= 1, got 0"),
        ("subagents: {max_total_per_run: 0}", "subagents.max_total_per_run: must be between 1 and 50, got 0"),
        ("subagents: {max_total_per_run: 51}", "subagents.max_total_per_run: must be between 1 and 50, got 51"),
        (
            "subagents: {agents: {general-purpose: {timeout_seconds: 0}}}",
            "subagents.agents.general-purpose.timeout_seconds: must be >= 1, got 0",
        ),
        (
            "subagents: {agents: {bash: {max_turns: 0}}}",
            "subagents.agents.bash.max_turns: must be >= 1, got 0",
        ),
        (
            "subagents: {agents: {bash: {model: ' '}}}",
            "subagents.agents.bash.model: must not be empty — name a model, or use null to inherit",
        ),
        (
            "subagents: {custom_agents: {rev: {system_prompt: p}}}",
            "subagents.custom_agents.rev.description: is required — describe the subagent",
        ),
        (
            "subagents: {custom_agents: {rev: {description: d}}}",
            "subagents.custom_agents.rev.system_prompt: is required — describe the subagent",
        ),
        (
            "subagents: {custom_agents: {rev: {description: d, system_prompt: p, max_turns: 0}}}",
            "subagents.custom_agents.rev.max_turns: must be >= 1, got 0",
        ),
        // §26.13 postgres schema identifiers (+ required URLs)
        (
            "database: {backend: postgres, postgres_url: 'postgres://x', postgres_schema: 'my-schema'}",
            "database.postgres_schema: 'my-schema' is not a plain identifier — use letters, digits and _ only",
        ),
        (
            "checkpointer: {type: postgres, connection_string: 'postgres://x', postgres_schema: '1abc'}",
            "checkpointer.postgres_schema: '1abc' is not a plain identifier — use letters, digits and _ only",
        ),
        (
            "database: {backend: postgres}",
            "database.postgres_url: required for backend postgres — set it (e.g. postgres_url: $DATABASE_URL)",
        ),
        (
            "checkpointer: {type: postgres}",
            "checkpointer.connection_string: required for type postgres — set it to the database URL",
        ),
        ("database: {pool_recycle: 0}", "database.pool_recycle: must be > 0, got 0"),
        // safety_finish_reason detectors
        (
            "safety_finish_reason: {detectors: []}",
            "safety_finish_reason.detectors: an empty list is not allowed — use null for the built-in detectors, or enabled: false to turn the check off",
        ),
    ]
}

#[test]
fn every_validation_rule_reports_file_key_and_fix() {
    for (yaml, expected) in cases() {
        // `sandbox:` cases bring their own section (a second one would be a duplicate key).
        let err = if yaml.starts_with("sandbox:") {
            crate::test_util::load(yaml).unwrap_err().to_string()
        } else {
            load_err(yaml)
        };
        assert_eq!(err, format!("config.yaml: {expected}"), "for {yaml}");
        assert!(!err.contains('\n'));
    }
}

#[test]
fn valid_edge_values_pass() {
    for yaml in [
        "token_budget: {max_tokens: 1000, warn_threshold: 1.0, hard_stop_threshold: 1.0}",
        "loop_detection: {warn_threshold: 5, hard_limit: 5, tool_freq_warn: 1, tool_freq_hard_limit: 1}",
        "title: {max_words: 20, max_chars: 10}",
        "memory: {shutdown_flush_timeout_seconds: 300, manager_class: 'my.pkg:Memory'}",
        "memory: {manager_class: noop, backend_config: {anything: [1]}}",
        "subagents: {max_total_per_run: 50, max_turns: 1}",
        "database: {backend: postgres, postgres_url: 'postgres://x', postgres_schema: app_1}",
        "checkpointer: {type: sqlite}",
        "tool_output: {storage_subdir: results, externalize_min_chars: 0}",
        "max_recursion_limit: 1",
        "safety_finish_reason: {detectors: [{use: 'my.mod:Detector'}]}",
    ] {
        let loaded = load_ok(yaml);
        assert!(
            loaded.warnings.iter().all(|w| w.contains("no models configured")),
            "{yaml}: {:?}",
            loaded.warnings
        );
    }
}
