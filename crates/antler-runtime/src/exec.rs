//! The innermost layers of the two onions: the real model call and the real tool call.

use antler_models::ChatRequest;
use antler_protocol::{Message, ToolMessage};

use crate::middleware::{ModelCallError, ModelRequest, ModelResponse, ToolCallRequest};
use crate::observe::RunEvent;
use crate::tool::{ToolContext, ToolError, ToolOutcome, ToolOutput};

/// Call the model, streaming deltas to the run's event sink when `req.stream` is set.
pub(crate) async fn call_model(req: ModelRequest) -> Result<ModelResponse, ModelCallError> {
    let chat = ChatRequest {
        system: req.system_prompt.as_deref(),
        messages: &req.messages,
        tools: &req.tools,
        tool_choice: req.tool_choice.as_ref(),
        settings: &req.settings,
        message_id: &req.message_id,
        encodings: Some(req.run.encodings()),
    };
    let info = req.model.info();
    let started = std::time::Instant::now();
    let result = if req.stream && req.run.events.wants_messages() {
        let meta = req.run.events.message_meta(
            "model",
            &req.message_id,
            Some(&info.provider),
            Some(&info.model),
        );
        let events = &req.run.events;
        let id = req.message_id.clone();
        let mut on_chunk = move |mut chunk: antler_protocol::AiMessageChunk| {
            chunk.id = Some(id.clone());
            events.ai_chunk(chunk, &meta);
        };
        req.model.stream(chat, &mut on_chunk).await
    } else if req.stream {
        req.model.stream(chat, &mut |_| {}).await
    } else {
        req.model.invoke(chat).await
    };
    let caller = req
        .run
        .get(&crate::context::keys::CALLER)
        .unwrap_or_else(|| "lead_agent".to_owned());
    match result {
        Ok(mut message) => {
            // One id everywhere: chunks, values, checkpoints.
            message.id = Some(req.message_id.clone());
            // Which provider counted the usage (summarization trusts usage of its own provider).
            message
                .response_metadata
                .entry("model_provider")
                .or_insert_with(|| serde_json::Value::from(info.provider.clone()));
            if req.run.observed() {
                req.run.observe(&RunEvent::ModelResponse {
                    caller: &caller,
                    model: &info.name,
                    request_messages: req.messages.len(),
                    response: &message,
                    latency: started.elapsed(),
                });
            }
            Ok(ModelResponse::from(message))
        }
        Err(error) => {
            if req.run.observed() {
                req.run.observe(&RunEvent::ModelError {
                    caller: &caller,
                    model: &info.name,
                    error: &error,
                    latency: started.elapsed(),
                });
            }
            Err(error.into())
        }
    }
}

/// Validate and run one tool call.
pub(crate) async fn execute_tool(req: ToolCallRequest) -> Result<ToolOutcome, ToolError> {
    let call_id = req.call.id_str().to_owned();
    let name = req.call.name.clone();
    let Some(tool) = req.tool.clone() else {
        let msg = ToolMessage::error(
            call_id,
            format!(
                "Error: {name} is not a valid tool, try one of [{}].",
                req.tool_names.join(", ")
            ),
        )
        .with_name(name);
        return Ok(ToolOutcome::Message(with_id(msg)));
    };
    let ctx = ToolContext::new(&call_id, &req.state, &req.run);
    match tool.call(req.call.args.clone(), ctx).await {
        Ok(ToolOutput::Content {
            content,
            status,
            artifact,
            additional_kwargs,
        }) => Ok(ToolOutcome::Message(with_id(ToolMessage {
            content,
            additional_kwargs: additional_kwargs.into(),
            name: Some(name),
            tool_call_id: call_id,
            artifact,
            status,
            ..Default::default()
        }))),
        Ok(ToolOutput::Command(mut cmd)) => {
            let answers = cmd.update.messages.iter_mut().flatten().any(|m| match m {
                Message::Tool(t) if t.tool_call_id == call_id => {
                    if t.id.is_none() {
                        t.id = Some(uuid::Uuid::new_v4().to_string());
                    }
                    true
                }
                _ => false,
            });
            if answers {
                Ok(ToolOutcome::Command(cmd))
            } else {
                Err(ToolError::InvalidCommand(name, call_id))
            }
        }
        Err(ToolError::InvalidArguments(reason)) => {
            let args = serde_json::Value::Object(req.call.args.clone());
            let msg = ToolMessage::error(
                call_id,
                format!(
                    "Error invoking tool '{name}' with kwargs {args} with error:\n {reason}\n Please fix the error and try again."
                ),
            )
            .with_name(name);
            Ok(ToolOutcome::Message(with_id(msg)))
        }
        Err(e) => Err(e),
    }
}

fn with_id(mut m: ToolMessage) -> ToolMessage {
    if m.id.is_none() {
        m.id = Some(uuid::Uuid::new_v4().to_string());
    }
    m
}
