#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use antler_config::Config;
use antler_models::{ChatModel, ChatRequest};
use antler_protocol::{Message, Object};
use antler_test_support::{MockGemini, MockOllama, MockOpenAi, MockResponses};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::build_model;

const EXAMPLE_MODELS: &str =
    include_str!("../../antler-config/tests/fixtures/deerflow-example-models.yaml");

fn env(name: &str) -> Option<String> {
    Some(format!("test-{name}"))
}

fn config(yaml: &str) -> Config {
    Config::load_str(yaml, Path::new("config.yaml"), &env)
        .unwrap()
        .config
}

/// Builds the first model of `yaml` (`thinking` on or off) and asks it once.
async fn ask_first(yaml: &str, thinking: bool) {
    ask(&build_model(&config(yaml).models[0], thinking).unwrap()).await;
}

async fn ask(model: &Arc<dyn ChatModel>) {
    let messages = vec![Arc::new(Message::human("hi"))];
    let settings = Object::new();
    model
        .invoke(ChatRequest {
            system: None,
            messages: &messages,
            tools: &[],
            tool_choice: None,
            settings: &settings,
            message_id: "m1",
            encodings: None,
        })
        .await
        .unwrap();
}

#[test]
fn every_model_entry_of_deerflows_example_builds() {
    // DeerFlow's placeholder gateway URL is not a URL; everything else is built as shipped.
    let yaml = EXAMPLE_MODELS.replace("<your-openai-compat-gateway>", "gateway.example");
    let config = config(&yaml);
    for m in &config.models {
        for thinking in [true, false] {
            let model = build_model(m, thinking).unwrap_or_else(|e| panic!("{}: {e}", m.name));
            let expected = match m.use_.as_deref() {
                Some("langchain_anthropic:ChatAnthropic") => "anthropic",
                Some("langchain_google_genai:ChatGoogleGenerativeAI") => "google_genai",
                Some("langchain_ollama:ChatOllama") => "ollama",
                _ => "openai",
            };
            assert_eq!(model.info().provider, expected, "{}", m.name);
        }
    }
}

#[tokio::test]
async fn client_options_of_vllm_and_mindie_are_not_sent() {
    let mock = MockOpenAi::start().await;
    let yaml = format!(
        "models:
  - name: vllm
    use: deerflow.models.vllm_provider:VllmChatModel
    model: Qwen/Qwen3-32B
    base_url: {url}
    cumulative_stream_usage: true
    supports_thinking: true
    when_thinking_enabled:
      extra_body:
        chat_template_kwargs:
          enable_thinking: true
  - name: mindie
    use: deerflow.models.mindie_provider:MindIEChatModel
    model: qwen-coder
    base_url: {url}
    read_timeout: 900.0
    connect_timeout: 30.0
    write_timeout: 60.0
    pool_timeout: 30.0
    model_kwargs: {{top_k: 3}}
",
        url = mock.base_url()
    );
    let config = config(&yaml);
    ask(&build_model(config.model("vllm").unwrap(), false).unwrap()).await;
    let body = mock.last_request().unwrap().body;
    assert_eq!(body.get("cumulative_stream_usage"), None);
    assert_eq!(
        body["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    ask(&build_model(config.model("mindie").unwrap(), false).unwrap()).await;
    let body = mock.last_request().unwrap().body;
    for key in [
        "read_timeout",
        "connect_timeout",
        "write_timeout",
        "pool_timeout",
        "model_kwargs",
    ] {
        assert_eq!(body.get(key), None, "{key}");
    }
    assert_eq!(body["top_k"], 3);
    mock.assert_no_violations();
}

#[tokio::test]
async fn use_responses_api_posts_to_responses() {
    let mock = MockResponses::start().await.require_api_key("sk-r");
    let yaml = format!(
        "models:
  - name: gpt-5-responses
    use: langchain_openai:ChatOpenAI
    model: gpt-5
    api_key: sk-r
    base_url: {}
    use_responses_api: true
    output_version: responses/v1
    max_tokens: 1000
    supports_reasoning_effort: true
    reasoning_effort: low
",
        mock.base_url()
    );
    ask_first(&yaml, false).await;
    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/v1/responses");
    assert_eq!(
        req.body,
        json!({
            "model": "gpt-5",
            "input": [{"role": "user", "content": "hi"}],
            "max_output_tokens": 1000,
            "reasoning": {"effort": "low"},
        })
    );
}

#[tokio::test]
async fn gemini_reads_deerflows_key_spelling_and_generation_settings() {
    let mock = MockGemini::start()
        .await
        .require_api_key("test-GEMINI_API_KEY");
    let yaml = format!(
        "models:
  - name: gemini-2.5-pro
    use: langchain_google_genai:ChatGoogleGenerativeAI
    model: gemini-2.5-pro
    gemini_api_key: $GEMINI_API_KEY
    base_url: {}
    timeout: 600.0
    max_retries: 2
    max_tokens: 8192
    temperature: 0.3
    top_k: 40
    thinking_budget: 512
",
        mock.base_url()
    );
    ask_first(&yaml, true).await;
    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/v1beta/models/gemini-2.5-pro:generateContent");
    assert_eq!(
        req.body["generationConfig"],
        json!({"temperature": 0.3, "maxOutputTokens": 8192, "topK": 40, "thinkingConfig": {"thinkingBudget": 512}})
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn ollama_entries_map_reasoning_and_num_predict() {
    let mock = MockOllama::start().await;
    let yaml = format!(
        "models:
  - name: qwen3-local
    use: langchain_ollama:ChatOllama
    model: qwen3:32b
    base_url: {}
    num_predict: 8192
    temperature: 0.7
    reasoning: true
    context_window: 32768
    supports_thinking: true
",
        mock.base_url()
    );
    ask_first(&yaml, true).await;
    let body = mock.last_request().unwrap().body;
    assert_eq!(
        body,
        json!({
            "model": "qwen3:32b",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": false,
            "think": true,
            "options": {"temperature": 0.7, "num_predict": 8192},
        })
    );
}
