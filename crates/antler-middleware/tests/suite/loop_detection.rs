//! LoopDetectionMiddleware: DeerFlow's `test_loop_detection_config.py`,
//! `test_loop_detection_middleware.py` and `test_loop_detection_stop_reason.py` expectations,
//! plus runs through the agent loop with a scripted model.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_middleware::hook::ModelResult;
use antler_middleware::loop_detection::{
    append_text, call_set_hash, tool_calls_hash, validate, LoopDetectionConfig,
    LoopDetectionConfigError, LoopDetectionMiddleware, ToolFreqOverride, HARD_STOP_MSG,
    MAX_PENDING_WARNINGS_PER_RUN, WARNING_NAME,
};
use antler_middleware::middleware_identity;
use antler_models::{ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Content, Message, StateUpdate, ThreadState, ToolCall, ToolMessage, ToolSpec,
};
use antler_runtime::*;
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::run_ok;
use crate::common::{model_request, state_of, FnTool};

// ---------------------------------------------------------------------------------------------
// helpers

fn run(thread: &str, run_id: &str) -> RunContext {
    RunContext::new(thread, run_id, Arc::new(NullSink))
}

fn rt() -> RunContext {
    run("test-thread", "test-run")
}

fn settings(f: impl FnOnce(&mut LoopDetectionConfig)) -> LoopDetectionConfig {
    let mut s = LoopDetectionConfig::default();
    f(&mut s);
    s
}

fn mw(f: impl FnOnce(&mut LoopDetectionConfig)) -> LoopDetectionMiddleware {
    LoopDetectionMiddleware::new(settings(f)).unwrap()
}

/// A detector warning and stopping on repeated identical call sets at `warn` / `hard`.
fn sets(warn: usize, hard: usize) -> LoopDetectionMiddleware {
    mw(|s| {
        s.warn_threshold = warn;
        s.hard_limit = hard;
    })
}

/// A detector warning and stopping on calls of one tool at `warn` / `hard`.
fn freq(warn: usize, hard: usize) -> LoopDetectionMiddleware {
    mw(|s| {
        s.tool_freq_warn = warn;
        s.tool_freq_hard_limit = hard;
    })
}

fn call(name: &str, id: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args.as_object().cloned().unwrap_or_default())
}

fn bash(cmd: &str) -> ToolCall {
    call("bash", &format!("call_{cmd}"), json!({"command": cmd}))
}

fn read(path: &str) -> ToolCall {
    call(
        "read_file",
        &format!("call_read_{path}"),
        json!({"path": path}),
    )
}

fn ai_with(calls: Vec<ToolCall>, content: Content) -> AiMessage {
    AiMessage {
        content,
        tool_calls: calls.into(),
        ..Default::default()
    }
}

/// after_model on a state whose only message is an AI message calling `calls`.
async fn apply(
    m: &LoopDetectionMiddleware,
    calls: Vec<ToolCall>,
    r: &RunContext,
) -> Option<StateUpdate> {
    apply_msg(m, ai_with(calls, Content::default()), r).await
}

async fn apply_msg(
    m: &LoopDetectionMiddleware,
    ai: AiMessage,
    r: &RunContext,
) -> Option<StateUpdate> {
    m.after_model(&state_of(vec![Message::Ai(ai)]), r)
        .await
        .unwrap()
        .update
}

fn stopped(update: Option<StateUpdate>) -> AiMessage {
    let msgs = update.expect("a hard stop").messages.unwrap();
    assert_eq!(msgs.len(), 1);
    msgs[0].as_ai().expect("an AI message").clone()
}

fn hash_of(calls: &[(&str, Value)]) -> String {
    call_set_hash(calls.iter().map(|(n, a)| (*n, a)))
}

/// Send `msgs` through a chain holding only `m`; returns what the model received.
async fn through(
    m: Arc<LoopDetectionMiddleware>,
    msgs: Vec<Message>,
    r: Arc<RunContext>,
) -> Vec<Message> {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("ok")]));
    let chain = Chain::new(vec![m]).unwrap();
    let req = model_request(model.clone(), r, msgs);
    chain.call_model(req).await.unwrap();
    model.requests().remove(0).messages
}

