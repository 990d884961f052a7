//! Which model summarizes, and what counts as a failure (spec 40 §1.6, §1.11, §1.12).

use std::sync::Arc;
use std::time::Duration;

use antler_middleware::summarization::*;
use antler_models::{ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, Message};
use antler_runtime::{Middleware, NullSink, RunContext};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::support::*;

fn msgs() -> Vec<Message> {
    vec![
        human("h1", "q1"),
        ai("a1", "x1"),
        human("h2", "q2"),
        ai("a2", "x2"),
    ]
}

fn cfg() -> SummarizationConfig {
    settings(vec![ContextSize::Messages(4)], ContextSize::Messages(2))
}

fn failure() -> ScriptedReply {
    ScriptedReply::Error(ModelError::Timeout(Duration::from_secs(5)))
}

/// One `before_model` over [`msgs`] with the run model `run` and the summary model `summary`.
async fn summarize(
    run: Arc<ScriptedModel>,
    summary: Option<Arc<ScriptedModel>>,
) -> antler_runtime::HookOutput {
    middleware(cfg(), run, summary, vec![])
        .before_model(&state(msgs()), &run_ctx("t"))
        .await
        .unwrap()
}

fn summary_of(out: &antler_runtime::HookOutput) -> Option<String> {
    let w = written(out);
    w.get(1).map(|m| m.text())
}

#[tokio::test]
async fn without_a_summary_model_the_run_model_summarizes() {
    let run = model("run-model", vec![ScriptedReply::text("from run")]);
    let out = summarize(run.clone(), None).await;
    assert_eq!(
        summary_of(&out).unwrap(),
        format!("{SUMMARY_PREFIX}from run")
    );
    let req = &run.requests()[0];
    // No tools, no system prompt, not streamed: one human message with the prompt.
    assert!(req.tools.is_empty());
    assert_eq!(req.system, None);
    assert!(!req.streamed);
    assert!(matches!(req.messages[0], Message::Human(_)));
}

#[tokio::test]
async fn the_summary_model_goes_first_and_the_run_model_is_the_fallback() {
    let primary = model("cheap", vec![ScriptedReply::text("from cheap")]);
    let run = model("run-model", vec![]);
    let out = summarize(run.clone(), Some(primary.clone())).await;
    assert_eq!(
        summary_of(&out).unwrap(),
        format!("{SUMMARY_PREFIX}from cheap")
    );
    assert!(run.requests().is_empty());

    // The summary model fails: the run model answers.
    let primary = model("cheap", vec![failure()]);
    let run = model("run-model", vec![ScriptedReply::text("from run")]);
    let out = summarize(run.clone(), Some(primary.clone())).await;
    assert_eq!(
        summary_of(&out).unwrap(),
        format!("{SUMMARY_PREFIX}from run")
    );
    assert_eq!(primary.requests().len(), 1);
    assert_eq!(run.requests().len(), 1);
    assert_eq!(
        prompt_of(&primary.requests()[0]),
        prompt_of(&run.requests()[0])
    );
}

#[tokio::test]
async fn when_every_candidate_fails_the_history_is_kept() {
    let primary = model("cheap", vec![failure()]);
    let run = model("run-model", vec![failure()]);
    let out = summarize(run.clone(), Some(primary.clone())).await;
    assert!(update_is_empty(&out));
    // Each tried exactly once (no in-process retry).
    assert_eq!(primary.requests().len(), 1);
    assert_eq!(run.requests().len(), 1);
}

#[tokio::test]
async fn the_same_model_configured_twice_is_tried_once() {
    let run = model("run-model", vec![failure(), ScriptedReply::text("late")]);
    let out = summarize(run.clone(), Some(run.clone())).await;
    assert!(update_is_empty(&out));
    assert_eq!(run.requests().len(), 1);
    // Same name, different object: still one candidate.
    let twin = model("run-model", vec![failure()]);
    let run = model("run-model", vec![ScriptedReply::text("unused")]);
    let mw = middleware(cfg(), run.clone(), Some(twin.clone()), vec![]);
    mw.before_model(&state(msgs()), &run_ctx("t"))
        .await
        .unwrap();
    assert_eq!(twin.requests().len(), 1);
    assert!(run.requests().is_empty());
}

#[tokio::test]
async fn a_blank_answer_is_a_failure() {
    let mw = middleware(
        cfg(),
        model("run", vec![ScriptedReply::text(" \n\t ")]),
        None,
        vec![],
    );
    let out = mw
        .before_model(&state(msgs()), &run_ctx("t"))
        .await
        .unwrap();
    assert!(update_is_empty(&out));

    // A blank summary model falls back to the run model.
    let blank = model("cheap", vec![ScriptedReply::text("   ")]);
    let run = model("run", vec![ScriptedReply::text("  real summary \n")]);
    let out = summarize(run.clone(), Some(blank)).await;
    assert_eq!(
        summary_of(&out).unwrap(),
        format!("{SUMMARY_PREFIX}real summary")
    );

    // An answer with only tool calls has no text either.
    let calls = ScriptedReply::Message(AiMessage {
        tool_calls: vec![antler_protocol::ToolCall::new(
            "c",
            "bash",
            Default::default(),
        )]
        .into(),
        ..Default::default()
    });
    let out = summarize(model("run", vec![calls]), None).await;
    assert!(update_is_empty(&out));
}

#[tokio::test]
async fn summary_calls_are_reported_to_observers() {
    let seen = EventLog::new();
    let run = RunContext::new("t", "r", Arc::new(NullSink)).with_observer(seen.clone());
    let primary = model("cheap", vec![failure()]);
    let run_model = model("run-model", vec![ScriptedReply::text("s")]);
    let mw = middleware(cfg(), run_model, Some(primary), vec![]);
    let out = mw.before_model(&state(msgs()), &run).await.unwrap();
    let summary_id = written(&out)[1].id().unwrap().to_owned();
    // What the summary calls report, without the error and answer texts.
    let events: Vec<Value> = seen
        .all()
        .into_iter()
        .filter(|e| e["kind"] != "other")
        .map(|mut e| {
            if let Some(o) = e.as_object_mut() {
                o.remove("error");
                o.remove("text");
            }
            e
        })
        .collect();
    assert_eq!(
        events,
        vec![
            json!({"kind": "model_error", "caller": "middleware:summarize", "model": "cheap"}),
            json!({"kind": "model_response", "caller": "middleware:summarize", "model": "run-model", "request_messages": 1}),
            json!({"kind": "middleware", "name": "DeerFlowSummarizationMiddleware", "action": "summarize",
                   "payload": {"removed_count": 2, "removed_ids": ["h1", "a1"],
                               "summary_id": summary_id, "kept_count": 2}}),
        ]
    );
}
