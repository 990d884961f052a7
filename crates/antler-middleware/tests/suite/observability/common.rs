//! Shared helpers: states, run contexts, small tools, an event recorder and a log capture.

use std::sync::Arc;

use antler_protocol::{
    AiMessage, Content, Message, Object, StateUpdate, ToolCall, ToolSpec, UsageMetadata,
};
use antler_runtime::{Command, NullSink, RunContext, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::common::args_object;

pub use crate::common::{hidden, state_of as state, EventLog, LogCapture};

pub fn run_ctx(thread: &str, run: &str) -> RunContext {
    RunContext::new(thread, run, Arc::new(NullSink))
}

pub fn ai_text(text: &str) -> Message {
    Message::ai(text)
}

/// An AI message calling `(id, name, args)`.
pub fn ai_calls(calls: &[(&str, &str, Value)]) -> AiMessage {
    AiMessage {
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall::new(*id, *name, args_object(args)))
            .collect(),
        ..Default::default()
    }
}

pub fn with_usage(mut ai: AiMessage, input: u64, output: u64) -> AiMessage {
    ai.usage_metadata = Some(UsageMetadata::new(input, output));
    ai
}

pub fn tool_msg(call_id: &str, content: &str) -> Message {
    Message::Tool(antler_protocol::ToolMessage::new(call_id, content))
}

/// The update's messages (empty when none).
pub fn update_messages(update: &Option<StateUpdate>) -> Vec<Message> {
    update
        .as_ref()
        .and_then(|u| u.messages.clone())
        .unwrap_or_default()
}

pub fn spec(name: &str) -> Arc<ToolSpec> {
    Arc::new(ToolSpec {
        name: name.into(),
        description: format!("{name} (test)"),
        parameters: json!({"type": "object"}),
    })
}

/// Answers every call with `ok` (plus optional extra `additional_kwargs`).
pub struct EchoTool {
    pub spec: Arc<ToolSpec>,
    pub kwargs: Object,
}

impl EchoTool {
    pub fn new(name: &str) -> Arc<EchoTool> {
        Arc::new(EchoTool {
            spec: spec(name),
            kwargs: Object::new(),
        })
    }

    pub fn with_kwargs(name: &str, kwargs: Value) -> Arc<EchoTool> {
        Arc::new(EchoTool {
            spec: spec(name),
            kwargs: kwargs.as_object().cloned().unwrap_or_default(),
        })
    }
}

#[async_trait]
impl Tool for EchoTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Content {
            content: Content::Text("ok".into()),
            status: Default::default(),
            artifact: Value::Null,
            additional_kwargs: self.kwargs.clone(),
        })
    }
}

/// A stand-in for `view_image`: records `{mime_type, size, actual_path}` for the path given in
/// the `image_path` argument, mapped onto `host_path`.
pub struct FakeViewImage {
    pub spec: Arc<ToolSpec>,
    pub host_path: std::path::PathBuf,
}

#[async_trait]
impl Tool for FakeViewImage {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let virtual_path = args
            .get("image_path")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let size = std::fs::metadata(&self.host_path)?.len();
        let mut viewed = Object::new();
        viewed.insert(
            virtual_path,
            json!({"mime_type": "image/png", "size": size, "actual_path": self.host_path}),
        );
        let mut reply = antler_protocol::ToolMessage::new(ctx.call_id, "Successfully read image");
        reply.name = Some("view_image".into());
        Ok(ToolOutput::Command(Command {
            update: StateUpdate {
                viewed_images: Some(viewed),
                messages: Some(vec![Message::Tool(reply)]),
                ..Default::default()
            },
            goto: None,
        }))
    }
}
