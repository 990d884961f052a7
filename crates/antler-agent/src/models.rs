//! Chat models from config entries (`use:` / `provider:` resolved to built-in adapters): one
//! HTTP driver config per wire (Chat Completions, Responses, Anthropic Messages, Gemini, Ollama),
//! the entry's keys sorted into transport settings, body settings and client options that are
//! never sent.

use std::sync::Arc;
use std::time::Duration;

use antler_config::{effective_request_options, ModelConfig, ProviderKind};
use antler_models::providers::anthropic::{AnthropicConfig, AnthropicModel};
use antler_models::providers::gemini::{GeminiConfig, GeminiModel};
use antler_models::providers::ollama::{OllamaConfig, OllamaModel};
use antler_models::providers::openai_compat::{OpenAiCompatConfig, OpenAiCompatModel};
use antler_models::providers::openai_responses::{ResponsesConfig, ResponsesModel};
use antler_models::providers::{HttpModelConfig, WireFormat};
use antler_models::{ChatModel, ModelInfo};
use serde_json::{Map, Value};

use crate::AgentError;

/// Keys of a model entry that describe the model to antler and are never sent to a provider.
const METADATA_KEYS: &[&str] = &[
    "use",
    "name",
    "display_name",
    "description",
    "supports_thinking",
    "supports_reasoning_effort",
    "when_thinking_enabled",
    "when_thinking_disabled",
    "thinking",
    "supports_vision",
    "context_window",
    "pricing",
    "provider",
    "streaming",
];

/// Client options of DeerFlow's OpenAI-compatible classes (and langchain-openai's), which shape
/// the HTTP client, not the request body: never forwarded as body fields.
const OPENAI_CLIENT_KEYS: &[&str] = &[
    "use_responses_api",
    "output_version",
    "stream_usage",
    "stream_chunk_timeout",
    "max_retries",
    // vLLM: usage snapshots are cumulative (antler keeps the last snapshot, which is the total).
    "cumulative_stream_usage",
    // MindIE's httpx timeouts.
    "read_timeout",
    "connect_timeout",
    "write_timeout",
    "pool_timeout",
    "default_headers",
    "default_query",
    "http_client",
    "http_async_client",
    "organization",
    "openai_organization",
    "openai_proxy",
    "tiktoken_model_name",
    "disabled_params",
    "include_response_headers",
    "use_previous_response_id",
];

/// Client options of `langchain_google_genai:ChatGoogleGenerativeAI` (keys, transport, Vertex
/// routing), never body fields.
const GEMINI_CLIENT_KEYS: &[&str] = &[
    "gemini_api_key",
    "google_api_key",
    "credentials",
    "transport",
    "client_options",
    "project",
    "location",
    "vertexai",
    "max_retries",
    "stream_chunk_timeout",
    "stream_usage",
];

/// Client options of `langchain_ollama:ChatOllama`, never body fields.
const OLLAMA_CLIENT_KEYS: &[&str] = &[
    "validate_model_on_init",
    "client_kwargs",
    "async_client_kwargs",
    "sync_client_kwargs",
    "max_retries",
    "stream_chunk_timeout",
    "stream_usage",
];

/// Config seconds as a duration; values too large for one (`.inf`) mean "no limit".
fn secs(t: f64) -> Duration {
    Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX)
}

/// The [`ModelInfo`] of a config entry.
pub fn model_info(cfg: &ModelConfig, provider: &str) -> ModelInfo {
    ModelInfo {
        name: cfg.name.clone(),
        model: cfg.model.clone(),
        provider: provider.to_owned(),
        supports_vision: cfg.supports_vision,
        supports_thinking: cfg.supports_thinking,
        context_window: cfg.context_window,
        streaming: cfg.streaming,
    }
}

/// Build the chat model for a config entry. `thinking` applies the entry's thinking toggles
/// (spec 60 §3.3); it is forced off when the model does not support thinking.
pub fn build_model(cfg: &ModelConfig, thinking: bool) -> Result<Arc<dyn ChatModel>, AgentError> {
    let fail =
        |e: &dyn std::fmt::Display| AgentError::Model(format!("models entry '{}': {e}", cfg.name));
    let kind = cfg.provider_kind().map_err(|e| fail(&e))?;
    let thinking = thinking && cfg.supports_thinking;
    let options = effective_request_options(cfg, thinking).map_err(|e| fail(&e))?;
    let model: Arc<dyn ChatModel> = match kind {
        ProviderKind::OpenAiCompat {
            replay_reasoning_content,
        } => Arc::new(
            OpenAiCompatModel::new(openai_compat(cfg, options, replay_reasoning_content))
                .map_err(|e| fail(&e))?,
        ),
        ProviderKind::OpenAiResponses => {
            Arc::new(ResponsesModel::new(openai_responses(cfg, options)).map_err(|e| fail(&e))?)
        }
        ProviderKind::Anthropic => {
            Arc::new(AnthropicModel::new(anthropic(cfg, options)).map_err(|e| fail(&e))?)
        }
        ProviderKind::Gemini => {
            Arc::new(GeminiModel::new(gemini(cfg, options)).map_err(|e| fail(&e))?)
        }
        ProviderKind::Ollama => {
            Arc::new(OllamaModel::new(ollama(cfg, options)).map_err(|e| fail(&e))?)
        }
    };
    Ok(model)
}

