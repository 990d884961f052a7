//! ModelLengthFinishReason (chain L20, lead only, always; after_model): a terminal answer the
//! provider cut at its output limit marks the run `stop_reason: model_length_capped`, so the
//! run record (and `antler run`) say the answer is truncated instead of passing it off as a
//! clean completion.
//!
//! Deliberately narrow, as DeerFlow's: only a final AI message with visible text and no tool-call
//! intent counts (a capped tool call is the tool path's business; an empty capped answer is
//! TerminalResponse's). The message is never rewritten and tool-call-looking text is never
//! parsed; an earlier stop reason is never overwritten.

use std::sync::Arc;

use antler_protocol::{Message, ThreadState};
use antler_runtime::{keys, HookOutput, HookSet, Middleware, RunContext};
use async_trait::async_trait;

use super::{
    default_length_detectors, first_hit, has_tool_call_intent, has_visible_content, Termination,
    TerminationDetector,
};

use crate::hook::HookResult;

pub const NAME: &str = "ModelLengthFinishReasonMiddleware";
/// The run's `stop_reason` when the final answer was length-capped.
pub const STOP_REASON: &str = "model_length_capped";

/// Records provider length caps of terminal answers.
pub struct ModelLengthFinishReasonMiddleware {
    detectors: Vec<Arc<dyn TerminationDetector>>,
}

default_is_new!(ModelLengthFinishReasonMiddleware);

impl ModelLengthFinishReasonMiddleware {
    /// With the built-in detectors (OpenAI-compatible, Anthropic, Gemini).
    pub fn new() -> Self {
        Self::with_detectors(default_length_detectors())
    }

    /// With these detectors instead (an empty list means the built-ins).
    pub fn with_detectors(detectors: Vec<Arc<dyn TerminationDetector>>) -> Self {
        let detectors = if detectors.is_empty() {
            default_length_detectors()
        } else {
            detectors
        };
        ModelLengthFinishReasonMiddleware { detectors }
    }

    /// The length cap of the last message, when it is a terminal answer with text.
    pub fn detect(&self, state: &ThreadState) -> Option<Termination> {
        let Some(Message::Ai(last)) = state.messages.last() else {
            return None;
        };
        if has_tool_call_intent(last) || !has_visible_content(last) {
            return None;
        }
        first_hit(&self.detectors, last)
    }
}

#[async_trait]
impl Middleware for ModelLengthFinishReasonMiddleware {
    middleware_identity!(NAME, HookSet::AFTER_MODEL, deferrable: HookSet::AFTER_MODEL);

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        if let Some(t) = self.detect(state) {
            // An earlier cap reason (from a previous hidden turn or another guard) wins.
            let stamped = run.set_if_absent(&keys::STOP_REASON, STOP_REASON.to_owned());
            tracing::info!(
                thread = %run.thread_id,
                run = %run.run_id,
                message = state.messages.last().and_then(|m| m.id()).unwrap_or(""),
                detector = %t.detector,
                reason_field = %t.reason_field,
                reason_value = %t.reason_value,
                stamped_stop_reason = stamped,
                "provider model length cap detected"
            );
        }
        Ok(HookOutput::none())
    }
}
