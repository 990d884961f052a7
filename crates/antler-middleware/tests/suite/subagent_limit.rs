//! SubagentLimitMiddleware: DeerFlow's expectations (spec 30 §SubagentLimit, spec 50 §8.12) as
//! unit tests on the hook, plus a run through the agent loop.

use std::sync::Arc;

use antler_middleware::subagent_limit::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Content, Delegation, Message, Messages, Object, ThreadState, ToolCall,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::FnTool;
use crate::common::{answered_ids, run_ok};

fn run_ctx(run_id: &str, concurrent: usize, extra: Value) -> RunContext {
    let extra = match extra {
        Value::Object(o) => o,
        _ => Default::default(),
    };
    RunContext::new("t", run_id, Arc::new(NullSink)).with_options(RunOptions {
        max_concurrent_subagents: concurrent,
        extra,
        ..Default::default()
    })
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall::new(id, name, Object::new())
}

/// An AI message with these calls, mirrored as provider-raw calls, finish_reason tool_calls.
fn ai_with(calls: &[(&str, &str)]) -> AiMessage {
    let mut ai = AiMessage {
        id: Some("ai-1".into()),
        content: Content::Text("dispatching".into()),
        tool_calls: calls.iter().map(|(id, n)| call(id, n)).collect(),
        ..Default::default()
    };
    let raw: Vec<Value> = calls
        .iter()
        .map(|(id, n)| json!({"id": id, "type": "function", "function": {"name": n, "arguments": "{}"}}))
        .collect();
    ai.additional_kwargs
        .insert("tool_calls".into(), Value::Array(raw));
    ai.response_metadata
        .insert("finish_reason".into(), json!("tool_calls"));
    ai
}

fn state_with(msgs: Vec<Message>, delegations: Vec<Delegation>) -> ThreadState {
    ThreadState {
        messages: Messages::from_messages(msgs),
        delegations,
        ..Default::default()
    }
}

fn ledger(id: &str, run_id: Option<&str>) -> Delegation {
    Delegation {
        id: id.into(),
        run_id: run_id.map(str::to_owned),
        status: "completed".into(),
        ..Default::default()
    }
}

/// What a middleware with a run budget of `max_total` leaves of `ai` in `run` after the
/// `prior` delegations.
fn truncate_in(
    run: &RunContext,
    max_total: i64,
    ai: AiMessage,
    prior: Vec<Delegation>,
) -> AiMessage {
    let mw = SubagentLimitMiddleware::new().with_max_total(max_total);
    let st = state_with(vec![Message::Ai(ai)], prior);
    mw.truncate(&st, run).unwrap()
}

/// What the middleware (3 task calls a turn, 4 a run) leaves of `tasks` task calls in run
/// `run_id` after the `prior` delegations, and the run.
fn truncate_tasks(run_id: &str, prior: Vec<Delegation>, tasks: usize) -> (AiMessage, RunContext) {
    let mw = SubagentLimitMiddleware::new();
    let run = run_ctx(run_id, 3, json!({"max_total_subagents": 4}));
    let st = state_with(vec![Message::Ai(ai_tasks(tasks))], prior);
    let out = mw.truncate(&st, &run).unwrap();
    (out, run)
}

fn ids(ai: &AiMessage) -> Vec<&str> {
    ai.tool_calls.iter().map(|c| c.id_str()).collect()
}

fn raw_ids(ai: &AiMessage) -> Vec<String> {
    match ai.additional_kwargs.get("tool_calls") {
        Some(Value::Array(raw)) => raw
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect(),
        _ => Vec::new(),
    }
}

fn tasks(n: usize) -> Vec<(String, &'static str)> {
    (1..=n).map(|i| (format!("t{i}"), "task")).collect()
}

fn ai_tasks(n: usize) -> AiMessage {
    let owned = tasks(n);
    let calls: Vec<(&str, &str)> = owned.iter().map(|(i, n)| (i.as_str(), *n)).collect();
    ai_with(&calls)
}

#[test]
fn concurrency_is_clamped_to_two_through_four() {
    // The seed's range [2, 4] (DESIGN §7): DeerFlow today lets 1 stay 1.
    assert_eq!(clamp_concurrency(i64::MIN), 2);
    assert_eq!(clamp_concurrency(0), 2);
    assert_eq!(clamp_concurrency(1), 2);
    assert_eq!(clamp_concurrency(2), 2);
    assert_eq!(clamp_concurrency(3), 3);
    assert_eq!(clamp_concurrency(4), 4);
    assert_eq!(clamp_concurrency(5), 4);
    assert_eq!(clamp_concurrency(100), 4);
    assert_eq!(DEFAULT_CONCURRENT_SUBAGENTS, 3);
    assert_eq!(RunOptions::default().max_concurrent_subagents, 3);
}

