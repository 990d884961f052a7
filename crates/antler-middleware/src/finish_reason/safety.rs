//! SafetyFinishReason (chain L21 lead, U9 subagent; after_model; `safety_finish_reason.enabled`,
//! default on): when the provider stopped a response for safety reasons,
//!
//! - tool calls in it are never executed — generation stopped mid-way, so their arguments may be
//!   truncated (a half-written `write_file` would otherwise land on disk);
//! - an empty answer is never persisted — strict providers reject an empty assistant message in
//!   every later request, which would strand the thread.
//!
//! The message is replaced in place (same id) with its tool calls removed through
//! [`AiMessage::set_tool_calls`] (the provider's safety `finish_reason` stays), an explanation
//! appended for the user, and an `additional_kwargs.safety_termination` record. A filtered
//! response that still has text and no tool calls is left alone, so its partial answer reaches
//! the user. The run's `stop_reason` becomes `safety_capped`; a `safety_termination` custom event
//! tells the UI to drop "tool starting…" placeholders, and the journal gets a
//! `middleware:safety_termination` record with the suppressed call names and ids — never their
//! arguments, which are the very content the provider filtered.
//!
//! Registered after LoopDetection, TokenBudget and TerminalResponse: after_model hooks run in
//! reverse, so this sees the raw provider response first and the other guards count the cleaned
//! message.

use std::sync::Arc;

use antler_config::SafetyFinishReasonConfig;
use antler_protocol::{markers, AiMessage, Content, Message, StateUpdate, ThreadState};
use antler_runtime::{keys, HookOutput, HookSet, Middleware, RunContext, RunEvent};
use async_trait::async_trait;
use serde_json::{json, Value};

use super::{
    append_text, default_safety_detectors, first_hit, safety_detector_from_config,
    DetectorConfigError, Termination, TerminationDetector,
};

use crate::hook::HookResult;

pub const NAME: &str = "SafetyFinishReasonMiddleware";
/// The run's `stop_reason` after a safety stop was repaired.
pub const STOP_REASON: &str = "safety_capped";
/// `type` of the custom stream event, and the journal action.
pub const EVENT: &str = "safety_termination";

/// Repairs AI messages a provider stopped for safety.
pub struct SafetyFinishReasonMiddleware {
    detectors: Vec<Arc<dyn TerminationDetector>>,
}

default_is_new!(SafetyFinishReasonMiddleware);

impl SafetyFinishReasonMiddleware {
    /// With the built-in detectors (OpenAI-compatible, Anthropic, Gemini).
    pub fn new() -> Self {
        SafetyFinishReasonMiddleware {
            detectors: default_safety_detectors(),
        }
    }

    /// With these detectors, in order, instead of the built-ins. An empty list is refused: it
    /// would keep the middleware in the chain while detecting nothing.
    pub fn with_detectors(
        detectors: Vec<Arc<dyn TerminationDetector>>,
    ) -> Result<Self, DetectorConfigError> {
        if detectors.is_empty() {
            return Err(DetectorConfigError::Empty);
        }
        Ok(SafetyFinishReasonMiddleware { detectors })
    }

