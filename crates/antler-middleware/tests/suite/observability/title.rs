//! TitleMiddleware: DeerFlow's `test_title_middleware_core_logic.py` expectations, plus the title
//! lifecycle through the agent loop with a checkpointer.

use std::sync::Arc;

use antler_middleware::title::{
    format_prompt, validate, TitleConfig, TitleConfigError, TitleMiddleware, CALLER,
    DEFAULT_PROMPT_TEMPLATE,
};
use antler_models::{ChatModel, ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::{Content, HumanMessage, Message, StreamEvent, StreamModes, ThreadState};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::common::*;
use crate::common::run_ok;

fn settings(max_chars: usize) -> TitleConfig {
    TitleConfig {
        max_chars,
        ..Default::default()
    }
}

fn local(max_chars: usize) -> TitleMiddleware {
    TitleMiddleware::new(settings(max_chars), None)
}

fn with_model(max_chars: usize, model: &Arc<ScriptedModel>) -> TitleMiddleware {
    let model: Arc<dyn ChatModel> = model.clone();
    TitleMiddleware::new(settings(max_chars), Some(model))
}

fn reminder(text: &str) -> Message {
    let mut h = HumanMessage {
        content: text.into(),
        ..Default::default()
    };
    h.additional_kwargs
        .insert("dynamic_context_reminder".into(), Value::Bool(true));
    h.additional_kwargs
        .insert("hide_from_ui".into(), Value::Bool(true));
    Message::Human(h)
}

fn exchange(user: &str, ai: &str) -> ThreadState {
    state(vec![Message::human(user), Message::ai(ai)])
}

async fn title_of(mw: &TitleMiddleware, s: &ThreadState) -> Option<String> {
    mw.after_model(s, &run_ctx("t", "r"))
        .await
        .unwrap()
        .update
        .and_then(|u| u.title.flatten())
}

#[test]
fn defaults_and_validation() {
    let d = TitleConfig::default();
    assert!(d.enabled);
    assert_eq!((d.max_words, d.max_chars), (6, 60));
    assert_eq!(d.prompt_template, DEFAULT_PROMPT_TEMPLATE);
    assert_eq!(validate(&d), Ok(()));
    let bad = |max_words, max_chars| {
        validate(&TitleConfig {
            max_words,
            max_chars,
            ..Default::default()
        })
    };
    assert_eq!(bad(0, 60), Err(TitleConfigError::MaxWords(0)));
    assert_eq!(bad(21, 60), Err(TitleConfigError::MaxWords(21)));
    assert_eq!(bad(6, 9), Err(TitleConfigError::MaxChars(9)));
    assert_eq!(bad(6, 201), Err(TitleConfigError::MaxChars(201)));
    assert_eq!(bad(20, 200), Ok(()));
    assert!(bad(6, 9)
        .unwrap_err()
        .to_string()
        .contains("title.max_chars"));
}

#[test]
fn first_complete_exchange_is_eligible() {
    let mw = local(60);
    assert!(mw.should_generate(&exchange("帮我总结这段代码", "好的，我先看结构"), false));
    let with_reminder = state(vec![
        reminder("<system-reminder>\n<memory>User prefers Python.</memory>\n</system-reminder>"),
        Message::human("帮我总结这段代码"),
        Message::ai("好的，我先看结构"),
    ]);
    assert!(mw.should_generate(&with_reminder, false));
}

#[test]
fn disabled_titled_or_second_turn_is_not_eligible() {
    let disabled = TitleMiddleware::new(
        TitleConfig {
            enabled: false,
            ..Default::default()
        },
        None,
    );
    assert!(!disabled.should_generate(&exchange("Q", "A"), false));
    let mut titled = exchange("Q", "A");
    titled.title = Some("Existing Title".into());
    assert!(!local(60).should_generate(&titled, false));
    let second = state(vec![
        Message::human("第一问"),
        Message::ai("第一答"),
        Message::human("第二问"),
        Message::ai("第二答"),
    ]);
    assert!(!local(60).should_generate(&second, false));
    assert!(!local(60).should_generate(&ThreadState::default(), false));
    assert!(!local(60).should_generate(&ThreadState::default(), true));
}

#[tokio::test]
async fn model_title_respects_max_chars_and_carries_no_tools() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("短标题")]));
    let mw = with_model(12, &model);
    let s = exchange("请帮我写一个很长很长的脚本标题", "好的，先确认需求");
    assert_eq!(title_of(&mw, &s).await.as_deref(), Some("短标题"));
    let reqs = model.requests();
    assert_eq!(reqs.len(), 1);
    assert!(reqs[0].tools.is_empty());
    assert_eq!(reqs[0].system, None);
    assert!(!reqs[0].streamed, "the title call never streams");
    assert_eq!(reqs[0].messages.len(), 1);
    let prompt = reqs[0].messages[0].text();
    assert!(prompt.contains("at most 6 words"), "{prompt}");
    assert!(
        prompt.contains("User: 请帮我写一个很长很长的脚本标题"),
        "{prompt}"
    );
    assert!(prompt.contains("Assistant: 好的，先确认需求"), "{prompt}");

    let long = Arc::new(ScriptedModel::new([ScriptedReply::text(
        "\"An Extremely Long Generated Title\"",
    )]));
    let title = title_of(&with_model(12, &long), &s).await.unwrap();
    assert_eq!(title, "An Extremely");
}