#[test]
fn total_is_clamped_to_one_through_fifty() {
    assert_eq!(clamp_total(0), 1);
    assert_eq!(clamp_total(-3), 1);
    assert_eq!(clamp_total(1), 1);
    assert_eq!(clamp_total(6), 6);
    assert_eq!(clamp_total(50), 50);
    assert_eq!(clamp_total(51), 50);
    let mw = SubagentLimitMiddleware::new();
    let run = run_ctx("r", 3, json!({}));
    assert_eq!(mw.total_for(&run), 6);
    assert_eq!(mw.clone().with_max_total(99).total_for(&run), 50);
    let run = run_ctx("r", 3, json!({"max_total_subagents": 0}));
    assert_eq!(mw.total_for(&run), 1, "the run option wins, clamped");
    assert_eq!(mw.concurrency_for(&run_ctx("r", 9, json!({}))), 4);
    assert_eq!(
        SubagentLimitMiddleware::new()
            .with_max_concurrent(1)
            .concurrency_for(&run_ctx("r", 4, json!({}))),
        2
    );
}

#[test]
fn nothing_to_do_without_excess_task_calls() {
    let mw = SubagentLimitMiddleware::new();
    let run = run_ctx("r", 3, json!({}));
    // No messages.
    assert!(mw.truncate(&ThreadState::default(), &run).is_none());
    // Last message not an AI message.
    let st = state_with(vec![Message::Ai(ai_tasks(5)), Message::human("hi")], vec![]);
    assert!(mw.truncate(&st, &run).is_none());
    // No tool calls.
    let st = state_with(vec![Message::ai("plain")], vec![]);
    assert!(mw.truncate(&st, &run).is_none());
    // Within the limit.
    let st = state_with(vec![Message::Ai(ai_tasks(3))], vec![]);
    assert!(mw.truncate(&st, &run).is_none());
    // Only non-task calls, however many.
    let st = state_with(
        vec![Message::Ai(ai_with(&[
            ("a", "bash"),
            ("b", "ls"),
            ("c", "read_file"),
            ("d", "grep"),
            ("e", "glob"),
        ]))],
        vec![],
    );
    assert!(mw.truncate(&st, &run).is_none());
}

#[test]
fn excess_task_calls_are_truncated_keeping_other_calls_and_mirrors_in_sync() {
    let mw = SubagentLimitMiddleware::new();
    let run = run_ctx("r", 2, json!({}));
    let st = state_with(
        vec![Message::Ai(ai_with(&[
            ("t1", "task"),
            ("b1", "bash"),
            ("t2", "task"),
            ("t3", "task"),
            ("l1", "ls"),
            ("t4", "task"),
        ]))],
        vec![],
    );
    let out = mw.truncate(&st, &run).unwrap();
    assert_eq!(
        out.id.as_deref(),
        Some("ai-1"),
        "same id: the reducer replaces"
    );
    assert_eq!(ids(&out), ["t1", "b1", "t2", "l1"]);
    assert_eq!(raw_ids(&out), ["t1", "b1", "t2", "l1"]);
    assert_eq!(out.finish_reason(), Some("tool_calls"));
    assert_eq!(
        out.content.text(),
        "dispatching",
        "no notice while budget remains"
    );
    assert_eq!(run.get(&keys::STOP_REASON), None);
}

#[test]
fn prior_delegations_of_this_run_reduce_the_budget() {
    let prior = vec![
        ledger("p1", Some("run-1")),
        ledger("p2", Some("run-1")),
        ledger("p3", Some("run-1")),
        ledger("p3", Some("run-1")), // same id counts once
    ];
    let (out, run) = truncate_tasks("run-1", prior, 3);
    assert_eq!(ids(&out), ["t1"]);
    assert_eq!(out.content.text(), "dispatching");
    assert_eq!(run.get(&keys::STOP_REASON), None);
}

#[test]
fn only_this_runs_delegations_count() {
    let prior = vec![
        ledger("p1", Some("run-1")),
        ledger("p2", Some("run-1")),
        ledger("p3", Some("run-1")),
        ledger("p4", None),
        ledger("q1", Some("run-2")),
    ];
    let (out, _) = truncate_tasks("run-2", prior, 5);
    assert_eq!(ids(&out), ["t1", "t2", "t3"], "4 - 1 prior leaves 3");
}

