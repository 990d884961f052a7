//! TerminalResponse (chain L19, lead only; before_agent, after_model (jumps to the model),
//! wrap_model, after_agent): a run that used tools must end with an answer the user can see.
//!
//! Some providers return an empty final message after tool results, which would end the run as
//! a silent "success". When the last AI message has no visible text and no tool-call intent
//! (structured, invalid or raw calls, or `finish_reason` `tool_calls`/`function_call`), and a
//! tool result follows the latest real (not hidden) human message:
//!
//! 1. the first time in a run, the empty message is removed and the run jumps back to the model,
//!    whose next request — only that one — ends with a hidden human nudge named
//!    `terminal_response_recovery` asking for a short visible answer from the tool results;
//! 2. after that, the empty message is replaced (same id) by a visible fallback carrying the
//!    `deerflow_error_fallback` markers, so the run ends as `error`.
//!
//! The retry budget is once per run, not per empty message: a retry that calls another tool and
//! then answers empty again gets the fallback, so empty → retry → tool cannot loop. Runs without a
//! real user message (internal, scheduled) are out of scope. The budget lives in the run's
//! scratchpad, which is per invocation: a resumed run starts fresh and an abandoned one leaves
//! nothing behind (DeerFlow needs a bounded map for the same).

use antler_protocol::{
    markers, AiMessage, HumanMessage, Message, Object, StateUpdate, ThreadState,
};
use antler_runtime::{HookOutput, JumpTo, Middleware, ModelNext, ModelRequest, RunContext, RunKey};
use async_trait::async_trait;
use serde_json::Value;

use crate::finish_reason::{has_tool_call_intent, has_visible_content};
use crate::hook::{AfterAgentResult, BeforeAgentResult, HookResult, ModelResult};

pub const NAME: &str = "TerminalResponseMiddleware";

/// The hidden nudge of the retry (request-only, never persisted).
pub const RECOVERY_PROMPT: &str = "<system_reminder>\nYour last reply after running tools was empty. Read the tool results already in this conversation and give the user a short, visible final answer. Call another tool only if you cannot answer without it.\n</system_reminder>";

/// What replaces an empty answer once the retry is spent.
pub const FALLBACK_CONTENT: &str = "The model completed the tool run but returned no final response, including after one automatic retry. Please try again or use a different model.";

/// `error_reason` of the fallback.
pub const FALLBACK_REASON: &str = "Model returned an empty terminal response after one retry";

/// Set once this run spent its retry.
const RETRIED: RunKey<bool> = RunKey::new("terminal_response_retried");
/// Set while the next model request must carry the nudge.
const PENDING: RunKey<bool> = RunKey::new("terminal_response_pending");

/// Retries one empty post-tool answer, then answers with a visible error fallback.
#[derive(Clone, Debug, Default)]
pub struct TerminalResponseMiddleware;

impl TerminalResponseMiddleware {
    pub fn new() -> Self {
        TerminalResponseMiddleware
    }

    fn reset(run: &RunContext) {
        run.remove(&RETRIED);
        run.remove(&PENDING);
    }
}

/// No visible text, and nothing that routes to tools.
pub fn is_empty_terminal(msg: &AiMessage) -> bool {
    let tool_finish = matches!(msg.finish_reason(), Some("tool_calls" | "function_call"));
    !has_visible_content(msg) && !has_tool_call_intent(msg) && !tool_finish
}

/// Whether a tool result follows the latest human message that is not hidden (`false` when there
/// is none at all).
pub fn tool_result_in_current_turn(state: &ThreadState) -> bool {
    let msgs = &state.messages;
    let Some(user) = msgs
        .iter()
        .rposition(|m| matches!(m, Message::Human(_)) && !m.is_hidden())
    else {
        return false;
    };
    msgs.iter()
        .skip(user + 1)
        .any(|m| matches!(m, Message::Tool(_)))
}

fn fallback(last: &AiMessage) -> AiMessage {
    let mut msg = last.clone();
    msg.content = FALLBACK_CONTENT.into();
    msg.additional_kwargs
        .insert(markers::ERROR_FALLBACK.into(), Value::Bool(true));
    msg.additional_kwargs
        .insert("error_reason".into(), Value::from(FALLBACK_REASON));
    msg
}

fn recovery_message() -> Message {
    let mut kwargs = Object::new();
    markers::mark_hidden(&mut kwargs);
    Message::Human(HumanMessage {
        content: RECOVERY_PROMPT.into(),
        name: Some(markers::TERMINAL_RESPONSE_RECOVERY.to_owned()),
        additional_kwargs: kwargs.into(),
        ..Default::default()
    })
}

#[async_trait]
impl Middleware for TerminalResponseMiddleware {
    middleware_identity!(NAME, crate::hook::RUN_GUARD_HOOKS, deferrable: antler_runtime::HookSet::AFTER_MODEL);

    async fn before_agent(&self, _state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        Self::reset(run);
        Ok(HookOutput::none())
    }

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let Some(Message::Ai(last)) = state.messages.last() else {
            return Ok(HookOutput::none());
        };
        if !is_empty_terminal(last) || !tool_result_in_current_turn(state) {
            return Ok(HookOutput::none());
        }
        if !run.get(&RETRIED).unwrap_or(false) {
            run.set(&RETRIED, true);
            run.set(&PENDING, true);
            tracing::warn!(thread = %run.thread_id, run = %run.run_id, "empty final answer after tool results; asking the model once more");
            // The retry's answer gets a new id: drop the empty one so it stays out of history.
            let update = match &last.id {
                Some(id) => StateUpdate::message(Message::remove(id.clone())),
                None => StateUpdate::default(),
            };
            return Ok(HookOutput::update(update).with_jump(JumpTo::Model));
        }
        tracing::warn!(thread = %run.thread_id, run = %run.run_id, "empty final answer again after the retry; answering with the error fallback");
        Ok(HookOutput::update(StateUpdate::message(Message::Ai(
            fallback(last),
        ))))
    }

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if !req.run.get(&PENDING).unwrap_or(false) {
            return next.run(req).await;
        }
        req.messages_mut()
            .push(std::sync::Arc::new(recovery_message()));
        let run = req.run.clone();
        let out = next.run(req).await;
        // Cleared only once a call went through: a failed attempt retried by LLMErrorHandling
        // (an outer wrapper) sends the nudge again.
        if out.is_ok() {
            run.remove(&PENDING);
        }
        out
    }

    async fn after_agent(&self, _state: &ThreadState, run: &RunContext) -> AfterAgentResult {
        Self::reset(run);
        Ok(HookOutput::none())
    }
}
