//! The terminal-answer guards (spec 30 §TerminalResponse, §ModelLengthFinishReason,
//! §SafetyFinishReason): DeerFlow's expectations as hook-level tests, plus runs through the
//! agent loop in the lead chain's order (TerminalResponse, ModelLength, Safety last, so Safety's
//! after_model runs first).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_config::{PluginRef, SafetyFinishReasonConfig};
use antler_middleware::finish_reason::model_length::{self, ModelLengthFinishReasonMiddleware};
use antler_middleware::finish_reason::safety::{self, SafetyFinishReasonMiddleware};
use antler_middleware::finish_reason::{
    first_hit, safety_detector_from_config, DetectorConfigError, FieldDetector, Termination,
    TerminationDetector,
};
use antler_middleware::loop_detection::LoopDetectionMiddleware;
use antler_middleware::terminal_response::{
    TerminalResponseMiddleware, FALLBACK_CONTENT, FALLBACK_REASON, RECOVERY_PROMPT,
};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    markers, AiMessage, Content, HumanMessage, InvalidToolCall, Message, Object, StreamEvent,
    ThreadState, ToolCall, ToolMessage,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::{human, run_ctx, state_of, FnTool, Recorder};

// ------------------------------------------------------------------------------ helpers

fn ai(content: impl Into<Content>, meta: Value) -> AiMessage {
    AiMessage {
        id: Some("ai-last".into()),
        content: content.into(),
        response_metadata: match meta {
            Value::Object(o) => o.into(),
            _ => Object::new().into(),
        },
        ..Default::default()
    }
}

fn with_call(mut m: AiMessage, id: &str, name: &str) -> AiMessage {
    m.tool_calls
        .push(ToolCall::new(id, name, serde_json::Map::new()));
    m.additional_kwargs.insert(
        "tool_calls".into(),
        json!([{"id": id, "type": "function", "function": {"name": name, "arguments": "{\"content\": \"half a"}}]),
    );
    m
}

fn tool_msg(id: &str) -> Message {
    Message::Tool(ToolMessage::new(id, "result").with_name("bash"))
}

/// human, ai (call), tool, then `last`.
fn after_tools(last: AiMessage) -> ThreadState {
    state_of(vec![
        human("h1", "do it"),
        Message::Ai(with_call(
            ai("", json!({"finish_reason": "tool_calls"})),
            "c1",
            "bash",
        )),
        tool_msg("c1"),
        Message::Ai(last),
    ])
}

fn replaced(out: &HookOutput) -> AiMessage {
    let msgs = out.update.as_ref().unwrap().messages.as_ref().unwrap();
    assert_eq!(msgs.len(), 1);
    msgs[0].as_ai().unwrap().clone()
}

// ------------------------------------------------------------------------------ TerminalResponse

#[tokio::test]
async fn an_empty_answer_after_tools_is_removed_and_retried_once_then_falls_back() {
    let mw = TerminalResponseMiddleware::new();
    let run = run_ctx("t", "r");
    mw.before_agent(&ThreadState::default(), &run)
        .await
        .unwrap();
    let st = after_tools(ai("", json!({"finish_reason": "stop"})));

    let first = mw.after_model(&st, &run).await.unwrap();
    assert_eq!(first.jump_to, Some(JumpTo::Model));
    let msgs = first.update.unwrap().messages.unwrap();
    assert_eq!(msgs, [Message::remove("ai-last")]);

    // The budget is per run: the next empty answer gets the visible fallback, same id.
    let second = mw.after_model(&st, &run).await.unwrap();
    assert_eq!(second.jump_to, None);
    let fb = replaced(&second);
    assert_eq!(fb.id.as_deref(), Some("ai-last"));
    assert_eq!(fb.content, Content::Text(FALLBACK_CONTENT.into()));
    assert_eq!(fb.additional_kwargs[markers::ERROR_FALLBACK], json!(true));
    assert_eq!(fb.additional_kwargs["error_reason"], json!(FALLBACK_REASON));
    assert!(antler_middleware::llm_error_handling::is_error_fallback(
        &fb
    ));

    // A new invocation (before_agent) starts with a fresh budget; so does after_agent.
    mw.after_agent(&st, &run).await.unwrap();
    assert_eq!(
        mw.after_model(&st, &run).await.unwrap().jump_to,
        Some(JumpTo::Model)
    );
    mw.before_agent(&st, &run).await.unwrap();
    assert_eq!(
        mw.after_model(&st, &run).await.unwrap().jump_to,
        Some(JumpTo::Model)
    );
}

