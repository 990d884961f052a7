#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::test_util::{
    env_of, load, load_env, load_err, load_ok, other_warnings, warnings_of, SANDBOX,
};
use crate::*;

const MODEL: &str =
    "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: gpt-4o-mini\n";

#[test]
fn env_substitution_walks_nested_lists_and_maps() {
    let yaml = format!(
        "{SANDBOX}
models:
  - name: main
    use: langchain_openai:ChatOpenAI
    model: $MODEL_ID
    api_key: $OPENAI_API_KEY
    extra_body:
      nested:
        list: [$A, literal, {{deep: $B}}]
    headers_note: 'not $A: only whole strings starting with $'
sandbox_env_check: 1
channels:
  slack: {{token: $B}}
"
    );
    let loaded = load_env(
        &yaml,
        &[
            ("MODEL_ID", "gpt-x"),
            ("OPENAI_API_KEY", "sk-123"),
            ("A", "alpha"),
            ("B", "beta"),
        ],
    )
    .unwrap();
    let model = &loaded.config.models[0];
    assert_eq!(model.model, "gpt-x");
    assert_eq!(model.api_key.as_deref(), Some("sk-123"));
    assert_eq!(
        model.extra_body.as_ref().unwrap()["nested"],
        json!({"list": ["alpha", "literal", {"deep": "beta"}]})
    );
    assert_eq!(
        model.extra["headers_note"],
        json!("not $A: only whole strings starting with $")
    );
    assert_eq!(
        loaded.config.channels,
        Some(json!({"slack": {"token": "beta"}}))
    );
}