/// The transport settings every HTTP provider shares: endpoint, key, time limits.
fn transport<W: WireFormat>(
    cfg: &ModelConfig,
    provider: &str,
    api_key: Option<String>,
) -> HttpModelConfig<W> {
    let mut hc = HttpModelConfig::<W>::from_info(model_info(cfg, provider));
    if let Some(url) = cfg.base_url.as_ref().filter(|u| !u.trim().is_empty()) {
        hc.base_url = url.clone();
    }
    hc.api_key = api_key;
    if let Some(t) = cfg.request_timeout.filter(|t| *t > 0.0) {
        hc.request_timeout = Some(secs(t));
    }
    if let Some(t) = cfg.effective_stream_chunk_timeout().filter(|t| *t > 0.0) {
        hc.stream_chunk_timeout = secs(t);
    }
    hc.call_timeout = secs(cfg.effective_call_timeout());
    hc
}

/// The entry's own key, else the first non-empty environment variable of `env`.
fn key_or_env(keys: &[Option<&str>], env: &[&str]) -> Option<String> {
    keys.iter()
        .flatten()
        .find(|k| !k.is_empty())
        .map(|k| (*k).to_owned())
        .or_else(|| {
            env.iter()
                .find_map(|v| std::env::var(v).ok().filter(|k| !k.is_empty()))
        })
}

/// The entry's untyped keys that are body settings: metadata, `skip` and nulls left out.
fn extras<'a>(
    cfg: &'a ModelConfig,
    skip: &'a [&str],
) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
    cfg.extra.iter().filter(move |(k, v)| {
        !METADATA_KEYS.contains(&k.as_str()) && !skip.contains(&k.as_str()) && !v.is_null()
    })
}

