//! `models:` entries (spec 60 §3): one provider endpoint + model id each; the first is the default.
//!
//! antler resolves the DeerFlow `use:` class path to a built-in wire protocol ([`ProviderKind`]);
//! nothing is imported dynamically. `provider: openai|anthropic|gemini|ollama` is antler's
//! shorter spelling. An OpenAI-compatible entry with `use_responses_api: true` speaks the
//! Responses API.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ModelError;

/// Longest one model call (a whole response, streamed or not) may take when `call_timeout` is
/// unset: generous enough for a long reasoning answer, finite so a stream kept alive by
/// keep-alive comments alone cannot hold a run forever.
pub const DEFAULT_CALL_TIMEOUT_SECS: f64 = 1800.0;

/// Stream chunk gap applied to OpenAI-compatible classes when `stream_chunk_timeout` is unset.
pub const DEFAULT_STREAM_CHUNK_TIMEOUT_SECS: f64 = 240.0;

/// `use:` values that speak OpenAI Chat Completions, with whether the adapter re-injects
/// `reasoning_content` into historical assistant messages (spec 60 §3.4).
const OPENAI_COMPAT_CLASSES: &[(&str, bool)] = &[
    ("langchain_openai:ChatOpenAI", false),
    ("langchain_deepseek:ChatDeepSeek", false),
    ("deerflow.models.patched_deepseek:PatchedChatDeepSeek", true),
    ("deerflow.models.patched_openai:PatchedChatOpenAI", true),
    ("deerflow.models.patched_mimo:PatchedChatMiMo", true),
    ("deerflow.models.patched_stepfun:PatchedChatStepFun", true),
    ("deerflow.models.patched_minimax:PatchedChatMiniMax", false),
    ("deerflow.models.vllm_provider:VllmChatModel", false),
    ("deerflow.models.mindie_provider:MindIEChatModel", false),
];

/// `use:` values that speak the Anthropic Messages API.
const ANTHROPIC_CLASSES: &[&str] = &[
    "langchain_anthropic:ChatAnthropic",
    "deerflow.models.claude_provider:ClaudeChatModel",
];

/// The `use:` value of the native Gemini API.
const GEMINI_CLASS: &str = "langchain_google_genai:ChatGoogleGenerativeAI";

/// The `use:` value of Ollama's native `/api/chat`.
const OLLAMA_CLASS: &str = "langchain_ollama:ChatOllama";

/// DeerFlow classes antler recognises but does not implement (Codex OAuth). Loading warns;
/// selecting such a model fails with [`ModelError::UnsupportedProvider`].
const UNSUPPORTED_CLASSES: &[&str] = &["deerflow.models.openai_codex_provider:CodexChatModel"];

/// Comma-separated list of every accepted `use:` value, for error messages.
pub(crate) fn accepted_use_values() -> String {
    OPENAI_COMPAT_CLASSES
        .iter()
        .map(|(class, _)| *class)
        .chain(ANTHROPIC_CLASSES.iter().copied())
        .chain([GEMINI_CLASS, OLLAMA_CLASS])
        .collect::<Vec<_>>()
        .join(", ")
}

/// antler's short provider spelling (`provider:`), an alternative to `use:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Any OpenAI-compatible Chat Completions endpoint.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
    /// The Gemini API (`generateContent`).
    Gemini,
    /// Ollama's native `/api/chat`.
    Ollama,
}

impl Provider {
    fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Ollama => "ollama",
        }
    }
}

/// The wire protocol (and its quirks) a model entry maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI Chat Completions against `base_url` (OpenAI, DeepSeek, vLLM, Ollama `/v1`, …).
    OpenAiCompat {
        /// Re-inject each historical assistant message's `reasoning_content` into the outgoing
        /// payload (thinking APIs reject history without it).
        replay_reasoning_content: bool,
    },
    /// OpenAI Responses API (`/v1/responses`): an OpenAI-compatible entry with
    /// `use_responses_api: true`.
    OpenAiResponses,
    /// Anthropic Messages API.
    Anthropic,
    /// The Gemini API (`langchain_google_genai:ChatGoogleGenerativeAI`).
    Gemini,
    /// Ollama's native `/api/chat` (`langchain_ollama:ChatOllama`).
    Ollama,
}

