//! DynamicContext and DurableContext: DeerFlow's expectations (spec 40 §3.8, part 2 §5.4) as
//! direct hook calls, and the behaviours users rely on through the agent loop with a scripted
//! model and an in-memory checkpointer.

mod durable;
mod dynamic;

pub use crate::common::{human, run_ctx, state_of, Recorder};

use std::sync::Arc;

use antler_models::{RecordedRequest, ScriptedModel, ScriptedReply};
use antler_protocol::{Message, ThreadState};
use antler_runtime::*;
use serde_json::Value;

pub fn ai(id: &str, text: &str) -> Message {
    let mut m = Message::ai(text);
    m.set_id(id);
    m
}

/// Fold a hook's update into the state, as the loop does.
pub fn apply<J>(state: &mut ThreadState, out: HookOutput<J>) {
    if let Some(u) = out.update {
        state.apply(u).unwrap();
    }
}

pub fn update_messages<J>(out: &HookOutput<J>) -> Vec<Message> {
    out.update
        .as_ref()
        .and_then(|u| u.messages.clone())
        .unwrap_or_default()
}

pub fn kw<'a>(m: &'a Message, key: &str) -> Option<&'a Value> {
    m.additional_kwargs().get(key)
}

/// An agent over `chain` with a static prompt and an in-memory checkpointer.
pub fn agent(model: Arc<ScriptedModel>, chain: Vec<Arc<dyn Middleware>>) -> Agent {
    Agent::new(model)
        .with_system_prompt("You are a static prompt.")
        .with_chain(Chain::new(chain).unwrap())
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
}

/// A model that answers every request with the same text.
pub fn echo_model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new([]).with_fallback(|_| ScriptedReply::text("ok")))
}

/// Run `agent` (over `model`) on `text`; the last request the model received.
pub async fn asked(
    agent: &Agent,
    model: &ScriptedModel,
    text: &str,
    run: Arc<RunContext>,
) -> RecordedRequest {
    agent
        .run(RunInput::message(Message::human(text)), run)
        .await;
    last_request(model)
}

pub fn last_request(model: &ScriptedModel) -> RecordedRequest {
    model.requests().pop().unwrap()
}