fn openai_compat(
    cfg: &ModelConfig,
    mut options: Map<String, Value>,
    replay_reasoning_content: bool,
) -> OpenAiCompatConfig {
    let mut oc: OpenAiCompatConfig =
        transport(cfg, "openai", cfg.api_key.clone().filter(|k| !k.is_empty()));
    if let (None, Some(t)) = (
        cfg.request_timeout,
        cfg.extra.get("read_timeout").and_then(Value::as_f64),
    ) {
        // MindIE's read timeout bounds the whole (non-streamed) answer.
        oc.request_timeout = Some(secs(t));
    }
    if let Some(t) = cfg
        .extra
        .get("connect_timeout")
        .and_then(Value::as_f64)
        .filter(|t| *t > 0.0)
    {
        oc.connect_timeout = secs(t);
    }
    oc.wire.temperature = cfg.temperature;
    oc.wire.max_tokens = cfg.max_tokens;
    oc.wire.replay_reasoning_content = replay_reasoning_content;
    oc.wire.stream_usage = cfg.effective_stream_usage();
    if let Some(Value::Object(body)) = options.remove("extra_body") {
        oc.wire.extra_body = body;
    }
    if let Some(Value::String(effort)) = options.remove("reasoning_effort") {
        oc.wire.reasoning_effort = Some(effort);
    }
    // Anything else the thinking toggles produced goes into the body as-is.
    let mut extra: Map<String, Value> = options;
    for (k, v) in extras(cfg, OPENAI_CLIENT_KEYS) {
        if k == "model_kwargs" {
            // langchain-openai spreads `model_kwargs` into the body.
            if let Value::Object(kw) = v {
                for (k, v) in kw {
                    extra.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            continue;
        }
        extra.entry(k.clone()).or_insert_with(|| v.clone());
    }
    oc.wire.extra = extra;
    oc
}

fn openai_responses(cfg: &ModelConfig, mut options: Map<String, Value>) -> ResponsesConfig {
    let mut rc: ResponsesConfig =
        transport(cfg, "openai", cfg.api_key.clone().filter(|k| !k.is_empty()));
    rc.wire.temperature = cfg.temperature;
    rc.wire.max_output_tokens = cfg.max_tokens;
    if let Some(Value::String(effort)) = options.remove("reasoning_effort") {
        rc.wire.reasoning_effort = Some(effort);
    }
    let mut extra = Map::new();
    if let Some(Value::Object(body)) = options.remove("extra_body") {
        extra.extend(body);
    }
    extra.extend(options);
    for (k, v) in extras(cfg, OPENAI_CLIENT_KEYS) {
        extra.entry(k.clone()).or_insert_with(|| v.clone());
    }
    rc.wire.extra = extra;
    rc
}

fn anthropic(cfg: &ModelConfig, mut options: Map<String, Value>) -> AnthropicConfig {
    // ChatAnthropic falls back to ANTHROPIC_API_KEY.
    let key = key_or_env(&[cfg.api_key.as_deref()], &["ANTHROPIC_API_KEY"]);
    let mut ac: AnthropicConfig = transport(cfg, "anthropic", key);
    ac.wire.temperature = cfg.temperature;
    ac.wire.max_tokens = cfg.max_tokens;
    // Thinking toggles (spec 60 §3.3) land in typed fields: the budget is checked against
    // max_tokens. OpenAI-only keys are dropped.
    if let Some(t) = options.remove("thinking") {
        ac.wire.thinking = Some(t);
    }
    if let Some(m) = options.remove("max_tokens").and_then(|v| v.as_u64()) {
        ac.wire.max_tokens = Some(m);
    }
    if let Some(t) = options.remove("temperature").and_then(|v| v.as_f64()) {
        ac.wire.temperature = Some(t);
    }
    options.remove("extra_body");
    options.remove("reasoning_effort");
    let mut extra = options;
    // `enable_prompt_caching` is a client option of DeerFlow's Claude class.
    for (k, v) in extras(cfg, &["enable_prompt_caching", "max_retries"]) {
        extra.entry(k.clone()).or_insert_with(|| v.clone());
    }
    ac.wire.extra = extra;
    ac
}

fn gemini(cfg: &ModelConfig, mut options: Map<String, Value>) -> GeminiConfig {
    let entry_key = |k: &str| cfg.extra.get(k).and_then(Value::as_str);
    // langchain-google-genai: `google_api_key` (alias `api_key`), DeerFlow's example spells it
    // `gemini_api_key`; the environment fallbacks are the Google SDK's.
    let key = key_or_env(
        &[
            cfg.api_key.as_deref(),
            entry_key("gemini_api_key"),
            entry_key("google_api_key"),
        ],
        &["GOOGLE_API_KEY", "GEMINI_API_KEY"],
    );
    let mut gc: GeminiConfig = transport(cfg, "google_genai", key);
    let wire = &mut gc.wire;
    if let Some(t) = cfg.temperature {
        wire.set("temperature", &Value::from(t));
    }
    if let Some(m) = cfg.max_tokens {
        wire.set("max_output_tokens", &Value::from(m));
    }
    // Anthropic-style `thinking: {type, budget_tokens}` from the thinking toggles.
    if let Some(Value::Object(t)) = options.remove("thinking") {
        match t.get("type").and_then(Value::as_str) {
            Some("disabled") => {
                wire.set("thinking_budget", &Value::from(0));
            }
            _ => {
                if let Some(b) = t.get("budget_tokens").or_else(|| t.get("thinking_budget")) {
                    wire.set("thinking_budget", b);
                }
                wire.set("include_thoughts", &Value::Bool(true));
            }
        }
    }
    set_options(cfg, options, GEMINI_CLIENT_KEYS, "a Gemini", |k, v| {
        wire.set(k, v)
    });
    gc
}

/// The remaining options and the config's extra keys, set on a typed request through `set`;
/// one the vendor (`what`: "a Gemini") has no setting for is warned about and ignored.
fn set_options(
    cfg: &ModelConfig,
    mut options: Map<String, Value>,
    client_keys: &[&str],
    what: &str,
    mut set: impl FnMut(&str, &Value) -> bool,
) {
    options.remove("extra_body");
    options.remove("reasoning_effort");
    for (k, v) in options.iter().chain(extras(cfg, client_keys)) {
        if !set(k, v) {
            tracing::warn!(model = %cfg.name, key = %k, "not {what} request setting; ignored");
        }
    }
}

fn ollama(cfg: &ModelConfig, options: Map<String, Value>) -> OllamaConfig {
    let mut oc: OllamaConfig =
        transport(cfg, "ollama", cfg.api_key.clone().filter(|k| !k.is_empty()));
    let wire = &mut oc.wire;
    if let Some(t) = cfg.temperature {
        wire.set("temperature", &Value::from(t));
    }
    if let Some(m) = cfg.max_tokens {
        wire.set("num_predict", &Value::from(m));
    }
    set_options(cfg, options, OLLAMA_CLIENT_KEYS, "an Ollama", |k, v| {
        wire.set(k, v)
    });
    oc
}

#[cfg(test)]
#[path = "models_tests.rs"]
mod tests;
