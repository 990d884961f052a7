//! One call of a side model (title, summary): a bare `invoke` outside the chain, observed as
//! the caller's own model call so run observers see it like any other.

use std::sync::Arc;
use std::time::Instant;

use antler_models::{ChatModel, ChatRequest, ModelError};
use antler_protocol::{AiMessage, Message, Object};
use antler_runtime::{RunContext, RunEvent};

/// `invoke` (never `stream`: the answer is not part of the conversation's token stream) with
/// no system prompt, tools or setting overrides; the response or error is reported to the
/// run's observers under `caller`.
pub(crate) async fn invoke_observed(
    model: &dyn ChatModel,
    run: &RunContext,
    caller: &str,
    messages: &[Arc<Message>],
    message_id: &str,
) -> Result<AiMessage, ModelError> {
    let settings = Object::new();
    let req = ChatRequest {
        system: None,
        messages,
        tools: &[],
        tool_choice: None,
        settings: &settings,
        message_id,
        // Not the run's encodings: the prompt is a new message every call (nothing to reuse),
        // and its list would displace the conversation's history memo and last body size,
        // making the next call of the loop encode the whole history again.
        encodings: None,
    };
    // The hooks that call side models are deferrable: the supersteps before this call are
    // written first, like before any model call of the loop. A failed write is the loop's to
    // report (its next write fails the run); the call goes ahead.
    if let Err(e) = run.persist().await {
        tracing::warn!(caller, error = %e, "could not write the run's pending checkpoints");
    }
    let name = model.info().name.as_str();
    let started = Instant::now();
    let result = model.invoke(req).await;
    if run.observed() {
        match &result {
            Ok(response) => run.observe(&RunEvent::ModelResponse {
                caller,
                model: name,
                request_messages: messages.len(),
                response,
                latency: started.elapsed(),
            }),
            Err(error) => run.observe(&RunEvent::ModelError {
                caller,
                model: name,
                error,
                latency: started.elapsed(),
            }),
        }
    }
    result
}
