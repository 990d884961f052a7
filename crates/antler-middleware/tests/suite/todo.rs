//! Plan mode: TodoMiddleware (spec 40 part 2 §5.6, spec 50 §4.13), as direct hook calls and
//! through the agent loop. The loop tests with the real `write_todos` tool live beside the tool
//! (antler-tools, `write_todos.rs`), which can depend on this crate.

use std::sync::Arc;

use antler_middleware::todo::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Message, Messages, Object, ThreadState, Todo, TodoStatus, ToolCall, ToolStatus,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn run_ctx(run: &str) -> Arc<RunContext> {
    Arc::new(RunContext::new("t", run, Arc::new(NullSink)))
}

fn todo(content: &str, status: TodoStatus) -> Todo {
    Todo {
        content: content.into(),
        status,
    }
}

fn plan() -> Vec<Todo> {
    vec![
        todo("collect data", TodoStatus::Completed),
        todo("analyse it", TodoStatus::InProgress),
        todo("write report", TodoStatus::Pending),
    ]
}

fn state(msgs: Vec<Message>, todos: Option<Vec<Todo>>) -> ThreadState {
    ThreadState {
        messages: Messages::from_messages(msgs),
        todos,
        ..Default::default()
    }
}

fn write_call(id: &str, todos: Value) -> AiMessage {
    AiMessage {
        tool_calls: vec![ToolCall::new(
            id,
            WRITE_TODOS,
            json!({"todos": todos}).as_object().unwrap().clone(),
        )]
        .into(),
        ..Default::default()
    }
}

fn mw() -> TodoMiddleware {
    TodoMiddleware::new(TodoSettings::default())
}

fn plan_agent(model: Arc<ScriptedModel>, m: Arc<TodoMiddleware>) -> Agent {
    Agent::new(model)
        .with_system_prompt("static prompt")
        .with_chain(Chain::new(vec![m as Arc<dyn Middleware>]).unwrap())
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
}

// ---- context-loss reminder -----------------------------------------------------------------

#[tokio::test]
async fn a_reminder_is_persisted_when_the_list_left_the_context() {
    let m = mw();
    let run = run_ctx("r");
    let mut st = state(vec![Message::human("go on")], Some(plan()));
    let out = m.before_model(&st, &run).await.unwrap();
    let msgs = out.update.clone().unwrap().messages.unwrap();
    assert_eq!(msgs.len(), 1);
    let r = &msgs[0];
    assert_eq!(r.name().as_deref(), Some(TODO_REMINDER));
    assert!(r.is_hidden());
    assert!(r.text().starts_with("<system_reminder>\n"));
    assert!(r.text().contains(
        "- [completed] collect data\n- [in_progress] analyse it\n- [pending] write report"
    ));
    st.apply(out.update.unwrap()).unwrap();
    // Present now: not again.
    assert_eq!(m.before_model(&st, &run).await.unwrap(), HookOutput::none());
    assert_eq!(
        m.before_model(&st, &run_ctx("r2")).await.unwrap(),
        HookOutput::none()
    );
}

#[tokio::test]
async fn no_reminder_while_the_call_is_visible_or_without_todos() {
    let m = mw();
    let visible = state(
        vec![
            Message::human("plan"),
            Message::Ai(write_call("c1", json!([]))),
        ],
        Some(plan()),
    );
    assert_eq!(
        m.before_model(&visible, &run_ctx("r")).await.unwrap(),
        HookOutput::none()
    );
    for todos in [None, Some(vec![])] {
        let st = state(vec![Message::human("hi")], todos);
        assert_eq!(
            m.before_model(&st, &run_ctx("r")).await.unwrap(),
            HookOutput::none()
        );
    }
}

// ---- premature exit --------------------------------------------------------------------------

#[tokio::test]
async fn a_clean_answer_with_open_items_jumps_back_listing_only_open_items() {
    let m = mw();
    let run = run_ctx("r");
    let st = state(
        vec![Message::human("go"), Message::ai("All done!")],
        Some(plan()),
    );
    let out = m.after_model(&st, &run).await.unwrap();
    assert_eq!(out, HookOutput::jump(JumpTo::Model));
    // Tool intent, finished lists and missing lists never trigger it.
    let mut intent = AiMessage::default();
    intent
        .response_metadata
        .insert("finish_reason".into(), json!("tool_calls"));
    let cases = [
        state(vec![Message::Ai(intent)], Some(plan())),
        state(
            vec![Message::ai("done")],
            Some(vec![todo("a", TodoStatus::Completed)]),
        ),
        state(vec![Message::ai("done")], None),
    ];
    for st in cases {
        assert_eq!(
            m.after_model(&st, &run_ctx("other")).await.unwrap(),
            HookOutput::none()
        );
    }
}