#[tokio::test]
async fn only_empty_terminal_answers_after_a_tool_result_of_this_turn_count() {
    let mw = TerminalResponseMiddleware::new();
    let none = |st: ThreadState| {
        let run = run_ctx("t", "r");
        let mw = mw.clone();
        async move { mw.after_model(&st, &run).await.unwrap() }
    };
    // Visible text, also as a text / output_text block.
    assert_eq!(
        none(after_tools(ai("done", json!({})))).await,
        HookOutput::none()
    );
    for block in [
        json!({"type": "text", "text": "done"}),
        json!({"type": "output_text", "text": "done"}),
        json!("done"),
    ] {
        let st = after_tools(ai(Content::Blocks(vec![block]), json!({})));
        assert_eq!(none(st).await, HookOutput::none());
    }
    // A thinking block alone is not visible.
    let thinking = ai(
        Content::Blocks(vec![json!({"type": "thinking", "thinking": "hmm"})]),
        json!({}),
    );
    assert_eq!(
        none(after_tools(thinking)).await.jump_to,
        Some(JumpTo::Model)
    );
    // Tool-call intent in every shape is not an empty answer.
    let structured = with_call(ai("", json!({})), "c2", "bash");
    let mut invalid = ai("", json!({}));
    invalid.invalid_tool_calls.push(InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: Some("c3".into()),
        name: Some("bash".into()),
        args: Some("{".into()),
        error: Some("bad json".into()),
    });
    let mut legacy = ai("", json!({}));
    legacy.additional_kwargs.insert(
        "function_call".into(),
        json!({"name": "bash", "arguments": "{}"}),
    );
    let finish = ai("", json!({"finish_reason": "function_call"}));
    for m in [structured, invalid, legacy, finish] {
        assert_eq!(none(after_tools(m)).await, HookOutput::none());
    }
    // No tool result since the user spoke: not a post-tool answer.
    let st = state_of(vec![
        human("h0", "earlier"),
        Message::Ai(with_call(ai("", json!({})), "c1", "bash")),
        tool_msg("c1"),
        human("h1", "hello"),
        Message::Ai(ai("", json!({}))),
    ]);
    assert_eq!(none(st).await, HookOutput::none());
    // Tool history without any real user message (internal runs) is out of scope.
    let mut hidden = HumanMessage {
        content: "scheduled".into(),
        ..Default::default()
    };
    markers::mark_hidden(&mut hidden.additional_kwargs);
    let st = state_of(vec![
        Message::Human(hidden.clone()),
        Message::Ai(with_call(ai("", json!({})), "c1", "bash")),
        tool_msg("c1"),
        Message::Ai(ai("", json!({}))),
    ]);
    assert_eq!(none(st).await, HookOutput::none());
    // A hidden human message after the real one does not hide the tool result.
    let st = state_of(vec![
        human("h1", "do it"),
        Message::Ai(with_call(ai("", json!({})), "c1", "bash")),
        tool_msg("c1"),
        Message::Human(hidden),
        Message::Ai(ai("  ", json!({}))),
    ]);
    assert_eq!(none(st).await.jump_to, Some(JumpTo::Model));
    // The last message is not an AI message.
    assert_eq!(
        none(state_of(vec![human("h1", "x")])).await,
        HookOutput::none()
    );
}

/// A `bash` that answers "ok", and the count of its calls.
fn counting_bash() -> (Arc<dyn Tool>, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let calls = n.clone();
    let tool = FnTool::named("bash", move |_, _| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("ok"))
    });
    (tool, n)
}

