//! TokenBudget (spec 40 part 2 §5.1).

use std::sync::Arc;

use antler_middleware::token_budget::*;
use antler_protocol::{Content, Message, ThreadState, ToolMessage};
use antler_runtime::*;
use pretty_assertions::assert_eq;

use super::*;
use crate::common::{answered_ids, run_ok};

fn budget(max: u64) -> TokenBudgetConfig {
    TokenBudgetConfig {
        enabled: true,
        max_tokens: max,
        ..Default::default()
    }
}

async fn after(m: &TokenBudgetMiddleware, state: &ThreadState, run: &RunContext) -> HookOutput {
    m.after_model(state, run).await.unwrap()
}

/// Messages the next request would carry at the end after `wrap_model_call`.
async fn next_request(
    m: Arc<TokenBudgetMiddleware>,
    state: ThreadState,
    run: Arc<RunContext>,
) -> Vec<Message> {
    let model = Arc::new(
        antler_models::ScriptedModel::new([])
            .with_fallback(|_| antler_models::ScriptedReply::text("ok")),
    );
    let chain = Chain::new(vec![m as Arc<dyn Middleware>]).unwrap();
    let req = state_request(model.clone(), run, state);
    chain.call_model(req).await.unwrap();
    model.requests().pop().unwrap().messages
}

fn warnings(msgs: &[Message]) -> Vec<String> {
    msgs.iter()
        .filter(|m| m.name().as_deref() == Some("budget_warning"))
        .map(Message::text)
        .collect()
}

#[tokio::test]
async fn no_usage_or_half_the_budget_does_nothing() {
    let m = TokenBudgetMiddleware::new(budget(1000));
    let run = run_ctx("t", "r");
    let mut none = ai("a1", 0, 0, &[]);
    none.usage_metadata = None;
    let state = state_of(vec![human("u", "hi"), Message::Ai(none)]);
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
    let state = state_of(vec![human("u", "hi"), Message::Ai(ai("a1", 400, 100, &[]))]);
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
}

#[tokio::test]
async fn crossing_the_warning_queues_one_request_only_warning() {
    let m = Arc::new(TokenBudgetMiddleware::new(budget(1000)));
    let run = run_ctx("t", "r");
    let mut state = state_of(vec![
        human("u", "hi"),
        Message::Ai(ai("a1", 300, 100, &[("c1", "bash")])),
        Message::Tool(ToolMessage::new("c1", "out")),
        Message::Ai(ai("a2", 400, 50, &[("c2", "bash")])),
    ]);
    // Two messages summing to 85 %: a warning is queued, the state is not touched.
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
    state
        .messages
        .push(Message::Tool(ToolMessage::new("c2", "out")));
    let sent = next_request(m.clone(), state.clone(), run.clone()).await;
    let n = sent.len();
    assert!(
        matches!(sent[n - 2], Message::Tool(_)),
        "after the tool result"
    );
    assert_eq!(sent[n - 1].name().as_deref(), Some("budget_warning"));
    assert_eq!(
        sent[n - 1].text(),
        "[TOKEN BUDGET WARNING] You have used 850 of your 1,000 total token budget (85%). Wrap up the current work and give your final answer; start no new tool calls unless one is truly necessary."
    );
    // Warned once per run: 90 % later queues nothing new.
    state
        .messages
        .push(Message::Ai(ai("a3", 40, 10, &[("c3", "bash")])));
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
    assert!(warnings(&next_request(m.clone(), state.clone(), run.clone()).await).is_empty());
    // Another run of the same thread starts afresh (and earlier runs never count).
    let run2 = run_ctx("t", "r2");
    m.before_agent(&state, &run2).await.unwrap();
    state.messages.push(Message::Ai(ai("a4", 10, 10, &[])));
    assert_eq!(after(&m, &state, &run2).await, HookOutput::none());
    assert!(warnings(&next_request(m, state, run2).await).is_empty());
}

#[tokio::test]
async fn exceeding_the_budget_strips_tool_calls_and_appends_the_notice() {
    let m = TokenBudgetMiddleware::new(budget(1000));
    let run = run_ctx("t", "r");
    let mut last = ai("a1", 1000, 50, &[("c1", "bash")]);
    last.additional_kwargs
        .insert("tool_calls".into(), serde_json::json!([{"id": "c1"}]));
    let state = state_of(vec![human("u", "hi"), Message::Ai(last)]);
    let out = after(&m, &state, &run).await;
    let msgs = out.update.unwrap().messages.unwrap();
    let Message::Ai(stopped) = &msgs[0] else {
        panic!("expected the AI message")
    };
    assert_eq!(stopped.id.as_deref(), Some("a1"), "replaced in place");
    assert!(stopped.tool_calls.is_empty());
    assert!(!stopped.additional_kwargs.contains_key("tool_calls"));
    assert_eq!(stopped.finish_reason(), Some("stop"));
    assert_eq!(
        stopped.content,
        Content::Text("working\n\n[TOKEN BUDGET EXCEEDED] The total token usage (1,050) has exceeded the safety limit (1,000). Producing final answer with results collected so far.".into())
    );
    assert_eq!(run.get(&keys::STOP_REASON), Some("token_capped".into()));
    assert_eq!(m.consume_stop_reason("r").as_deref(), Some(STOP_REASON));
    assert_eq!(m.consume_stop_reason("r"), None, "consumed once");
    assert_eq!(m.consume_stop_reason("other"), None);
}