/// Per-million-token prices for the UI's cost display; never sent to the provider (EXTRA).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PricingConfig {
    /// Currency code, e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Price per million input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_per_million: Option<f64>,
    /// Price per million output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_per_million: Option<f64>,
    /// Price per million cached input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_cache_hit_per_million: Option<f64>,
    /// Any other pricing keys, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `models:` entry. Keys antler does not type are kept in [`ModelConfig::extra`]
/// (DeerFlow forwards them to the provider constructor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Unique id used by requests, agents, subagents, summarization and title.
    pub name: String,
    /// UI label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// UI text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// DeerFlow provider class path, e.g. `langchain_openai:ChatOpenAI` (see [`ProviderKind`]).
    #[serde(rename = "use", default, skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
    /// antler extension: `openai` | `anthropic` | `gemini` | `ollama`, an alternative to `use`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// The provider's model id (sent as the request's `model`).
    pub model: String,
    /// API key, usually `$ENV_VAR`; sent as `Authorization: Bearer` (OpenAI) or `x-api-key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Endpoint override. `api_base` / `openai_api_base` are accepted as aliases; when several
    /// are present `base_url` wins and the loader warns.
    #[serde(
        default,
        alias = "api_base",
        alias = "openai_api_base",
        skip_serializing_if = "Option::is_none"
    )]
    pub base_url: Option<String>,
    /// Per-call output cap sent to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Total prompt+completion capacity (> 0). Drives "% context used" and fraction-based
    /// summarization; never sent to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Request timeout in seconds; `timeout` and `default_request_timeout` are aliases
    /// (DeerFlow's DeepSeek/Anthropic spellings).
    #[serde(
        default,
        alias = "timeout",
        alias = "default_request_timeout",
        skip_serializing_if = "Option::is_none"
    )]
    pub request_timeout: Option<f64>,
    /// antler extension: overall deadline in seconds for one model call, from sending the
    /// request to the last streamed event; unset → [`DEFAULT_CALL_TIMEOUT_SECS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout: Option<f64>,
    /// Provider client retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The model can run in thinking mode.
    #[serde(default)]
    pub supports_thinking: bool,
    /// The model accepts `reasoning_effort`; when false it is never sent.
    #[serde(default)]
    pub supports_reasoning_effort: bool,
    /// Enables `view_image` and image injection.
    #[serde(default)]
    pub supports_vision: bool,
    /// Request options merged in when thinking is on (see [`effective_request_options`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_thinking_enabled: Option<Map<String, Value>>,
    /// Request options merged in when thinking is off (takes full precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_thinking_disabled: Option<Map<String, Value>>,
    /// Shortcut merged into `when_thinking_enabled.thinking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Map<String, Value>>,
    /// Extra JSON fields for OpenAI-compatible request bodies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_body: Option<Map<String, Value>>,
    /// Route OpenAI calls through `/v1/responses` (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_responses_api: Option<bool>,
    /// e.g. `responses/v1` (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_version: Option<String>,
    /// Max seconds between streamed chunks; unset → 240 s for OpenAI-compatible classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_chunk_timeout: Option<f64>,
    /// Ask for usage on streams; unset → true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_usage: Option<bool>,
    /// `minimal`/`low`/`medium`/`high`/`xhigh`; dropped unless `supports_reasoning_effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// antler extension: `true` makes antler stream from this provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// UI cost display only (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<PricingConfig>,
    /// Every other key (provider extras such as `num_predict`, `enable_prompt_caching`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ModelConfig {
    /// A minimal OpenAI-compatible entry (`use: langchain_openai:ChatOpenAI`).
    pub fn openai_compatible(name: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            display_name: None,
            description: None,
            use_: Some("langchain_openai:ChatOpenAI".to_owned()),
            provider: None,
            model: model.into(),
            api_key: None,
            base_url: None,
            max_tokens: None,
            temperature: None,
            context_window: None,
            request_timeout: None,
            call_timeout: None,
            max_retries: None,
            supports_thinking: false,
            supports_reasoning_effort: false,
            supports_vision: false,
            when_thinking_enabled: None,
            when_thinking_disabled: None,
            thinking: None,
            extra_body: None,
            use_responses_api: None,
            output_version: None,
            stream_chunk_timeout: None,
            stream_usage: None,
            reasoning_effort: None,
            streaming: None,
            pricing: None,
            extra: Map::new(),
        }
    }

    /// The wire protocol this entry maps to.
    ///
    /// `use` is authoritative; `provider` alone picks the plain adapter; both set must agree.
    /// `use_responses_api: true` turns an OpenAI-compatible entry into a Responses API one.
    pub fn provider_kind(&self) -> Result<ProviderKind, ModelError> {
        let kind = self.wire_kind()?;
        Ok(match kind {
            ProviderKind::OpenAiCompat { .. } if self.use_responses_api == Some(true) => {
                ProviderKind::OpenAiResponses
            }
            other => other,
        })
    }

    fn wire_kind(&self) -> Result<ProviderKind, ModelError> {
        let from_use = match self.use_.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(value) => Some((value, kind_of_use(value, &self.name)?)),
        };
        match (from_use, self.provider) {
            (Some((_, kind)), None) => Ok(kind),
            (Some((value, kind)), Some(provider)) => {
                let agrees = matches!(
                    (kind, provider),
                    (ProviderKind::OpenAiCompat { .. }, Provider::Openai)
                        | (ProviderKind::Anthropic, Provider::Anthropic)
                        | (ProviderKind::Gemini, Provider::Gemini)
                        | (ProviderKind::Ollama, Provider::Ollama)
                );
                if agrees {
                    Ok(kind)
                } else {
                    Err(ModelError::ProviderConflict {
                        model: self.name.clone(),
                        value: value.to_owned(),
                        provider: provider.as_str().to_owned(),
                    })
                }
            }
            (None, Some(provider)) => Ok(provider_default(provider)),
            (None, None) => Err(ModelError::MissingProvider {
                model: self.name.clone(),
            }),
        }
    }

    /// `stream_chunk_timeout`, or 240 s for OpenAI-compatible entries (Chat Completions and
    /// Responses); `None` for the others, which use the driver's own default.
    pub fn effective_stream_chunk_timeout(&self) -> Option<f64> {
        match self.stream_chunk_timeout {
            Some(t) => Some(t),
            None => match self.provider_kind() {
                Ok(ProviderKind::OpenAiCompat { .. } | ProviderKind::OpenAiResponses) => {
                    Some(DEFAULT_STREAM_CHUNK_TIMEOUT_SECS)
                }
                Ok(ProviderKind::Anthropic | ProviderKind::Gemini | ProviderKind::Ollama)
                | Err(_) => None,
            },
        }
    }

    /// `call_timeout`, or [`DEFAULT_CALL_TIMEOUT_SECS`].
    pub fn effective_call_timeout(&self) -> f64 {
        self.call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT_SECS)
    }

    /// `stream_usage`, defaulting to true.
    pub fn effective_stream_usage(&self) -> bool {
        self.stream_usage.unwrap_or(true)
    }
}

