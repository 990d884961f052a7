//! MemoryMiddleware and DeerMem's conversation preprocessing (spec 40 §4.3–§4.4, §4.11:
//! `test_memory_middleware.py`, `test_memory_upload_filtering.py`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use antler_middleware::memory::preprocess::{
    detect_signals, filter_messages_for_memory, filter_trivial, is_trivial, prepare, Signal,
};
use antler_middleware::memory::{MemoryCandidate, MemoryMiddleware, MemoryWriter};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, Content, Message, StateUpdate, ThreadState, ToolMessage};
use antler_runtime::{Agent, Chain, Middleware, NullSink, RunContext, RunOptions};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::run_ok;

#[derive(Default)]
struct Recorder(Mutex<Vec<MemoryCandidate>>);

impl MemoryWriter for Recorder {
    fn add(&self, candidate: MemoryCandidate) {
        self.0.lock().unwrap().push(candidate);
    }
}

fn human(id: &str, text: &str) -> Message {
    let mut m = Message::human(text);
    m.set_id(id);
    m
}

fn ai(id: &str, text: &str) -> Message {
    let mut m = Message::ai(text);
    m.set_id(id);
    m
}

fn ai_calling(id: &str) -> Message {
    let mut m = AiMessage {
        id: Some(id.into()),
        ..Default::default()
    };
    m.set_tool_calls(vec![antler_protocol::ToolCall::new(
        "call_1",
        "bash",
        serde_json::Map::new(),
    )]);
    Message::Ai(m)
}

fn tool(id: &str) -> Message {
    let mut t = ToolMessage::new("call_1", "output");
    t.id = Some(id.into());
    Message::Tool(t)
}

fn hidden(id: &str, text: &str, extra: Value) -> Message {
    let mut m = human(id, text);
    let kw = m.additional_kwargs_mut();
    kw.insert("hide_from_ui".into(), json!(true));
    if let Value::Object(o) = extra {
        kw.extend(o);
    }
    m
}

fn arcs(ms: Vec<Message>) -> Vec<Arc<Message>> {
    ms.into_iter().map(Arc::new).collect()
}

fn texts(ms: &[Arc<Message>]) -> Vec<String> {
    ms.iter()
        .map(|m| format!("{}:{}", m.kind(), m.text()))
        .collect()
}

fn state_of(ms: Vec<Message>) -> ThreadState {
    let mut s = ThreadState::default();
    s.apply(StateUpdate::messages(ms)).unwrap();
    s
}

// ---------- the middleware ----------

#[tokio::test]
async fn after_agent_queues_the_raw_conversation_and_returns_nothing() {
    let rec = Arc::new(Recorder::default());
    let mw = MemoryMiddleware::new(rec.clone()).with_agent_name(Some("researcher".into()));
    let state = state_of(vec![human("h1", "hello"), ai("a1", "hi there")]);
    let run = RunContext::new("thread-123", "run-9", Arc::new(NullSink))
        .with_user(Some("runtime-user".into()));
    let out = mw.after_agent(&state, &run).await.unwrap();
    assert_eq!(out, antler_runtime::HookOutput::none());
    let got = rec.0.lock().unwrap();
    assert_eq!(got.len(), 1);
    let c = &got[0];
    assert_eq!(
        (
            c.thread_id.as_str(),
            c.run_id.as_str(),
            c.agent_name.as_deref(),
            c.user_id.as_deref(),
            c.trace_id.as_deref()
        ),
        (
            "thread-123",
            "run-9",
            Some("researcher"),
            Some("runtime-user"),
            None
        )
    );
    assert_eq!(
        texts(&c.messages),
        ["human:hello", "ai:hi there"],
        "raw messages, in order"
    );
}

#[tokio::test]
async fn trace_id_and_agent_come_from_the_run_when_not_configured() {
    let rec = Arc::new(Recorder::default());
    let mw = MemoryMiddleware::new(rec.clone());
    let state = state_of(vec![human("h1", "q"), ai("a1", "a")]);
    let mut extra = serde_json::Map::new();
    extra.insert("trace_id".into(), json!("trace-42"));
    let run = RunContext::new("t", "r", Arc::new(NullSink)).with_options(RunOptions {
        agent_name: Some("coder".into()),
        extra,
        ..Default::default()
    });
    mw.after_agent(&state, &run).await.unwrap();
    let got = rec.0.lock().unwrap();
    assert_eq!(got[0].trace_id.as_deref(), Some("trace-42"));
    assert_eq!(got[0].agent_name.as_deref(), Some("coder"));
    assert_eq!(got[0].user_id, None);
}