/// The tail of the lead chain: LoopDetection-free, TerminalResponse, ModelLength, Safety.
fn tail_chain() -> Chain {
    Chain::new(vec![
        Arc::new(TerminalResponseMiddleware::new()),
        Arc::new(ModelLengthFinishReasonMiddleware::new()),
        Arc::new(SafetyFinishReasonMiddleware::new()),
    ])
    .unwrap()
}

fn empty() -> ScriptedReply {
    ScriptedReply::Message(ai("", json!({"finish_reason": "stop"})))
}

fn is_recovery(m: &Message) -> bool {
    matches!(m, Message::Human(h) if h.name.as_deref() == Some(markers::TERMINAL_RESPONSE_RECOVERY))
}

async fn run_agent(model: Arc<ScriptedModel>, chain: Chain) -> (RunOutcome, Arc<AtomicUsize>) {
    let (tool, calls) = counting_bash();
    let agent = Agent::new(model)
        .with_tools(ToolRegistry::new().with(tool))
        .with_chain(chain);
    let run = run_ctx("t", "r");
    let out = agent
        .run(RunInput::message(Message::human("list files")), run)
        .await;
    (out, calls)
}

#[tokio::test]
async fn the_retry_answer_is_kept_and_the_nudge_is_never_persisted() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "bash", json!({})),
        empty(),
        ScriptedReply::text("Here are the files."),
    ]));
    let (out, calls) = run_agent(model.clone(), tail_chain()).await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let kinds: Vec<&str> = out.state.messages.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["human", "ai", "tool", "ai"]);
    assert_eq!(
        out.state.messages.last().unwrap().text(),
        "Here are the files."
    );
    assert!(!out.state.messages.iter().any(is_recovery));
    // Only the retry request carries the nudge, as its last message, hidden.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(!reqs[1].messages.iter().any(is_recovery));
    let nudge = reqs[2].messages.last().unwrap();
    assert!(is_recovery(nudge));
    assert!(nudge.is_hidden());
    assert_eq!(nudge.text(), RECOVERY_PROMPT);
    // The empty answer was removed before the retry.
    assert_eq!(
        reqs[2]
            .messages
            .iter()
            .filter(|m| m.as_ai().is_some())
            .count(),
        1
    );
}

#[tokio::test]
async fn the_budget_is_once_per_run_even_when_the_retry_calls_a_tool() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "bash", json!({})),
        empty(),
        ScriptedReply::tool_call("c2", "bash", json!({})),
        empty(),
    ]));
    let (out, calls) = run_agent(model.clone(), tail_chain()).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let last = out.state.last_ai().unwrap();
    assert_eq!(last.content, Content::Text(FALLBACK_CONTENT.into()));
    assert_eq!(last.additional_kwargs[markers::ERROR_FALLBACK], json!(true));
    let nudges: usize = model
        .requests()
        .iter()
        .map(|r| r.messages.iter().filter(|m| is_recovery(m)).count())
        .sum();
    assert_eq!(nudges, 1);
    assert_eq!(model.requests().len(), 4);
}

#[tokio::test]
async fn a_failed_retry_attempt_sends_the_nudge_again() {
    // LLMErrorHandling (outer) may retry the recovery call: every attempt must carry the nudge,
    // and only a call that went through spends it.
    let mw = Arc::new(TerminalResponseMiddleware::new());
    let run = run_ctx("t", "r");
    let st = after_tools(ai("", json!({})));
    mw.after_model(&st, &run).await.unwrap();
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::Error(antler_models::ModelError::Http {
            status: 503,
            retry_after: None,
            message: "busy".into(),
            code: None,
            body: String::new(),
        }),
        ScriptedReply::text("answer"),
        ScriptedReply::text("later"),
    ]));
    let chain = Chain::new(vec![mw as Arc<dyn Middleware>]).unwrap();
    let req = || crate::common::state_request(model.clone(), run.clone(), st.clone());
    assert!(chain.call_model(req()).await.is_err());
    assert!(chain.call_model(req()).await.is_ok());
    assert!(chain.call_model(req()).await.is_ok());
    let nudged: Vec<bool> = model
        .requests()
        .iter()
        .map(|r| r.messages.last().is_some_and(is_recovery))
        .collect();
    assert_eq!(nudged, [true, true, false]);
}