fn provider_default(provider: Provider) -> ProviderKind {
    match provider {
        Provider::Openai => ProviderKind::OpenAiCompat {
            replay_reasoning_content: false,
        },
        Provider::Anthropic => ProviderKind::Anthropic,
        Provider::Gemini => ProviderKind::Gemini,
        Provider::Ollama => ProviderKind::Ollama,
    }
}

fn kind_of_use(value: &str, model: &str) -> Result<ProviderKind, ModelError> {
    if let Some((_, replay)) = OPENAI_COMPAT_CLASSES.iter().find(|(c, _)| *c == value) {
        return Ok(ProviderKind::OpenAiCompat {
            replay_reasoning_content: *replay,
        });
    }
    if ANTHROPIC_CLASSES.contains(&value) {
        return Ok(ProviderKind::Anthropic);
    }
    if value == GEMINI_CLASS {
        return Ok(ProviderKind::Gemini);
    }
    if value == OLLAMA_CLASS {
        return Ok(ProviderKind::Ollama);
    }
    if UNSUPPORTED_CLASSES.contains(&value) {
        return Err(ModelError::UnsupportedProvider {
            model: model.to_owned(),
            value: value.to_owned(),
        });
    }
    Err(ModelError::UnknownProvider {
        model: model.to_owned(),
        value: value.to_owned(),
    })
}

