//! DurableContext: the delegation ledger and skill references that survive compaction (spec 40
//! part 2 §5.4).

use std::sync::Arc;

use antler_middleware::durable_context::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Delegation, HumanMessage, Message, Object, SkillEntry, StateUpdate, ThreadState,
    ToolCall, ToolMessage, ToolStatus,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::*;
use crate::common::{Blocker, FnTool};

fn mw() -> DurableContextMiddleware {
    DurableContextMiddleware::new(DurableContextSettings::default())
}

fn user(id: &str, run: &str) -> Message {
    let mut m = human(id, "do the research");
    m.additional_kwargs_mut()
        .insert("run_id".into(), json!(run));
    m
}

fn task_call(msg_id: &str, calls: &[(&str, &str)]) -> Message {
    Message::Ai(AiMessage {
        id: Some(msg_id.into()),
        tool_calls: calls
            .iter()
            .map(|(id, desc)| {
                let args =
                    json!({"description": desc, "prompt": "p", "subagent_type": "general-purpose"});
                ToolCall::new(*id, "task", args.as_object().unwrap().clone())
            })
            .collect(),
        ..Default::default()
    })
}

/// The answer to `call` from tool `name`, with message id `id` and `kwargs`.
fn result_of(call: &str, (name, id): (&str, String), text: &str, kwargs: Object) -> Message {
    let mut t = ToolMessage::new(call, text).with_name(name);
    t.id = Some(id);
    t.additional_kwargs = kwargs.into();
    Message::Tool(t)
}

fn task_result(call: &str, text: &str, kwargs: Value) -> Message {
    let kwargs = match kwargs {
        Value::Object(o) => o,
        _ => Object::new(),
    };
    result_of(call, ("task", format!("tm-{call}")), text, kwargs)
}

/// One list the update of `out` writes (empty when it writes none).
fn written_list<T: Clone>(out: &HookOutput, list: fn(&StateUpdate) -> &Option<Vec<T>>) -> Vec<T> {
    out.update
        .as_ref()
        .and_then(|u| list(u).clone())
        .unwrap_or_default()
}

fn delegations(out: &HookOutput) -> Vec<Delegation> {
    written_list(out, |u| &u.delegations)
}

#[tokio::test]
async fn dispatches_and_results_are_captured_with_the_run_id() {
    let state = state_of(vec![
        user("u1", "run-1"),
        task_call("a1", &[("c1", "find papers"), ("c2", "summarise them")]),
        task_result(
            "c1",
            "Task failed. (free text must not decide)",
            json!({"subagent_status": "completed", "subagent_result_brief": "3 papers found"}),
        ),
    ]);
    let run = run_ctx("t", "run-1");
    let out = mw().before_model(&state, &run).await.unwrap();
    let d = delegations(&out);
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].id, "c1");
    assert_eq!(
        d[0].status, "completed",
        "structured metadata beats the text"
    );
    assert_eq!(d[0].result_brief.as_deref(), Some("3 papers found"));
    assert_eq!(d[0].result_ref.as_deref(), Some("tm-c1"));
    assert_eq!(d[0].result_sha256.as_ref().map(String::len), Some(64));
    assert_eq!(d[1].id, "c2");
    assert_eq!(d[1].status, "in_progress");
    assert_eq!(d[1].description, "summarise them");
    assert_eq!(d[1].subagent_type, "general-purpose");
    for e in &d {
        assert_eq!(e.run_id.as_deref(), Some("run-1"));
        assert!(e.created_at.is_some());
    }
    // Applied, then nothing changed: nothing is emitted again.
    let mut state = state;
    apply(&mut state, out);
    assert_eq!(
        mw().before_model(&state, &run).await.unwrap(),
        HookOutput::none()
    );
}

#[tokio::test]
async fn capture_starts_at_the_current_runs_message_and_never_retags_old_calls() {
    let state = state_of(vec![
        user("u0", "run-0"),
        task_call("a0", &[("old", "earlier work")]),
        user("u1", "run-1"),
        task_call("a1", &[("new", "current work")]),
    ]);
    let out = mw()
        .after_model(&state, &run_ctx("t", "run-1"))
        .await
        .unwrap();
    let ids: Vec<String> = delegations(&out).into_iter().map(|d| d.id).collect();
    assert_eq!(ids, ["new"]);
    // A run that added no user message of its own (a resume) captures only what it produces.
    let out = mw()
        .after_model(&state, &run_ctx("t", "run-2"))
        .await
        .unwrap();
    assert_eq!(out, HookOutput::none());
}