#[test]
fn missing_env_var_names_the_key_path() {
    let err = load(&format!(
        "{SANDBOX}models:\n  - name: a\n    use: langchain_openai:ChatOpenAI\n    model: m\n  - name: b\n    use: langchain_openai:ChatOpenAI\n    model: m\n    api_key: $OPENAI_API_KEY\n"
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config.yaml: models[1].api_key: environment variable OPENAI_API_KEY is not set — export it or put the value in the file"
    );
    let nested =
        load("tools:\n  - name: web\n    group: web\n    use: x:y\n    keys: [ok, $NOPE]\n")
            .unwrap_err();
    assert_eq!(
        nested.to_string(),
        "config.yaml: tools[0].keys[1]: environment variable NOPE is not set — export it or put the value in the file"
    );
}

#[test]
fn unknown_keys_warn_with_their_path() {
    let loaded = load_ok(&format!(
        "{MODEL}loop_detection:\n  warn_treshold: 4\ntitle:\n  enabled: true\n  colour: red\nmystery_section: {{a: 1}}\nsubagents:\n  agents:\n    bash:\n      max_turnz: 3\n"
    ));
    assert_eq!(
        loaded.warnings,
        vec![
            "unknown key 'loop_detection.warn_treshold' in config.yaml (ignored)".to_owned(),
            "unknown key 'title.colour' in config.yaml (ignored)".to_owned(),
            "unknown key 'subagents.agents.bash.max_turnz' in config.yaml (ignored)".to_owned(),
            "unknown key 'mystery_section' in config.yaml (ignored)".to_owned(),
        ]
    );
    // Unknown top-level keys are kept.
    assert_eq!(loaded.config.extra["mystery_section"], json!({"a": 1}));
}

#[test]
fn free_form_sections_do_not_warn() {
    let loaded = load_ok(&format!(
        "{MODEL}    num_predict: 512
    enable_prompt_caching: true
tools:
  - name: web_search
    group: web
    use: deerflow.community.tavily.tools:web_search_tool
    max_results: 5
    api_key: abc
tool_groups:
  - name: web
    description: internet
sandbox_extra_check: null
uploads:
  max_files: 3
  something_new: true
channels: {{feishu: {{app_id: x}}}}
scheduler: {{enabled: false}}
extensions: {{middlewares: []}}
logging: {{enhance: {{enabled: true}}}}
acp_agents: {{codex: {{command: codex}}}}
memory:
  backend_config: {{custom_knob: 1}}
guardrails:
  provider:
    use: deerflow.guardrails.builtin:AllowlistProvider
    config: {{allowed_tools: [ls]}}
authorization: {{enabled: false, default_role: user}}
"
    ));
    assert_eq!(
        loaded.warnings,
        vec!["unknown key 'sandbox_extra_check' in config.yaml (ignored)".to_owned()]
    );
    let config = &loaded.config;
    assert_eq!(config.models[0].extra["num_predict"], json!(512));
    assert_eq!(config.tools[0].extra["max_results"], json!(5));
    assert_eq!(
        config.tool_groups[0].extra["description"],
        json!("internet")
    );
    assert_eq!(config.uploads.max_files, 3);
    assert_eq!(config.uploads.extra["something_new"], json!(true));
    assert_eq!(config.authorization.extra["default_role"], json!("user"));

    // Sandbox provider extras are kept without warnings.
    let loaded = load("sandbox:\n  use: deerflow.community.e2b_sandbox:E2BSandboxProvider\n  template: code-interpreter-v1\n  api_key: k\n").unwrap();
    assert!(loaded.warnings.iter().all(|w| !w.contains("unknown key")));
    assert_eq!(
        loaded.config.sandbox.extra["template"],
        json!("code-interpreter-v1")
    );
    assert!(!loaded.config.sandbox.is_local());
}

#[test]
fn type_errors_name_the_key_path() {
    assert_eq!(
        load_err("max_recursion_limit: \"abc\"\n"),
        "config.yaml: max_recursion_limit: invalid type: string \"abc\", expected a non-negative integer — change the value to the expected type"
    );
    assert_eq!(
        load_err(&format!("{MODEL}    context_window: lots\n")),
        "config.yaml: models[0].context_window: invalid type: string \"lots\", expected a non-negative integer — change the value to the expected type"
    );
    assert_eq!(
        load_err("models:\n  - use: langchain_openai:ChatOpenAI\n    model: m\n"),
        "config.yaml: models[0]: missing field `name` — add it"
    );
    assert_eq!(
        load_err("memory:\n  mode: passive\n"),
        "config.yaml: memory.mode: unknown variant `passive`, expected `middleware` or `tool` — use one of the listed values"
    );
    assert_eq!(
        load_err("summarization:\n  trigger:\n    - {type: tokens, value: 1}\n    - {type: words, value: 3}\n"),
        "config.yaml: summarization.trigger[1].type: unknown variant `words`, expected one of `tokens`, `messages`, `fraction` — use one of the listed values"
    );
    assert_eq!(
        load_err("loop_detection:\n  window_size: -1\n"),
        "config.yaml: loop_detection.window_size: invalid value: integer `-1`, expected a non-negative integer — fix the value"
    );
    assert_eq!(
        load_err("tools:\n  - name: ls\n    use: deerflow.sandbox.tools:ls_tool\n"),
        "config.yaml: tools[0]: missing field `group` — add it"
    );
}

#[test]
fn enum_sections_reject_unknown_values() {
    for (yaml, key) in [
        ("database:\n  backend: mysql\n", "database.backend"),
        ("checkpointer:\n  type: redis\n", "checkpointer.type"),
        ("run_events:\n  backend: kafka\n", "run_events.backend"),
        ("stream_bridge:\n  type: nats\n", "stream_bridge.type"),
        (
            "database:\n  checkpoint_channel_mode: partial\n",
            "database.checkpoint_channel_mode",
        ),
        (
            "sandbox:\n  use: x:y\n  overflow_policy: drop\n",
            "sandbox.overflow_policy",
        ),
        (
            "sandbox:\n  use: x:y\n  ownership: {type: etcd}\n",
            "sandbox.ownership.type",
        ),
        (
            "sandbox:\n  use: x:y\n  confine: strict\n",
            "sandbox.confine",
        ),
    ] {
        let err = load(yaml).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("config.yaml: {key}: unknown variant")),
            "{err}"
        );
    }
    // checkpointer needs its type.
    assert_eq!(
        load_err("checkpointer:\n  connection_string: x.db\n"),
        "config.yaml: checkpointer: missing field `type` — add it"
    );
}

