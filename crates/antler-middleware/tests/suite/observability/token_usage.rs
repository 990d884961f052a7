//! TokenUsageMiddleware: DeerFlow's `test_token_usage_middleware.py` expectations, plus subagent
//! usage folded through the agent loop.

use std::sync::Arc;

use antler_middleware::token_usage::{
    build_attribution, TokenUsageConfig, TokenUsageMiddleware, ATTRIBUTION_KEY,
    SUBAGENT_USAGE_ATTRIBUTED_KEY, SUBAGENT_USAGE_KEY,
};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Message, ThreadState, Todo, TodoStatus, ToolMessage, UsageMetadata,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::common::*;
use crate::common::{first_tool, run_ok};

fn mw() -> TokenUsageMiddleware {
    TokenUsageMiddleware::new(TokenUsageConfig::default())
}

async fn after(state: &ThreadState) -> Option<antler_protocol::StateUpdate> {
    mw().after_model(state, &run_ctx("test-thread", "r1"))
        .await
        .unwrap()
        .update
}

fn attribution_of(msgs: &[Message]) -> Value {
    msgs.iter()
        .find_map(|m| m.as_ai())
        .and_then(|ai| ai.additional_kwargs.get(ATTRIBUTION_KEY).cloned())
        .expect("an attributed AI message")
}

/// The AI messages of `msgs` that carry usage.
fn carrying_usage(msgs: &[Message]) -> Vec<&AiMessage> {
    msgs.iter()
        .filter_map(Message::as_ai)
        .filter(|ai| ai.usage_metadata.is_some())
        .collect()
}

fn subagent_tool(call_id: &str, usage: Value) -> Message {
    let mut t = ToolMessage::new(call_id, "task result");
    t.additional_kwargs.insert(SUBAGENT_USAGE_KEY.into(), usage);
    Message::Tool(t)
}

#[test]
fn defaults_match_deerflow() {
    assert!(TokenUsageConfig::default().enabled);
}

#[tokio::test]
async fn logs_cache_token_details() {
    let mut usage = UsageMetadata::new(350, 240);
    usage.input_token_details = Some(
        json!({"audio": 10, "cache_creation": 200, "cache_read": 100})
            .as_object()
            .cloned()
            .unwrap(),
    );
    usage.output_token_details = Some(
        json!({"audio": 10, "reasoning": 200})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let ai = AiMessage {
        content: "Here is the final answer.".into(),
        usage_metadata: Some(usage),
        ..Default::default()
    };
    let logs = LogCapture::start();
    let update = after(&state(vec![Message::Ai(ai)])).await;
    assert!(update.is_some());
    let text = logs.text();
    assert!(
        text.contains("LLM token usage: input=350 output=240 total=590"),
        "{text}"
    );
    assert!(
        text.contains(r#"input_token_details={"audio":10,"cache_creation":200,"cache_read":100}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"output_token_details={"audio":10,"reasoning":200}"#),
        "{text}"
    );
}

#[tokio::test]
async fn logs_basic_counts_without_details() {
    let ai = with_usage(
        AiMessage {
            content: "Here is the final answer.".into(),
            ..Default::default()
        },
        350,
        240,
    );
    let logs = LogCapture::start();
    assert!(after(&state(vec![Message::Ai(ai)])).await.is_some());
    let text = logs.text();
    assert!(
        text.contains("LLM token usage: input=350 output=240 total=590"),
        "{text}"
    );
    assert!(!text.contains("input_token_details"), "{text}");
}

#[tokio::test]
async fn no_log_without_usage_metadata() {
    let mut ai = AiMessage {
        content: "Here is the final answer.".into(),
        ..Default::default()
    };
    ai.response_metadata.insert(
        "usage".into(),
        json!({"input_tokens": 350, "output_tokens": 240, "total_tokens": 590}),
    );
    let logs = LogCapture::start();
    // The attribution is still stamped.
    assert!(after(&state(vec![Message::Ai(ai)])).await.is_some());
    assert!(!logs.text().contains("LLM token usage"));
}

#[tokio::test]
async fn usage_is_reported_to_run_observers() {
    let rec = EventLog::new();
    let run = run_ctx("t", "r").with_observer(rec.clone());
    let ai = with_usage(ai_calls(&[]), 12, 3);
    mw().after_model(&state(vec![Message::Ai(ai)]), &run)
        .await
        .unwrap();
    let events = rec.of("middleware");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["action"], "token_usage");
    assert_eq!(events[0]["payload"]["input_tokens"], 12);
    assert_eq!(events[0]["payload"]["output_tokens"], 3);
    assert_eq!(events[0]["payload"]["total_tokens"], 15);
}

#[tokio::test]
async fn todo_updates_are_annotated_with_structured_actions() {
    let ai = with_usage(
        ai_calls(&[(
            "write_todos:1",
            "write_todos",
            json!({"todos": [
                {"content": "Inspect streaming path", "status": "completed"},
                {"content": "Design token attribution schema", "status": "in_progress"},
            ]}),
        )]),
        100,
        20,
    );
    let mut s = state(vec![Message::Ai(ai)]);
    s.todos = Some(vec![
        Todo {
            content: "Inspect streaming path".into(),
            status: TodoStatus::InProgress,
        },
        Todo {
            content: "Design token attribution schema".into(),
            status: TodoStatus::Pending,
        },
    ]);
    let msgs = update_messages(&after(&s).await);
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        attribution_of(&msgs),
        json!({
            "version": 1,
            "kind": "tool_batch",
            "shared_attribution": true,
            "tool_call_ids": ["write_todos:1"],
            "actions": [
                {"kind": "todo_complete", "content": "Inspect streaming path", "tool_call_id": "write_todos:1"},
                {"kind": "todo_start", "content": "Design token attribution schema", "tool_call_id": "write_todos:1"},
            ],
        })
    );
}