#[tokio::test]
async fn an_empty_answer_without_a_tool_result_is_not_retried() {
    let model = Arc::new(ScriptedModel::new([empty()]));
    let (out, _) = run_agent(model.clone(), tail_chain()).await;
    assert_eq!(model.requests().len(), 1);
    assert_eq!(out.state.messages.len(), 2);
}

// ------------------------------------------------------------------------------ ModelLength

async fn length_reason(last: AiMessage, preset: Option<&str>) -> (HookOutput, Option<String>) {
    let mw = ModelLengthFinishReasonMiddleware::new();
    let run = run_ctx("t", "r");
    if let Some(p) = preset {
        run.set(&keys::STOP_REASON, p.to_owned());
    }
    let st = state_of(vec![human("h1", "write"), Message::Ai(last)]);
    let out = mw.after_model(&st, &run).await.unwrap();
    (out, run.get(&keys::STOP_REASON))
}

#[tokio::test]
async fn a_length_capped_answer_marks_the_run_and_keeps_the_text() {
    let capped = Some(model_length::STOP_REASON.to_owned());
    // Every provider's spelling, in response_metadata or additional_kwargs.
    for meta in [
        json!({"finish_reason": "length"}),
        json!({"finish_reason": "LENGTH"}),
        json!({"finish_reason": "MAX_TOKENS"}),
        json!({"stop_reason": "max_tokens"}),
    ] {
        let (out, reason) = length_reason(ai("partial <tool_call>{", meta.clone()), None).await;
        assert_eq!(out, HookOutput::none(), "{meta}");
        assert_eq!(reason, capped, "{meta}");
    }
    let mut kw = ai("partial", json!({}));
    kw.additional_kwargs
        .insert("finish_reason".into(), json!("length"));
    assert_eq!(length_reason(kw, None).await.1, capped);
    // Clean stops, tool calls, empty answers and non-string metadata pass.
    for m in [
        ai(
            "<tool_call>bash</tool_call>",
            json!({"finish_reason": "stop"}),
        ),
        with_call(ai("x", json!({"finish_reason": "length"})), "c1", "bash"),
        ai("  ", json!({"finish_reason": "length"})),
        ai(
            "x",
            json!({"finish_reason": 7, "stop_reason": {"v": "max_tokens"}}),
        ),
    ] {
        assert_eq!(length_reason(m, None).await.1, None);
    }
    // An earlier stop reason is not overwritten.
    let (_, reason) = length_reason(
        ai("x", json!({"finish_reason": "length"})),
        Some("loop_capped"),
    )
    .await;
    assert_eq!(reason.as_deref(), Some("loop_capped"));
    // Non-AI last message.
    let mw = ModelLengthFinishReasonMiddleware::new();
    let st = state_of(vec![human("h1", "x")]);
    assert_eq!(mw.detect(&st), None);
}

// ------------------------------------------------------------------------------ detectors

