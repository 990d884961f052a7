//! Chat models from config entries (`use:` / `provider:` resolved to built-in adapters).

use std::sync::Arc;
use std::time::Duration;

use antler_config::{effective_request_options, ModelConfig, ProviderKind};
use antler_models::providers::anthropic::{AnthropicConfig, AnthropicModel};
use antler_models::providers::openai_compat::{OpenAiCompatConfig, OpenAiCompatModel};
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
    let kind = cfg
        .provider_kind()
        .map_err(|e| AgentError::Model(format!("models entry '{}': {e}", cfg.name)))?;
    let thinking = thinking && cfg.supports_thinking;
    let mut options = effective_request_options(cfg, thinking)
        .map_err(|e| AgentError::Model(format!("models entry '{}': {e}", cfg.name)))?;
    match kind {
        ProviderKind::OpenAiCompat {
            replay_reasoning_content,
        } => {
            let mut oc = OpenAiCompatConfig::from_info(model_info(cfg, "openai"));
            if let Some(url) = &cfg.base_url {
                oc.base_url = url.clone();
            }
            oc.api_key = cfg.api_key.clone().filter(|k| !k.is_empty());
            oc.wire.temperature = cfg.temperature;
            oc.wire.max_tokens = cfg.max_tokens;
            oc.wire.replay_reasoning_content = replay_reasoning_content;
            if let Some(t) = cfg.request_timeout.filter(|t| *t > 0.0) {
                oc.request_timeout = Some(secs(t));
            }
            if let Some(t) = cfg.effective_stream_chunk_timeout().filter(|t| *t > 0.0) {
                oc.stream_chunk_timeout = secs(t);
            }
            oc.call_timeout = secs(cfg.effective_call_timeout());
            oc.wire.stream_usage = cfg.effective_stream_usage();
            if let Some(Value::Object(body)) = options.remove("extra_body") {
                oc.wire.extra_body = body;
            }
            if let Some(Value::String(effort)) = options.remove("reasoning_effort") {
                oc.wire.reasoning_effort = Some(effort);
            }
            // Anything else the thinking toggles produced goes into the body as-is.
            let mut extra: Map<String, Value> = options;
            for (k, v) in &cfg.extra {
                if !METADATA_KEYS.contains(&k.as_str()) && !v.is_null() {
                    extra.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            oc.wire.extra = extra;
            let model = OpenAiCompatModel::new(oc)
                .map_err(|e| AgentError::Model(format!("models entry '{}': {e}", cfg.name)))?;
            Ok(Arc::new(model))
        }
        ProviderKind::Anthropic => {
            let mut ac = AnthropicConfig::from_info(model_info(cfg, "anthropic"));
            if let Some(url) = &cfg.base_url {
                ac.base_url = url.clone();
            }
            // ChatAnthropic falls back to ANTHROPIC_API_KEY.
            ac.api_key = cfg.api_key.clone().filter(|k| !k.is_empty()).or_else(|| {
                std::env::var("ANTHROPIC_API_KEY")
                    .ok()
                    .filter(|k| !k.is_empty())
            });
            ac.wire.temperature = cfg.temperature;
            ac.wire.max_tokens = cfg.max_tokens;
            if let Some(t) = cfg.request_timeout.filter(|t| *t > 0.0) {
                ac.request_timeout = Some(secs(t));
            }
            if let Some(t) = cfg.stream_chunk_timeout.filter(|t| *t > 0.0) {
                ac.stream_chunk_timeout = secs(t);
            }
            ac.call_timeout = secs(cfg.effective_call_timeout());
            // Thinking toggles (spec 60 §3.3) land in typed fields: the budget is checked
            // against max_tokens. OpenAI-only keys are dropped.
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
            for (k, v) in &cfg.extra {
                // `enable_prompt_caching` is a client option of DeerFlow's Claude class.
                if !METADATA_KEYS.contains(&k.as_str())
                    && k != "enable_prompt_caching"
                    && !v.is_null()
                {
                    extra.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            ac.wire.extra = extra;
            let model = AnthropicModel::new(ac)
                .map_err(|e| AgentError::Model(format!("models entry '{}': {e}", cfg.name)))?;
            Ok(Arc::new(model))
        }
    }
}