#[tokio::test]
async fn a_settled_entry_is_not_reopened_and_an_unchanged_one_not_rewritten() {
    let mut state = state_of(vec![
        user("u1", "run-1"),
        task_call("a1", &[("c1", "x")]),
        task_result("c1", "no metadata", json!({})),
    ]);
    state.delegations = vec![Delegation {
        id: "c1".into(),
        description: "x".into(),
        subagent_type: "general-purpose".into(),
        status: "completed".into(),
        run_id: Some("run-1".into()),
        ..Default::default()
    }];
    assert_eq!(
        mw().before_model(&state, &run_ctx("t", "run-1"))
            .await
            .unwrap(),
        HookOutput::none()
    );
}

#[tokio::test]
async fn a_failed_task_gets_its_status_brief_and_stop_reason() {
    let state = state_of(vec![
        user("u1", "r"),
        task_call("a1", &[("c1", "x")]),
        task_result(
            "c1",
            "Task failed.",
            json!({"subagent_status": "failed", "subagent_stop_reason": "token_capped"}),
        ),
    ]);
    let d = delegations(&mw().before_model(&state, &run_ctx("t", "r")).await.unwrap());
    assert_eq!(d[0].status, "failed");
    assert_eq!(d[0].stop_reason.as_deref(), Some("token_capped"));
    assert_eq!(d[0].result_brief.as_deref(), Some("Task failed."));
}

fn skill_read(call: &str, tool: &str, path: &str) -> Message {
    let args = json!({"description": "load skill", "path": path});
    Message::Ai(AiMessage {
        id: Some(format!("a-{call}")),
        tool_calls: vec![ToolCall::new(call, tool, args.as_object().unwrap().clone())].into(),
        ..Default::default()
    })
}

fn skill_result(call: &str, stamp: Option<Value>) -> Message {
    let kwargs = stamp
        .map(|s| Object::from_iter([(SKILL_ENTRY_KEY.to_owned(), s)]))
        .unwrap_or_default();
    let body = "---\nname: x\n---\nTHE BODY";
    result_of(call, ("read_file", format!("t-{call}")), body, kwargs)
}

fn skills(out: &HookOutput) -> Vec<SkillEntry> {
    written_list(out, |u| &u.skill_context)
}

#[tokio::test]
async fn skill_reads_are_captured_as_references_never_bodies() {
    let path = "/mnt/skills/public/deep-research/SKILL.md";
    let state = state_of(vec![
        user("u1", "r"),
        skill_read(
            "c1",
            "read_file",
            "/mnt/skills/public/deep-research/../deep-research/SKILL.md",
        ),
        skill_result(
            "c1",
            Some(json!({"path": path, "description": "  Research   deeply "})),
        ),
    ]);
    let got = skills(&mw().before_model(&state, &run_ctx("t", "r")).await.unwrap());
    assert_eq!(
        got,
        [SkillEntry {
            name: "deep-research".into(),
            path: path.into(),
            description: "Research deeply".into(),
            loaded_at: 2,
        }]
    );
    assert!(!format!("{got:?}").contains("THE BODY"));
}

#[tokio::test]
async fn skill_capture_honours_root_tool_names_stamps_and_errors() {
    let stamp = |p: &str| Some(json!({"path": p, "description": "d"}));
    let cases: Vec<(DurableContextSettings, Vec<Message>, usize)> = vec![
        // Outside the root.
        (
            DurableContextSettings::default(),
            vec![
                skill_read("c", "read_file", "/tmp/x/SKILL.md"),
                skill_result("c", stamp("/tmp/x/SKILL.md")),
            ],
            0,
        ),
        // Not a SKILL.md.
        (
            DurableContextSettings::default(),
            vec![
                skill_read("c", "read_file", "/mnt/skills/x/README.md"),
                skill_result("c", stamp("/mnt/skills/x/README.md")),
            ],
            0,
        ),
        // No stamp from the read tool.
        (
            DurableContextSettings::default(),
            vec![
                skill_read("c", "read_file", "/mnt/skills/x/SKILL.md"),
                skill_result("c", None),
            ],
            0,
        ),
        // A stamp for another path.
        (
            DurableContextSettings::default(),
            vec![
                skill_read("c", "read_file", "/mnt/skills/x/SKILL.md"),
                skill_result("c", stamp("/mnt/skills/y/SKILL.md")),
            ],
            0,
        ),
        // A custom root and tool name.
        (
            DurableContextSettings {
                skills_container_path: "/opt/skills/".into(),
                skill_file_read_tool_names: vec!["view".into()],
                ..Default::default()
            },
            vec![
                skill_read("c", "view", "/opt/skills/x/SKILL.md"),
                skill_result("c", stamp("/opt/skills/x/SKILL.md")),
            ],
            1,
        ),
        // The `/` root keeps every absolute path.
        (
            DurableContextSettings {
                skills_container_path: "/".into(),
                ..Default::default()
            },
            vec![
                skill_read("c", "read_file", "/x/SKILL.md"),
                skill_result("c", stamp("/x/SKILL.md")),
            ],
            1,
        ),
        // An empty tool-name list disables skill capture.
        (
            DurableContextSettings {
                skill_file_read_tool_names: vec![],
                ..Default::default()
            },
            vec![
                skill_read("c", "read_file", "/mnt/skills/x/SKILL.md"),
                skill_result("c", stamp("/mnt/skills/x/SKILL.md")),
            ],
            0,
        ),
    ];
    for (i, (settings, msgs, want)) in cases.into_iter().enumerate() {
        let mut all = vec![user("u1", "r")];
        all.extend(msgs);
        let out = DurableContextMiddleware::new(settings)
            .before_model(&state_of(all), &run_ctx("t", "r"))
            .await
            .unwrap();
        assert_eq!(skills(&out).len(), want, "case {i}");
    }
    // A failed read records nothing.
    let mut failed = skill_result("c", stamp("/mnt/skills/x/SKILL.md"));
    if let Message::Tool(t) = &mut failed {
        t.status = ToolStatus::Error;
    }
    let state = state_of(vec![
        user("u1", "r"),
        skill_read("c", "read_file", "/mnt/skills/x/SKILL.md"),
        failed,
    ]);
    assert!(skills(&mw().before_model(&state, &run_ctx("t", "r")).await.unwrap()).is_empty());
}