#[test]
fn detectors_take_custom_values_and_ignore_non_strings() {
    let d =
        FieldDetector::openai_compatible_content_filter().with_values(["sensitive", "Violation"]);
    let hit = d
        .detect(&ai("", json!({"finish_reason": "VIOLATION"})))
        .unwrap();
    assert_eq!(hit.reason_value, "VIOLATION");
    assert_eq!(
        d.detect(&ai("", json!({"finish_reason": "content_filter"}))),
        None
    );
    let g = FieldDetector::gemini_safety();
    assert!(g
        .detect(&ai("", json!({"finish_reason": "recitation"})))
        .is_some());
    assert_eq!(
        g.detect(&ai("", json!({"finish_reason": "MAX_TOKENS"}))),
        None
    );
    assert_eq!(g.detect(&ai("", json!({"finish_reason": "OTHER"}))), None);
    assert_eq!(
        g.detect(&ai("", json!({"finish_reason": ["SAFETY"]}))),
        None
    );
    // Extras carry the provider's details.
    let hit = g
        .detect(&ai(
            "",
            json!({"finish_reason": "SAFETY", "safety_ratings": [{"category": "HARM_CATEGORY_X"}]}),
        ))
        .unwrap();
    assert_eq!(
        hit.extras["safety_ratings"][0]["category"],
        "HARM_CATEGORY_X"
    );
    let azure = FieldDetector::openai_compatible_content_filter()
        .detect(&ai(
            "",
            json!({"finish_reason": "content_filter", "content_filter_results": {"hate": {"filtered": true}}}),
        ))
        .unwrap();
    assert_eq!(
        azure.extras["content_filter_results"]["hate"]["filtered"],
        true
    );
}

struct Panics;

impl TerminationDetector for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn detect(&self, _: &AiMessage) -> Option<Termination> {
        panic!("buggy detector")
    }
}

#[test]
fn detectors_run_in_order_and_a_buggy_one_counts_as_no_hit() {
    let list: Vec<Arc<dyn TerminationDetector>> = vec![
        Arc::new(Panics),
        Arc::new(FieldDetector::anthropic_refusal()),
        Arc::new(FieldDetector::anthropic_refusal().with_values(["refusal", "other"])),
    ];
    let hit = first_hit(&list, &ai("", json!({"stop_reason": "refusal"}))).unwrap();
    assert_eq!(hit.detector, "anthropic_refusal");
    assert_eq!(hit.reason_field, "stop_reason");
    assert_eq!(
        first_hit(&list, &ai("", json!({"stop_reason": "end_turn"}))),
        None
    );
}

#[test]
fn configured_detectors_are_deerflows_builtins_by_class_path() {
    let entry = |use_: &str, config: Value| PluginRef {
        use_: use_.into(),
        config: match config {
            Value::Object(o) => o,
            _ => Object::new(),
        },
    };
    let d = safety_detector_from_config(&entry(
        "deerflow.agents.middlewares.safety_termination_detectors:OpenAICompatibleContentFilterDetector",
        json!({"finish_reasons": ["sensitive"]}),
    ))
    .unwrap();
    assert!(d
        .detect(&ai("", json!({"finish_reason": "sensitive"})))
        .is_some());
    assert!(d
        .detect(&ai("", json!({"finish_reason": "content_filter"})))
        .is_none());
    let r = safety_detector_from_config(&entry(
        "deerflow.agents.middlewares.safety_termination_detectors:AnthropicRefusalDetector",
        json!({}),
    ))
    .unwrap();
    assert_eq!(r.name(), "anthropic_refusal");
    assert!(matches!(
        safety_detector_from_config(&entry("my.pkg:Detector", json!({}))),
        Err(DetectorConfigError::Unknown(u)) if u == "my.pkg:Detector"
    ));
    assert!(matches!(
        safety_detector_from_config(&entry(
            "deerflow.agents.middlewares.safety_termination_detectors:GeminiSafetyDetector",
            json!({"finish_reasons": "SAFETY"}),
        )),
        Err(DetectorConfigError::BadValues { .. })
    ));
    assert!(matches!(
        safety_detector_from_config(&entry(
            "deerflow.agents.middlewares.safety_termination_detectors:GeminiSafetyDetector",
            json!({"stop_reasons": ["SAFETY"]}),
        )),
        Err(DetectorConfigError::UnknownKey { .. })
    ));
    // Config: disabled → none; null → built-ins; empty list → refused; unknown class → error.
    let off = SafetyFinishReasonConfig {
        enabled: false,
        detectors: None,
    };
    assert!(SafetyFinishReasonMiddleware::from_config(&off)
        .unwrap()
        .is_none());
    let default = SafetyFinishReasonMiddleware::from_config(&SafetyFinishReasonConfig::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        default.detector_names(),
        [
            "openai_compatible_content_filter",
            "anthropic_refusal",
            "gemini_safety"
        ]
    );
    let empty = SafetyFinishReasonConfig {
        enabled: true,
        detectors: Some(vec![]),
    };
    assert!(SafetyFinishReasonMiddleware::from_config(&empty).is_err());
    let unknown = SafetyFinishReasonConfig {
        enabled: true,
        detectors: Some(vec![entry("my.pkg:Detector", json!({}))]),
    };
    let err = SafetyFinishReasonMiddleware::from_config(&unknown)
        .err()
        .unwrap();
    assert!(
        err.contains("detectors[0]") && err.contains("my.pkg:Detector"),
        "{err}"
    );
    assert!(SafetyFinishReasonMiddleware::with_detectors(Vec::new()).is_err());
}