#[test]
fn uploads_are_lenient() {
    let loaded = load_ok(
        "uploads:\n  max_file_count: 4\n  max_single_file_size: '1024'\n  max_total_size: -1\n  auto_convert_documents: 'Yes'\n  pdf_converter: MarkItDown\n",
    );
    let uploads = &loaded.config.uploads;
    assert_eq!(uploads.max_files, 4);
    assert_eq!(uploads.max_file_size, 1024);
    assert_eq!(uploads.max_total_size, 104_857_600);
    assert!(uploads.auto_convert_documents);
    assert_eq!(uploads.pdf_converter, PdfConverter::Markitdown);
    assert_eq!(
        other_warnings(&loaded),
        vec!["config.yaml: uploads.max_total_size: expected a positive integer, got -1; using 104857600".to_owned()]
    );
    let loaded = load_ok("uploads:\n  pdf_converter: tesseract\n  auto_convert_documents: maybe\n");
    assert_eq!(loaded.config.uploads.pdf_converter, PdfConverter::Auto);
    assert!(!loaded.config.uploads.auto_convert_documents);
    assert_eq!(other_warnings(&loaded).len(), 1);
}

#[test]
fn yaml_syntax_error_has_line_and_column() {
    let err = load("models:\n  - name: a\n   bad: [1, 2\n").unwrap_err();
    let ConfigError::Yaml { line, column, .. } = &err else {
        panic!("expected a YAML error, got {err:?}");
    };
    assert_eq!((*line, *column), (3, 4));
    let text = err.to_string();
    assert_yaml_error_at(&text, "3:4");
    assert!(!text.contains("at line 3 column 4"), "{text}");
    assert!(!text.contains("at line 3, column 4"), "{text}");
    assert!(!text.contains('\n'));
}

/// `text` is an invalid-YAML error at `config.yaml:{line_col}`, telling to fix the syntax.
fn assert_yaml_error_at(text: &str, line_col: &str) {
    assert!(
        text.starts_with(&format!("config.yaml:{line_col}: invalid YAML: ")),
        "{text}"
    );
    assert!(
        text.ends_with(" — fix the syntax at that position"),
        "{text}"
    );
}

#[test]
fn bad_merge_key_is_a_yaml_error_at_the_merged_value() {
    // serde_yaml had no position for this one; serde-saphyr points at the anchored scalar.
    let err = load("a: &a 1\nb:\n  <<: *a\n").unwrap_err();
    let text = err.to_string();
    assert_yaml_error_at(&text, "1:7");
    assert!(!text.contains("at line 1, column 7"), "{text}");
}

#[test]
fn top_level_must_be_a_mapping() {
    assert_eq!(
        load("- a\n- b\n").unwrap_err().to_string(),
        "config.yaml: top level: the file must be a mapping of sections (models:, tools:, sandbox:, …)"
    );
}

#[test]
fn yaml_merge_keys_are_applied() {
    let loaded = load_ok(
        "x-base: &base\n  use: langchain_openai:ChatOpenAI\n  api_key: k\nmodels:\n  - <<: *base\n    name: a\n    model: m\n",
    );
    assert_eq!(loaded.config.models[0].api_key.as_deref(), Some("k"));
}

#[test]
fn api_base_is_an_alias_of_base_url() {
    let loaded = load_ok(
        "models:\n  - {name: d, use: 'langchain_deepseek:ChatDeepSeek', model: deepseek-chat, api_base: 'https://api.deepseek.com/v1'}\n",
    );
    assert_eq!(
        loaded.config.models[0].base_url.as_deref(),
        Some("https://api.deepseek.com/v1")
    );
    assert_eq!(loaded.warnings, Vec::<String>::new());

    let both = load_ok(
        "models:\n  - {name: d, use: 'langchain_openai:ChatOpenAI', model: m, base_url: 'http://a/v1', api_base: 'http://b/v1', timeout: 5, default_request_timeout: 9}\n",
    );
    let model = &both.config.models[0];
    assert_eq!(model.base_url.as_deref(), Some("http://a/v1"));
    assert_eq!(model.request_timeout, Some(5.0));
    assert!(!model.extra.contains_key("api_base"));
    assert_eq!(
        both.warnings,
        vec![
            "config.yaml: models[0].api_base: ignored because models[0].base_url is also set"
                .to_owned(),
            "config.yaml: models[0].default_request_timeout: ignored because models[0].timeout is also set"
                .to_owned(),
        ]
    );
}