    /// From `safety_finish_reason`: `None` when disabled; `detectors: null` → the built-ins,
    /// otherwise DeerFlow's built-in detector classes by path (see
    /// [`safety_detector_from_config`]).
    pub fn from_config(config: &SafetyFinishReasonConfig) -> Result<Option<Self>, String> {
        if !config.enabled {
            return Ok(None);
        }
        let Some(entries) = &config.detectors else {
            return Ok(Some(Self::new()));
        };
        let detectors = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                safety_detector_from_config(e)
                    .map_err(|err| format!("safety_finish_reason.detectors[{i}]: {err}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_detectors(detectors)
            .map(Some)
            .map_err(|e| format!("safety_finish_reason.detectors: {e}"))
    }

    /// The detectors in use, by name.
    pub fn detector_names(&self) -> Vec<&str> {
        self.detectors.iter().map(|d| d.name()).collect()
    }

    /// The repaired last message and what fired, when a safety stop needs repairing.
    pub fn repair(&self, state: &ThreadState) -> Option<(AiMessage, Termination)> {
        let Some(Message::Ai(last)) = state.messages.last() else {
            return None;
        };
        let blank = is_blank(&last.content);
        if last.tool_calls.is_empty() && !blank {
            return None;
        }
        let t = first_hit(&self.detectors, last)?;
        Some((patched(last, &t), t))
    }
}

/// Whether the text of `content` (LangChain's: strings and `text` fields of blocks) is blank,
/// without building it — this runs on every model response.
fn is_blank(content: &Content) -> bool {
    match content {
        Content::Text(s) => s.trim().is_empty(),
        Content::Blocks(blocks) => blocks.iter().all(|b| match b {
            Value::String(s) => s.trim().is_empty(),
            Value::Object(o) => o
                .get("text")
                .and_then(Value::as_str)
                .is_none_or(|t| t.trim().is_empty()),
            _ => true,
        }),
    }
}

fn explanation(t: &Termination, had_tool_calls: bool) -> String {
    let signal = format!(
        "{}={:?}, detector {:?}",
        t.reason_field, t.reason_value, t.detector
    );
    if had_tool_calls {
        format!(
            "The model provider stopped this response on a safety signal ({signal}). Its tool calls were not run, because generation stopped mid-way and their arguments may be incomplete. Please rephrase the request or ask for a smaller piece of output."
        )
    } else {
        format!(
            "The model provider stopped this response on a safety signal ({signal}) and returned no content. Please rephrase the request or start a new conversation."
        )
    }
}

fn patched(last: &AiMessage, t: &Termination) -> AiMessage {
    let names: Vec<&str> = last
        .tool_calls
        .iter()
        .map(|c| {
            if c.name.is_empty() {
                "unknown"
            } else {
                c.name.as_str()
            }
        })
        .collect();
    let mut msg = last.clone();
    msg.content = append_text(
        std::mem::take(&mut msg.content),
        &explanation(t, !names.is_empty()),
    );
    msg.additional_kwargs.insert(
        markers::SAFETY_TERMINATION.into(),
        json!({
            "detector": t.detector,
            "reason_field": t.reason_field,
            "reason_value": t.reason_value,
            "suppressed_tool_call_count": names.len(),
            "suppressed_tool_call_names": names,
            "extras": t.extras,
        }),
    );
    msg.set_tool_calls(Vec::new());
    msg
}

#[async_trait]
impl Middleware for SafetyFinishReasonMiddleware {
    middleware_identity!(NAME, HookSet::AFTER_MODEL, deferrable: HookSet::AFTER_MODEL);

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let Some((msg, t)) = self.repair(state) else {
            return Ok(HookOutput::none());
        };
        let Some(Message::Ai(original)) = state.messages.last() else {
            return Ok(HookOutput::none());
        };
        run.set(&keys::STOP_REASON, STOP_REASON.to_owned());
        let names: Vec<&str> = original
            .tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        tracing::warn!(
            thread = %run.thread_id,
            detector = %t.detector,
            reason_field = %t.reason_field,
            reason_value = %t.reason_value,
            suppressed = ?names,
            backfilled_empty_content = original.tool_calls.is_empty(),
            "provider safety termination: suppressed {} tool call(s)",
            names.len()
        );
        let record = msg
            .additional_kwargs
            .get(markers::SAFETY_TERMINATION)
            .cloned()
            .unwrap_or(Value::Null);
        run.events.custom(json!({
            "type": EVENT,
            "detector": t.detector,
            "reason_field": t.reason_field,
            "reason_value": t.reason_value,
            "suppressed_tool_call_count": record["suppressed_tool_call_count"],
            "suppressed_tool_call_names": record["suppressed_tool_call_names"],
            "thread_id": run.thread_id,
        }));
        if run.observed() {
            let ids: Vec<&str> = original
                .tool_calls
                .iter()
                .filter_map(|c| c.id.as_deref().filter(|id| !id.is_empty()))
                .collect();
            let payload = json!({
                "hook": "after_model",
                "action": "suppress_tool_calls",
                "detector": t.detector,
                "reason_field": t.reason_field,
                "reason_value": t.reason_value,
                "suppressed_tool_call_count": record["suppressed_tool_call_count"],
                "suppressed_tool_call_names": record["suppressed_tool_call_names"],
                "suppressed_tool_call_ids": ids,
                "message_id": original.id,
                "extras": t.extras,
            });
            run.observe(&RunEvent::Middleware {
                name: NAME,
                action: EVENT,
                payload: &payload,
            });
        }
        Ok(HookOutput::update(StateUpdate::message(Message::Ai(msg))))
    }
}
