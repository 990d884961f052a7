//! SystemMessageCoalescing (L13 lead; U13 innermost for subagents, wrap_model): strict backends
//! (vLLM, SGLang, Qwen, Anthropic) reject several or non-leading system messages, so every
//! system message of the request is folded into the one leading system prompt. Request-only:
//! the thread's messages are untouched. Sits inside every middleware that may add system
//! messages, so it sees the final request.

use std::sync::Arc;

use antler_protocol::markers;
use antler_protocol::{Content, Message};
use antler_runtime::{HookSet, Middleware, ModelNext, ModelRequest};
use async_trait::async_trait;
use serde_json::Value;

use crate::hook::ModelResult;

pub const NAME: &str = "SystemMessageCoalescingMiddleware";

#[derive(Debug, Default)]
pub struct SystemMessageCoalescingMiddleware;

impl SystemMessageCoalescingMiddleware {
    pub fn new() -> Self {
        SystemMessageCoalescingMiddleware
    }
}

/// Text of a system message: strings as is; lists → strings and item `text`s, other items
/// stringified, joined by `\n`.
pub fn flatten(content: &Content) -> String {
    match content {
        Content::Text(s) => s.clone(),
        Content::Blocks(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                Value::Object(o) => match o.get("text") {
                    Some(Value::String(t)) => t.clone(),
                    _ => v.to_string(),
                },
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn is_reminder(m: &Message) -> bool {
    m.additional_kwargs()
        .get(markers::DYNAMIC_CONTEXT_REMINDER)
        .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
}

/// Fold the request's in-list system messages into its system prompt. Returns `None` when
/// there are none (the request passes unchanged, keeping provider prompt caches warm).
pub fn coalesce(req: &ModelRequest) -> Option<(String, Vec<Arc<Message>>)> {
    if !req
        .messages
        .iter()
        .any(|m| matches!(**m, Message::System(_)))
    {
        return None;
    }
    let systems: Vec<&Arc<Message>> = req
        .messages
        .iter()
        .filter(|m| matches!(***m, Message::System(_)))
        .collect();
    // Only the last dynamic-context reminder survives.
    let last_reminder = systems.iter().rposition(|m| is_reminder(m));
    let mut parts: Vec<String> = Vec::with_capacity(systems.len() + 1);
    if let Some(p) = &req.system_prompt {
        parts.push(p.to_string());
    }
    for (i, m) in systems.iter().enumerate() {
        if is_reminder(m) && Some(i) != last_reminder {
            continue;
        }
        parts.push(flatten(m.content()));
    }
    let rest = req
        .messages
        .iter()
        .filter(|m| !matches!(***m, Message::System(_)))
        .cloned()
        .collect();
    Some((parts.join("\n\n"), rest))
}

#[async_trait]
impl Middleware for SystemMessageCoalescingMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL);

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if let Some((system, rest)) = coalesce(&req) {
            req.system_prompt = Some(Arc::from(system));
            req.messages = Arc::new(rest);
        }
        next.run(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use antler_models::{ScriptedModel, ScriptedReply};
    use antler_protocol::SystemMessage;
    use antler_runtime::{Agent, Chain, NullSink, RunContext, RunInput, RunStatus};
    use serde_json::json;

    fn sys(text: &str, reminder: bool) -> Message {
        let mut m = SystemMessage {
            content: text.into(),
            ..Default::default()
        };
        if reminder {
            m.additional_kwargs
                .insert(markers::DYNAMIC_CONTEXT_REMINDER.into(), json!(true));
        }
        Message::System(m)
    }

    async fn sent(
        history: Vec<Message>,
        prompt: Option<&str>,
        chain: bool,
    ) -> (Option<String>, Vec<&'static str>) {
        let model = Arc::new(ScriptedModel::new([ScriptedReply::text("ok")]));
        let mut agent = Agent::new(model.clone());
        if let Some(p) = prompt {
            agent = agent.with_system_prompt(p);
        }
        if chain {
            agent = agent.with_chain(
                Chain::new(vec![Arc::new(SystemMessageCoalescingMiddleware::new())]).unwrap(),
            );
        }
        let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)));
        let out = agent
            .run(
                RunInput {
                    messages: history,
                    ..Default::default()
                },
                run,
            )
            .await;
        assert_eq!(out.status, RunStatus::Success);
        let r = model.requests().remove(0);
        (r.system, r.messages.iter().map(Message::kind).collect())
    }

    #[tokio::test]
    async fn no_system_messages_pass_unchanged() {
        let (system, kinds) = sent(vec![Message::human("hi")], Some("P"), true).await;
        assert_eq!(system.as_deref(), Some("P"));
        assert_eq!(kinds, ["human"]);
    }

    #[tokio::test]
    async fn in_list_systems_merge_into_the_leading_prompt_in_order() {
        let history = vec![sys("A", false), Message::human("hi"), sys("B", false)];
        let (system, kinds) = sent(history.clone(), Some("P"), true).await;
        assert_eq!(system.as_deref(), Some("P\n\nA\n\nB"));
        assert_eq!(kinds, ["human"]);
        // Without the middleware the systems stay where they are (a strict provider would reject).
        let (_, kinds) = sent(history, Some("P"), false).await;
        assert_eq!(kinds, ["system", "human", "system"]);
    }

    #[tokio::test]
    async fn only_the_last_reminder_survives_and_lists_flatten() {
        let blocks = Message::System(SystemMessage {
            content: Content::Blocks(vec![
                json!("x"),
                json!({"type": "text", "text": "y"}),
                json!(3),
            ]),
            ..Default::default()
        });
        let history = vec![
            sys("R1", true),
            blocks,
            sys("R2", true),
            Message::human("hi"),
        ];
        let (system, _) = sent(history, None, true).await;
        assert_eq!(system.as_deref(), Some("x\ny\n3\n\nR2"));
    }
}