#[tokio::test]
async fn a_forced_final_answer_is_not_sent_back() {
    let m = mw();
    let run = run_ctx("r");
    run.set(&keys::STOP_REASON, "token_capped".to_owned());
    let st = state(
        vec![Message::human("go"), Message::ai("out of budget")],
        Some(plan()),
    );
    assert_eq!(m.after_model(&st, &run).await.unwrap(), HookOutput::none());
}

#[tokio::test]
async fn parallel_write_todos_calls_are_answered_with_errors() {
    let m = mw();
    let mut two = write_call("c1", json!([]));
    two.tool_calls
        .push(ToolCall::new("c2", WRITE_TODOS, Object::new()));
    two.tool_calls
        .push(ToolCall::new("c3", "bash", Object::new()));
    let st = state(vec![Message::human("go"), Message::Ai(two)], None);
    let out = m.after_model(&st, &run_ctx("r")).await.unwrap();
    let msgs = out.update.unwrap().messages.unwrap();
    let answered: Vec<(&str, ToolStatus)> = msgs
        .iter()
        .filter_map(Message::as_tool)
        .map(|t| (t.tool_call_id.as_str(), t.status))
        .collect();
    assert_eq!(
        answered,
        [("c1", ToolStatus::Error), ("c2", ToolStatus::Error)]
    );
    assert!(msgs[0].text().starts_with("Error:"));
    assert_eq!(out.jump_to, None);
}

#[tokio::test]
async fn bookkeeping_is_run_scoped() {
    let m = mw();
    let st = state(vec![Message::ai("done")], Some(plan()));
    m.after_model(&st, &run_ctx("r1")).await.unwrap();
    assert_eq!(m.tracked_runs(), 1);
    // A new run of the thread drops the old run's reminders.
    m.before_agent(&st, &run_ctx("r2")).await.unwrap();
    assert_eq!(m.tracked_runs(), 0);
    m.after_model(&st, &run_ctx("r2")).await.unwrap();
    m.after_agent(&st, &run_ctx("r2")).await.unwrap();
    assert_eq!(m.tracked_runs(), 0);
}

// ---- through the loop ----------------------------------------------------------------------

#[tokio::test]
async fn the_premature_exit_reminder_fires_at_most_twice_and_is_never_stored() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::text("Here you go."),
        ScriptedReply::text("Really done."),
        ScriptedReply::text("I cannot finish the review."),
    ]));
    let m = Arc::new(mw());
    let out = plan_agent(model.clone(), m.clone())
        .run(
            RunInput {
                messages: vec![Message::human("write and review")],
                update: Some(antler_protocol::StateUpdate {
                    todos: Some(Some(vec![
                        todo("draft", TodoStatus::Completed),
                        todo("review", TodoStatus::InProgress),
                    ])),
                    ..Default::default()
                }),
                ..Default::default()
            },
            run_ctx("r"),
        )
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3, "two reminders, then the model may stop");
    for (i, req) in reqs.iter().enumerate() {
        // The plan-mode section rides on the same static prompt every time.
        assert_eq!(
            req.system.as_deref(),
            Some(format!("static prompt\n\n{TODO_SYSTEM_PROMPT}").as_str())
        );
        let last = req.messages.last().unwrap();
        let reminded = last.name().as_deref() == Some(COMPLETION_REMINDER);
        assert_eq!(reminded, i > 0, "request {i}");
        if reminded {
            assert!(last.is_hidden());
            assert!(last.text().contains("- [in_progress] review"));
            assert!(!last.text().contains("draft"));
        }
    }
    assert!(out
        .state
        .messages
        .iter()
        .all(|m| m.name().as_deref() != Some(COMPLETION_REMINDER)));
    assert_eq!(
        out.state.last_ai().unwrap().content.text(),
        "I cannot finish the review."
    );
    assert_eq!(m.tracked_runs(), 0, "cleared after the run");
}

#[tokio::test]
async fn the_list_is_restated_once_after_its_call_was_compacted_away() {
    let model =
        Arc::new(ScriptedModel::new([]).with_fallback(|_| ScriptedReply::text("working on it")));
    let m = Arc::new(TodoMiddleware::new(TodoSettings {
        max_completion_reminders: 0,
        ..Default::default()
    }));
    let agent = plan_agent(model.clone(), m);
    let input = |text: &str| RunInput {
        messages: vec![Message::human(text)],
        update: Some(antler_protocol::StateUpdate {
            todos: Some(Some(plan())),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = agent.run(input("continue"), run_ctx("r1")).await;
    let reminders = |s: &ThreadState| {
        s.messages
            .iter()
            .filter(|m| m.name().as_deref() == Some(TODO_REMINDER))
            .count()
    };
    assert_eq!(reminders(&out.state), 1);
    let sent = &model.requests()[0].messages;
    assert_eq!(sent.last().unwrap().name().as_deref(), Some(TODO_REMINDER));
    let out = agent.run(input("and now"), run_ctx("r2")).await;
    assert_eq!(reminders(&out.state), 1, "still visible: not repeated");
}