#[test]
fn legacy_memory_keys_move_into_backend_config() {
    let loaded = load_ok(
        "memory:\n  enabled: true\n  max_facts: 50\n  debounce_seconds: 10\n  staleness_age_days: 60\n  model_name: small\n  storage_path: /data/mem\n  backend_config:\n    max_facts: 80\n  flavour: vanilla\n",
    );
    let memory = &loaded.config.memory;
    assert_eq!(
        serde_json::Value::Object(memory.backend_config.clone()),
        json!({
            "max_facts": 80,
            "debounce_seconds": 10,
            "staleness_age_days": 60,
            "model": {"model": "small"},
            "storage_path": "/data/mem",
        })
    );
    let deermem = memory.deermem().unwrap();
    assert_eq!(deermem.max_facts, 80);
    assert_eq!(deermem.model.model.as_deref(), Some("small"));
    assert_eq!(deermem.manifest_filename, "memory.json");
    assert_eq!(
        other_warnings(&loaded),
        vec![
            "config.yaml: memory.max_facts: ignored because memory.backend_config.max_facts is also set".to_owned(),
            "unknown key 'memory.flavour' in config.yaml (ignored)".to_owned(),
        ]
    );
}

#[test]
fn missing_sandbox_defaults_to_local_quietly() {
    for yaml in [MODEL.to_owned(), format!("{MODEL}sandbox:\n")] {
        let loaded = load(&yaml).unwrap();
        assert!(loaded.config.sandbox.is_local());
        assert_eq!(loaded.config.sandbox.use_, LOCAL_SANDBOX_USE);
        assert!(!loaded.config.sandbox.allow_host_bash);
        assert_eq!(loaded.warnings, Vec::<String>::new());
    }
}

#[test]
fn sandbox_section_without_use_is_an_error() {
    assert_eq!(
        load("sandbox:\n  allow_host_bash: true\n").unwrap_err().to_string(),
        format!("config.yaml: sandbox.use: missing — set it to {LOCAL_SANDBOX_USE} (or remove the sandbox section to get the local sandbox)")
    );
}

#[test]
fn empty_models_warn() {
    assert_eq!(
        warnings_of(""),
        vec!["config.yaml: no models configured — add an entry under models: (building an agent fails without one)".to_owned()]
    );
}

#[test]
fn sandbox_and_antler_extensions_parse() {
    let config = load(
        "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\n  confine: required\n  bash_command_timeout: 30\n  mounts:\n    - {host_path: /data, container_path: /mnt/data, read_only: true}\n  environment: {TOKEN: abc}\n",
    )
    .unwrap()
    .config;
    let sb = &config.sandbox;
    assert!(sb.allow_host_bash);
    assert_eq!(sb.confine, Confine::Required);
    assert_eq!(sb.bash_command_timeout, 30.0);
    assert_eq!(
        sb.mounts,
        vec![MountConfig {
            host_path: "/data".into(),
            container_path: "/mnt/data".into(),
            read_only: true
        }]
    );
    assert_eq!(sb.environment["TOKEN"], json!("abc"));
}