#[tokio::test]
async fn disabled_or_empty_queues_nothing() {
    let rec = Arc::new(Recorder::default());
    let run = RunContext::new("t", "r", Arc::new(NullSink));
    let full = state_of(vec![human("h1", "q"), ai("a1", "a")]);
    MemoryMiddleware::new(rec.clone())
        .with_enabled(false)
        .after_agent(&full, &run)
        .await
        .unwrap();
    MemoryMiddleware::new(rec.clone())
        .after_agent(&ThreadState::default(), &run)
        .await
        .unwrap();
    let no_thread = RunContext::new("", "r", Arc::new(NullSink));
    MemoryMiddleware::new(rec.clone())
        .after_agent(&full, &no_thread)
        .await
        .unwrap();
    assert!(rec.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn through_the_loop_it_runs_once_after_the_agent_and_changes_no_state() {
    let rec = Arc::new(Recorder::default());
    let mw: Arc<dyn Middleware> = Arc::new(MemoryMiddleware::new(rec.clone()));
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text(
        "Noted: you like tea.",
    )]));
    let agent = Agent::new(model).with_chain(Chain::new(vec![mw]).unwrap());
    let run = Arc::new(
        RunContext::new("thread-a", "run-1", Arc::new(NullSink)).with_user(Some("alice".into())),
    );
    let out = run_ok(&agent, "I prefer tea", run).await;
    assert_eq!(out.state.messages.len(), 2, "no message added by memory");
    let got = rec.0.lock().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].user_id.as_deref(), Some("alice"));
    assert_eq!(
        texts(&got[0].messages),
        ["human:I prefer tea", "ai:Noted: you like tea."]
    );
}

// ---------- preprocessing ----------

#[test]
fn upload_only_turns_are_dropped_with_their_reply() {
    for tag in ["uploaded_files", "current_uploads"] {
        let msgs = arcs(vec![
            human(
                "h1",
                &format!("<{tag}>\n- /mnt/user-data/uploads/report.pdf\n</{tag}>\n"),
            ),
            ai("a1", "I see the file."),
            human("h2", "What is Rust?"),
            ai("a2", "A language."),
        ]);
        let kept = filter_messages_for_memory(&msgs);
        assert_eq!(
            texts(&kept),
            ["human:What is Rust?", "ai:A language."],
            "{tag}"
        );
    }
}

#[test]
fn upload_plus_question_keeps_only_the_question() {
    let msgs = arcs(vec![
        human(
            "h1",
            "<uploaded_files>\n- /mnt/user-data/uploads/data.csv\n</uploaded_files>\n\nSummarize this table",
        ),
        ai("a1", "Done."),
    ]);
    let kept = filter_messages_for_memory(&msgs);
    assert_eq!(texts(&kept), ["human:Summarize this table", "ai:Done."]);
    assert!(!kept.iter().any(|m| m.text().contains("/mnt/user-data")));
}

#[test]
fn tool_traffic_is_excluded_and_multimodal_text_kept() {
    let mut multimodal = human("h1", "");
    *multimodal.content_mut() = Content::Blocks(vec![
        json!({"type": "text", "text": "look at"}),
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
        json!({"type": "text", "text": "this chart"}),
    ]);
    let msgs = arcs(vec![
        multimodal,
        ai_calling("a1"),
        tool("t1"),
        ai("a2", "It rises."),
    ]);
    let kept = filter_messages_for_memory(&msgs);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].kind(), "human");
    assert_eq!(
        antler_middleware::memory::preprocess::message_text(&kept[0]),
        "look at this chart"
    );
    assert_eq!(kept[1].text(), "It rises.");
    // Unchanged messages are shared, not copied.
    assert!(Arc::ptr_eq(&kept[1], &msgs[3]));
}

#[test]
fn hidden_messages_are_excluded_unless_clarification_answers() {
    let good = json!({"human_input_response": {
        "version": 1, "kind": "human_input_response", "source": "ask_clarification",
        "request_id": "req-1", "value": "Use PostgreSQL", "response_kind": "text"}});
    let good_option = json!({"human_input_response": {
        "version": 1, "kind": "human_input_response", "source": "ask_clarification",
        "request_id": "req-2", "value": "B", "response_kind": "option", "option_id": "opt-b"}});
    let option_without_id = json!({"human_input_response": {
        "version": 1, "kind": "human_input_response", "source": "ask_clarification",
        "request_id": "req-3", "value": "C", "response_kind": "option"}});
    let wrong_version = json!({"human_input_response": {
        "version": 2, "kind": "human_input_response", "source": "s",
        "request_id": "r", "value": "v", "response_kind": "text"}});
    let mut visible = human("h6", "hide_from_ui false stays");
    visible
        .additional_kwargs_mut()
        .insert("hide_from_ui".into(), json!(false));
    let msgs = arcs(vec![
        hidden(
            "h1",
            "<system-reminder>todo list</system-reminder>",
            json!({}),
        ),
        hidden(
            "h2",
            "<memory>User likes tea</memory>",
            json!({"dynamic_context_reminder": true, "name": "__memory"}),
        ),
        hidden("h3", "Use PostgreSQL", good),
        hidden("h4", "B", good_option),
        hidden("h5", "C", option_without_id),
        hidden("h7", "v", wrong_version),
        visible,
        ai("a1", "ok"),
    ]);
    let kept = filter_messages_for_memory(&msgs);
    assert_eq!(
        texts(&kept),
        [
            "human:Use PostgreSQL",
            "human:B",
            "human:hide_from_ui false stays",
            "ai:ok"
        ]
    );
}