fn loop_warnings(msgs: &[Message]) -> Vec<&Message> {
    msgs.iter()
        .filter(|m| matches!(m, Message::Human(_)) && m.name().as_deref() == Some(WARNING_NAME))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// config (test_loop_detection_config.py)

#[test]
fn defaults_match_deerflow() {
    let d = LoopDetectionConfig::default();
    assert!(d.enabled);
    assert_eq!(
        (
            d.warn_threshold,
            d.hard_limit,
            d.window_size,
            d.max_tracked_threads,
            d.tool_freq_warn,
            d.tool_freq_hard_limit
        ),
        (3, 5, 20, 100, 30, 50)
    );
    assert!(d.tool_freq_overrides.is_empty());
    assert_eq!(validate(&d), Ok(()));
    let custom = settings(|s| {
        s.warn_threshold = 4;
        s.hard_limit = 8;
        s.window_size = 15;
        s.max_tracked_threads = 50;
        s.tool_freq_warn = 20;
        s.tool_freq_hard_limit = 40;
    });
    let m = LoopDetectionMiddleware::new(custom.clone()).unwrap();
    assert_eq!(m.settings(), &custom);
}

#[test]
fn zero_counts_are_rejected() {
    for field in [
        "warn_threshold",
        "hard_limit",
        "tool_freq_warn",
        "tool_freq_hard_limit",
        "window_size",
        "max_tracked_threads",
    ] {
        let s = settings(|s| match field {
            "warn_threshold" => s.warn_threshold = 0,
            "hard_limit" => s.hard_limit = 0,
            "tool_freq_warn" => s.tool_freq_warn = 0,
            "tool_freq_hard_limit" => s.tool_freq_hard_limit = 0,
            "window_size" => s.window_size = 0,
            _ => s.max_tracked_threads = 0,
        });
        let err = validate(&s).unwrap_err();
        assert_eq!(
            err,
            LoopDetectionConfigError::TooSmall {
                field: match field {
                    "warn_threshold" => "warn_threshold",
                    "hard_limit" => "hard_limit",
                    "tool_freq_warn" => "tool_freq_warn",
                    "tool_freq_hard_limit" => "tool_freq_hard_limit",
                    "window_size" => "window_size",
                    _ => "max_tracked_threads",
                },
                value: 0
            }
        );
        assert!(LoopDetectionMiddleware::new(s).is_err());
    }
}

#[test]
fn hard_limits_below_their_warnings_are_rejected_with_the_field_named() {
    let err = validate(&settings(|s| {
        s.warn_threshold = 5;
        s.hard_limit = 3;
    }))
    .unwrap_err();
    assert!(err.to_string().contains("hard_limit"), "{err}");
    let err = validate(&settings(|s| {
        s.tool_freq_warn = 40;
        s.tool_freq_hard_limit = 30;
    }))
    .unwrap_err();
    assert!(err.to_string().contains("tool_freq_hard_limit"), "{err}");
}

#[test]
fn tool_overrides_are_validated() {
    let with = |warn, hard_limit| {
        validate(&settings(|s| {
            s.tool_freq_overrides =
                BTreeMap::from([("bash".to_owned(), ToolFreqOverride { warn, hard_limit })]);
        }))
    };
    assert_eq!(with(150, 300), Ok(()));
    assert_eq!(
        with(0, 10),
        Err(LoopDetectionConfigError::OverrideTooSmall {
            tool: "bash".into(),
            field: "warn",
            value: 0
        })
    );
    let err = with(10, 5).unwrap_err();
    assert!(
        err.to_string()
            .contains("tool_freq_overrides.bash.hard_limit"),
        "{err}"
    );
}

#[test]
fn the_frequency_window_covers_every_hard_limit() {
    let d = LoopDetectionMiddleware::default();
    assert!(d.tool_freq_window() >= 50 && d.tool_freq_window() >= 30);
    let o = mw(|s| {
        s.tool_freq_overrides = BTreeMap::from([(
            "bash".to_owned(),
            ToolFreqOverride {
                warn: 60,
                hard_limit: 120,
            },
        )]);
    });
    assert!(o.tool_freq_window() >= 120);
}

// ---------------------------------------------------------------------------------------------
// hashing

#[test]
fn hash_equivalence_classes() {
    let ls = || [("bash", json!({"command": "ls"}))];
    assert_eq!(hash_of(&ls()), hash_of(&ls()));
    assert_ne!(
        hash_of(&ls()),
        hash_of(&[("bash", json!({"command": "pwd"}))])
    );
    assert_eq!(
        hash_of(&[
            ("bash", json!({"command": "ls"})),
            ("read_file", json!({"path": "/tmp"}))
        ]),
        hash_of(&[
            ("read_file", json!({"path": "/tmp"})),
            ("bash", json!({"command": "ls"}))
        ]),
    );
    assert!(!hash_of(&[]).is_empty());
    assert_eq!(tool_calls_hash(&[]), hash_of(&[]));
    // The structured form hashes like the raw one.
    assert_eq!(tool_calls_hash(&[bash("ls")]), hash_of(&ls()));
    // Descriptions and other non-salient arguments are ignored.
    assert_eq!(
        hash_of(&[("bash", json!({"command": "ls", "description": "list"}))]),
        hash_of(&ls())
    );
}

#[test]
fn json_string_arguments_hash_like_maps() {
    let dict = json!({"path": "/tmp/demo.py", "start_line": "1", "end_line": "150"});
    let string = json!(r#"{"path":"/tmp/demo.py","start_line":"1","end_line":"150"}"#);
    assert_eq!(
        hash_of(&[("read_file", dict)]),
        hash_of(&[("read_file", string)])
    );
    let forward = json!({"path": "/tmp/demo.py", "start_line": 10, "end_line": 300});
    let reversed = json!({"path": "/tmp/demo.py", "start_line": 300, "end_line": 10});
    assert_eq!(
        hash_of(&[("read_file", forward)]),
        hash_of(&[("read_file", reversed)])
    );
    // Neighbouring reads of one 200-line block collide on purpose; the next block does not.
    assert_eq!(
        hash_of(&[(
            "read_file",
            json!({"path": "/a", "start_line": 1, "end_line": 50})
        )]),
        hash_of(&[(
            "read_file",
            json!({"path": "/a", "start_line": 120, "end_line": 200})
        )]),
    );
    assert_ne!(
        hash_of(&[("read_file", json!({"path": "/a", "start_line": 1}))]),
        hash_of(&[("read_file", json!({"path": "/a", "start_line": 201}))]),
    );
}

#[test]
fn odd_argument_payloads_do_not_crash() {
    let json_string = hash_of(&[("bash", json!("\"echo hello\""))]);
    let plain = hash_of(&[("bash", json!("echo hello"))]);
    let number = hash_of(&[("bash", json!(42))]);
    let null = hash_of(&[("bash", Value::Null)]);
    for h in [&json_string, &plain, &number, &null] {
        assert_eq!(h.len(), 12);
    }
    assert_eq!(null, hash_of(&[("bash", json!({}))]));
    assert_ne!(plain, hash_of(&[("bash", json!("echo bye"))]));
}

#[test]
fn salient_and_content_fields_change_the_hash() {
    let h = |name: &str, args: Value| hash_of(&[(name, args)]);
    assert_ne!(
        h("grep", json!({"path": "/tmp", "pattern": "foo"})),
        h("grep", json!({"path": "/tmp", "pattern": "bar"}))
    );
    assert_ne!(
        h("glob", json!({"path": "/tmp", "pattern": "*.py"})),
        h("glob", json!({"path": "/tmp", "pattern": "*.ts"}))
    );
    assert_ne!(
        h("write_file", json!({"path": "/tmp/a.py", "content": "v1"})),
        h("write_file", json!({"path": "/tmp/a.py", "content": "v2"}))
    );
    assert_ne!(
        h(
            "str_replace",
            json!({"path": "/tmp/a.py", "old_str": "foo", "new_str": "bar"})
        ),
        h(
            "str_replace",
            json!({"path": "/tmp/a.py", "old_str": "foo", "new_str": "baz"})
        )
    );
}

// ---------------------------------------------------------------------------------------------
// detection and warnings

#[tokio::test]
async fn nothing_without_tool_calls_or_an_ai_message() {
    let m = LoopDetectionMiddleware::default();
    let r = rt();
    assert_eq!(
        m.after_model(&state_of(vec![Message::ai("hello")]), &r)
            .await
            .unwrap(),
        HookOutput::none()
    );
    assert_eq!(
        m.after_model(&state_of(vec![Message::system("hello")]), &r)
            .await
            .unwrap(),
        HookOutput::none()
    );
    assert_eq!(
        m.after_model(&ThreadState::default(), &r).await.unwrap(),
        HookOutput::none()
    );
    assert!(m.tracked_threads().is_empty());
}

#[tokio::test]
async fn the_third_identical_call_queues_one_warning_and_leaves_state_alone() {
    let m = mw(|s| s.hard_limit = 5);
    let r = rt();
    for _ in 0..2 {
        assert_eq!(apply(&m, vec![bash("ls")], &r).await, None);
    }
    assert!(m.pending_for(&r).is_empty());
    assert_eq!(apply(&m, vec![bash("ls")], &r).await, None);
    let queued = m.pending_warnings("test-thread", "test-run");
    assert_eq!(queued.len(), 1);
    assert!(queued[0].contains("LOOP DETECTED"));
    // Already warned for this hash: the fourth adds nothing.
    assert_eq!(apply(&m, vec![bash("ls")], &r).await, None);
    assert_eq!(m.pending_for(&r).len(), 1);
}

#[tokio::test]
async fn the_warning_is_appended_after_the_tool_messages_of_the_next_request() {
    let m = Arc::new(mw(|s| s.hard_limit = 10));
    let r = Arc::new(rt());
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &r).await;
    }
    let ai = Message::Ai(ai_with(vec![bash("ls")], Content::default()));
    let tool = Message::Tool(ToolMessage::new("call_ls", "ok").with_name("bash"));
    let sent = through(m.clone(), vec![ai.clone(), tool.clone()], r.clone()).await;
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0], ai);
    assert_eq!(sent[1], tool);
    assert_eq!(sent[2].kind(), "human");
    assert_eq!(sent[2].name().as_deref(), Some(WARNING_NAME));
    assert!(sent[2].text().contains("LOOP DETECTED"));
    // Emitted once: the next request has none.
    let again = through(m.clone(), vec![Message::ai("hi")], r.clone()).await;
    assert!(loop_warnings(&again).is_empty());
    assert_eq!(m.pending_key_count(), 0);
}