#[test]
fn a_missing_run_id_counts_every_delegation() {
    let prior = vec![ledger("p1", Some("other")), ledger("p2", None)];
    let (out, _) = truncate_tasks("", prior, 3);
    assert_eq!(
        ids(&out),
        ["t1", "t2"],
        "fail restrictive: all ledger entries spent"
    );
}

#[test]
fn an_exhausted_budget_drops_every_task_call_and_adds_the_notice() {
    let run = run_ctx("run-1", 3, json!({}));
    let prior = vec![ledger("p1", Some("run-1")), ledger("p2", Some("run-1"))];
    let out = truncate_in(&run, 2, ai_tasks(2), prior);
    assert!(out.tool_calls.is_empty());
    assert!(!out.additional_kwargs.contains_key("tool_calls"));
    assert_eq!(out.finish_reason(), Some("stop"));
    assert_eq!(
        out.content.text(),
        format!("dispatching\n\n{LIMIT_REACHED_NOTICE}")
    );
    assert!(LIMIT_REACHED_NOTICE.starts_with("[SUBAGENT LIMIT REACHED]"));
    assert_eq!(
        run.get(&keys::STOP_REASON),
        Some("subagent_limit_capped".to_owned())
    );
}

#[test]
fn an_exhausted_budget_keeps_other_calls_and_still_adds_the_notice() {
    let run = run_ctx("run-1", 3, json!({}));
    let mut ai = ai_with(&[("b1", "bash"), ("t1", "task")]);
    ai.content = Content::Text(String::new());
    let out = truncate_in(&run, 1, ai, vec![ledger("p1", Some("run-1"))]);
    assert_eq!(ids(&out), ["b1"]);
    assert_eq!(raw_ids(&out), ["b1"]);
    assert_eq!(out.finish_reason(), Some("tool_calls"));
    assert_eq!(
        out.content.text(),
        LIMIT_REACHED_NOTICE,
        "empty text → just the notice"
    );
    assert_eq!(
        run.get(&keys::STOP_REASON),
        Some("subagent_limit_capped".to_owned())
    );
}

#[test]
fn the_notice_is_a_text_block_for_list_content() {
    let run = run_ctx("run-1", 3, json!({}));
    let mut ai = ai_tasks(1);
    ai.content = Content::Blocks(vec![json!({"type": "text", "text": "hi"})]);
    let out = truncate_in(&run, 1, ai, vec![ledger("p1", Some("run-1"))]);
    assert_eq!(
        out.content,
        Content::Blocks(vec![
            json!({"type": "text", "text": "hi"}),
            json!({"type": "text", "text": format!("\n\n{LIMIT_REACHED_NOTICE}")}),
        ])
    );
}

#[tokio::test]
async fn after_model_returns_the_rewritten_message() {
    let mw = SubagentLimitMiddleware::new();
    let run = run_ctx("r", 3, json!({}));
    let st = state_with(vec![Message::Ai(ai_tasks(4))], vec![]);
    let out = mw.after_model(&st, &run).await.unwrap();
    let msgs = out.update.unwrap().messages.unwrap();
    assert_eq!(ids(msgs[0].as_ai().unwrap()), ["t1", "t2", "t3"]);
    assert_eq!(out.jump_to, None);
    assert_eq!(mw.name(), "SubagentLimitMiddleware");
    assert_eq!(mw.hooks(), HookSet::AFTER_MODEL);
}

#[tokio::test]
async fn six_task_calls_in_one_turn_run_three_through_the_loop() {
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Counts its calls; answers "ok".
    let counter = ran.clone();
    let noop = FnTool::named("task", move |_, _| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(ToolOutput::text("ok"))
    });
    let mut six = ai_tasks(6);
    six.id = None;
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::Message(six),
        ScriptedReply::text("done"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(noop))
        .with_chain(Chain::new(vec![Arc::new(SubagentLimitMiddleware::new())]).unwrap());
    let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)));
    let out = run_ok(&agent, "go", run).await;
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 3);
    let ai = out.state.messages.iter().find_map(Message::as_ai).unwrap();
    assert_eq!(ids(ai), ["t1", "t2", "t3"]);
    assert_eq!(raw_ids(ai), ["t1", "t2", "t3"]);
    assert_eq!(answered_ids(&out.state), ["t1", "t2", "t3"]);
    // The second request carries the truncated message, so every call sent is answered.
    let second = &model.requests()[1];
    let sent = second.messages.iter().find_map(Message::as_ai).unwrap();
    assert_eq!(ids(sent), ["t1", "t2", "t3"]);
}
