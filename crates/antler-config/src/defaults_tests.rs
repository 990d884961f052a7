#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::test_util::{load_ok, other_warnings};
use crate::*;

/// Every spec 60 default antler types, as (JSON pointer, value).
fn spec_defaults() -> Vec<(&'static str, Value)> {
    vec![
        ("/config_version", json!(0)),
        ("/log_level", json!("info")),
        ("/models", json!([])),
        ("/token_usage/enabled", json!(true)),
        ("/token_budget/enabled", json!(false)),
        ("/token_budget/max_tokens", json!(200000)),
        ("/token_budget/max_input_tokens", json!(null)),
        ("/token_budget/max_output_tokens", json!(null)),
        ("/token_budget/warn_threshold", json!(0.8)),
        ("/token_budget/hard_stop_threshold", json!(1.0)),
        ("/max_recursion_limit", json!(1000)),
        ("/tool_groups", json!([])),
        ("/tools", json!([])),
        ("/tool_search/enabled", json!(false)),
        ("/tool_search/auto_promote_top_k", json!(3)),
        ("/tool_output/enabled", json!(true)),
        ("/tool_output/externalize_min_chars", json!(12000)),
        ("/tool_output/preview_head_chars", json!(2000)),
        ("/tool_output/preview_tail_chars", json!(1000)),
        ("/tool_output/fallback_max_chars", json!(30000)),
        ("/tool_output/fallback_head_chars", json!(8000)),
        ("/tool_output/fallback_tail_chars", json!(3000)),
        ("/tool_output/storage_subdir", json!(".tool-results")),
        (
            "/tool_output/exempt_tools",
            json!(["read_file", "read_file_tool"]),
        ),
        ("/tool_output/tool_overrides", json!({})),
        ("/loop_detection/enabled", json!(true)),
        ("/loop_detection/warn_threshold", json!(3)),
        ("/loop_detection/hard_limit", json!(5)),
        ("/loop_detection/window_size", json!(20)),
        ("/loop_detection/max_tracked_threads", json!(100)),
        ("/loop_detection/tool_freq_warn", json!(30)),
        ("/loop_detection/tool_freq_hard_limit", json!(50)),
        ("/loop_detection/tool_freq_overrides", json!({})),
        ("/read_before_write/enabled", json!(true)),
        ("/safety_finish_reason/enabled", json!(true)),
        ("/safety_finish_reason/detectors", json!(null)),
        ("/tool_progress/enabled", json!(false)),
        ("/tool_progress/stagnation_threshold", json!(3)),
        ("/tool_progress/warn_escalation_count", json!(2)),
        ("/tool_progress/inject_assessment", json!(true)),
        ("/tool_progress/jaccard_similarity_threshold", json!(0.8)),
        ("/tool_progress/min_word_count_for_similarity", json!(10)),
        ("/tool_progress/max_tracked_threads", json!(100)),
        (
            "/tool_progress/exempt_tools",
            json!(["ask_clarification", "write_todos", "present_files", "task"]),
        ),
        ("/uploads/max_files", json!(10)),
        ("/uploads/max_file_size", json!(52428800)),
        ("/uploads/max_total_size", json!(104857600)),
        ("/uploads/auto_convert_documents", json!(false)),
        ("/uploads/pdf_converter", json!("auto")),
        ("/sandbox/use", json!(LOCAL_SANDBOX_USE)),
        ("/sandbox/allow_host_bash", json!(false)),
        ("/sandbox/mounts", json!([])),
        ("/sandbox/bash_output_max_chars", json!(20000)),
        ("/sandbox/read_file_output_max_chars", json!(50000)),
        ("/sandbox/ls_output_max_chars", json!(20000)),
        ("/sandbox/bash_command_timeout", json!(600.0)),
        ("/sandbox/confine", json!("auto")),
        ("/sandbox/network", json!("allow")),
        (
            "/sandbox/limits",
            json!({"memory": null, "processes": 1024, "file_size": null}),
        ),
        ("/sandbox/overflow_policy", json!("wait")),
        ("/sandbox/acquire_timeout", json!(30.0)),
        ("/sandbox/burst_limit", json!(0)),
        ("/sandbox/environment", json!({})),
        (
            "/skills/use",
            json!("deerflow.skills.storage.local_skill_storage:LocalSkillStorage"),
        ),
        ("/skills/path", json!(null)),
        ("/skills/container_path", json!("/mnt/skills")),
        ("/skills/deferred_discovery", json!(false)),
        ("/skill_evolution/enabled", json!(false)),
        ("/skill_evolution/moderation_model_name", json!(null)),
        ("/skill_evolution/security_fail_closed", json!(true)),
        ("/skill_scan/enabled", json!(true)),
        ("/title/enabled", json!(true)),
        ("/title/max_words", json!(6)),
        ("/title/max_chars", json!(60)),
        ("/title/model_name", json!(null)),
        ("/summarization/enabled", json!(false)),
        ("/summarization/model_name", json!(null)),
        ("/summarization/trigger", json!([])),
        (
            "/summarization/keep",
            json!({"type": "messages", "value": 20.0}),
        ),
        ("/summarization/trim_tokens_to_summarize", json!(4000)),
        ("/summarization/summary_prompt", json!(null)),
        (
            "/summarization/skill_file_read_tool_names",
            json!(["read_file", "read", "view", "cat"]),
        ),
        ("/summarization/preserve_recent_skill_count", json!(5)),
        ("/summarization/preserve_recent_skill_tokens", json!(25000)),
        (
            "/summarization/preserve_recent_skill_tokens_per_skill",
            json!(5000),
        ),
        ("/memory/enabled", json!(true)),
        ("/memory/mode", json!("middleware")),
        ("/memory/injection_enabled", json!(true)),
        ("/memory/shutdown_flush_timeout_seconds", json!(30.0)),
        ("/memory/manager_class", json!("deermem")),
        ("/memory/backend_config", json!({})),
        ("/subagents/enabled", json!(false)),
        ("/subagents/timeout_seconds", json!(1800)),
        ("/subagents/max_turns", json!(null)),
        ("/subagents/max_total_per_run", json!(6)),
        ("/subagents/token_budget", json!(null)),
        ("/subagents/agents", json!({})),
        ("/subagents/custom_agents", json!({})),
        ("/guardrails/enabled", json!(false)),
        ("/guardrails/fail_closed", json!(true)),
        ("/guardrails/passport", json!(null)),
        ("/guardrails/provider", json!(null)),
        ("/authorization/enabled", json!(false)),
        ("/run_events/backend", json!("memory")),
        ("/run_events/max_trace_content", json!(10240)),
        ("/run_events/track_token_usage", json!(true)),
        ("/circuit_breaker/failure_threshold", json!(5)),
        ("/circuit_breaker/recovery_timeout_sec", json!(60.0)),
        ("/llm_call/max_concurrent_calls", json!(0)),
        ("/llm_call/retry_max_attempts", json!(3)),
        ("/llm_call/retry_base_delay_ms", json!(1000)),
        ("/llm_call/retry_cap_delay_ms", json!(8000)),
        ("/llm_call/burst_retry_base_delay_ms", json!(5000)),
        ("/llm_call/max_retry_after", json!(60.0)),
        ("/database/sqlite_dir", json!(null)),
        ("/database/postgres_url", json!("")),
        ("/database/postgres_schema", json!("")),
        ("/database/checkpoint_channel_mode", json!("full")),
        ("/database/checkpoint_delta/snapshot_frequency", json!(10)),
        (
            "/database/checkpoint_graph_cache/accessor_graph_max",
            json!(64),
        ),
        ("/database/echo_sql", json!(false)),
        ("/database/pool_size", json!(5)),
        ("/database/pool_recycle", json!(300.0)),
        ("/database/command_timeout", json!(30.0)),
    ]
}