#[tokio::test]
async fn warnings_are_scoped_by_run() {
    let m = Arc::new(mw(|s| s.hard_limit = 10));
    let a = Arc::new(run("test-thread", "run-A"));
    let b = Arc::new(run("test-thread", "run-B"));
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &a).await;
    }
    let sent_b = through(m.clone(), vec![Message::ai("hi")], b).await;
    assert!(loop_warnings(&sent_b).is_empty());
    assert!(!m.pending_warnings("test-thread", "run-A").is_empty());
    let sent_a = through(m.clone(), vec![Message::ai("hi")], a).await;
    assert_eq!(loop_warnings(&sent_a).len(), 1);
}

#[tokio::test]
async fn a_run_without_an_id_is_keyed_by_its_context() {
    let m = Arc::new(mw(|s| s.hard_limit = 10));
    let r = Arc::new(run("test-thread", ""));
    let other = Arc::new(run("test-thread", ""));
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &r).await;
    }
    assert_eq!(m.pending_for(&r).len(), 1);
    assert!(
        m.pending_for(&other).is_empty(),
        "another run-less context never shares the key"
    );
    let sent = through(m.clone(), vec![Message::ai("hi")], r.clone()).await;
    let warnings = loop_warnings(&sent);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].text().contains("LOOP DETECTED"));
    assert!(m.pending_for(&r).is_empty());
}

