//! Builders shared by the summarization tests.

use std::sync::{Arc, Mutex};

use antler_middleware::summarization::{
    BeforeSummarizationHook, ContextSize, DeerFlowSummarizationMiddleware, SummarizationConfig,
    SummarizationEvent,
};
use antler_models::tokens::TokenCounter;
use antler_models::{ChatModel, ModelInfo, ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, HumanMessage, Message, Object, StateUpdate, SystemMessage, ThreadState, ToolCall,
    ToolMessage,
};
use antler_runtime::{HookOutput, NullSink, RunContext};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::common::args_object;

pub use crate::common::{human, state_of as state, EventLog};

pub fn ai(id: &str, text: &str) -> Message {
    Message::Ai(AiMessage {
        content: text.into(),
        id: Some(id.into()),
        ..Default::default()
    })
}

/// An AI message calling `(call_id, tool, args)`.
pub fn ai_calls(id: &str, calls: &[(&str, &str, Value)]) -> Message {
    let tool_calls = calls
        .iter()
        .map(|(cid, name, args)| ToolCall::new(*cid, *name, args_object(args)))
        .collect();
    let mut m = AiMessage {
        tool_calls,
        id: Some(id.into()),
        ..Default::default()
    };
    m.response_metadata
        .insert("finish_reason".into(), json!("tool_calls"));
    Message::Ai(m)
}

pub fn tool(id: &str, call_id: &str, text: &str) -> Message {
    let mut t = ToolMessage::new(call_id, text);
    t.id = Some(id.into());
    Message::Tool(t)
}

/// DynamicContext's date reminder (a flagged system message).
pub fn date_reminder(id: &str) -> Message {
    let mut kw = Object::new();
    kw.insert("hide_from_ui".into(), json!(true));
    kw.insert("dynamic_context_reminder".into(), json!(true));
    kw.insert("reminder_date".into(), json!("2026-05-08, Friday"));
    Message::System(SystemMessage {
        content:
            "<system-reminder>\n<current_date>2026-05-08, Friday</current_date>\n</system-reminder>"
                .into(),
        additional_kwargs: kw.into(),
        id: Some(id.into()),
        ..Default::default()
    })
}

/// DynamicContext's memory block (a flagged human message).
pub fn memory_reminder(id: &str) -> Message {
    let mut kw = Object::new();
    kw.insert("hide_from_ui".into(), json!(true));
    kw.insert("dynamic_context_reminder".into(), json!(true));
    Message::Human(HumanMessage {
        content: "<memory>\nlikes tea\n</memory>".into(),
        additional_kwargs: kw.into(),
        id: Some(id.into()),
        ..Default::default()
    })
}

pub fn ids(msgs: &[Message]) -> Vec<String> {
    msgs.iter()
        .map(|m| m.id().unwrap_or_default().to_owned())
        .collect()
}

pub fn model(name: &str, replies: Vec<ScriptedReply>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(replies).with_info(ModelInfo {
        name: name.into(),
        model: "gpt-4o-mini".into(),
        provider: "openai".into(),
        ..Default::default()
    }))
}

pub fn settings(trigger: Vec<ContextSize>, keep: ContextSize) -> SummarizationConfig {
    SummarizationConfig {
        enabled: true,
        trigger,
        keep,
        ..Default::default()
    }
}

/// A middleware counting characters as tokens (so budgets in tests read as characters).
pub fn middleware(
    settings: SummarizationConfig,
    run_model: Arc<ScriptedModel>,
    summary_model: Option<Arc<ScriptedModel>>,
    hooks: Vec<Arc<dyn BeforeSummarizationHook>>,
) -> DeerFlowSummarizationMiddleware {
    let summary_model = summary_model.map(|m| m as Arc<dyn ChatModel>);
    DeerFlowSummarizationMiddleware::new(settings, run_model, summary_model, None, hooks)
        .unwrap()
        .with_token_counter(chars_as_tokens())
}

/// Counts characters as tokens.
pub fn chars_as_tokens() -> TokenCounter {
    TokenCounter::custom(|t| t.chars().count())
}