#[tokio::test]
async fn structured_content_is_normalized() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::Message(
        antler_protocol::AiMessage {
            content: Content::Blocks(vec![json!({"type": "text", "text": "请帮我总结这段代码"})]),
            ..Default::default()
        },
    )]));
    let s = state(vec![
        Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "请帮我总结这段代码"}),
        ])),
        Message::ai(Content::Blocks(vec![
            json!({"type": "text", "text": "好的，先看结构"}),
        ])),
    ]);
    assert_eq!(
        title_of(&with_model(20, &model), &s).await.as_deref(),
        Some("请帮我总结这段代码")
    );
    assert!(model.requests()[0].messages[0]
        .text()
        .contains("User: 请帮我总结这段代码"));
}

#[tokio::test]
async fn model_failure_falls_back_to_the_truncated_user_message() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::Error(
        ModelError::Connect("model unavailable".into()),
    )]));
    let s = exchange(
        "这是一个非常长的问题描述，需要被截断以形成fallback标题",
        "收到",
    );
    let title = title_of(&with_model(20, &model), &s).await.unwrap();
    assert!(title.ends_with("..."), "{title}");
    assert!(title.starts_with("这是一个非常长的问题描述"), "{title}");
    assert!(title.chars().count() <= 20);
}

#[tokio::test]
async fn empty_or_think_only_answers_fall_back() {
    for answer in [
        "",
        "   ",
        "<think>just thinking, no real title</think>",
        "\"\"",
    ] {
        let model = Arc::new(ScriptedModel::new([ScriptedReply::text(answer)]));
        let title = title_of(&with_model(20, &model), &exchange("请帮我写测试", "好的")).await;
        assert_eq!(title.as_deref(), Some("请帮我写测试"), "answer {answer:?}");
    }
}

#[tokio::test]
async fn without_a_model_the_local_fallback_is_used() {
    assert_eq!(
        title_of(&local(20), &exchange("请帮我写测试", "好的"))
            .await
            .as_deref(),
        Some("请帮我写测试")
    );
    // The local path never formats the (unused) prompt template.
    let odd = TitleMiddleware::new(
        TitleConfig {
            max_chars: 20,
            prompt_template: "{missing_placeholder}".into(),
            ..Default::default()
        },
        None,
    );
    assert_eq!(
        title_of(&odd, &exchange("默认标题路径不应读取模型 prompt", "好的"))
            .await
            .as_deref(),
        Some("默认标题路径不应读取模型 prompt")
    );
    let long = exchange(
        "这是一个非常长的问题描述，需要被截断以形成fallback标题，而且这里继续补充更多上下文，确保超过本地fallback截断阈值",
        "回复",
    );
    let title = title_of(&local(50), &long).await.unwrap();
    assert!(title.ends_with("...") && title.starts_with("这是一个非常长的问题描述"));
    assert!(title.chars().count() <= 50);
}

#[tokio::test]
async fn an_invalid_template_falls_back_without_calling_the_model() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("never used")]));
    let model_dyn: Arc<dyn ChatModel> = model.clone();
    let mw = TitleMiddleware::new(
        TitleConfig {
            max_chars: 20,
            prompt_template: "{usr_msg}".into(),
            ..Default::default()
        },
        Some(model_dyn),
    );
    assert_eq!(
        title_of(&mw, &exchange("请帮我写测试", "好的"))
            .await
            .as_deref(),
        Some("请帮我写测试")
    );
    assert!(model.requests().is_empty());
}