// ------------------------------------------------------------------------------ Safety

async fn safety(last: AiMessage) -> (HookOutput, Option<String>) {
    let mw = SafetyFinishReasonMiddleware::new();
    let run = run_ctx("t", "r");
    let st = state_of(vec![human("h1", "write"), Message::Ai(last)]);
    let out = mw.after_model(&st, &run).await.unwrap();
    (out, run.get(&keys::STOP_REASON))
}

#[tokio::test]
async fn a_filtered_response_with_tool_calls_loses_them_and_explains() {
    for meta in [
        json!({"finish_reason": "content_filter"}),
        json!({"stop_reason": "refusal", "finish_reason": "refusal"}),
        json!({"finish_reason": "SAFETY"}),
    ] {
        let mut m = with_call(ai("Writing the file", meta.clone()), "c1", "write_file");
        m.additional_kwargs.insert("keep".into(), json!(1));
        m.additional_kwargs
            .insert("function_call".into(), json!({"name": "x"}));
        let (out, reason) = safety(m).await;
        assert_eq!(reason.as_deref(), Some(safety::STOP_REASON));
        let p = replaced(&out);
        assert_eq!(p.id.as_deref(), Some("ai-last"));
        assert!(p.tool_calls.is_empty());
        assert!(!p.additional_kwargs.contains_key("tool_calls"));
        assert!(!p.additional_kwargs.contains_key("function_call"));
        assert_eq!(p.additional_kwargs["keep"], json!(1));
        // The provider's reason stays.
        assert_eq!(
            p.response_metadata.get("finish_reason"),
            meta.get("finish_reason")
        );
        let text = p.content.text();
        assert!(text.starts_with("Writing the file\n\n"), "{text}");
        assert!(text.contains("tool calls were not run"), "{text}");
        let rec = &p.additional_kwargs[markers::SAFETY_TERMINATION];
        assert_eq!(rec["suppressed_tool_call_count"], 1);
        assert_eq!(rec["suppressed_tool_call_names"], json!(["write_file"]));
        assert!(rec["detector"].is_string() && rec["reason_value"].is_string());
    }
}