/// [`middleware`] for a run model with a `context_window`, without hooks.
pub fn windowed(
    settings: SummarizationConfig,
    run_model: Arc<ScriptedModel>,
    context_window: u64,
) -> DeerFlowSummarizationMiddleware {
    DeerFlowSummarizationMiddleware::new(settings, run_model, None, Some(context_window), vec![])
        .unwrap()
        .with_token_counter(chars_as_tokens())
}

/// A middleware summarizing with `model` itself, counting with the model's real encoding.
pub fn with_real_tokens(
    settings: SummarizationConfig,
    model: Arc<ScriptedModel>,
) -> DeerFlowSummarizationMiddleware {
    DeerFlowSummarizationMiddleware::new(settings, model, None, None, vec![]).unwrap()
}

pub fn run_ctx(thread: &str) -> RunContext {
    RunContext::new(thread, "run-1", Arc::new(NullSink))
}

/// The messages of a hook's state write, `[]` when it wrote nothing.
pub fn written(out: &HookOutput) -> Vec<Message> {
    out.update
        .as_ref()
        .and_then(|u| u.messages.clone())
        .unwrap_or_default()
}

/// The state after applying a hook's write.
pub fn applied(mut s: ThreadState, out: &HookOutput) -> ThreadState {
    if let Some(u) = &out.update {
        s.apply(u.clone()).unwrap();
    }
    s
}

pub fn is_remove_all(m: &Message) -> bool {
    matches!(m, Message::Remove(_)) && m.id() == Some(antler_protocol::REMOVE_ALL_MESSAGES)
}

/// A hook recording the events it sees (and optionally failing).
pub struct Recorder {
    pub label: String,
    pub log: HookLog,
    pub fail: bool,
    pub panic: bool,
}

pub type HookLog = Arc<Mutex<Vec<(String, SummarizationEvent)>>>;

impl Recorder {
    pub fn new(label: &str, log: &HookLog) -> Arc<Recorder> {
        Self::with(label, log, false, false)
    }

    pub fn with(label: &str, log: &HookLog, fail: bool, panic: bool) -> Arc<Recorder> {
        Arc::new(Recorder {
            label: label.into(),
            log: log.clone(),
            fail,
            panic,
        })
    }
}

#[async_trait]
impl BeforeSummarizationHook for Recorder {
    async fn before_summarization(&self, event: &SummarizationEvent) -> Result<(), String> {
        self.log
            .lock()
            .unwrap()
            .push((self.label.clone(), event.clone()));
        if self.panic {
            panic!("hook {} panics", self.label);
        }
        if self.fail {
            return Err("boom".into());
        }
        Ok(())
    }

    fn name(&self) -> &str {
        &self.label
    }
}

/// The text of the prompt a summary request carried.
pub fn prompt_of(req: &antler_models::RecordedRequest) -> String {
    assert_eq!(
        req.messages.len(),
        1,
        "a summary request is one human message"
    );
    req.messages[0].text()
}

/// Every tool message answers a call made earlier in the list, and every call is answered.
pub fn assert_paired(msgs: &[Message]) {
    let mut open: Vec<String> = Vec::new();
    let mut all_calls = std::collections::HashSet::new();
    for m in msgs {
        match m {
            Message::Ai(a) => {
                for c in &a.tool_calls {
                    open.push(c.id_str().to_owned());
                    all_calls.insert(c.id_str().to_owned());
                }
            }
            Message::Tool(t) => {
                assert!(
                    all_calls.contains(&t.tool_call_id),
                    "orphaned tool result {} in {:?}",
                    t.tool_call_id,
                    ids(msgs)
                );
                open.retain(|c| c != &t.tool_call_id);
            }
            _ => {}
        }
    }
    assert!(
        open.is_empty(),
        "unanswered calls {open:?} in {:?}",
        ids(msgs)
    );
}

pub fn update_is_empty(out: &HookOutput) -> bool {
    out.update.as_ref().is_none_or(StateUpdate::is_empty)
}
