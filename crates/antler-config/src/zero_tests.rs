#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;

use crate::test_util::{env_of, load_env};
use crate::*;

#[test]
fn template_loads_without_warnings() {
    let loaded = load_env(TEMPLATE, &[("OPENAI_API_KEY", "sk-test")]).unwrap();
    assert_eq!(loaded.warnings, Vec::<String>::new());
    let config = &loaded.config;
    let model = config.default_model().unwrap();
    assert_eq!(model.api_key.as_deref(), Some("sk-test"));
    assert_eq!(
        model.provider_kind(),
        Ok(ProviderKind::OpenAiCompat {
            replay_reasoning_content: false
        })
    );
    assert!(config.sandbox.is_local());
    assert!(!config.sandbox.allow_host_bash);
    assert_eq!(config.sandbox.confine, Confine::Auto);
    assert_eq!(config.database.backend, DatabaseBackend::Sqlite);
    assert!(config.summarization.enabled);
    let names: Vec<_> = config.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "ls",
            "read_file",
            "glob",
            "grep",
            "write_file",
            "str_replace",
            "bash"
        ]
    );
    // Without the key the template names it.
    let err = load_env(TEMPLATE, &[]).unwrap_err().to_string();
    assert!(err.contains("models[0].api_key: environment variable OPENAI_API_KEY is not set"));
}

#[test]
fn template_commented_examples_are_valid_when_uncommented() {
    // Uncomment the DeepSeek and Anthropic examples and load the result.
    // Uncomment the DeepSeek and Anthropic examples (inside the models section only).
    let mut in_models = false;
    let uncommented: String = TEMPLATE
        .lines()
        .map(|line| {
            if !line.starts_with(' ') && !line.starts_with('#') && !line.is_empty() {
                in_models = line.starts_with("models:");
            }
            let trimmed = line.trim_start();
            let entry_line = trimmed.starts_with("# - ") || trimmed.starts_with("#   ");
            if in_models && line.starts_with("  #") && entry_line {
                format!("  {}", &trimmed[2..])
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let loaded = load_env(
        &uncommented,
        &[
            ("OPENAI_API_KEY", "a"),
            ("DEEPSEEK_API_KEY", "b"),
            ("ANTHROPIC_API_KEY", "c"),
        ],
    )
    .unwrap();
    assert_eq!(loaded.warnings, Vec::<String>::new());
    let names: Vec<_> = loaded
        .config
        .models
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, vec!["default", "deepseek", "claude"]);
    assert_eq!(
        loaded.config.model("deepseek").unwrap().provider_kind(),
        Ok(ProviderKind::OpenAiCompat {
            replay_reasoning_content: true
        })
    );
    assert_eq!(
        loaded.config.model("claude").unwrap().provider_kind(),
        Ok(ProviderKind::Anthropic)
    );
}

#[test]
fn zero_config_from_openai_env() {
    let config = Config::zero_config(&env_of(&[("OPENAI_API_KEY", "sk-1")])).unwrap();
    assert_eq!(config.models.len(), 1);
    let model = &config.models[0];
    assert_eq!(model.name, "default");
    assert_eq!(model.model, "gpt-4o-mini");
    assert_eq!(model.api_key.as_deref(), Some("sk-1"));
    assert_eq!(model.base_url, None);
    assert_eq!(model.use_.as_deref(), Some("langchain_openai:ChatOpenAI"));
    assert!(config.sandbox.is_local());
    assert!(!config.sandbox.allow_host_bash);
    assert_eq!(config.database.backend, DatabaseBackend::Sqlite);
    let tools: Vec<_> = config
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.group.as_str(), t.use_.as_str()))
        .collect();
    assert_eq!(
        tools,
        vec![
            ("ls", "file:read", "deerflow.sandbox.tools:ls_tool"),
            (
                "read_file",
                "file:read",
                "deerflow.sandbox.tools:read_file_tool"
            ),
            ("glob", "file:read", "deerflow.sandbox.tools:glob_tool"),
            ("grep", "file:read", "deerflow.sandbox.tools:grep_tool"),
            (
                "write_file",
                "file:write",
                "deerflow.sandbox.tools:write_file_tool"
            ),
            (
                "str_replace",
                "file:write",
                "deerflow.sandbox.tools:str_replace_tool"
            ),
            ("bash", "bash", "deerflow.sandbox.tools:bash_tool"),
        ]
    );
    let groups: Vec<_> = config.tool_groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(groups, vec!["file:read", "file:write", "bash"]);
}

#[test]
fn zero_config_base_url_only_and_model_override() {
    let config = Config::zero_config(&env_of(&[
        ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
        ("ANTLER_MODEL", "qwen3"),
    ]))
    .unwrap();
    let model = &config.models[0];
    assert_eq!(model.api_key, None);
    assert_eq!(model.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
    assert_eq!(model.model, "qwen3");
}

#[test]
fn zero_config_without_env_explains_what_to_do() {
    for env in [env_of(&[]), env_of(&[("OPENAI_API_KEY", "  ")])] {
        let err = Config::zero_config(&env).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ConfigError::ZeroConfig { .. }));
        assert!(text.contains("OPENAI_API_KEY is not set"), "{text}");
        assert!(text.contains("antler config init"), "{text}");
        assert!(!text.contains('\n'));
    }
}