#[tokio::test]
async fn blank_filtered_answers_are_backfilled_and_text_ones_kept() {
    for content in [
        Content::Text(String::new()),
        Content::Text("   ".into()),
        Content::Blocks(vec![]),
    ] {
        for meta in [
            json!({"finish_reason": "content_filter"}),
            json!({"stop_reason": "refusal"}),
        ] {
            let (out, reason) = safety(ai(content.clone(), meta)).await;
            let p = replaced(&out);
            assert!(
                p.content.text().contains("returned no content"),
                "{:?}",
                p.content
            );
            assert!(!p.content.text().contains("tool calls"));
            assert_eq!(reason.as_deref(), Some(safety::STOP_REASON));
            assert_eq!(
                p.additional_kwargs[markers::SAFETY_TERMINATION]["suppressed_tool_call_count"],
                0
            );
        }
    }
    // A partial safe answer is left alone; blank without a signal passes; normal stops pass.
    for m in [
        ai("partial answer", json!({"finish_reason": "content_filter"})),
        ai("", json!({"finish_reason": "stop"})),
        with_call(ai("", json!({"finish_reason": "tool_calls"})), "c1", "bash"),
    ] {
        assert_eq!(safety(m).await, (HookOutput::none(), None));
    }
    // List content (thinking blocks) gets an extra text block.
    let m = with_call(
        ai(
            Content::Blocks(vec![json!({"type": "thinking", "thinking": "t"})]),
            json!({"finish_reason": "SAFETY"}),
        ),
        "c1",
        "bash",
    );
    let p = replaced(&safety(m).await.0);
    let Content::Blocks(b) = &p.content else {
        panic!("{:?}", p.content)
    };
    assert_eq!(b.len(), 2);
    assert!(b[1]["text"].as_str().unwrap().starts_with("\n\n"));
    // Idempotent: the repaired message has text and no calls.
    assert_eq!(safety(p).await, (HookOutput::none(), None));
}

#[tokio::test]
async fn a_repair_emits_a_custom_event_and_a_journal_record_without_arguments() {
    let sink = Arc::new(CollectingSink::new());
    let rec = Arc::new(Recorder::default());
    let run = RunContext::new("t", "r", sink.clone()).with_observer(rec.clone());
    let st = state_of(vec![
        human("h1", "x"),
        Message::Ai(with_call(
            ai("", json!({"finish_reason": "content_filter"})),
            "c1",
            "write_file",
        )),
    ]);
    SafetyFinishReasonMiddleware::new()
        .after_model(&st, &run)
        .await
        .unwrap();
    let customs: Vec<Value> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Custom(v) => Some(v),
            _ => None,
        })
        .collect();
    assert_eq!(
        customs,
        [json!({
            "type": "safety_termination",
            "detector": "openai_compatible_content_filter",
            "reason_field": "finish_reason",
            "reason_value": "content_filter",
            "suppressed_tool_call_count": 1,
            "suppressed_tool_call_names": ["write_file"],
            "thread_id": "t",
        })]
    );
    let records = rec.0.lock().unwrap().clone();
    assert_eq!(records.len(), 1);
    let (action, payload) = &records[0];
    assert_eq!(action, "safety_termination");
    assert_eq!(payload["action"], "suppress_tool_calls");
    assert_eq!(payload["suppressed_tool_call_ids"], json!(["c1"]));
    assert_eq!(payload["message_id"], "ai-last");
    assert!(!payload.to_string().contains("half a"), "{payload}");
    // Nothing is recorded on pass-through.
    let clean = state_of(vec![human("h1", "x"), Message::Ai(ai("fine", json!({})))]);
    SafetyFinishReasonMiddleware::new()
        .after_model(&clean, &run)
        .await
        .unwrap();
    assert_eq!(rec.0.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_filtered_tool_call_never_reaches_the_tool_and_the_run_ends() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::Message(with_call(
        ai("", json!({"finish_reason": "content_filter"})),
        "c1",
        "bash",
    ))]));
    let mut chain = vec![
        Arc::new(LoopDetectionMiddleware::new(Default::default()).unwrap()) as Arc<dyn Middleware>,
    ];
    chain.extend(tail_chain().middlewares().iter().cloned());
    let (out, calls) = run_agent(model.clone(), Chain::new(chain).unwrap()).await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(model.requests().len(), 1);
    assert_eq!(out.stop_reason.as_deref(), Some(safety::STOP_REASON));
    let last = out.state.last_ai().unwrap();
    assert!(last.tool_calls.is_empty());
    assert!(last.content.text().contains("safety signal"));
}

#[tokio::test]
async fn normal_tool_round_trips_are_untouched_by_the_tail_guards() {
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "bash", json!({})),
        ScriptedReply::text("All done."),
    ]));
    let (out, calls) = run_agent(model, tail_chain()).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(out.stop_reason, None);
    assert_eq!(out.state.messages.last().unwrap().text(), "All done.");
}