#[test]
fn fallback_never_exceeds_max_chars() {
    for max_chars in [10, 20, 40, 49, 50, 52, 53, 60, 200] {
        let mw = local(max_chars);
        let long = "x".repeat(200);
        let title = mw.fallback_title(&long);
        assert!(title.chars().count() <= max_chars, "{max_chars}: {title}");
        assert!(title.ends_with("..."));
        assert!(mw.parse_title(&Content::Text(long)).chars().count() <= max_chars);
    }
    assert_eq!(
        local(60).fallback_title(&"x".repeat(200)),
        format!("{}...", "x".repeat(50))
    );
    assert_eq!(local(60).fallback_title(""), "New Conversation");
    assert_eq!(local(60).fallback_title("short"), "short");
}

#[test]
fn think_tags_are_stripped_from_answers_and_prompts() {
    let mw = local(60);
    assert_eq!(
        mw.parse_title(&Content::Text(
            "<think>用户想要研究贵阳发展情况。我需要使用 deep-research skill。</think>贵阳近5年发展报告研究".into()
        )),
        "贵阳近5年发展报告研究"
    );
    assert_eq!(
        mw.parse_title(&Content::Text("<THINK>x</Think>  'Quoted'  ".into())),
        "Quoted"
    );
    assert_eq!(
        mw.parse_title(&Content::Text(
            "<think>just thinking, no real title</think>".into()
        )),
        ""
    );
    let prompt = mw
        .build_prompt(&exchange(
            "贵阳发展报告研究",
            "<think>分析用户需求</think>我将为您研究贵阳的发展情况。",
        ))
        .unwrap();
    assert!(!prompt.contains("<think>"), "{prompt}");
    assert!(
        prompt.contains("Assistant: 我将为您研究贵阳的发展情况。"),
        "{prompt}"
    );
}

#[test]
fn prompt_uses_the_real_user_message_not_the_reminder() {
    let s = state(vec![
        reminder("<system-reminder>\n<memory>User prefers Python.</memory>\n</system-reminder>"),
        Message::human("请帮我写测试"),
        Message::ai("好的"),
    ]);
    let prompt = local(60).build_prompt(&s).unwrap();
    assert!(prompt.contains("User: 请帮我写测试"));
    assert!(!prompt.contains("<system-reminder>"));
    assert!(!prompt.contains("User prefers Python"));
    // Each text is capped at 500 characters in the prompt.
    let long = local(60)
        .build_prompt(&exchange(&"u".repeat(800), &"a".repeat(800)))
        .unwrap();
    assert!(long.contains(&format!("User: {}\n", "u".repeat(500))));
    assert!(!long.contains(&"u".repeat(501)));
    // An empty state still formats the template.
    let empty = local(60).build_prompt(&ThreadState::default()).unwrap();
    assert!(!empty.contains("{user_msg}"));
}

#[test]
fn partial_exchange_rules() {
    let mw = local(20);
    let lone = state(vec![Message::human("只有人类消息，AI 还没回复")]);
    assert!(!mw.should_generate(&lone, false));
    assert!(mw.should_generate(&lone, true));
    assert_eq!(
        mw.interrupted_title(&lone).as_deref(),
        Some("只有人类消息，AI 还没回复")
    );
    let mut titled = state(vec![Message::human("问题")]);
    titled.title = Some("Already set".into());
    assert!(!mw.should_generate(&titled, true));
    assert_eq!(mw.interrupted_title(&titled), None);
    let with_reminder = state(vec![
        reminder("<memory>User prefers concise titles.</memory>"),
        Message::human("请帮我写测试"),
    ]);
    assert_eq!(
        mw.interrupted_title(&with_reminder).as_deref(),
        Some("请帮我写测试")
    );
}

#[test]
fn role_shaped_messages_count_once_parsed() {
    let s = state(vec![
        Message::from_input(json!({"role": "user", "content": "Q"})).unwrap(),
        Message::from_input(json!({"role": "assistant", "content": "A"})).unwrap(),
    ]);
    assert!(local(60).should_generate(&s, false));
}