// ---- injection -----------------------------------------------------------------------------

async fn request_through(state: ThreadState, leading_system: bool) -> Vec<Message> {
    request_with(mw(), state, leading_system).await
}

async fn request_with(
    m: DurableContextMiddleware,
    state: ThreadState,
    leading_system: bool,
) -> Vec<Message> {
    let model = echo_model();
    let chain = Chain::new(vec![Arc::new(m) as Arc<dyn Middleware>]).unwrap();
    let mut msgs = Vec::new();
    if leading_system {
        msgs.push(Arc::new(Message::system("in-list system")));
    }
    msgs.push(Arc::new(human("q", "question")));
    let req = ModelRequest {
        model: model.clone(),
        system_prompt: Some("static".into()),
        messages: Arc::new(msgs),
        tools: vec![],
        tool_choice: None,
        settings: Object::new(),
        stream: false,
        message_id: "m".into(),
        state: Arc::new(state),
        run: run_ctx("t", "r"),
    };
    chain.call_model(req).await.unwrap();
    let req = last_request(&model);
    assert_eq!(
        req.system.as_deref(),
        Some("static"),
        "the system prompt is untouched"
    );
    req.messages
}

#[tokio::test]
async fn summary_ledger_and_skills_share_one_hidden_data_message() {
    let state = ThreadState {
        summary_text: Some("We compared <b>three</b> libraries.".into()),
        delegations: vec![Delegation {
            id: "c1".into(),
            description: "benchmark them".into(),
            subagent_type: "bash".into(),
            status: "in_progress".into(),
            ..Default::default()
        }],
        skill_context: vec![SkillEntry {
            name: "bench".into(),
            path: "/mnt/skills/public/bench/SKILL.md".into(),
            description: "How to benchmark".into(),
            loaded_at: 3,
        }],
        ..Default::default()
    };
    let msgs = request_through(state, true).await;
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        msgs[0].text(),
        "in-list system",
        "inserted after leading system messages"
    );
    let Message::System(authority) = &msgs[1] else {
        panic!("authority contract must be a system message")
    };
    assert_eq!(authority.content.text(), AUTHORITY_CONTRACT);
    let Message::Human(HumanMessage {
        content,
        additional_kwargs,
        ..
    }) = &msgs[2]
    else {
        panic!("data must be a human message")
    };
    assert_eq!(additional_kwargs.get("hide_from_ui"), Some(&json!(true)));
    assert_eq!(additional_kwargs.get(DATA_FLAG), Some(&json!(true)));
    let data = content.text();
    assert!(data.starts_with("<durable_context_data>\n## Conversation summary so far\n"));
    assert!(data.contains("We compared &lt;b&gt;three&lt;/b&gt; libraries."));
    assert!(data.contains("## Work already delegated"));
    assert!(data.contains(
        "- [in_progress] benchmark them (via bash; already delegated; do NOT delegate again"
    ));
    assert!(data.contains("## Active skills (loaded earlier - re-read the file before applying its instructions)\n- bench: How to benchmark -> /mnt/skills/public/bench/SKILL.md"));
    for untrusted in ["three", "benchmark them", "bench"] {
        assert!(!authority.content.text().contains(untrusted));
    }
    assert_eq!(msgs[3].text(), "question");
}