#[tokio::test]
async fn run_boundaries_drop_pending_warnings() {
    let m = mw(|s| s.hard_limit = 10);
    let a = run("test-thread", "run-A");
    let b = run("test-thread", "run-B");
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &a).await;
    }
    assert!(!m.pending_for(&a).is_empty());
    m.before_agent(&ThreadState::default(), &b).await.unwrap();
    assert!(m.pending_for(&a).is_empty());

    let m = mw(|s| s.hard_limit = 10);
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &a).await;
    }
    m.after_agent(&ThreadState::default(), &a).await.unwrap();
    assert!(m.pending_for(&a).is_empty());
    assert_eq!(m.pending_key_count(), 0);
}

#[tokio::test]
async fn several_pending_warnings_merge_into_one_message() {
    let m = Arc::new(LoopDetectionMiddleware::default());
    let r = Arc::new(rt());
    for w in ["first warning", "second warning", "first warning"] {
        m.queue_warning(&r, w);
    }
    let sent = through(m, vec![Message::ai("hi")], r).await;
    let warnings = loop_warnings(&sent);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].text(), "first warning\n\nsecond warning");
}

#[test]
fn pending_state_is_bounded() {
    let m = mw(|s| {
        s.warn_threshold = 2;
        s.max_tracked_threads = 2;
    });
    for i in 0..10 {
        m.queue_warning(
            &run("same-thread", &format!("run-{i}")),
            format!("warning-{i}"),
        );
    }
    assert_eq!(m.pending_key_count(), 4);
    assert_eq!(m.pending_warnings("same-thread", "run-9"), ["warning-9"]);

    let m = LoopDetectionMiddleware::default();
    let r = rt();
    for i in 0..MAX_PENDING_WARNINGS_PER_RUN + 4 {
        m.queue_warning(&r, format!("warning-{i}"));
    }
    m.queue_warning(&r, format!("warning-{}", MAX_PENDING_WARNINGS_PER_RUN + 3));
    let expected: Vec<String> = (4..MAX_PENDING_WARNINGS_PER_RUN + 4)
        .map(|i| format!("warning-{i}"))
        .collect();
    assert_eq!(m.pending_for(&r), expected);
}

#[tokio::test]
async fn distinct_calls_and_a_sliding_window_never_warn() {
    let m = mw(|s| s.warn_threshold = 2);
    let r = rt();
    for i in 0..10 {
        assert_eq!(apply(&m, vec![bash(&format!("cmd_{i}"))], &r).await, None);
    }
    assert!(m.pending_for(&r).is_empty());

    let m = mw(|s| s.window_size = 5);
    apply(&m, vec![bash("ls")], &r).await;
    apply(&m, vec![bash("ls")], &r).await;
    for i in 0..5 {
        apply(&m, vec![bash(&format!("other_{i}"))], &r).await;
    }
    assert_eq!(apply(&m, vec![bash("ls")], &r).await, None);
    assert!(m.pending_for(&r).is_empty());
}

#[tokio::test]
async fn reset_clears_state_and_pending_warnings() {
    let m = mw(|s| s.warn_threshold = 2);
    let r = rt();
    apply(&m, vec![bash("ls")], &r).await;
    apply(&m, vec![bash("ls")], &r).await;
    assert!(!m.pending_for(&r).is_empty());
    m.reset(None);
    assert!(m.pending_for(&r).is_empty());
    assert_eq!(apply(&m, vec![bash("ls")], &r).await, None);
    assert!(m.pending_for(&r).is_empty());
}

#[tokio::test]
async fn threads_are_tracked_separately_with_a_default_id() {
    let m = mw(|s| s.warn_threshold = 2);
    let a = run("thread-A", "test-run");
    let b = run("thread-B", "test-run");
    apply(&m, vec![bash("ls")], &a).await;
    apply(&m, vec![bash("ls")], &b).await;
    apply(&m, vec![bash("ls")], &a).await;
    assert!(m.pending_warnings("thread-A", "test-run")[0].contains("LOOP DETECTED"));
    assert!(m.pending_warnings("thread-B", "test-run").is_empty());
    apply(&m, vec![bash("ls")], &b).await;
    assert!(m.pending_warnings("thread-B", "test-run")[0].contains("LOOP DETECTED"));

    let m = mw(|s| s.warn_threshold = 2);
    apply(&m, vec![bash("ls")], &run("", "r")).await;
    assert_eq!(m.tracked_threads(), ["default"]);
}

#[tokio::test]
async fn lru_eviction_drops_the_oldest_thread_entirely() {
    let m = mw(|s| {
        s.warn_threshold = 2;
        s.max_tracked_threads = 3;
    });
    for i in 0..3 {
        apply(&m, vec![bash("ls")], &run(&format!("thread-{i}"), "r")).await;
    }
    apply(&m, vec![bash("ls")], &run("thread-new", "r")).await;
    let tracked = m.tracked_threads();
    assert_eq!(tracked.len(), 3);
    assert!(!tracked.contains(&"thread-0".to_owned()));
    assert!(tracked.contains(&"thread-new".to_owned()));
    assert_eq!(m.thread_window("thread-0"), None);
    assert_eq!(m.tool_count("thread-0", "bash"), 0);
}

#[tokio::test]
async fn warned_hashes_stay_inside_the_window() {
    let m = mw(|s| {
        s.warn_threshold = 2;
        s.hard_limit = 100;
        s.window_size = 4;
    });
    let r = rt();
    for i in 0..12 {
        let c = bash(&format!("cmd_{i}"));
        apply(&m, vec![c.clone()], &r).await;
        apply(&m, vec![c], &r).await;
    }
    let window = m.thread_window("test-thread").unwrap();
    assert!(window.len() <= 4);
    let warned = m.warned_hashes("test-thread");
    assert!(warned.len() <= 4);
    assert!(warned.iter().all(|h| window.contains(h)));
}

