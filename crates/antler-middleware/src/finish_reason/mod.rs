//! Provider stop signals on the final AI message, and the two guards that act on them (spec 30
//! §ModelLengthFinishReasonMiddleware, §SafetyFinishReasonMiddleware):
//!
//! - [`model_length`] (L20): the answer was cut by the provider's output limit → the run's
//!   `stop_reason` becomes `model_length_capped`; the text is kept as is.
//! - [`safety`] (L21, U9): the provider stopped for safety → possibly truncated tool calls are
//!   never executed and an empty answer is never persisted; the user gets an explanation.
//!
//! Every provider spells these signals differently, so the guards ask a list of
//! [`TerminationDetector`]s. The built-ins read what antler's provider modules put into
//! `response_metadata` (values found in `additional_kwargs` count too, as DeerFlow's detectors
//! accept both):
//!
//! | provider | length | safety |
//! |---|---|---|
//! | OpenAI-compatible (incl. Responses API, Ollama) | `finish_reason: length` | `finish_reason: content_filter` |
//! | Anthropic | `stop_reason: max_tokens` (and the mapped `finish_reason: length`) | `stop_reason: refusal` |
//! | Gemini | `finish_reason: MAX_TOKENS` | `finish_reason: SAFETY`, `RECITATION`, … |
//!
//! The Responses API's `incomplete_details.reason: max_output_tokens` and Ollama's
//! `done_reason: length` arrive as `finish_reason: length` (the providers map them).

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use antler_config::PluginRef;
use antler_protocol::{AiMessage, Content, Object};
use serde_json::Value;

use crate::py::truthy;

pub mod model_length;
pub mod safety;

/// A provider stop signal one detector recognised.
#[derive(Clone, Debug, PartialEq)]
pub struct Termination {
    /// The detector that fired (`openai_compatible_length`, `gemini_safety`, …).
    pub detector: String,
    /// The metadata field that carried the signal (`finish_reason`, `stop_reason`).
    pub reason_field: String,
    /// Its value as the provider wrote it (`length`, `content_filter`, `SAFETY`, …).
    pub reason_value: String,
    /// Provider details worth keeping (`content_filter_results`, `safety_ratings`).
    pub extras: Object,
}

/// Recognises one provider's way of saying "I stopped for reason X". Runs on every model
/// response: must be cheap and tolerate missing or oddly typed metadata.
pub trait TerminationDetector: Send + Sync {
    fn name(&self) -> &str;
    fn detect(&self, message: &AiMessage) -> Option<Termination>;
}

/// How a [`FieldDetector`] compares values (DeerFlow lower-cases OpenAI and Anthropic values and
/// upper-cases Gemini's; both are case-insensitive in effect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fold {
    Lower,
    Upper,
}

impl Fold {
    fn apply(self, s: &str) -> String {
        match self {
            Fold::Lower => s.to_lowercase(),
            Fold::Upper => s.to_uppercase(),
        }
    }
}

/// A detector that fires when one metadata field holds one of a set of values — every built-in
/// detector is one of these, with its own field, values and extras.
#[derive(Clone, Debug)]
pub struct FieldDetector {
    name: &'static str,
    field: &'static str,
    values: HashSet<String>,
    fold: Fold,
    /// A `response_metadata` key copied into [`Termination::extras`] when present.
    extras_key: Option<&'static str>,
}

impl FieldDetector {
    fn new(
        name: &'static str,
        field: &'static str,
        values: &[&str],
        fold: Fold,
        extras_key: Option<&'static str>,
    ) -> Self {
        FieldDetector {
            name,
            field,
            values: values.iter().map(|v| fold.apply(v)).collect(),
            fold,
            extras_key,
        }
    }

    /// The same detector matching `values` instead of its defaults.
    pub fn with_values<S: AsRef<str>>(mut self, values: impl IntoIterator<Item = S>) -> Self {
        self.values = values
            .into_iter()
            .map(|v| self.fold.apply(v.as_ref()))
            .collect();
        self
    }

    /// OpenAI-compatible `finish_reason == "length"`.
    pub fn openai_compatible_length() -> Self {
        Self::new(
            "openai_compatible_length",
            "finish_reason",
            &["length"],
            Fold::Lower,
            None,
        )
    }

    /// Anthropic `stop_reason == "max_tokens"`.
    pub fn anthropic_max_tokens() -> Self {
        Self::new(
            "anthropic_max_tokens",
            "stop_reason",
            &["max_tokens"],
            Fold::Lower,
            None,
        )
    }