#[tokio::test]
async fn subagent_and_search_steps_are_annotated() {
    let ai = ai_calls(&[
        (
            "task:1",
            "task",
            json!({"description": "spec-coder patch message grouping", "subagent_type": "general-purpose"}),
        ),
        (
            "web_search:1",
            "web_search",
            json!({"query": "LangGraph useStream messages tuple"}),
        ),
    ]);
    let msgs = update_messages(&after(&state(vec![Message::Ai(ai)])).await);
    let a = attribution_of(&msgs);
    assert_eq!(a["kind"], "tool_batch");
    assert_eq!(a["shared_attribution"], true);
    assert_eq!(
        a["actions"],
        json!([
            {"kind": "subagent", "description": "spec-coder patch message grouping", "subagent_type": "general-purpose", "tool_call_id": "task:1"},
            {"kind": "search", "tool_name": "web_search", "query": "LangGraph useStream messages tuple", "tool_call_id": "web_search:1"},
        ])
    );
}

#[test]
fn step_kinds_for_single_actions_and_other_tools() {
    let one = |name: &str, args: Value| build_attribution(&ai_calls(&[("c1", name, args)]), &[]);
    assert_eq!(
        one(
            "task",
            json!({"description": " d ", "subagent_type": "bash"})
        )["kind"],
        "subagent_dispatch"
    );
    assert_eq!(
        one("task", json!({"description": " d "}))["actions"][0]["description"],
        "d"
    );
    assert_eq!(
        one("present_files", json!({}))["actions"],
        json!([{"kind": "present_files", "tool_call_id": "c1"}])
    );
    assert_eq!(
        one("ask_clarification", json!({}))["actions"],
        json!([{"kind": "clarification", "tool_call_id": "c1"}])
    );
    assert_eq!(
        one("bash", json!({"description": "list", "command": "ls"}))["actions"],
        json!([{"kind": "tool", "tool_name": "bash", "description": "list", "tool_call_id": "c1"}])
    );
    assert_eq!(one("bash", json!({}))["kind"], "tool_batch");
    // A write_todos call that changes nothing is a plain tool action.
    assert_eq!(
        one("write_todos", json!({"todos": []}))["actions"],
        json!([{"kind": "tool", "tool_name": "write_todos", "tool_call_id": "c1"}])
    );
    let thinking = build_attribution(&AiMessage::default(), &[]);
    assert_eq!(thinking["kind"], "thinking");
    assert_eq!(thinking["shared_attribution"], false);
}

#[tokio::test]
async fn final_answer_without_tools() {
    let msgs = update_messages(&after(&state(vec![ai_text("Here is the final answer.")])).await);
    let a = attribution_of(&msgs);
    assert_eq!(a["kind"], "final_answer");
    assert_eq!(a["shared_attribution"], false);
    assert_eq!(a["actions"], json!([]));
}