// ---------------------------------------------------------------------------------------------
// hard stop

#[tokio::test]
async fn hard_stop_strips_tool_calls_and_stamps_loop_capped_once() {
    let m = sets(2, 4);
    let r = rt();
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &r).await;
    }
    let msg = stopped(apply(&m, vec![bash("ls")], &r).await);
    assert!(msg.tool_calls.is_empty());
    assert!(msg.content.text().contains(HARD_STOP_MSG));
    assert_eq!(r.get(&keys::STOP_REASON), Some("loop_capped".to_owned()));
    assert_eq!(
        m.consume_stop_reason("test-run").as_deref(),
        Some("loop_capped")
    );
    assert_eq!(m.consume_stop_reason("test-run"), None);
}

#[tokio::test]
async fn warnings_alone_never_stamp_a_stop_reason() {
    let m = sets(2, 10);
    let r = rt();
    apply(&m, vec![bash("ls")], &r).await;
    apply(&m, vec![bash("ls")], &r).await;
    assert_eq!(m.consume_stop_reason("test-run"), None);
    assert_eq!(r.get(&keys::STOP_REASON), None);
}

#[tokio::test]
async fn the_frequency_hard_stop_stamps_loop_capped_too() {
    let m = freq(2, 3);
    let r = rt();
    for i in 0..3 {
        let out = apply(&m, vec![bash(&format!("cmd_{i}"))], &r).await;
        if i < 2 {
            assert_eq!(out, None, "unexpected hard stop at call {i}");
        } else {
            assert!(stopped(out).tool_calls.is_empty());
        }
    }
    assert_eq!(
        m.consume_stop_reason("test-run").as_deref(),
        Some("loop_capped")
    );
}

#[tokio::test]
async fn a_run_without_an_id_still_records_its_stop_reason_in_the_run_context() {
    let m = sets(2, 4);
    let r = run("t", "");
    for _ in 0..4 {
        apply(&m, vec![bash("ls")], &r).await;
    }
    assert_eq!(r.get(&keys::STOP_REASON), Some("loop_capped".to_owned()));
}

#[test]
fn append_text_shapes() {
    assert_eq!(
        append_text(&Content::Text("existing".into()), "appended"),
        Content::Text("existing\n\nappended".into())
    );
    assert_eq!(
        append_text(&Content::Text(String::new()), "appended"),
        Content::Text("\n\nappended".into())
    );
    let original = vec![
        json!({"type": "thinking", "text": "Let me think..."}),
        json!({"type": "text", "text": "Here is my answer"}),
    ];
    let out = append_text(&Content::Blocks(original.clone()), "stop msg");
    let Content::Blocks(blocks) = out else {
        panic!("blocks stay blocks")
    };
    assert_eq!(blocks.len(), 3);
    assert_eq!(&blocks[..2], &original[..]);
    assert_eq!(blocks[2], json!({"type": "text", "text": "\n\nstop msg"}));
    assert_eq!(
        append_text(&Content::Blocks(vec![]), "stop msg"),
        Content::Blocks(vec![json!({"type": "text", "text": "\n\nstop msg"})])
    );
}

#[tokio::test]
async fn hard_stop_keeps_the_content_shape() {
    let m = sets(2, 4);
    let r = rt();
    let blocks = Content::Blocks(vec![
        json!({"type": "thinking", "text": "Let me think..."}),
        json!({"type": "text", "text": "I'll run ls"}),
    ]);
    for _ in 0..3 {
        apply_msg(&m, ai_with(vec![bash("ls")], blocks.clone()), &r).await;
    }
    let msg = stopped(apply_msg(&m, ai_with(vec![bash("ls")], blocks), &r).await);
    let Content::Blocks(b) = &msg.content else {
        panic!("list content stays a list")
    };
    assert_eq!(b.len(), 3);
    assert_eq!(b[2]["type"], "text");
    assert!(b[2]["text"].as_str().unwrap().contains(HARD_STOP_MSG));

    m.reset(None);
    for _ in 0..3 {
        apply(&m, vec![bash("ls")], &r).await;
    }
    let msg = stopped(apply(&m, vec![bash("ls")], &r).await);
    assert_eq!(msg.content, Content::Text(format!("\n\n{HARD_STOP_MSG}")));

    m.reset(None);
    let thinking = || Content::Text("thinking...".into());
    for _ in 0..3 {
        apply_msg(&m, ai_with(vec![bash("ls")], thinking()), &r).await;
    }
    let msg = stopped(apply_msg(&m, ai_with(vec![bash("ls")], thinking()), &r).await);
    assert!(msg.content.text().starts_with("thinking..."));
    assert!(msg.content.text().contains(HARD_STOP_MSG));
}

#[tokio::test]
async fn hard_stop_clears_raw_provider_tool_calls() {
    let m = sets(2, 4);
    let r = rt();
    let provider = || {
        let mut ai = ai_with(vec![bash("ls")], Content::Text("thinking...".into()));
        ai.additional_kwargs.insert(
            "tool_calls".into(),
            json!([{
                "id": "call_ls",
                "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"},
                "thought_signature": "sig-1",
            }]),
        );
        ai.additional_kwargs.insert(
            "function_call".into(),
            json!({"name": "bash", "arguments": "{\"command\":\"ls\"}"}),
        );
        ai.response_metadata
            .insert("finish_reason".into(), json!("tool_calls"));
        ai.id = Some("ai-1".into());
        ai
    };
    for _ in 0..3 {
        apply_msg(&m, provider(), &r).await;
    }
    let msg = stopped(apply_msg(&m, provider(), &r).await);
    assert!(msg.tool_calls.is_empty());
    assert!(!msg.additional_kwargs.contains_key("tool_calls"));
    assert!(!msg.additional_kwargs.contains_key("function_call"));
    assert_eq!(msg.response_metadata["finish_reason"], "stop");
    assert_eq!(
        msg.id.as_deref(),
        Some("ai-1"),
        "same id: the reducer replaces in place"
    );
}

