//! TokenBudget and ToolOutputBudget: DeerFlow's expectations (spec 40 part 2 §5.1, §5.3) as
//! direct hook calls, and the guarantees users rely on through the agent loop.

mod token;
mod tool_output;

pub use crate::common::{human, object_spec, run_ctx, state_of, state_request, Recorder};

use std::sync::{Arc, Mutex};

use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, Message, Object, ToolCall, ToolSpec, UsageMetadata};
use antler_runtime::*;
use async_trait::async_trait;
use serde_json::json;

/// An AI message with usage and optional tool calls `(id, name)`.
pub fn ai(id: &str, input: u64, output: u64, calls: &[(&str, &str)]) -> AiMessage {
    let mut m = AiMessage {
        id: Some(id.to_owned()),
        content: "working".into(),
        usage_metadata: Some(UsageMetadata::new(input, output)),
        tool_calls: calls
            .iter()
            .map(|(cid, name)| ToolCall::new(*cid, *name, Object::new()))
            .collect(),
        ..Default::default()
    };
    if !calls.is_empty() {
        m.response_metadata
            .insert("finish_reason".into(), json!("tool_calls"));
    }
    m
}

pub fn spec(name: &str) -> Arc<ToolSpec> {
    object_spec(name, "")
}

/// A tool answering with a fixed output, counting its calls.
pub struct Fixed {
    pub spec: Arc<ToolSpec>,
    pub output: ToolOutput,
    pub calls: Mutex<usize>,
}

impl Fixed {
    pub fn new(name: &str, output: ToolOutput) -> Arc<Fixed> {
        Arc::new(Fixed {
            spec: spec(name),
            output,
            calls: Mutex::new(0),
        })
    }
    pub fn calls(&self) -> usize {
        *self.calls.lock().unwrap()
    }
}

#[async_trait]
impl Tool for Fixed {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, _: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        *self.calls.lock().unwrap() += 1;
        Ok(match &self.output {
            ToolOutput::Command(c) => {
                let mut c = c.clone();
                for m in c.update.messages.iter_mut().flatten() {
                    if let Message::Tool(t) = m {
                        t.tool_call_id = ctx.call_id.to_owned();
                    }
                }
                ToolOutput::Command(c)
            }
            other => other.clone(),
        })
    }
}

pub fn scripted(replies: Vec<AiMessage>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(
        replies.into_iter().map(ScriptedReply::Message),
    ))
}