/// The request options a model entry contributes once the thinking toggle is applied
/// (spec 60 §3.3), as a JSON object to merge over the request: `extra_body`, `reasoning_effort`
/// from the entry itself, plus every key of whichever `when_thinking_*` mapping applies
/// (`thinking`, `temperature`, …). Nested mappings are deep-merged.
///
/// - thinking on and `when_thinking_enabled`/`thinking` set: requires `supports_thinking`, merges
///   them (the `thinking` shortcut lands in `when_thinking_enabled.thinking`).
/// - thinking off: `when_thinking_disabled` if set (user wins); otherwise the "off" switch that
///   mirrors how thinking is turned on: `extra_body.thinking.type` → `{type: disabled}` plus
///   `reasoning_effort: minimal`; `extra_body.chat_template_kwargs.{thinking,enable_thinking}` →
///   false (vLLM/Qwen); `thinking.type` → `thinking: {type: disabled}` (Anthropic).
/// - `reasoning_effort` is removed unless `supports_reasoning_effort`.
///
/// A run-level `reasoning_effort` is the caller's to add, under the same support rule.
pub fn effective_request_options(
    model: &ModelConfig,
    thinking_enabled: bool,
) -> Result<Map<String, Value>, ModelError> {
    let mut kwargs = Map::new();
    if let Some(body) = &model.extra_body {
        kwargs.insert("extra_body".to_owned(), Value::Object(body.clone()));
    }
    if let Some(effort) = &model.reasoning_effort {
        kwargs.insert("reasoning_effort".to_owned(), Value::String(effort.clone()));
    }

    let mut wte = model.when_thinking_enabled.clone().unwrap_or_default();
    if let Some(shortcut) = &model.thinking {
        let mut patch = Map::new();
        patch.insert("thinking".to_owned(), Value::Object(shortcut.clone()));
        deep_merge(&mut wte, &patch);
    }
    let has_thinking_settings = model.when_thinking_enabled.is_some() || model.thinking.is_some();

    if thinking_enabled {
        if has_thinking_settings {
            if !model.supports_thinking {
                return Err(ModelError::ThinkingUnsupported {
                    model: model.name.clone(),
                });
            }
            deep_merge(&mut kwargs, &wte);
        }
    } else if let Some(wtd) = &model.when_thinking_disabled {
        deep_merge(&mut kwargs, wtd);
    } else if wte
        .get("extra_body")
        .and_then(|b| b.get("thinking"))
        .and_then(|t| t.get("type"))
        .is_some_and(|t| !t.is_null())
    {
        let patch = serde_json::json!({
            "extra_body": {"thinking": {"type": "disabled"}},
            "reasoning_effort": "minimal",
        });
        if let Value::Object(patch) = patch {
            deep_merge(&mut kwargs, &patch);
        }
    } else if let Some(template) = wte
        .get("extra_body")
        .and_then(|b| b.get("chat_template_kwargs"))
        .and_then(Value::as_object)
        .filter(|t| t.contains_key("thinking") || t.contains_key("enable_thinking"))
    {
        let mut off = Map::new();
        for key in ["thinking", "enable_thinking"] {
            if template.contains_key(key) {
                off.insert(key.to_owned(), Value::Bool(false));
            }
        }
        let mut body = Map::new();
        body.insert("chat_template_kwargs".to_owned(), Value::Object(off));
        let mut patch = Map::new();
        patch.insert("extra_body".to_owned(), Value::Object(body));
        deep_merge(&mut kwargs, &patch);
    } else if wte
        .get("thinking")
        .and_then(|t| t.get("type"))
        .is_some_and(|t| !t.is_null())
    {
        kwargs.insert(
            "thinking".to_owned(),
            serde_json::json!({"type": "disabled"}),
        );
    }

    if !model.supports_reasoning_effort {
        kwargs.remove("reasoning_effort");
    }
    Ok(kwargs)
}

/// Deep-merges `patch` into `base`: objects merge key by key, anything else is replaced.
pub fn deep_merge(base: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match (base.get_mut(key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => {
                deep_merge(existing, incoming);
            }
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}
