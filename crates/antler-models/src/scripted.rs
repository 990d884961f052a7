//! A model that answers from a script: a queue of replies, every request recorded. Used by tests
//! and benchmarks; also handy to replay a conversation offline.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use antler_protocol::{AiMessage, Message, Object, ToolCall};
use async_trait::async_trait;
use serde_json::Value;

use crate::{chunk_of_message, ChatModel, ChatRequest, ChunkSink, ModelError, ModelInfo};

/// One scripted answer.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // test scaffolding; moved once per reply
pub enum ScriptedReply {
    Message(AiMessage),
    Error(ModelError),
}

impl ScriptedReply {
    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Self {
        ScriptedReply::Message(AiMessage {
            content: antler_protocol::Content::Text(text.into()),
            ..Default::default()
        })
    }

    /// An answer that calls tools: `(call_id, tool_name, args)`.
    pub fn tool_calls(calls: impl IntoIterator<Item = (String, String, Value)>) -> Self {
        let tool_calls = calls
            .into_iter()
            .map(|(id, name, args)| {
                let args = match args {
                    Value::Object(o) => o,
                    _ => Object::new(),
                };
                ToolCall::new(id, name, args)
            })
            .collect();
        let mut msg = AiMessage {
            tool_calls,
            ..Default::default()
        };
        msg.response_metadata
            .insert("finish_reason".into(), Value::from("tool_calls"));
        ScriptedReply::Message(msg)
    }

    /// A single tool call.
    pub fn tool_call(id: &str, name: &str, args: Value) -> Self {
        Self::tool_calls([(id.to_owned(), name.to_owned(), args)])
    }
}

/// What the model was asked, owned.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<String>,
    pub settings: Object,
    pub streamed: bool,
}

type Fallback = Arc<dyn Fn(&RecordedRequest) -> ScriptedReply + Send + Sync>;

/// A queue of replies; when it runs dry, an optional fallback answers (else an error).
pub struct ScriptedModel {
    info: ModelInfo,
    replies: Mutex<VecDeque<ScriptedReply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    record: bool,
    fallback: Option<Fallback>,
}

impl ScriptedModel {
    pub fn new(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        ScriptedModel {
            info: ModelInfo {
                name: "scripted".into(),
                model: "scripted".into(),
                provider: "scripted".into(),
                ..Default::default()
            },
            replies: Mutex::new(replies.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
            record: true,
            fallback: None,
        }
    }

    pub fn with_info(mut self, info: ModelInfo) -> Self {
        self.info = info;
        self
    }

    /// Answer with `f` once the queue is empty.
    pub fn with_fallback(
        mut self,
        f: impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static,
    ) -> Self {
        self.fallback = Some(Arc::new(f));
        self
    }

    /// Do not keep requests (benchmarks: recording copies the whole history).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    pub fn push(&self, reply: ScriptedReply) {
        if let Ok(mut q) = self.replies.lock() {
            q.push_back(reply);
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn remaining(&self) -> usize {
        self.replies.lock().map(|q| q.len()).unwrap_or(0)
    }

    fn next(&self, req: &ChatRequest<'_>, streamed: bool) -> Result<AiMessage, ModelError> {
        let recorded = if self.record || self.fallback.is_some() {
            Some(RecordedRequest {
                system: req.system.map(str::to_owned),
                messages: req.messages.iter().map(|m| (**m).clone()).collect(),
                tools: req.tools.iter().map(|t| t.name.clone()).collect(),
                settings: req.settings.clone(),
                streamed,
            })
        } else {
            None
        };
        let n = {
            let mut reqs = self
                .requests
                .lock()
                .map_err(|_| ModelError::InvalidRequest("poisoned".into()))?;
            if self.record {
                if let Some(r) = &recorded {
                    reqs.push(r.clone());
                }
            }
            reqs.len()
        };
        let queued = self.replies.lock().ok().and_then(|mut q| q.pop_front());
        let reply = match (queued, &self.fallback, &recorded) {
            (Some(r), _, _) => r,
            (None, Some(f), Some(r)) => f(r),
            _ => return Err(ModelError::ScriptExhausted(n)),
        };
        match reply {
            ScriptedReply::Message(mut m) => {
                m.id = Some(req.message_id.to_owned());
                m.response_metadata
                    .entry("model_name")
                    .or_insert_with(|| Value::from(self.info.model.clone()));
                Ok(m)
            }
            ScriptedReply::Error(e) => Err(e),
        }
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn invoke(&self, req: ChatRequest<'_>) -> Result<AiMessage, ModelError> {
        self.next(&req, false)
    }

    async fn stream(
        &self,
        req: ChatRequest<'_>,
        on_chunk: ChunkSink<'_>,
    ) -> Result<AiMessage, ModelError> {
        let msg = self.next(&req, true)?;
        // Emit the text word by word, then the rest as a final chunk, like a provider would.
        let text = match &msg.content {
            antler_protocol::Content::Text(t) => t.clone(),
            _ => String::new(),
        };
        let mut last = chunk_of_message(&msg);
        if !text.is_empty() {
            let mut parts: Vec<&str> = text.split_inclusive(' ').collect();
            let tail = parts.pop().unwrap_or("");
            for p in parts {
                on_chunk(antler_protocol::AiMessageChunk {
                    content: p.into(),
                    id: msg.id.clone(),
                    ..Default::default()
                });
            }
            last.content = tail.into();
        }
        on_chunk(last);
        Ok(msg)
    }
}