fn signals(turns: &[&str]) -> BTreeSet<Signal> {
    let mut msgs = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        msgs.push(human(&format!("h{i}"), t));
        msgs.push(ai(&format!("a{i}"), "reply"));
    }
    detect_signals(&arcs(msgs))
}

#[test]
fn correction_and_reinforcement_are_detected_in_english_and_chinese() {
    assert!(signals(&["No, that's wrong, use tabs"]).contains(&Signal::Correction));
    assert!(signals(&["你理解错了，重新来"]).contains(&Signal::Correction));
    assert!(signals(&["Yes, exactly right. Keep doing that"]).contains(&Signal::Reinforcement));
    assert!(signals(&["完全正确！"]).contains(&Signal::Reinforcement));
    // Reinforcement alone does not count as a correction.
    let r = signals(&["That's exactly what I wanted."]);
    assert!(r.contains(&Signal::Reinforcement) && !r.contains(&Signal::Correction));
    // Bare 对 / 对不起 are not reinforcement.
    assert!(signals(&["对不起，我来晚了"]).is_empty());
    assert_eq!(
        signals(&["I prefer dark mode", "I am a data engineer"]),
        BTreeSet::from([Signal::Preference, Signal::Identity])
    );
    assert!(signals(&["My goal is to learn Rust"]).contains(&Signal::Goal));
    assert!(signals(&["Let's go with SQLite"]).contains(&Signal::Decision));
    assert!(signals(&["what time is it"]).is_empty());
}

#[test]
fn signals_only_look_at_the_recent_turns() {
    // The correction is 4 turns (8 messages) back: outside the last six messages.
    let s = signals(&["that's wrong", "next", "more", "and more"]);
    assert!(!s.contains(&Signal::Correction));
    let s = signals(&["first", "that's wrong", "more"]);
    assert!(s.contains(&Signal::Correction));
}

#[test]
fn list_content_is_scanned_for_signals() {
    let mut m = human("h1", "");
    *m.content_mut() = Content::Blocks(vec![
        json!({"type": "text", "text": "You misunderstood me"}),
    ]);
    let got = detect_signals(&arcs(vec![m, ai("a", "sorry")]));
    assert!(got.contains(&Signal::Correction));
}

#[test]
fn trivial_acknowledgements_are_dropped_with_their_reply() {
    for t in [
        "ok",
        "OK.",
        "好的！",
        "谢谢",
        "got it",
        "Thanks!",
        "嗯嗯",
        "  收到。 ",
    ] {
        assert!(is_trivial(t), "{t}");
    }
    for t in [
        "ok, now use tabs",
        "thanks for the SQL tip, I prefer CTEs",
        "",
    ] {
        assert!(!is_trivial(t), "{t}");
    }
    let kept = filter_trivial(arcs(vec![
        human("h1", "I like Rust"),
        ai("a1", "Nice."),
        human("h2", "thanks"),
        ai("a2", "You're welcome."),
    ]));
    assert_eq!(texts(&kept), ["human:I like Rust", "ai:Nice."]);
}

#[test]
fn prepare_requires_a_human_and_an_ai_message() {
    assert!(prepare(&arcs(vec![human("h", "ok"), ai("a", "fine")])).is_none());
    assert!(prepare(&arcs(vec![human("h", "I like tea")])).is_none());
    let kept = prepare(&arcs(vec![
        human("h", "I like tea"),
        ai_calling("x"),
        tool("t"),
        ai("a", "Noted"),
    ]))
    .unwrap();
    assert_eq!(texts(&kept), ["human:I like tea", "ai:Noted"]);
}

#[test]
fn upload_event_sentences_are_removed_but_file_work_survives() {
    use antler_middleware::memory::preprocess::{mentions_upload, strip_upload_sentences};
    let summary = "User is a data analyst. The user uploaded a CSV file for review. Works with CSV files daily.";
    assert_eq!(
        strip_upload_sentences(summary),
        "User is a data analyst. Works with CSV files daily."
    );
    assert!(mentions_upload("User uploaded three PDF documents"));
    assert!(mentions_upload("Uploaded the report file yesterday"));
    assert_eq!(
        strip_upload_sentences("Uploaded a file. Likes Go."),
        "Likes Go."
    );
    assert!(mentions_upload("See /mnt/user-data/uploads/report.pdf"));
    assert!(!mentions_upload("User works with CSV files"));
    assert!(!mentions_upload("Prefers PDF export"));
    assert_eq!(strip_upload_sentences(""), "");
}
