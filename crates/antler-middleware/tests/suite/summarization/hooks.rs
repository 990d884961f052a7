//! Before-summarization hooks and the committed shape (spec 40 §1.7, §1.8, §1.11).

use std::sync::{Arc, Mutex};

use antler_middleware::summarization::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::Message;
use antler_runtime::Middleware;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;
use crate::common::LogCapture;

fn four() -> Vec<Message> {
    vec![
        human("user-1", "first question"),
        ai("assistant-1", "first answer"),
        human("user-2", "second question"),
        ai("assistant-2", "second answer"),
    ]
}

/// A middleware triggering at `trigger` messages (keeping two) whose one hook, `memory`,
/// records into the returned log.
fn remembered(
    trigger: usize,
    run_model: Arc<ScriptedModel>,
) -> (HookLog, DeerFlowSummarizationMiddleware) {
    let log: HookLog = Arc::new(Mutex::new(Vec::new()));
    let mw = middleware(
        settings(
            vec![ContextSize::Messages(trigger)],
            ContextSize::Messages(2),
        ),
        run_model,
        None,
        vec![Recorder::new("memory", &log)],
    );
    (log, mw)
}

#[tokio::test]
async fn hooks_receive_what_goes_and_what_stays() {
    let (log, mw) = remembered(
        4,
        model("run", vec![ScriptedReply::text("compressed summary")]),
    );
    let out = mw
        .before_model(&state(four()), &run_ctx("thread-1"))
        .await
        .unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1);
    let event = &log[0].1;
    assert_eq!(ids(&event.messages), ["user-1", "assistant-1"]);
    assert_eq!(ids(&event.preserved), ["user-2", "assistant-2"]);
    assert_eq!(event.thread_id, "thread-1");
    assert_eq!(event.agent_name, None);
    assert_eq!(event.user_id, None);

    // The write: remove-all, the summary message, then the preserved tail.
    let w = written(&out);
    assert!(is_remove_all(&w[0]));
    let Message::Human(summary) = &w[1] else {
        panic!("summary must be a human message: {:?}", w[1])
    };
    assert_eq!(summary.name.as_deref(), Some("summary"));
    assert_eq!(
        summary.content.text(),
        "Summary of the conversation so far:\n\ncompressed summary"
    );
    assert_eq!(summary.additional_kwargs["hide_from_ui"], json!(true));
    assert!(!w[1].is_real_user_message());
    assert_eq!(ids(&w[2..]), ["user-2", "assistant-2"]);
    // DeerFlow's `summary_text` channel is not used.
    assert_eq!(out.update.as_ref().unwrap().summary_text, None);
}

#[tokio::test]
async fn hooks_see_the_run_identity() {
    let (log, mw) = remembered(4, model("run", vec![ScriptedReply::text("s")]));
    let mut run = run_ctx("t7").with_user(Some("alice".into()));
    run.options.agent_name = Some("researcher".into());
    mw.before_model(&state(four()), &run).await.unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log[0].1.user_id.as_deref(), Some("alice"));
    assert_eq!(log[0].1.agent_name.as_deref(), Some("researcher"));
}

#[tokio::test]
async fn below_the_threshold_nothing_happens() {
    let run_model = model("run", vec![]);
    let (log, mw) = remembered(10, run_model.clone());
    let out = mw
        .before_model(&state(four()), &run_ctx("t"))
        .await
        .unwrap();
    assert!(update_is_empty(&out));
    assert!(log.lock().unwrap().is_empty());
    assert!(run_model.requests().is_empty());
}

#[tokio::test]
async fn a_failing_or_panicking_hook_never_blocks_the_others_or_the_compaction() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let broken = Recorder::with("_broken_hook", &log, true, false);
    let panicking = Recorder::with("_panicking_hook", &log, false, true);
    let hooks: Vec<Arc<dyn BeforeSummarizationHook>> = vec![
        Recorder::new("first", &log),
        broken,
        panicking,
        Recorder::new("last", &log),
    ];
    let mw = middleware(
        settings(vec![ContextSize::Messages(4)], ContextSize::Messages(2)),
        model("run", vec![ScriptedReply::text("s")]),
        None,
        hooks,
    );
    let logs = LogCapture::start();
    let out = mw
        .before_model(&state(four()), &run_ctx("t"))
        .await
        .unwrap();
    let lines = logs.lines();
    // Registration order, every hook called.
    let order: Vec<String> = log.lock().unwrap().iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(order, ["first", "_broken_hook", "_panicking_hook", "last"]);
    assert!(
        lines
            .iter()
            .any(|l| l == "before_summarization hook _broken_hook failed"),
        "{lines:?}"
    );
    assert!(lines
        .iter()
        .any(|l| l == "before_summarization hook _panicking_hook failed"));
    // Compaction still happened.
    assert!(is_remove_all(&written(&out)[0]));
}

/// Seed order: the hooks see what is about to be summarized before the summary is asked for,
/// so a failing summary (HTTP 500) has still flushed it; the history stays and a retry hands
/// the hooks only messages they have not had.
#[tokio::test]
async fn hooks_flush_before_the_summary_and_a_retry_flushes_only_new_messages() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let http500 = || {
        ScriptedReply::Error(antler_models::ModelError::Http {
            status: 500,
            retry_after: None,
            message: "upstream failed".into(),
            code: None,
            body: String::new(),
        })
    };
    let mw = middleware(
        settings(vec![ContextSize::Messages(4)], ContextSize::Messages(2)),
        model(
            "run",
            vec![http500(), http500(), ScriptedReply::text("at last")],
        ),
        None,
        vec![Recorder::new("memory", &log)],
    );
    let s = state(four());
    let out = mw.before_model(&s, &run_ctx("t")).await.unwrap();
    // History unchanged: the next model call tries again.
    assert!(update_is_empty(&out));
    {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 1, "flushed although the summary failed");
        assert_eq!(ids(&log[0].1.messages), ["user-1", "assistant-1"]);
        assert_eq!(ids(&log[0].1.preserved), ["user-2", "assistant-2"]);
    }

    // The same list fails again: nothing new to flush, so the hooks are not called again.
    let out = mw.before_model(&s, &run_ctx("t")).await.unwrap();
    assert!(update_is_empty(&out));
    assert_eq!(log.lock().unwrap().len(), 1);

    // Two more messages move the cutoff: only the messages not flushed yet go to the hooks,
    // and this time the summary succeeds.
    let mut six = four();
    six.push(human("user-3", "third question"));
    six.push(ai("assistant-3", "third answer"));
    let out = mw.before_model(&state(six), &run_ctx("t")).await.unwrap();
    assert!(is_remove_all(&written(&out)[0]));
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(ids(&log[1].1.messages), ["user-2", "assistant-2"]);
}