#[tokio::test]
async fn the_contract_can_live_in_the_static_prompt_instead() {
    let m = DurableContextMiddleware::new(DurableContextSettings {
        inject_authority_contract: false,
        ..Default::default()
    });
    let state = ThreadState {
        summary_text: Some("earlier".into()),
        ..Default::default()
    };
    let msgs = request_with(m, state, false).await;
    assert_eq!(msgs.len(), 2);
    assert!(kw(&msgs[0], DATA_FLAG).is_some());
    assert!(msgs.iter().all(|m| !matches!(m, Message::System(_))));
}

#[tokio::test]
async fn empty_channels_inject_nothing() {
    let msgs = request_through(ThreadState::default(), false).await;
    assert_eq!(msgs, [human("q", "question")]);
}

// ---- through the loop ----------------------------------------------------------------------

/// A `task` stand-in that reports the subagent contract.
fn fake_task() -> Arc<dyn Tool> {
    FnTool::named("task", |_, _| {
        let mut kwargs = Object::new();
        kwargs.insert("subagent_status".into(), json!("completed"));
        kwargs.insert("subagent_result_brief".into(), json!("the answer is 42"));
        Ok(ToolOutput::Content {
            content: "Task Succeeded. Result: the answer is 42".into(),
            status: ToolStatus::Success,
            artifact: Value::Null,
            additional_kwargs: kwargs,
        })
    })
}

#[tokio::test]
async fn the_ledger_survives_compaction_and_reaches_every_later_request() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call(
            "c1",
            "task",
            json!({"description": "compute the answer", "prompt": "p", "subagent_type": "general-purpose"}),
        ),
        ScriptedReply::text("done"),
    ]));
    let task = fake_task();
    let agent =
        agent(model.clone(), vec![Arc::new(mw())]).with_tools(ToolRegistry::new().with(task));
    let mut first = HumanMessage {
        content: "go".into(),
        ..Default::default()
    };
    first.additional_kwargs.insert("run_id".into(), json!("r1"));
    let out = agent
        .run(RunInput::message(Message::Human(first)), run_ctx("t", "r1"))
        .await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(out.state.delegations.len(), 1);
    let d = &out.state.delegations[0];
    assert_eq!((d.id.as_str(), d.status.as_str()), ("c1", "completed"));
    assert_eq!(d.run_id.as_deref(), Some("r1"));
    // The model's second request already carried the ledger.
    let second = &model.requests()[1];
    assert!(second.messages[1].text().contains("compute the answer"));

    // Compaction removes every message; the ledger still reaches the model on the next run.
    let wipe = StateUpdate {
        messages: Some(vec![Message::remove_all()]),
        ..Default::default()
    };
    model.push(ScriptedReply::text("still know"));
    agent
        .run(
            RunInput {
                messages: vec![Message::human("what did we delegate?")],
                update: Some(wipe),
                ..Default::default()
            },
            run_ctx("t", "r2"),
        )
        .await;
    let req = last_request(&model);
    assert!(req.messages[1].text().contains(
        "- [completed] compute the answer (via general-purpose; done; do NOT delegate again; reuse this result) -> the answer is 42"
    ));
    assert_eq!(req.messages.last().unwrap().text(), "what did we delegate?");
}

#[tokio::test]
async fn an_interrupted_delegation_is_still_known_after_resuming() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::tool_call(
        "c1",
        "task",
        json!({"description": "crawl the site", "prompt": "p", "subagent_type": "general-purpose"}),
    )]));
    // A `task` stand-in that never finishes (the run is cancelled while it works).
    let task = Blocker::new("task");
    let started = task.entered.clone();
    let agent =
        agent(model.clone(), vec![Arc::new(mw())]).with_tools(ToolRegistry::new().with(task));
    let run = run_ctx("t", "r1");
    let cancel = run.cancel.clone();
    let a = agent.clone();
    let handle =
        tokio::spawn(async move { a.run(RunInput::message(Message::human("crawl")), run).await });
    started.notified().await;
    cancel.cancel();
    let out = handle.await.unwrap();
    assert_eq!(out.status, RunStatus::Interrupted);
    assert_eq!(
        out.state.delegations[0].status, "in_progress",
        "checkpointed before the tool ran"
    );

    model.push(ScriptedReply::text("waiting for the crawl"));
    let req = asked(&agent, &model, "continue", run_ctx("t", "r2")).await;
    let data = req
        .messages
        .iter()
        .find(|m| kw(m, DATA_FLAG).is_some())
        .expect("durable data in the resumed request")
        .text();
    assert!(data.contains("- [in_progress] crawl the site (via general-purpose; already delegated; do NOT delegate again"));
}