// ---------------------------------------------------------------------------------------------
// frequency layer

#[tokio::test]
async fn frequency_warns_once_at_its_threshold() {
    let m = freq(5, 10);
    let r = rt();
    for i in 0..4 {
        assert_eq!(
            apply(&m, vec![read(&format!("/file_{i}.py"))], &r).await,
            None
        );
    }
    assert!(m.pending_for(&r).is_empty());
    assert_eq!(apply(&m, vec![read("/file_4.py")], &r).await, None);
    let queued = m.pending_for(&r);
    assert_eq!(queued.len(), 1);
    assert!(queued[0].contains("read_file") && queued[0].contains("LOOP DETECTED"));
    assert!(queued[0].contains("read_file has been called 5 times"));
    assert_eq!(apply(&m, vec![read("/file_5.py")], &r).await, None);
    assert_eq!(m.pending_for(&r).len(), 1);
}

#[tokio::test]
async fn frequency_hard_stop_names_the_tool() {
    let m = freq(3, 6);
    let r = rt();
    for i in 0..5 {
        apply(&m, vec![read(&format!("/file_{i}.py"))], &r).await;
    }
    let msg = stopped(apply(&m, vec![read("/file_5.py")], &r).await);
    assert!(msg.tool_calls.is_empty());
    let text = msg.content.text();
    assert!(
        text.contains("FORCED STOP") && text.contains("read_file") && text.contains("6 times"),
        "{text}"
    );
}

#[tokio::test]
async fn spread_out_calls_decay_but_a_tight_burst_still_stops() {
    let m = mw(|s| {
        s.tool_freq_warn = 4;
        s.tool_freq_hard_limit = 4;
        s.window_size = 5;
    });
    let r = rt();
    for i in 0..8 {
        assert_eq!(
            apply(&m, vec![read(&format!("/file_{i}.py"))], &r).await,
            None,
            "read {i}"
        );
        assert_eq!(
            apply(&m, vec![bash(&format!("cmd_{i}"))], &r).await,
            None,
            "bash {i}"
        );
    }
    let m = mw(|s| {
        s.tool_freq_warn = 4;
        s.tool_freq_hard_limit = 4;
        s.window_size = 5;
    });
    for i in 0..3 {
        assert_eq!(apply(&m, vec![read(&format!("/f_{i}.py"))], &r).await, None);
    }
    let text = stopped(apply(&m, vec![read("/f_3.py")], &r).await)
        .content
        .text();
    assert!(text.contains("FORCED STOP") && text.contains("read_file"));
}

#[tokio::test]
async fn tools_and_threads_are_counted_independently() {
    let m = freq(3, 10);
    let r = rt();
    for i in 0..2 {
        apply(&m, vec![read(&format!("/file_{i}.py"))], &r).await;
    }
    for i in 0..2 {
        assert_eq!(apply(&m, vec![bash(&format!("cmd_{i}"))], &r).await, None);
    }
    assert!(m.pending_for(&r).is_empty());
    apply(&m, vec![read("/file_2.py")], &r).await;
    assert!(m.pending_for(&r)[0].contains("read_file"));

    let m = freq(3, 10);
    let a = run("thread-A", "r");
    let b = run("thread-B", "r");
    for i in 0..2 {
        apply(&m, vec![read(&format!("/file_{i}.py"))], &a).await;
        apply(&m, vec![read(&format!("/other_{i}.py"))], &b).await;
    }
    apply(&m, vec![read("/file_2.py")], &a).await;
    assert!(m.pending_for(&a)[0].contains("LOOP DETECTED"));
    assert!(m.pending_for(&b).is_empty());
}

#[tokio::test]
async fn reset_and_eviction_restart_frequency_counts() {
    let m = freq(3, 10);
    let a = run("thread-A", "r");
    let b = run("thread-B", "r");
    for i in 0..2 {
        apply(&m, vec![read(&format!("/a_{i}.py"))], &a).await;
        apply(&m, vec![read(&format!("/b_{i}.py"))], &b).await;
    }
    m.reset(Some("thread-A"));
    assert_eq!(m.tool_count("thread-A", "read_file"), 0);
    apply(&m, vec![read("/b_2.py")], &b).await;
    assert!(m.pending_for(&b)[0].contains("LOOP DETECTED"));
    assert_eq!(apply(&m, vec![read("/a_new.py")], &a).await, None);
    assert!(m.pending_for(&a).is_empty());

    let m = mw(|s| {
        s.tool_freq_warn = 2;
        s.tool_freq_hard_limit = 3;
        s.max_tracked_threads = 2;
    });
    let evicted = run("thread-evicted", "r");
    for i in 0..2 {
        apply(&m, vec![read(&format!("/file_{i}.py"))], &evicted).await;
    }
    apply(&m, vec![bash("ls")], &run("thread-a", "r")).await;
    apply(&m, vec![bash("ls")], &run("thread-b", "r")).await;
    assert_eq!(m.tool_count("thread-evicted", "read_file"), 0);
    assert_eq!(apply(&m, vec![read("/fresh.py")], &evicted).await, None);

    let m = freq(2, 3);
    for i in 0..2 {
        apply(&m, vec![read(&format!("/f_{i}.py"))], &b).await;
    }
    m.reset(None);
    assert_eq!(m.tool_count("thread-B", "read_file"), 0);
    assert_eq!(apply(&m, vec![read("/fresh.py")], &b).await, None);
}