fn check_table(label: &str, config: &Config) {
    let value = serde_json::to_value(config).unwrap();
    for (pointer, expected) in spec_defaults() {
        let actual = value.pointer(pointer).unwrap_or(&Value::Null);
        assert_eq!(actual, &expected, "{label}: {pointer}");
    }
}

#[test]
fn defaults_match_spec_when_sections_are_absent() {
    check_table("Config::default", &Config::default());
    check_table("empty file", &load_ok("").config);
}

#[test]
fn defaults_match_spec_when_sections_are_empty_mappings() {
    // Every section present but empty: serde's field defaults must agree with Default impls.
    let yaml = "
token_usage: {}
token_budget: {}
tool_search: {}
tool_output: {}
loop_detection: {}
read_before_write: {}
safety_finish_reason: {}
tool_progress: {}
uploads: {}
skills: {}
skill_evolution: {}
skill_scan: {}
title: {}
summarization: {}
memory: {}
subagents: {}
guardrails: {}
authorization: {}
run_events: {}
circuit_breaker: {}
llm_call: {}
database: {backend: sqlite}
";
    let loaded = load_ok(yaml);
    assert_eq!(other_warnings(&loaded), Vec::<String>::new());
    check_table("empty sections", &loaded.config);
}

#[test]
fn null_sections_take_their_defaults() {
    let yaml = "
models:
tools:
tool_groups:
token_budget:
loop_detection:
summarization:
memory:
subagents:
title:
database:
uploads:
max_recursion_limit:
log_level:
stream_bridge:
checkpointer:
";
    let loaded = load_ok(yaml);
    assert_eq!(loaded.config, Config::default());
    // models: null still warns that no model is configured.
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("no models configured"));
}