#[tokio::test]
async fn a_warning_alone_sets_no_stop_reason() {
    let m = TokenBudgetMiddleware::new(budget(1000));
    let run = run_ctx("t", "r");
    let state = state_of(vec![human("u", "hi"), Message::Ai(ai("a1", 800, 50, &[]))]);
    after(&m, &state, &run).await;
    assert_eq!(m.consume_stop_reason("r"), None);
    assert_eq!(run.get(&keys::STOP_REASON), None);
}

#[tokio::test]
async fn input_and_output_limits_name_their_dimension() {
    let input_only = TokenBudgetConfig {
        max_tokens: 1_000_000,
        max_input_tokens: Some(10_000),
        ..budget(1_000_000)
    };
    let m = Arc::new(TokenBudgetMiddleware::new(input_only));
    let run = run_ctx("t", "r");
    let state = state_of(vec![
        human("u", "hi"),
        Message::Ai(ai("a1", 9_000, 10, &[])),
    ]);
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
    let w = warnings(&next_request(m, state, run).await);
    assert!(
        w[0].contains("9,000 of your 10,000 input token budget (90%)"),
        "{w:?}"
    );

    let output_only = TokenBudgetConfig {
        max_output_tokens: Some(5_000),
        ..budget(1_000_000)
    };
    let m = TokenBudgetMiddleware::new(output_only);
    let run = run_ctx("t", "r");
    let state = state_of(vec![
        human("u", "hi"),
        Message::Ai(ai("a1", 100, 6_000, &[])),
    ]);
    let out = after(&m, &state, &run).await;
    let text = out.update.unwrap().messages.unwrap()[0].text();
    assert!(text.contains("The output token usage (6,000) has exceeded the safety limit (5,000)"));
}

#[tokio::test]
async fn usage_folded_in_later_counts_and_earlier_runs_do_not() {
    let m = TokenBudgetMiddleware::new(budget(1000));
    let run = run_ctx("t", "r");
    let mut state = state_of(vec![
        human("u0", "old"),
        Message::Ai(ai("old", 50_000, 5_000, &[])),
        human("u1", "new"),
    ]);
    m.before_agent(&state, &run).await.unwrap();
    state
        .messages
        .push(Message::Ai(ai("a1", 300, 100, &[("c1", "task")])));
    assert_eq!(
        after(&m, &state, &run).await,
        HookOutput::none(),
        "40 %: the old run is not counted"
    );
    state
        .messages
        .push(Message::Tool(ToolMessage::new("c1", "subagent done")));
    state.messages.push(Message::Ai(ai("a2", 50, 10, &[])));
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
    // The subagent's usage is merged into the dispatching message afterwards (same id).
    state
        .messages
        .add(vec![Message::Ai(ai("a1", 800, 200, &[("c1", "task")]))])
        .unwrap();
    state.messages.push(Message::Ai(ai("a3", 10, 10, &[])));
    let out = after(&m, &state, &run).await;
    let text = out.update.unwrap().messages.unwrap()[0].text();
    assert!(text.contains("The total token usage (1,080)"), "{text}");
}

#[tokio::test]
async fn disabled_does_nothing() {
    let m = TokenBudgetMiddleware::new(TokenBudgetConfig::default());
    let run = run_ctx("t", "r");
    let state = state_of(vec![
        human("u", "hi"),
        Message::Ai(ai("a1", 900_000, 0, &[])),
    ]);
    assert_eq!(after(&m, &state, &run).await, HookOutput::none());
}

#[tokio::test]
async fn through_the_loop_a_warning_then_a_forced_final_answer() {
    let model = scripted(vec![
        ai("x", 800, 50, &[("c1", "search")]),
        ai("x", 250, 50, &[("c2", "search")]),
    ]);
    let tool = Fixed::new("search", ToolOutput::text("results"));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(tool.clone()))
        .with_chain(Chain::new(vec![Arc::new(TokenBudgetMiddleware::new(budget(1000)))]).unwrap())
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let out = run_ok(&agent, "research this", run_ctx("t", "r")).await;
    assert_eq!(out.stop_reason.as_deref(), Some("token_capped"));
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2, "no model call after the hard stop");
    let second = &reqs[1].messages;
    assert!(matches!(second[second.len() - 2], Message::Tool(_)));
    assert_eq!(
        second.last().unwrap().name().as_deref(),
        Some("budget_warning")
    );
    // The warning never reached the state.
    assert!(out
        .state
        .messages
        .iter()
        .all(|m| m.name().as_deref() != Some("budget_warning")));
    assert_eq!(tool.calls(), 1, "the capped turn's tool call never ran");
    let last = out.state.last_ai().unwrap();
    assert!(last.tool_calls.is_empty());
    assert!(last.content.text().ends_with(
        "[TOKEN BUDGET EXCEEDED] The total token usage (1,150) has exceeded the safety limit (1,000). Producing final answer with results collected so far."
    ));
    // The tool-call/result pairing stays intact: every call in the history is answered.
    let calls: Vec<String> = out
        .state
        .messages
        .iter()
        .filter_map(Message::as_ai)
        .flat_map(|a| a.tool_calls.iter().map(|c| c.id_str().to_owned()))
        .collect();
    assert_eq!(calls, answered_ids(&out.state));
}