    /// Gemini / Vertex AI `finish_reason == "MAX_TOKENS"`.
    pub fn gemini_max_tokens() -> Self {
        Self::new(
            "gemini_max_tokens",
            "finish_reason",
            &["MAX_TOKENS"],
            Fold::Upper,
            None,
        )
    }

    /// OpenAI-compatible `finish_reason == "content_filter"` (OpenAI, Azure, DeepSeek, Kimi,
    /// vLLM, …); Azure's `content_filter_results` is kept as an extra.
    pub fn openai_compatible_content_filter() -> Self {
        Self::new(
            "openai_compatible_content_filter",
            "finish_reason",
            &["content_filter"],
            Fold::Lower,
            Some("content_filter_results"),
        )
    }

    /// Anthropic `stop_reason == "refusal"`.
    pub fn anthropic_refusal() -> Self {
        Self::new(
            "anthropic_refusal",
            "stop_reason",
            &["refusal"],
            Fold::Lower,
            None,
        )
    }

    /// Gemini's safety-related finish reasons (text and image safety, blocklist, PII,
    /// recitation); `safety_ratings` is kept as an extra. `MAX_TOKENS`, `OTHER` and the
    /// tool-protocol errors are deliberately not safety signals.
    pub fn gemini_safety() -> Self {
        Self::new(
            "gemini_safety",
            "finish_reason",
            &[
                "SAFETY",
                "BLOCKLIST",
                "PROHIBITED_CONTENT",
                "SPII",
                "RECITATION",
                "IMAGE_SAFETY",
                "IMAGE_PROHIBITED_CONTENT",
                "IMAGE_RECITATION",
            ],
            Fold::Upper,
            Some("safety_ratings"),
        )
    }
}

impl TerminationDetector for FieldDetector {
    fn name(&self) -> &str {
        self.name
    }

    fn detect(&self, message: &AiMessage) -> Option<Termination> {
        let value = metadata_str(message, self.field)?;
        if !self.values.contains(&self.fold.apply(value)) {
            return None;
        }
        let mut extras = Object::new();
        if let Some(key) = self.extras_key {
            if let Some(v) = message.response_metadata.get(key).filter(|v| truthy(v)) {
                extras.insert(key.to_owned(), v.clone());
            }
        }
        Some(Termination {
            detector: self.name.to_owned(),
            reason_field: self.field.to_owned(),
            reason_value: value.to_owned(),
            extras,
        })
    }
}

/// The built-in length-cap detectors, in DeerFlow's order.
pub fn default_length_detectors() -> Vec<Arc<dyn TerminationDetector>> {
    vec![
        Arc::new(FieldDetector::openai_compatible_length()),
        Arc::new(FieldDetector::anthropic_max_tokens()),
        Arc::new(FieldDetector::gemini_max_tokens()),
    ]
}

/// The built-in safety detectors, in DeerFlow's order.
pub fn default_safety_detectors() -> Vec<Arc<dyn TerminationDetector>> {
    vec![
        Arc::new(FieldDetector::openai_compatible_content_filter()),
        Arc::new(FieldDetector::anthropic_refusal()),
        Arc::new(FieldDetector::gemini_safety()),
    ]
}

/// The module DeerFlow's built-in safety detectors live in (`safety_finish_reason.detectors`
/// entries name them as `<module>:<Class>`).
pub const SAFETY_DETECTORS_MODULE: &str =
    "deerflow.agents.middlewares.safety_termination_detectors";

/// A `safety_finish_reason.detectors` entry antler cannot build.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DetectorConfigError {
    #[error("an empty detector list detects nothing — leave detectors unset for the built-ins, or use enabled: false to turn the check off")]
    Empty,
    #[error("'{0}' is not one of DeerFlow's built-in safety detectors, and antler cannot load Python classes — use {SAFETY_DETECTORS_MODULE}:OpenAICompatibleContentFilterDetector, :AnthropicRefusalDetector or :GeminiSafetyDetector (each takes a custom value list), or leave detectors unset")]
    Unknown(String),
    #[error("'{use_}': config.{key} must be a list of strings")]
    BadValues { use_: String, key: &'static str },
    #[error("'{use_}': unknown config key '{key}' (expected '{expected}')")]
    UnknownKey {
        use_: String,
        key: String,
        expected: &'static str,
    },
}