#[test]
fn sandbox_network_and_limits_parse() {
    let sb = load_ok("").config.sandbox;
    assert_eq!(sb.network, NetworkPolicy::Allow);
    assert_eq!(sb.limits, LimitsConfig::default());
    assert_eq!(sb.limits.processes, Some(1024));
    let sb = load(
        "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  network: deny\n  limits: {memory: 512M, processes: 64, file_size: 1048576}\n",
    )
    .unwrap()
    .config
    .sandbox;
    assert_eq!(sb.network, NetworkPolicy::Deny);
    assert_eq!(sb.limits.memory, Some(ByteSize(512 << 20)));
    assert_eq!(sb.limits.processes, Some(64));
    assert_eq!(sb.limits.file_size, Some(ByteSize(1 << 20)));
    let sb = load(
        "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  limits: {processes: null, memory: 2GiB}\n",
    )
    .unwrap()
    .config
    .sandbox;
    assert_eq!(sb.limits.processes, None);
    assert_eq!(sb.limits.memory, Some(ByteSize(2 << 30)));
    for (yaml, key) in [
        ("network: sometimes", "sandbox.network"),
        ("limits: {memory: 12 parsecs}", "sandbox.limits.memory"),
        ("limits: {memroy: 1G}", "sandbox.limits"),
    ] {
        let err = load(&format!(
            "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  {yaml}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains(key), "{yaml}: {err}");
    }
}

#[test]
fn byte_sizes() {
    assert_eq!(ByteSize::parse("100").unwrap(), ByteSize(100));
    assert_eq!(ByteSize::parse("1.5k").unwrap(), ByteSize(1536));
    assert_eq!(ByteSize::parse("2 GiB").unwrap(), ByteSize(2 << 30));
    assert!(ByteSize::parse("0").is_err());
    assert!(ByteSize::parse("ten").is_err());
    assert!(ByteSize::parse("5 lightyears").is_err());
}

#[test]
fn subagents_sections_parse() {
    let config = load_ok(
        "subagents:\n  enabled: true\n  max_turns: 40\n  agents:\n    general-purpose:\n      model: fast\n      skills: []\n    bash: {timeout_seconds: 60}\n  custom_agents:\n    reviewer:\n      description: Reviews diffs\n      system_prompt: You review code.\n      tools: [read_file]\n",
    )
    .config;
    let s = &config.subagents;
    assert!(s.enabled);
    assert_eq!(s.max_turns, Some(40));
    assert_eq!(s.agents["general-purpose"].model.as_deref(), Some("fast"));
    assert_eq!(s.agents["general-purpose"].skills, Some(vec![]));
    assert_eq!(s.agents["bash"].skills, None);
    assert_eq!(s.agents["bash"].timeout_seconds, Some(60));
    let reviewer = &s.custom_agents["reviewer"];
    assert_eq!(reviewer.model, "inherit");
    assert_eq!(reviewer.max_turns, 50);
    assert_eq!(reviewer.timeout_seconds, 900);
    assert_eq!(
        reviewer.disallowed_tools,
        vec!["task", "ask_clarification", "present_files"]
    );
}

#[test]
fn resolve_path_order() {
    let dir = tempfile::tempdir().unwrap();
    let cli = dir.path().join("cli.yaml");
    // --config wins, even when the file does not exist (load reports it).
    let env = env_of(&[(CONFIG_ENV, "/somewhere/env.yaml")]);
    assert_eq!(resolve_path_with_env(Some(&cli), &env), Some(cli.clone()));
    // Then $ANTLER_CONFIG.
    assert_eq!(
        resolve_path_with_env(None, &env),
        Some(PathBuf::from("/somewhere/env.yaml"))
    );
    // An empty variable counts as unset; then ./config.yaml only when it exists.
    let empty = env_of(&[(CONFIG_ENV, "")]);
    let expected = Path::new(DEFAULT_CONFIG_FILE)
        .is_file()
        .then(|| PathBuf::from(DEFAULT_CONFIG_FILE));
    assert_eq!(resolve_path_with_env(None, &empty), expected);
}

#[test]
fn load_reports_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.yaml");
    let err = Config::load_with_env(&path, &env_of(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::NotFound { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: config file not found — check the --config argument or $ANTLER_CONFIG",
            path.display()
        )
    );
}

#[test]
fn load_from_file_and_version_check() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b");
    std::fs::create_dir_all(&nested).unwrap();
    let path = nested.join("config.yaml");
    std::fs::write(&path, format!("config_version: 3\n{SANDBOX}{MODEL}")).unwrap();

    let loaded = Config::load_with_env(&path, &env_of(&[])).unwrap();
    assert_eq!(loaded.path, path);
    assert_eq!(loaded.config.config_version, 3);
    assert_eq!(loaded.warnings, Vec::<String>::new());

    // An example two levels up with a newer version → warning, never an error.
    let example = dir.path().join("config.example.yaml");
    std::fs::write(&example, "config_version: 34\n").unwrap();
    let loaded = Config::load_with_env(&path, &env_of(&[])).unwrap();
    assert_eq!(loaded.warnings.len(), 1);
    assert!(loaded.warnings[0].contains("config_version 3 is older than 34"));

    // Same or older example → no warning; non-integer version counts as 0.
    std::fs::write(&example, "config_version: 3\n").unwrap();
    assert!(Config::load_with_env(&path, &env_of(&[]))
        .unwrap()
        .warnings
        .is_empty());
    std::fs::write(&path, format!("config_version: new\n{SANDBOX}{MODEL}")).unwrap();
    let loaded = Config::load_with_env(&path, &env_of(&[])).unwrap();
    assert_eq!(loaded.config.config_version, 0);
    assert_eq!(loaded.warnings.len(), 1);
}