#[test]
fn database_defaults_depend_on_presence() {
    // Absent (or null) → sqlite, as DeerFlow's loader fills in.
    assert_eq!(Config::default().database.backend, DatabaseBackend::Sqlite);
    assert_eq!(
        load_ok("database:\n").config.database.backend,
        DatabaseBackend::Sqlite
    );
    // Present without backend → DeerFlow's code default, memory.
    assert_eq!(
        load_ok("database:\n  echo_sql: true\n")
            .config
            .database
            .backend,
        DatabaseBackend::Memory
    );
}

#[test]
fn subagent_token_budget_tracks_summarization_only_by_default() {
    let off = Config::default();
    assert_eq!(off.subagent_token_budget().max_tokens, 2_000_000);
    assert!(off.subagent_token_budget().enabled);
    assert_eq!(off.subagent_token_budget().warn_threshold, 0.7);

    let on = load_ok("summarization:\n  enabled: true\n").config;
    assert_eq!(on.subagent_token_budget().max_tokens, 1_000_000);

    let explicit = load_ok(
        "summarization:\n  enabled: true\nsubagents:\n  token_budget:\n    max_tokens: 5000\n",
    )
    .config;
    let budget = explicit.subagent_token_budget();
    assert_eq!(budget.max_tokens, 5000);
    // An explicit section uses the §5 schema defaults for the rest.
    assert!(!budget.enabled);
    assert_eq!(budget.warn_threshold, 0.8);
}

#[test]
fn recursion_limit_clamp() {
    let mut config = Config::default();
    assert_eq!(config.clamp_recursion_limit(None), 100);
    assert_eq!(config.clamp_recursion_limit(Some(0)), 100);
    assert_eq!(config.clamp_recursion_limit(Some(-5)), 100);
    assert_eq!(config.clamp_recursion_limit(Some(1)), 1);
    assert_eq!(config.clamp_recursion_limit(Some(250)), 250);
    assert_eq!(config.clamp_recursion_limit(Some(5000)), 1000);
    config.max_recursion_limit = 50;
    assert_eq!(config.clamp_recursion_limit(Some(80)), 50);
    assert_eq!(config.clamp_recursion_limit(None), 100);
}