#[tokio::test]
async fn every_call_of_one_response_counts() {
    let m = freq(5, 10);
    let r = rt();
    assert_eq!(
        apply(&m, vec![read("/a.py"), read("/b.py")], &r).await,
        None
    );
    assert_eq!(
        apply(&m, vec![read("/c.py"), read("/d.py")], &r).await,
        None
    );
    assert!(m.pending_for(&r).is_empty());
    assert_eq!(apply(&m, vec![read("/e.py")], &r).await, None);
    assert!(m.pending_for(&r)[0].contains("read_file"));
}

#[tokio::test]
async fn overrides_replace_the_global_thresholds_for_their_tool_only() {
    let overrides = || {
        BTreeMap::from([(
            "bash".to_owned(),
            ToolFreqOverride {
                warn: 50,
                hard_limit: 100,
            },
        )])
    };
    let m = mw(|s| {
        s.tool_freq_warn = 5;
        s.tool_freq_hard_limit = 10;
        s.tool_freq_overrides = overrides();
    });
    let r = rt();
    for i in 0..10 {
        assert_eq!(
            apply(&m, vec![bash(&format!("cmd_{i}"))], &r).await,
            None,
            "call {}",
            i + 1
        );
    }
    assert!(m.pending_for(&r).is_empty());

    let m = mw(|s| {
        s.tool_freq_warn = 3;
        s.tool_freq_hard_limit = 6;
        s.tool_freq_overrides = overrides();
    });
    for i in 0..3 {
        assert_eq!(
            apply(&m, vec![read(&format!("/file_{i}.py"))], &r).await,
            None
        );
    }
    assert!(m.pending_for(&r)[0].contains("read_file"));
}

#[tokio::test]
async fn identical_calls_hit_the_hash_stop_before_the_frequency_layer() {
    let m = mw(|s| {
        s.warn_threshold = 2;
        s.hard_limit = 3;
        s.tool_freq_warn = 100;
        s.tool_freq_hard_limit = 200;
    });
    let r = rt();
    for _ in 0..2 {
        apply(&m, vec![read("/same_file.py")], &r).await;
    }
    let msg = stopped(apply(&m, vec![read("/same_file.py")], &r).await);
    assert!(msg.content.text().contains(HARD_STOP_MSG));
}

#[tokio::test]
async fn defaults_stop_the_fiftieth_distinct_bash_call() {
    let m = LoopDetectionMiddleware::default();
    let r = rt();
    for i in 0..49 {
        assert_eq!(
            apply(&m, vec![bash(&format!("cmd_{i}"))], &r).await,
            None,
            "call {i}"
        );
    }
    let msg = stopped(apply(&m, vec![bash("cmd_50")], &r).await);
    assert!(msg.content.text().contains("bash was called 50 times"));
    assert_eq!(
        m.consume_stop_reason("test-run").as_deref(),
        Some("loop_capped")
    );
}

// ---------------------------------------------------------------------------------------------
// through the agent loop

/// `bash` that answers `ran: <command>`.
fn bash_tools() -> ToolRegistry {
    let spec = Arc::new(ToolSpec {
        name: "bash".into(),
        description: "Run a fake shell command.".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    });
    ToolRegistry::new().with(FnTool::with_spec(spec, |args, _| {
        let cmd = args.get("command").and_then(Value::as_str).unwrap_or("");
        Ok(ToolOutput::text(format!("ran: {cmd}")))
    }))
}

/// Every tool call in `state` is answered by exactly one tool message after it.
fn assert_paired(state: &ThreadState) {
    let msgs: Vec<&Message> = state.messages.iter().collect();
    for (i, m) in msgs.iter().enumerate() {
        if let Message::Ai(ai) = m {
            for c in &ai.tool_calls {
                let answers = msgs[i + 1..]
                    .iter()
                    .filter(|m| matches!(m, Message::Tool(t) if t.tool_call_id == c.id_str()))
                    .count();
                assert_eq!(answers, 1, "call {} answered {answers} times", c.id_str());
            }
        }
    }
}