/// Build one configured safety detector: DeerFlow's three built-ins, by class path, with their
/// optional value list (`finish_reasons` / `stop_reasons`).
pub fn safety_detector_from_config(
    entry: &PluginRef,
) -> Result<Arc<dyn TerminationDetector>, DetectorConfigError> {
    let use_ = entry.use_.trim();
    let class = use_
        .strip_prefix(SAFETY_DETECTORS_MODULE)
        .and_then(|rest| rest.strip_prefix(':'))
        .ok_or_else(|| DetectorConfigError::Unknown(use_.to_owned()))?;
    let (detector, key) = match class {
        "OpenAICompatibleContentFilterDetector" => (
            FieldDetector::openai_compatible_content_filter(),
            "finish_reasons",
        ),
        "AnthropicRefusalDetector" => (FieldDetector::anthropic_refusal(), "stop_reasons"),
        "GeminiSafetyDetector" => (FieldDetector::gemini_safety(), "finish_reasons"),
        _ => return Err(DetectorConfigError::Unknown(use_.to_owned())),
    };
    if let Some(other) = entry.config.keys().find(|k| k.as_str() != key) {
        return Err(DetectorConfigError::UnknownKey {
            use_: use_.to_owned(),
            key: other.clone(),
            expected: key,
        });
    }
    match entry.config.get(key) {
        None | Some(Value::Null) => Ok(Arc::new(detector)),
        Some(Value::Array(items)) => {
            let values: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            let values = values.ok_or_else(|| DetectorConfigError::BadValues {
                use_: use_.to_owned(),
                key,
            })?;
            Ok(Arc::new(detector.with_values(values)))
        }
        Some(_) => Err(DetectorConfigError::BadValues {
            use_: use_.to_owned(),
            key,
        }),
    }
}

/// The first hit of `detectors`, in order. A detector that panics counts as no hit: a buggy
/// detector must not break a run.
pub fn first_hit(
    detectors: &[Arc<dyn TerminationDetector>],
    message: &AiMessage,
) -> Option<Termination> {
    detectors.iter().find_map(
        |d| match catch_unwind(AssertUnwindSafe(|| d.detect(message))) {
            Ok(hit) => hit,
            Err(_) => {
                tracing::error!(
                    detector = d.name(),
                    "termination detector panicked; treated as no match"
                );
                None
            }
        },
    )
}

/// A non-empty string under `field` in `response_metadata`, else in `additional_kwargs`.
pub fn metadata_str<'a>(message: &'a AiMessage, field: &str) -> Option<&'a str> {
    [&message.response_metadata, &message.additional_kwargs]
        .into_iter()
        .find_map(|o| {
            o.get(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
}

/// Whether the message has user-visible text: a non-blank string, or a non-blank bare string or
/// `text`/`output_text` block (thinking blocks do not count).
pub fn has_visible_content(message: &AiMessage) -> bool {
    match &message.content {
        Content::Text(s) => !s.trim().is_empty(),
        Content::Blocks(blocks) => blocks.iter().any(|b| match b {
            Value::String(s) => !s.trim().is_empty(),
            Value::Object(o) => {
                matches!(
                    o.get("type").and_then(Value::as_str),
                    Some("text" | "output_text")
                ) && o
                    .get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.trim().is_empty())
            }
            _ => false,
        }),
    }
}

/// Whether the message still means to call tools (or failed to): structured or invalid calls, or
/// provider-raw `tool_calls` / legacy `function_call`.
pub fn has_tool_call_intent(message: &AiMessage) -> bool {
    !message.tool_calls.is_empty()
        || !message.invalid_tool_calls.is_empty()
        || message
            .additional_kwargs
            .get("tool_calls")
            .is_some_and(truthy)
        || message
            .additional_kwargs
            .get("function_call")
            .is_some_and(truthy)
}

/// Append `text` to message content as DeerFlow does: empty → the text; string → `"\n\n"` +
/// text; blocks → an extra text block.
pub(crate) fn append_text(content: Content, text: &str) -> Content {
    match content {
        Content::Text(t) if t.is_empty() => Content::Text(text.to_owned()),
        Content::Text(t) => Content::Text(format!("{t}\n\n{text}")),
        Content::Blocks(b) if b.is_empty() => Content::Text(text.to_owned()),
        Content::Blocks(mut b) => {
            b.push(serde_json::json!({"type": "text", "text": format!("\n\n{text}")}));
            Content::Blocks(b)
        }
    }
}