#[test]
fn lookups_first_match_wins() {
    let yaml = "
models:
  - {name: a, use: 'langchain_openai:ChatOpenAI', model: m1}
  - {name: b, provider: anthropic, model: m2}
  - {name: a, use: 'langchain_openai:ChatOpenAI', model: m3}
tools:
  - {name: ls, group: 'file:read', use: 'deerflow.sandbox.tools:ls_tool'}
  - {name: ls, group: other, use: 'x:y'}
";
    let loaded = load_ok(yaml);
    let config = &loaded.config;
    assert_eq!(config.default_model().unwrap().model, "m1");
    assert_eq!(config.model("a").unwrap().model, "m1");
    assert_eq!(config.model("b").unwrap().model, "m2");
    assert!(config.model("zzz").is_none());
    assert_eq!(config.tool("ls").unwrap().group, "file:read");
    assert!(config.tool("bash").is_none());
    assert_eq!(
        loaded.warnings,
        vec![
            "config.yaml: models[2].name: 'a' repeats models[0]; the first entry wins".to_owned(),
            "config.yaml: tools[1].name: 'ls' repeats tools[0]; the first entry wins".to_owned(),
        ]
    );
}

#[test]
fn sandbox_is_local_and_bash_detection() {
    let mut sandbox = SandboxConfig::default();
    assert!(sandbox.is_local());
    sandbox.use_ = LOCAL_SANDBOX_USE_LONG.to_owned();
    assert!(sandbox.is_local());
    sandbox.use_ = "deerflow.community.aio_sandbox:AioSandboxProvider".to_owned();
    assert!(!sandbox.is_local());

    assert_eq!(
        SandboxConfig::default().bash_timeout(),
        std::time::Duration::from_secs(600)
    );

    let tools = ToolConfig::sandbox_defaults();
    let bash: Vec<_> = tools
        .iter()
        .filter(|t| t.is_bash())
        .map(|t| &t.name)
        .collect();
    assert_eq!(bash, vec!["bash"]);
    assert!(ToolConfig::new("shell", "custom", BASH_TOOL_USE).is_bash());
}

#[test]
fn tool_search_top_k_is_clamped() {
    for (raw, clamped) in [(0, 1), (-3, 1), (1, 1), (4, 4), (5, 5), (9, 5)] {
        let config = load_ok(&format!("tool_search:\n  auto_promote_top_k: {raw}\n")).config;
        assert_eq!(config.tool_search.auto_promote_top_k, clamped, "{raw}");
    }
}

#[test]
fn summarization_trigger_single_or_list() {
    let single = load_ok("summarization:\n  trigger: {type: tokens, value: 32000}\n").config;
    assert_eq!(
        single.summarization.trigger,
        vec![ContextSize::tokens(32000)]
    );

    let list = load_ok(
        "summarization:\n  trigger:\n    - {type: messages, value: 50}\n    - {type: fraction, value: 0.8}\n",
    )
    .config;
    assert_eq!(
        list.summarization.trigger,
        vec![ContextSize::messages(50), ContextSize::Fraction(0.8)]
    );
    let none =
        load_ok("summarization:\n  trigger: null\n  trim_tokens_to_summarize: null\n").config;
    assert!(none.summarization.trigger.is_empty());
    assert_eq!(none.summarization.trim_tokens_to_summarize, None);
}

#[test]
fn config_serializes_back_to_yaml_that_loads_to_the_same_value() {
    let original = load_ok(
        "models:\n  - {name: a, use: 'langchain_openai:ChatOpenAI', model: m, custom_flag: 1}\nchannels: {slack: {enabled: false}}\n",
    )
    .config;
    let yaml = serde_saphyr::to_string(&original).unwrap();
    let reloaded = crate::test_util::load(&yaml).unwrap().config;
    assert_eq!(reloaded, original);
}
