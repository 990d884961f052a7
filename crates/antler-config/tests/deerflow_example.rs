//! DeerFlow's own `config.example.yaml` (fixture, `config_version: 34`) loads: antler accepts
//! every key DeerFlow ships, and keys it does not model are warnings, never errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use antler_config::Config;
use pretty_assertions::assert_eq;

const EXAMPLE: &str = include_str!("fixtures/deerflow-config.example.keys.yaml");

/// The example with one model entry under its (otherwise comment-only) `models:` key.
fn example_with_a_model() -> String {
    let model = "models:\n  - name: gpt-4o\n    use: langchain_openai:ChatOpenAI\n    \
                 model: gpt-4o\n    api_key: $OPENAI_API_KEY\n";
    assert_eq!(EXAMPLE.matches("\nmodels:\n").count(), 1);
    EXAMPLE.replacen("\nmodels:\n", &format!("\n{model}"), 1)
}

/// Every `$NAME` resolves, so the test does not depend on the machine's environment.
fn env(name: &str) -> Option<String> {
    Some(format!("test-{name}"))
}

#[test]
fn deerflow_example_loads_with_a_model() {
    let text = example_with_a_model();
    let loaded = Config::load_str(&text, Path::new("config.yaml"), &env).unwrap();
    let config = &loaded.config;
    assert_eq!(config.config_version, 34);
    let model = config.default_model().expect("the filled-in model");
    assert_eq!(model.name, "gpt-4o");
    assert_eq!(model.api_key.as_deref(), Some("test-OPENAI_API_KEY"));
    assert!(
        config.summarization.enabled,
        "the example turns summarization on"
    );
    assert!(!config.tools.is_empty());
    // antler models every key the example ships, so nothing is even reported as unknown.
    assert_eq!(loaded.warnings, Vec::<String>::new());
}

#[test]
fn unknown_keys_in_the_example_only_warn() {
    let text = format!(
        "{}\nnot_a_deerflow_key: 1\n",
        example_with_a_model().trim_end()
    );
    let loaded = Config::load_str(&text, Path::new("config.yaml"), &env).unwrap();
    assert!(
        loaded
            .warnings
            .contains(&"unknown key 'not_a_deerflow_key' in config.yaml (ignored)".to_owned()),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn the_example_as_written_has_no_models_and_still_loads() {
    let loaded = Config::load_str(EXAMPLE, Path::new("config.yaml"), &env).unwrap();
    assert!(loaded.config.models.is_empty());
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("no models configured")),
        "{:?}",
        loaded.warnings
    );
}

/// DeerFlow's file itself, comments and all, where a snapshot of DeerFlow's repository is at
/// hand (`$ANTLER_DEERFLOW_REPO`, a git directory; default: this workplace's mirror). The
/// committed fixture keeps DeerFlow's keys and values but not its prose.
#[test]
#[allow(clippy::print_stderr)]
fn deerflow_original_example_loads_when_available() {
    let repo = std::env::var("ANTLER_DEERFLOW_REPO")
        .unwrap_or_else(|_| "/work/.mirror/bytedance+deer-flow/repo".to_owned());
    let out = std::process::Command::new("git")
        .args(["--git-dir", &repo, "show", "HEAD:config.example.yaml"])
        .output();
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap(),
        _ => {
            eprintln!("skipping: no DeerFlow repository snapshot at {repo}");
            return;
        }
    };
    let loaded = Config::load_str(&text, Path::new("config.yaml"), &env).unwrap();
    assert!(loaded.config.config_version >= 34);
    assert!(!loaded.config.tools.is_empty());
}

/// Every model entry DeerFlow's example ships (fixture: the example's commented-out entries,
/// uncommented), one per `use:` class: each loads without a warning and maps to its wire.
#[test]
fn every_model_entry_of_the_example_loads_and_maps_to_a_wire() {
    use antler_config::ProviderKind;
    let models = include_str!("fixtures/deerflow-example-models.yaml");
    let loaded = Config::load_str(models, Path::new("config.yaml"), &env).unwrap();
    assert_eq!(loaded.warnings, Vec::<String>::new());
    let config = &loaded.config;
    assert_eq!(config.models.len(), 26);
    let kind = |name: &str| config.model(name).unwrap().provider_kind().unwrap();
    let compat = |replay| ProviderKind::OpenAiCompat {
        replay_reasoning_content: replay,
    };
    for (name, expected) in [
        ("doubao-seed-1.8", compat(true)),
        ("gpt-4", compat(false)),
        ("gpt-5-responses", ProviderKind::OpenAiResponses),
        ("qwen3-local", ProviderKind::Ollama),
        ("gemma4-local", ProviderKind::Ollama),
        ("claude-sonnet-4", ProviderKind::Anthropic),
        ("gemini-2.5-pro", ProviderKind::Gemini),
        ("gemini-2.5-pro-thinking", compat(true)),
        ("mimo-v2.5-pro", compat(true)),
        ("step-3.7-flash", compat(true)),
        ("minimax-m3", compat(false)),
        ("minimax-m3-cn", compat(false)),
        ("qwen3-32b-vllm", compat(false)),
        ("Qwen3_Coder_480B_MindIE", compat(false)),
    ] {
        assert_eq!(kind(name), expected, "{name}");
    }
    for m in &config.models {
        assert!(m.provider_kind().is_ok(), "{}", m.name);
    }
    // Provider extras stay on the entry for the adapter to read.
    let ollama = config.model("qwen3-local").unwrap();
    assert_eq!(ollama.extra["num_predict"], 8192);
    assert_eq!(ollama.extra["reasoning"], true);
    let gemini = config.model("gemini-2.5-pro").unwrap();
    assert_eq!(gemini.extra["gemini_api_key"], "test-GEMINI_API_KEY");
    let vllm = config.model("qwen3-32b-vllm").unwrap();
    assert_eq!(vllm.extra["cumulative_stream_usage"], true);
}