#[test]
fn prompt_template_placeholders() {
    assert_eq!(
        format_prompt(DEFAULT_PROMPT_TEMPLATE, 6, "U", "A").unwrap(),
        "Write a short title (at most 6 words) for the conversation below. Reply with the title only: no quotes, no trailing punctuation.\n\nUser: U\n\nAssistant: A"
    );
}

/// Lead agent with one registered tool (so its requests carry tools), the title middleware and a
/// checkpointer.
fn agent_with(
    title: TitleMiddleware,
    lead: Arc<ScriptedModel>,
    cp: Arc<dyn Checkpointer>,
) -> Agent {
    Agent::new(lead)
        .with_tools(ToolRegistry::new().with(EchoTool::new("ls")))
        .with_chain(Chain::new(vec![Arc::new(title)]).unwrap())
        .with_checkpointer(cp)
}

#[tokio::test]
async fn title_is_generated_once_after_the_first_exchange_and_kept_on_later_runs() {
    let cp: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let lead = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "ls", json!({"path": "/mnt/user-data/workspace"})),
        ScriptedReply::text("Here is your workspace."),
        ScriptedReply::text("Anything else?"),
    ]));
    let title_model = Arc::new(
        ScriptedModel::new([ScriptedReply::text(
            "<think>hmm</think>\"Workspace Listing\"",
        )])
        .with_info(antler_models::ModelInfo {
            name: "title-model".into(),
            model: "title-model".into(),
            provider: "scripted".into(),
            ..Default::default()
        }),
    );
    let agent = agent_with(with_model(60, &title_model), lead.clone(), cp.clone());
    let rec = EventLog::new();
    let sink = Arc::new(CollectingSink::with_modes(StreamModes::ALL));

    let run =
        Arc::new(RunContext::new("thread-title", "run-1", sink.clone()).with_observer(rec.clone()));
    let out = run_ok(&agent, "What is in my workspace?", run).await;
    assert_eq!(out.state.title.as_deref(), Some("Workspace Listing"));
    // Generated right after the first model answer (the tool call), once.
    assert_eq!(title_model.requests().len(), 1);
    assert!(title_model.requests()[0].tools.is_empty());
    assert!(lead.requests().iter().all(|r| r.tools == ["ls"]));
    let title_calls: Vec<Value> = rec
        .of("model_response")
        .into_iter()
        .filter(|e| e["caller"] == CALLER)
        .collect();
    assert_eq!(title_calls.len(), 1);
    assert_eq!(title_calls[0]["model"], "title-model");
    assert_eq!(title_calls[0]["request_messages"], 1);
    // The title call streamed nothing: no `messages` event carries its text.
    for e in sink.events() {
        if let StreamEvent::Messages { .. } = &e {
            assert!(!e.data().to_string().contains("Workspace Listing"));
        }
    }
    let stored = cp.latest("thread-title").await.unwrap().unwrap();
    assert_eq!(stored.state.title.as_deref(), Some("Workspace Listing"));

    // Second run on the same thread: the title is not regenerated.
    let run = Arc::new(run_ctx("thread-title", "run-2").with_observer(rec.clone()));
    let out = run_ok(&agent, "thanks", run).await;
    assert_eq!(out.state.title.as_deref(), Some("Workspace Listing"));
    assert_eq!(title_model.requests().len(), 1);
}

#[tokio::test]
async fn title_model_failure_falls_back_through_the_loop() {
    let cp: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let lead = Arc::new(ScriptedModel::new([ScriptedReply::text("Sure.")]));
    let title_model = Arc::new(ScriptedModel::new([ScriptedReply::Error(
        ModelError::Http {
            status: 500,
            retry_after: None,
            message: "boom".into(),
            code: None,
            body: String::new(),
        },
    )]));
    let agent = agent_with(with_model(60, &title_model), lead, cp);
    let rec = EventLog::new();
    let run = Arc::new(run_ctx("thread-fallback", "run-1").with_observer(rec.clone()));
    let question = "Please write a detailed migration plan for our billing database cluster";
    let out = run_ok(&agent, question, run).await;
    assert_eq!(
        out.state.title.as_deref(),
        Some("Please write a detailed migration plan for our bil...")
    );
    let errors = rec.of("model_error");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["caller"], CALLER);
}