#[tokio::test]
async fn removed_todos_are_annotated() {
    let ai = ai_calls(&[("write_todos:remove", "write_todos", json!({"todos": []}))]);
    let mut s = state(vec![Message::Ai(ai)]);
    s.todos = Some(vec![Todo {
        content: "Archive obsolete plan".into(),
        status: TodoStatus::Pending,
    }]);
    let a = attribution_of(&update_messages(&after(&s).await));
    assert_eq!(a["kind"], "todo_update");
    assert_eq!(a["shared_attribution"], false);
    assert_eq!(
        a["actions"],
        json!([{"kind": "todo_remove", "content": "Archive obsolete plan", "tool_call_id": "write_todos:remove"}])
    );
}

#[tokio::test]
async fn unchanged_attribution_is_not_rewritten() {
    let ai = ai_text("done");
    let first = update_messages(&after(&state(vec![ai])).await);
    let again = after(&state(first)).await;
    assert_eq!(again, None);
}

#[tokio::test]
async fn subagent_usage_merges_by_message_position() {
    let first = ai_calls(&[("task:first", "task", json!({}))]);
    let second = ai_calls(&[
        ("task:second-a", "task", json!({})),
        ("task:second-b", "task", json!({})),
    ]);
    let s = state(vec![
        Message::Ai(first),
        tool_msg("task:first", "first"),
        Message::Ai(second.clone()),
        subagent_tool(
            "task:second-a",
            json!({"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}),
        ),
        subagent_tool(
            "task:second-b",
            json!({"input_tokens": 20, "output_tokens": 7, "total_tokens": 27}),
        ),
        ai_text("done"),
    ]);
    let msgs = update_messages(&after(&s).await);
    let with_usage = carrying_usage(&msgs);
    assert_eq!(with_usage.len(), 1);
    assert_eq!(with_usage[0].tool_calls, second.tool_calls);
    assert_eq!(
        with_usage[0].usage_metadata,
        Some(UsageMetadata {
            input_tokens: 30,
            output_tokens: 12,
            total_tokens: 42,
            ..Default::default()
        })
    );
    // Both tool messages are marked, in list order after the dispatch message.
    let kinds: Vec<&str> = msgs.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["ai", "tool", "tool", "ai"]);
    for t in msgs.iter().filter_map(Message::as_tool) {
        assert_eq!(t.additional_kwargs[SUBAGENT_USAGE_ATTRIBUTED_KEY], true);
    }
}

#[tokio::test]
async fn reused_tool_call_ids_stay_scoped_to_each_history() {
    let id = "reused-provider-tool-call-id";
    for usage in [
        json!({"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}),
        json!({"input_tokens": 90, "output_tokens": 8, "total_tokens": 98}),
    ] {
        let s = state(vec![
            Message::Ai(ai_calls(&[(id, "task", json!({}))])),
            subagent_tool(id, usage.clone()),
            ai_text("done"),
        ]);
        let msgs = update_messages(&after(&s).await);
        let got = msgs
            .iter()
            .filter_map(Message::as_ai)
            .find_map(|ai| ai.usage_metadata.clone())
            .unwrap();
        assert_eq!(serde_json::to_value(got).unwrap(), usage);
    }
    // Within one history an id reused by a later message folds into the later (nearest) one.
    let s = state(vec![
        Message::Ai(ai_calls(&[(id, "task", json!({}))])),
        tool_msg(id, "old"),
        Message::human("again"),
        Message::Ai(ai_calls(&[(id, "task", json!({}))])),
        subagent_tool(
            id,
            json!({"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}),
        ),
        ai_text("done"),
    ]);
    let dispatch_id = s.messages.get(3).unwrap().id().unwrap().to_owned();
    let msgs = update_messages(&after(&s).await);
    let folded = carrying_usage(&msgs);
    assert_eq!(folded.len(), 1);
    assert_eq!(folded[0].id.as_deref(), Some(dispatch_id.as_str()));
}

#[tokio::test]
async fn attribution_is_idempotent_when_state_is_reprocessed() {
    let mut dispatch = ai_calls(&[("task:replayed", "task", json!({}))]);
    dispatch.id = Some("dispatch-message".into());
    let mut tool = ToolMessage::new("task:replayed", "task result");
    tool.id = Some("tool-message".into());
    tool.additional_kwargs.insert(
        SUBAGENT_USAGE_KEY.into(),
        json!({"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}),
    );
    let mut fin = AiMessage {
        content: "done".into(),
        ..Default::default()
    };
    fin.id = Some("final-message".into());
    let mut s = state(vec![
        Message::Ai(dispatch),
        Message::Tool(tool),
        Message::Ai(fin),
    ]);

    let first = after(&s).await.expect("first pass updates");
    s.apply(first).unwrap();
    assert_eq!(
        s.messages
            .by_id("dispatch-message")
            .and_then(Message::as_ai)
            .unwrap()
            .usage_metadata,
        Some(UsageMetadata::new(10, 2))
    );
    assert_eq!(after(&s).await, None);
}

#[tokio::test]
async fn malformed_subagent_usage_is_ignored() {
    for bad in [
        json!({"input_tokens": true, "output_tokens": 1, "total_tokens": 1}),
        json!({"input_tokens": -1, "output_tokens": 1, "total_tokens": 0}),
        json!("lots"),
    ] {
        let s = state(vec![
            Message::Ai(ai_calls(&[("c", "task", json!({}))])),
            subagent_tool("c", bad),
            ai_text("done"),
        ]);
        let msgs = update_messages(&after(&s).await);
        assert_eq!(msgs.len(), 1, "only the attribution of the new message");
        assert!(msgs[0].as_ai().unwrap().usage_metadata.is_none());
    }
}

#[tokio::test]
async fn subagent_usage_is_folded_into_the_dispatching_message_exactly_once() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let with = |reply: ScriptedReply, i: u64, o: u64| match reply {
        ScriptedReply::Message(m) => ScriptedReply::Message(with_usage(m, i, o)),
        other => other,
    };
    let model = Arc::new(ScriptedModel::new([
        with(
            ScriptedReply::tool_call(
                "task-1",
                "task",
                json!({"description": "research", "prompt": "go", "subagent_type": "general-purpose"}),
            ),
            100,
            20,
        ),
        with(ScriptedReply::text("all done"), 50, 10),
        with(ScriptedReply::text("second turn"), 7, 1),
    ]));
    let task = EchoTool::with_kwargs(
        "task",
        json!({SUBAGENT_USAGE_KEY: {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}}),
    );
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(task))
        .with_chain(Chain::new(vec![Arc::new(mw())]).unwrap())
        .with_checkpointer(checkpointer.clone());
    let rec = EventLog::new();

    let run = Arc::new(run_ctx("thread-sub", "run-1").with_observer(rec.clone()));
    let out = run_ok(&agent, "delegate", run).await;
    let dispatch = |s: &ThreadState| -> AiMessage {
        s.messages
            .iter()
            .filter_map(Message::as_ai)
            .find(|ai| !ai.tool_calls.is_empty())
            .cloned()
            .unwrap()
    };
    let d = dispatch(&out.state);
    assert_eq!(
        d.usage_metadata
            .as_ref()
            .map(|u| (u.input_tokens, u.output_tokens, u.total_tokens)),
        Some((130, 25, 155))
    );
    assert_eq!(
        d.additional_kwargs[ATTRIBUTION_KEY]["kind"],
        "subagent_dispatch"
    );
    let tool = first_tool(&out.state);
    assert_eq!(tool.additional_kwargs[SUBAGENT_USAGE_ATTRIBUTED_KEY], true);
    let last = out.state.messages.last().and_then(Message::as_ai).unwrap();
    assert_eq!(last.usage_metadata, Some(UsageMetadata::new(50, 10)));
    assert_eq!(
        last.additional_kwargs[ATTRIBUTION_KEY]["kind"],
        "final_answer"
    );

    // A later run on the thread never folds the same usage again.
    let run = Arc::new(run_ctx("thread-sub", "run-2").with_observer(rec.clone()));
    let out = run_ok(&agent, "more", run).await;
    assert_eq!(
        dispatch(&out.state).usage_metadata.map(|u| u.total_tokens),
        Some(155)
    );
    let folds: Vec<Value> = rec
        .of("middleware")
        .into_iter()
        .filter(|e| e["action"] == "subagent_usage_attributed")
        .collect();
    assert_eq!(folds.len(), 1);
    assert_eq!(folds[0]["payload"]["tool_call_id"], "task-1");
    // One usage record per model call.
    let usage_events = rec
        .of("middleware")
        .into_iter()
        .filter(|e| e["action"] == "token_usage")
        .count();
    assert_eq!(usage_events, 3);
}
