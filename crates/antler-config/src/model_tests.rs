#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::{json, Map, Value};

use crate::test_util::{load_err, load_ok, warnings_of};
use crate::*;

fn model_with(use_: Option<&str>, provider: Option<Provider>) -> ModelConfig {
    let mut m = ModelConfig::openai_compatible("m", "id");
    m.use_ = use_.map(str::to_owned);
    m.provider = provider;
    m
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn provider_kind_for_every_accepted_use() {
    let compat = |replay| ProviderKind::OpenAiCompat {
        replay_reasoning_content: replay,
    };
    for (use_, kind) in [
        ("langchain_openai:ChatOpenAI", compat(false)),
        ("langchain_deepseek:ChatDeepSeek", compat(false)),
        (
            "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
            compat(true),
        ),
        (
            "deerflow.models.patched_openai:PatchedChatOpenAI",
            compat(true),
        ),
        ("deerflow.models.patched_mimo:PatchedChatMiMo", compat(true)),
        (
            "deerflow.models.patched_stepfun:PatchedChatStepFun",
            compat(true),
        ),
        (
            "deerflow.models.patched_minimax:PatchedChatMiniMax",
            compat(false),
        ),
        ("deerflow.models.vllm_provider:VllmChatModel", compat(false)),
        (
            "deerflow.models.mindie_provider:MindIEChatModel",
            compat(false),
        ),
        ("langchain_anthropic:ChatAnthropic", ProviderKind::Anthropic),
        (
            "deerflow.models.claude_provider:ClaudeChatModel",
            ProviderKind::Anthropic,
        ),
        (
            "langchain_google_genai:ChatGoogleGenerativeAI",
            ProviderKind::Gemini,
        ),
        ("langchain_ollama:ChatOllama", ProviderKind::Ollama),
    ] {
        assert_eq!(
            model_with(Some(use_), None).provider_kind(),
            Ok(kind),
            "{use_}"
        );
    }
    assert_eq!(
        model_with(None, Some(Provider::Openai)).provider_kind(),
        Ok(compat(false))
    );
    assert_eq!(
        model_with(None, Some(Provider::Anthropic)).provider_kind(),
        Ok(ProviderKind::Anthropic)
    );
    assert_eq!(
        model_with(None, Some(Provider::Gemini)).provider_kind(),
        Ok(ProviderKind::Gemini)
    );
    assert_eq!(
        model_with(Some("langchain_ollama:ChatOllama"), Some(Provider::Ollama)).provider_kind(),
        Ok(ProviderKind::Ollama)
    );
    // Both set and agreeing: `use` decides the quirks.
    assert_eq!(
        model_with(
            Some("deerflow.models.patched_deepseek:PatchedChatDeepSeek"),
            Some(Provider::Openai)
        )
        .provider_kind(),
        Ok(compat(true))
    );
}

#[test]
fn provider_kind_errors() {
    assert_eq!(
        model_with(None, None).provider_kind(),
        Err(ModelError::MissingProvider { model: "m".into() })
    );
    let conflict = model_with(
        Some("langchain_anthropic:ChatAnthropic"),
        Some(Provider::Openai),
    )
    .provider_kind()
    .unwrap_err();
    assert_eq!(
        conflict.to_string(),
        "model 'm': use 'langchain_anthropic:ChatAnthropic' and provider 'openai' disagree — keep only one of them"
    );
    let unknown = model_with(Some("foo:Bar"), None)
        .provider_kind()
        .unwrap_err();
    let text = unknown.to_string();
    assert!(
        text.starts_with("model 'm': unknown provider class 'foo:Bar' — use one of langchain_openai:ChatOpenAI, langchain_deepseek:ChatDeepSeek, deerflow.models.patched_deepseek:PatchedChatDeepSeek, "),
        "{text}"
    );
    assert!(
        text.ends_with("langchain_anthropic:ChatAnthropic, deerflow.models.claude_provider:ClaudeChatModel, langchain_google_genai:ChatGoogleGenerativeAI, langchain_ollama:ChatOllama, or provider: openai|anthropic|gemini|ollama"),
        "{text}"
    );
    assert!(matches!(
        model_with(
            Some("deerflow.models.openai_codex_provider:CodexChatModel"),
            None
        )
        .provider_kind(),
        Err(ModelError::UnsupportedProvider { .. })
    ));
    assert!(matches!(
        model_with(Some("langchain_ollama:ChatOllama"), Some(Provider::Gemini)).provider_kind(),
        Err(ModelError::ProviderConflict { .. })
    ));
}

#[test]
fn use_responses_api_selects_the_responses_wire_for_openai_classes_only() {
    let mut m = model_with(Some("langchain_openai:ChatOpenAI"), None);
    m.use_responses_api = Some(true);
    assert_eq!(m.provider_kind(), Ok(ProviderKind::OpenAiResponses));
    assert_eq!(m.effective_stream_chunk_timeout(), Some(240.0));
    m.use_responses_api = Some(false);
    assert!(matches!(
        m.provider_kind(),
        Ok(ProviderKind::OpenAiCompat { .. })
    ));
    let mut p = model_with(None, Some(Provider::Openai));
    p.use_responses_api = Some(true);
    assert_eq!(p.provider_kind(), Ok(ProviderKind::OpenAiResponses));
    // Not an OpenAI class: the flag means nothing.
    let mut a = model_with(Some("langchain_anthropic:ChatAnthropic"), None);
    a.use_responses_api = Some(true);
    assert_eq!(a.provider_kind(), Ok(ProviderKind::Anthropic));
    let mut g = model_with(Some("langchain_google_genai:ChatGoogleGenerativeAI"), None);
    g.use_responses_api = Some(true);
    assert_eq!(g.provider_kind(), Ok(ProviderKind::Gemini));
    assert_eq!(g.effective_stream_chunk_timeout(), None);
}

#[test]
fn unknown_use_fails_the_load_naming_the_entry() {
    let err = load_err(
        "models:\n  - {name: a, use: 'langchain_openai:ChatOpenAI', model: m}\n  - {name: b, use: 'foo:Bar', model: m}\n",
    );
    assert!(
        err.starts_with("config.yaml: models[1].use: unknown provider class 'foo:Bar' (model 'b') — use one of langchain_openai:ChatOpenAI, "),
        "{err}"
    );
    assert!(
        err.ends_with(", or provider: openai|anthropic|gemini|ollama"),
        "{err}"
    );

    assert_eq!(
        load_err("models:\n  - {name: a, model: m}\n"),
        "config.yaml: models[0]: no `use` or `provider` (model 'a') — add `use: langchain_openai:ChatOpenAI` (or `provider: openai|anthropic|gemini|ollama`)"
    );
    assert!(
        load_err("models:\n  - {name: a, provider: bedrock, model: m}\n")
            .starts_with("config.yaml: models[0].provider: unknown variant `bedrock`")
    );
}

#[test]
fn unsupported_deerflow_provider_warns_at_load() {
    assert_eq!(
        warnings_of("models:\n  - {name: c, use: 'deerflow.models.openai_codex_provider:CodexChatModel', model: gpt-5-codex}\n  - {name: g, use: 'langchain_google_genai:ChatGoogleGenerativeAI', model: gemini-2.5-pro, gemini_api_key: k}\n"),
        vec!["config.yaml: models[0].use: 'deerflow.models.openai_codex_provider:CodexChatModel' is a DeerFlow provider antler does not implement; model 'c' cannot be selected".to_owned()]
    );
}

#[test]
fn every_typed_model_field_parses() {
    let loaded = load_ok(
        "models:
  - name: full
    display_name: Full
    description: every key
    use: langchain_openai:ChatOpenAI
    model: gpt-5
    api_key: k
    base_url: http://x/v1
    max_tokens: 4096
    temperature: 0.2
    context_window: 200000
    request_timeout: 120
    call_timeout: 900
    max_retries: 2
    supports_thinking: true
    supports_reasoning_effort: true
    supports_vision: true
    when_thinking_enabled: {extra_body: {thinking: {type: enabled}}}
    when_thinking_disabled: {temperature: 0.0}
    thinking: {budget_tokens: 1024}
    extra_body: {top_k: 5}
    use_responses_api: true
    output_version: responses/v1
    stream_chunk_timeout: 30
    stream_usage: false
    reasoning_effort: high
    streaming: true
    pricing: {currency: USD, input_per_million: 1.25, output_per_million: 10}
",
    );
    assert_eq!(loaded.warnings, Vec::<String>::new());
    let m = &loaded.config.models[0];
    assert_eq!(m.display_name.as_deref(), Some("Full"));
    assert_eq!(m.max_tokens, Some(4096));
    assert_eq!(m.temperature, Some(0.2));
    assert_eq!(m.context_window, Some(200_000));
    assert_eq!(m.request_timeout, Some(120.0));
    assert_eq!(m.effective_call_timeout(), 900.0);
    assert_eq!(m.max_retries, Some(2));
    assert!(m.supports_thinking && m.supports_reasoning_effort && m.supports_vision);
    assert_eq!(m.use_responses_api, Some(true));
    assert_eq!(m.output_version.as_deref(), Some("responses/v1"));
    assert_eq!(m.effective_stream_chunk_timeout(), Some(30.0));
    assert!(!m.effective_stream_usage());
    assert_eq!(m.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(m.streaming, Some(true));
    assert_eq!(m.pricing.as_ref().unwrap().output_per_million, Some(10.0));
    assert!(m.extra.is_empty());
}

#[test]
fn stream_defaults_depend_on_protocol() {
    let openai = model_with(Some("langchain_openai:ChatOpenAI"), None);
    assert_eq!(openai.effective_stream_chunk_timeout(), Some(240.0));
    assert!(openai.effective_stream_usage());
    let anthropic = model_with(None, Some(Provider::Anthropic));
    assert_eq!(anthropic.effective_stream_chunk_timeout(), None);
    // Every protocol gets an overall call deadline.
    assert_eq!(openai.effective_call_timeout(), DEFAULT_CALL_TIMEOUT_SECS);
    assert_eq!(
        anthropic.effective_call_timeout(),
        DEFAULT_CALL_TIMEOUT_SECS
    );
}

fn thinking_model(yaml_fields: &str) -> ModelConfig {
    let loaded = load_ok(&format!(
        "models:\n  - name: t\n    use: langchain_openai:ChatOpenAI\n    model: x\n{yaml_fields}"
    ));
    loaded.config.models[0].clone()
}

/// `effective_request_options` of a [`thinking_model`] with thinking on or off; each case is
/// named after the test it came from.
#[test]
fn thinking_request_options() {
    let cases: &[(&str, &str, bool, Value)] = &[
        (
            "thinking_on_merges_when_thinking_enabled",
            "    supports_thinking: true\n    extra_body: {top_k: 5, thinking: {budget: 1}}\n    when_thinking_enabled:\n      extra_body: {thinking: {type: enabled}}\n      temperature: 1.0\n",
            true,
            json!({
                "extra_body": {"top_k": 5, "thinking": {"budget": 1, "type": "enabled"}},
                "temperature": 1.0,
            }),
        ),
        (
            "thinking_shortcut_lands_in_thinking",
            "    supports_thinking: true\n    when_thinking_enabled: {thinking: {type: enabled}}\n    thinking: {budget_tokens: 2048}\n",
            true,
            json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ),
        // Thinking off: native Anthropic switch.
        (
            "thinking_shortcut_lands_in_thinking (off)",
            "    supports_thinking: true\n    when_thinking_enabled: {thinking: {type: enabled}}\n    thinking: {budget_tokens: 2048}\n",
            false,
            json!({"thinking": {"type": "disabled"}}),
        ),
        // Without thinking settings, thinking on is a no-op even without support.
        (
            "thinking_on_requires_support (plain, on)",
            "    extra_body: {top_k: 5}\n",
            true,
            json!({"extra_body": {"top_k": 5}}),
        ),
        (
            "thinking_on_requires_support (plain, off)",
            "    extra_body: {top_k: 5}\n",
            false,
            json!({"extra_body": {"top_k": 5}}),
        ),
        (
            "thinking_off_user_disabled_settings_win",
            "    supports_thinking: true\n    when_thinking_enabled: {extra_body: {thinking: {type: enabled}}}\n    when_thinking_disabled: {extra_body: {thinking: {type: off_by_user}}}\n",
            false,
            json!({"extra_body": {"thinking": {"type": "off_by_user"}}}),
        ),
        (
            "thinking_off_extra_body_switch (supported)",
            "    supports_thinking: true\n    supports_reasoning_effort: true\n    when_thinking_enabled: {extra_body: {thinking: {type: enabled}}}\n",
            false,
            json!({
                "extra_body": {"thinking": {"type": "disabled"}},
                "reasoning_effort": "minimal",
            }),
        ),
        // Without reasoning-effort support the "minimal" effort is dropped.
        (
            "thinking_off_extra_body_switch (unsupported)",
            "    supports_thinking: true\n    when_thinking_enabled: {extra_body: {thinking: {type: enabled}}}\n",
            false,
            json!({"extra_body": {"thinking": {"type": "disabled"}}}),
        ),
        (
            "thinking_off_chat_template_kwargs_switch (off)",
            "    supports_thinking: true\n    extra_body: {chat_template_kwargs: {other: 1}}\n    when_thinking_enabled:\n      extra_body: {chat_template_kwargs: {enable_thinking: true}}\n",
            false,
            json!({"extra_body": {"chat_template_kwargs": {"other": 1, "enable_thinking": false}}}),
        ),
        (
            "thinking_off_chat_template_kwargs_switch (on)",
            "    supports_thinking: true\n    extra_body: {chat_template_kwargs: {other: 1}}\n    when_thinking_enabled:\n      extra_body: {chat_template_kwargs: {enable_thinking: true}}\n",
            true,
            json!({"extra_body": {"chat_template_kwargs": {"other": 1, "enable_thinking": true}}}),
        ),
        (
            "thinking_off_chat_template_kwargs_switch (both)",
            "    supports_thinking: true\n    when_thinking_enabled:\n      extra_body: {chat_template_kwargs: {thinking: true, enable_thinking: true}}\n",
            false,
            json!({"extra_body": {"chat_template_kwargs": {"thinking": false, "enable_thinking": false}}}),
        ),
        (
            "reasoning_effort_needs_support (without)",
            "    reasoning_effort: high\n",
            true,
            json!({}),
        ),
        (
            "reasoning_effort_needs_support (with, on)",
            "    reasoning_effort: high\n    supports_reasoning_effort: true\n",
            true,
            json!({"reasoning_effort": "high"}),
        ),
        (
            "reasoning_effort_needs_support (with, off)",
            "    reasoning_effort: high\n    supports_reasoning_effort: true\n",
            false,
            json!({"reasoning_effort": "high"}),
        ),
    ];
    for (name, yaml_fields, thinking, want) in cases {
        assert_eq!(
            effective_request_options(&thinking_model(yaml_fields), *thinking).unwrap(),
            obj(want.clone()),
            "{name}"
        );
    }
}

#[test]
fn thinking_on_requires_support() {
    let m = thinking_model("    thinking: {type: enabled}\n");
    assert_eq!(
        effective_request_options(&m, true),
        Err(ModelError::ThinkingUnsupported { model: "t".into() })
    );
}

#[test]
fn deep_merge_merges_objects_and_replaces_the_rest() {
    let mut base = obj(json!({"a": {"b": 1, "c": [1]}, "d": 1}));
    deep_merge(
        &mut base,
        &obj(json!({"a": {"c": [2], "e": 3}, "d": {"x": 1}})),
    );
    assert_eq!(
        base,
        obj(json!({"a": {"b": 1, "c": [2], "e": 3}, "d": {"x": 1}}))
    );
}