#[tokio::test]
async fn the_fourth_request_carries_the_warning_and_state_never_does() {
    let m = Arc::new(mw(|s| s.hard_limit = 10));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("call_ls_0", "bash", json!({"command": "ls"})),
        ScriptedReply::tool_call("call_ls_1", "bash", json!({"command": "ls"})),
        ScriptedReply::tool_call("call_ls_2", "bash", json!({"command": "ls"})),
        ScriptedReply::text("final answer"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(bash_tools())
        .with_chain(Chain::new(vec![m.clone()]).unwrap());
    let opts = RunOptions {
        recursion_limit: 20,
        ..Default::default()
    };
    let r = Arc::new(run("integration-thread", "integration-run").with_options(opts));
    let out = agent
        .run(
            RunInput::message(Message::human("inspect the directory")),
            r,
        )
        .await;
    assert_eq!(out.status, RunStatus::Success, "{:?}", out.error);

    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    let counts: Vec<usize> = reqs
        .iter()
        .map(|q| loop_warnings(&q.messages).len())
        .collect();
    assert_eq!(counts, [0, 0, 0, 1]);
    let fourth = &reqs[3].messages;
    assert!(fourth.last().unwrap().text().contains("LOOP DETECTED"));
    assert!(matches!(&fourth[fourth.len() - 2], Message::Tool(t) if t.tool_call_id == "call_ls_2"));

    assert!(loop_warnings(&out.state.messages.to_vec()).is_empty());
    assert_eq!(out.state.messages.last().unwrap().text(), "final answer");
    assert_paired(&out.state);
    assert_eq!(m.pending_key_count(), 0);
    assert_eq!(out.stop_reason, None);
}

#[tokio::test]
async fn an_endless_loop_is_warned_then_stopped_on_the_fifth_call() {
    let m = Arc::new(LoopDetectionMiddleware::default());
    let n = Arc::new(AtomicUsize::new(0));
    let counter = n.clone();
    let model = Arc::new(ScriptedModel::new([]).with_fallback(move |_| {
        let i = counter.fetch_add(1, Ordering::SeqCst);
        ScriptedReply::tool_call(
            &format!("call_{i}"),
            "bash",
            json!({"command": "ls", "description": format!("try {i}")}),
        )
    }));
    let cp: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let agent = Agent::new(model.clone())
        .with_tools(bash_tools())
        .with_chain(Chain::new(vec![m.clone()]).unwrap())
        .with_checkpointer(cp.clone());
    let r = Arc::new(run("endless", "run-1"));
    let out = agent
        .run(RunInput::message(Message::human("list files")), r.clone())
        .await;

    assert_eq!(out.status, RunStatus::Success, "{:?}", out.error);
    assert_eq!(out.stop_reason.as_deref(), Some("loop_capped"));
    assert_eq!(r.get(&keys::STOP_REASON), Some("loop_capped".to_owned()));
    let reqs = model.requests();
    assert_eq!(reqs.len(), 5, "hard stop on the fifth response");
    let counts: Vec<usize> = reqs
        .iter()
        .map(|q| loop_warnings(&q.messages).len())
        .collect();
    assert_eq!(
        counts,
        [0, 0, 0, 1, 0],
        "warned after the third response, in the fourth request"
    );

    let last = out.state.messages.last().and_then(Message::as_ai).unwrap();
    assert!(last.tool_calls.is_empty());
    assert!(last.content.text().contains(HARD_STOP_MSG));
    assert_eq!(last.finish_reason(), Some("stop"));
    let tool_messages = out
        .state
        .messages
        .iter()
        .filter(|m| m.kind() == "tool")
        .count();
    assert_eq!(tool_messages, 4);
    assert_paired(&out.state);
    assert!(loop_warnings(&out.state.messages.to_vec()).is_empty());
    let stored = cp.latest("endless").await.unwrap().unwrap();
    assert_paired(&stored.state);
    assert_eq!(m.pending_key_count(), 0);
    assert_eq!(
        m.consume_stop_reason("run-1").as_deref(),
        Some("loop_capped")
    );
}

#[tokio::test]
async fn a_tight_threshold_caps_the_run_as_the_worker_reads_it() {
    // test_loop_detection_stop_reason.py: warn 1, hard 3 ⇒ loop_capped, status success.
    let m = Arc::new(sets(1, 3));
    let model = Arc::new(ScriptedModel::new([]).with_fallback(|req| {
        ScriptedReply::tool_call(
            &format!("c{}", req.messages.len()),
            "bash",
            json!({"command": "ls"}),
        )
    }));
    let agent = Agent::new(model.clone())
        .with_tools(bash_tools())
        .with_chain(Chain::new(vec![m]).unwrap());
    let out = run_ok(&agent, "go", Arc::new(run("t", "r"))).await;
    assert_eq!(out.stop_reason.as_deref(), Some("loop_capped"));
    assert_eq!(model.requests().len(), 3);
}

/// Retries a failed model call once (stands in for LLM error handling, which sits outside).
struct RetryOnce;

#[async_trait]
impl Middleware for RetryOnce {
    middleware_identity!("RetryOnce", HookSet::WRAP_MODEL);
    async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        match next.run(req.clone()).await {
            Err(_) => next.run(req).await,
            ok => ok,
        }
    }
}

#[tokio::test]
async fn a_retried_request_still_carries_the_warning() {
    let m = Arc::new(mw(|s| s.hard_limit = 10));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("a", "bash", json!({"command": "ls"})),
        ScriptedReply::tool_call("b", "bash", json!({"command": "ls"})),
        ScriptedReply::tool_call("c", "bash", json!({"command": "ls"})),
        ScriptedReply::Error(ModelError::Connect("reset".into())),
        ScriptedReply::text("done"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(bash_tools())
        .with_chain(Chain::new(vec![Arc::new(RetryOnce), m.clone()]).unwrap());
    let out = agent
        .run(
            RunInput::message(Message::human("go")),
            Arc::new(run("t", "r")),
        )
        .await;
    assert_eq!(out.status, RunStatus::Success, "{:?}", out.error);
    let reqs = model.requests();
    assert_eq!(reqs.len(), 5);
    let counts: Vec<usize> = reqs
        .iter()
        .map(|q| loop_warnings(&q.messages).len())
        .collect();
    assert_eq!(
        counts,
        [0, 0, 0, 1, 1],
        "the failed attempt and its retry both carry it"
    );
    assert_eq!(m.pending_key_count(), 0);
}
