//! Clarification: options, forms, payload, text, ids, the disable flag, and the two-run
//! conversation through the loop.

use std::sync::Arc;

use antler_middleware::clarification::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Content, Message, Object, StateUpdate, ThreadState, ToolMessage};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::common::*;
use crate::common::run_ok;

fn args(v: Value) -> Object {
    v.as_object().cloned().unwrap()
}

fn text(a: Value) -> String {
    let a = args(a);
    format_question(&a, &normalize_fields(a.get("fields")))
}

fn payload(a: Value) -> Value {
    let a = args(a);
    human_input_payload(
        &a,
        "call-abc",
        "clarification:call-abc",
        &normalize_fields(a.get("fields")),
    )
}

// ---------------------------------------------------------------------------- options

#[test]
fn options_render_from_every_shape() {
    let q = |options: Value| {
        text(
            json!({"question": "Which env?", "clarification_type": "approach_choice", "options": options}),
        )
    };
    for list in [
        json!(["dev", "staging", "prod"]),
        json!(r#"["dev", "staging", "prod"]"#),
    ] {
        let t = q(list);
        assert!(
            t.contains("1. dev") && t.contains("2. staging") && t.contains("3. prod"),
            "{t}"
        );
        assert!(!t.contains("1. [") && !t.contains("2. \""));
    }
    let t = q(json!("\"development\""));
    assert!(t.contains("1. development") && !t.contains("2."));
    assert!(q(json!("just one option")).contains("1. just one option"));
    for none in [Value::Null, json!([])] {
        assert!(!q(none).contains("1."));
    }
    assert!(
        !text(json!({"question": "Tell me more", "clarification_type": "missing_info"}))
            .contains("1.")
    );

    let t = q(json!(r#"["Option A", 2, true, null]"#));
    for line in ["1. Option A", "2. 2", "3. True", "4. None"] {
        assert!(t.contains(line), "{t}");
    }
}

#[test]
fn the_text_puts_context_before_the_question() {
    assert_eq!(
        text(json!({
            "question": "Which env?",
            "clarification_type": "approach_choice",
            "context": "Need target env for config",
            "options": ["dev", "prod"],
        })),
        "🔀 Need target env for config\n\nWhich env?\n\n  1. dev\n  2. prod"
    );
    assert_eq!(
        text(json!({"question": "Delete it?", "clarification_type": "risk_confirmation"})),
        "⚠️ Delete it?"
    );
    for (kind, icon) in [
        ("missing_info", "❓"),
        ("ambiguous_requirement", "🤔"),
        ("suggestion", "💡"),
        ("something_else", "❓"),
    ] {
        assert_eq!(
            text(json!({"question": "Q", "clarification_type": kind})),
            format!("{icon} Q")
        );
    }
}

#[test]
fn the_payload_for_native_options() {
    assert_eq!(
        payload(json!({
            "question": "Which environment should I deploy to?",
            "clarification_type": "approach_choice",
            "context": "Need the target environment for config.",
            "options": ["development", "staging", "production"],
        })),
        json!({
            "version": 1,
            "kind": "human_input_request",
            "source": "ask_clarification",
            "request_id": "clarification:call-abc",
            "clarification_type": "approach_choice",
            "question": "Which environment should I deploy to?",
            "input_mode": "choice_with_other",
            "tool_call_id": "call-abc",
            "context": "Need the target environment for config.",
            "options": [
                {"id": "option-1", "label": "development", "value": "development"},
                {"id": "option-2", "label": "staging", "value": "staging"},
                {"id": "option-3", "label": "production", "value": "production"},
            ],
        })
    );
}

#[test]
fn payload_options_from_json_xml_dicts_and_plain_strings() {
    let p = payload(
        json!({"question": "Pick one", "clarification_type": "approach_choice",
                           "options": r#"["Option A", 2, true, null]"#}),
    );
    assert_eq!(p["input_mode"], "choice_with_other");
    assert_eq!(
        p["options"],
        json!([
            {"id": "option-1", "label": "Option A", "value": "Option A"},
            {"id": "option-2", "label": "2", "value": "2"},
            {"id": "option-3", "label": "True", "value": "True"},
            {"id": "option-4", "label": "None", "value": "None"},
        ])
    );

    let p = payload(json!({
        "question": "How should the document structure change?",
        "clarification_type": "approach_choice",
        "options": {
            "item": {
                "item": "Move the system section earlier</item>",
                "$text": "Merge it into the shared patterns section</item>",
            },
            "$text": "Add a standalone section</item>",
        },
    }));
    let labels: Vec<&str> = p["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "Move the system section earlier",
            "Merge it into the shared patterns section",
            "Add a standalone section"
        ]
    );

    assert_eq!(
        normalize_options(Some(
            &json!({"item": [["First</item>"], {"$text": 2}], "$text": null})
        )),
        ["First", "2"]
    );

    let p = payload(
        json!({"question": "Pick one", "clarification_type": "approach_choice", "options": "just one option"}),
    );
    assert_eq!(
        p["options"],
        json!([{"id": "option-1", "label": "just one option", "value": "just one option"}])
    );
}

#[test]
fn no_options_means_free_text() {
    for a in [
        json!({"question": "Tell me more", "clarification_type": "missing_info", "options": null}),
        json!({"question": "Tell me more", "clarification_type": "missing_info"}),
    ] {
        let p = payload(a);
        assert_eq!(p["input_mode"], "free_text");
        assert_eq!(p["version"], 1);
        assert!(p.get("options").is_none());
        assert!(p.get("context").is_none());
    }
    // A given-but-null context is kept as null.
    let p =
        payload(json!({"question": "Q", "clarification_type": "missing_info", "context": null}));
    assert_eq!(p["context"], Value::Null);
}

#[test]
fn top_level_options_are_trimmed_and_deduplicated() {
    let p = payload(
        json!({"question": "Which env?", "clarification_type": "approach_choice",
                           "options": [" dev ", "", "prod", "dev"]}),
    );
    assert_eq!(
        p["options"],
        json!([
            {"id": "option-1", "label": "dev", "value": "dev"},
            {"id": "option-2", "label": "prod", "value": "prod"},
        ])
    );
}

// ------------------------------------------------------------------------------ forms

fn expense_fields() -> Value {
    json!([
        {"name": "amount", "label": "Amount", "type": "number", "required": true},
        {"name": "category", "label": "Category", "type": "select", "options": ["travel", "meals"], "required": true},
        {"name": "receipts", "label": "Receipts", "type": "multi_select", "options": ["A-1", "A-2"]},
        {"name": "note", "type": "textarea"},
    ])
}

#[test]
fn native_and_json_fields_make_a_v2_form() {
    let p = payload(json!({"question": "Please provide the expense details.",
                           "clarification_type": "missing_info", "fields": expense_fields()}));
    assert_eq!(p["version"], 2);
    assert_eq!(p["input_mode"], "form");
    assert_eq!(
        p["fields"],
        json!([
            {"name": "amount", "label": "Amount", "type": "number", "required": true},
            {"name": "category", "label": "Category", "type": "select", "required": true,
             "options": [
                {"id": "category-option-1", "label": "travel", "value": "travel"},
                {"id": "category-option-2", "label": "meals", "value": "meals"},
             ]},
            {"name": "receipts", "label": "Receipts", "type": "multi_select", "required": false,
             "options": [
                {"id": "receipts-option-1", "label": "A-1", "value": "A-1"},
                {"id": "receipts-option-2", "label": "A-2", "value": "A-2"},
             ]},
            {"name": "note", "label": "note", "type": "textarea", "required": false},
        ])
    );

    let p = payload(
        json!({"question": "Details please", "clarification_type": "missing_info",
                           "fields": r#"[{"name": "amount", "type": "number"}]"#}),
    );
    assert_eq!(p["input_mode"], "form");
    assert_eq!(
        p["fields"],
        json!([{"name": "amount", "label": "amount", "type": "number", "required": false}])
    );
}

#[test]
fn a_form_wins_over_options() {
    let p = payload(
        json!({"question": "Details please", "clarification_type": "missing_info",
                           "fields": [{"name": "amount"}], "options": ["dev", "prod"]}),
    );
    assert_eq!(p["input_mode"], "form");
    assert!(p.get("options").is_none());
}

#[test]
fn benign_field_problems_degrade_locally() {
    let field = |f: Value| {
        payload(json!({"question": "Details please", "clarification_type": "missing_info", "fields": [f]}))["fields"][0].clone()
    };
    assert_eq!(
        field(json!({"name": "amount", "type": "slider"}))["type"],
        "text"
    );
    let select = field(json!({"name": "category", "type": "select"}));
    assert_eq!(select["type"], "text");
    assert!(select.get("options").is_none());
    for bad_type in [
        json!([]),
        json!({}),
        json!(["select"]),
        json!({"t": "select"}),
    ] {
        assert_eq!(
            field(json!({"name": "amount", "type": bad_type}))["type"],
            "text"
        );
    }
    assert_eq!(
        field(
            json!({"name": "category", "type": "select", "options": [" travel ", "", "  ", "travel", "meals"]})
        )["options"],
        json!([
            {"id": "category-option-1", "label": "travel", "value": "travel"},
            {"id": "category-option-2", "label": "meals", "value": "meals"},
        ])
    );
    assert_eq!(
        field(json!({"name": "note", "placeholder": "Optional remarks"}))["placeholder"],
        "Optional remarks"
    );
}

#[test]
fn required_is_coerced() {
    let p = payload(
        json!({"question": "Details please", "clarification_type": "missing_info", "fields": [
            {"name": "a", "type": "number", "required": 1},
            {"name": "b", "type": "text", "required": 0},
            {"name": "c", "required": " TRUE "},
            {"name": "d", "required": "yes"},
        ]}),
    );
    let req: Vec<&Value> = p["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["required"])
        .collect();
    assert_eq!(
        req,
        [&json!(true), &json!(false), &json!(true), &json!(false)]
    );
}

#[test]
fn structural_problems_reject_the_whole_form() {
    let with_fields = |fields: Value| {
        payload(
            json!({"question": "Details please", "clarification_type": "missing_info", "fields": fields}),
        )
    };
    // Any broken entry, with options to fall back to.
    for bad in [
        json!("not-a-dict"),
        json!({"label": "no name"}),
        json!({"name": "   "}),
    ] {
        let p = payload(
            json!({"question": "Details please", "clarification_type": "missing_info",
                               "fields": [bad, {"name": "amount", "type": "number"}], "options": ["dev", "prod"]}),
        );
        assert_eq!(p["version"], 1);
        assert_eq!(p["input_mode"], "choice_with_other");
        assert!(p.get("fields").is_none());
    }
    let rejected = |p: Value| p["input_mode"] == "free_text" && p.get("fields").is_none();
    assert!(rejected(with_fields(
        json!([{"name": "amount", "type": "number"}, {"name": "amount", "type": "text"}])
    )));
    for reserved in ["__proto__", "constructor", "toString", "hasOwnProperty"] {
        assert!(
            rejected(with_fields(json!([{"name": reserved, "type": "text"}]))),
            "{reserved}"
        );
    }
    let many: Vec<Value> = (0..17)
        .map(|i| json!({"name": format!("field_{i}"), "type": "text"}))
        .collect();
    assert!(rejected(with_fields(Value::Array(many))));
    let options: Vec<String> = (0..25).map(|i| format!("option-{i}")).collect();
    assert!(rejected(with_fields(
        json!([{"name": "category", "type": "select", "options": options}])
    )));
    assert!(rejected(with_fields(
        json!([{"name": "amount", "label": "x".repeat(201), "type": "number"}])
    )));
    assert!(rejected(with_fields(json!([{"name": "n".repeat(201)}]))));
    assert!(rejected(with_fields(
        json!([{"name": "a", "placeholder": "p".repeat(201)}])
    )));
    assert!(rejected(with_fields(
        json!([{"name": "c", "type": "select", "options": ["o".repeat(201)]}])
    )));
    assert!(rejected(with_fields(json!("not json"))));
    // 200 characters are fine.
    assert!(!rejected(with_fields(
        json!([{"name": "amount", "label": "x".repeat(200)}])
    )));

    // The serialized byte budget (CJK labels count three bytes each).
    let big: Vec<Value> = (0..16)
        .map(|i| json!({"name": format!("field_{i}"), "label": "标".repeat(190), "type": "select",
                        "options": (0..20).map(|j| format!("{}{j}", "选".repeat(190))).collect::<Vec<_>>()}))
        .collect();
    assert!(rejected(with_fields(Value::Array(big))));
}

#[test]
fn accepted_forms_keep_the_text_fallback_under_channel_limits() {
    let mut largest = None;
    for count in 1..=16 {
        let fields: Vec<Value> = (0..count)
            .map(|i| json!({"name": format!("field_{i}"), "label": "标".repeat(150), "type": "select",
                            "options": (0..10).map(|j| format!("{}{j}", "选".repeat(100))).collect::<Vec<_>>()}))
            .collect();
        let a = json!({"question": "Q", "clarification_type": "missing_info", "fields": fields});
        if payload(a.clone())["input_mode"] != "form" {
            break;
        }
        largest = Some(text(a));
    }
    let largest = largest.expect("at least one form accepted");
    assert!(largest.len() < 30_000);
}

#[test]
fn the_fallback_text_lists_the_fields() {
    let t = text(json!({"question": "Please provide the expense details.",
                        "clarification_type": "missing_info", "fields": expense_fields()}));
    assert_eq!(
        t,
        "❓ Please provide the expense details.\n\
         \n  1. Amount (required)\
         \n  2. Category (required) — options: travel / meals\
         \n  3. Receipts — options: A-1 / A-2 (multiple allowed)\
         \n  4. note\
         \n\
         \nPlease reply with a value for each field."
    );
}

#[tokio::test]
async fn an_unhashable_clarification_type_does_not_crash() {
    let out = intercept(
        call("call-clarify-1", TOOL_NAME, json!({"question": "q?", "clarification_type": [], "fields": [{"name": "amount", "type": []}]})),
        plain_run(),
    )
    .await;
    let ToolOutcome::Command(cmd) = out else {
        panic!("expected a command")
    };
    let msg = only_tool_message(&cmd.update);
    assert_eq!(msg.artifact["human_input"]["input_mode"], "form");
    assert_eq!(msg.artifact["human_input"]["clarification_type"], "[]");
}

// ---------------------------------------------------------------------- the middleware

fn plain_run() -> Arc<RunContext> {
    Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)))
}

fn disabled_run() -> Arc<RunContext> {
    let mut opts = RunOptions::default();
    opts.extra.insert(DISABLE_KEY.into(), json!(true));
    Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)).with_options(opts))
}

/// Through Clarification with a tool that must not run.
async fn intercept(c: antler_protocol::ToolCall, run: Arc<RunContext>) -> ToolOutcome {
    let echo = Echo::new(&c.name);
    let chain = Chain::new(vec![Arc::new(ClarificationMiddleware::new())]).unwrap();
    let out = chain
        .call_tool(tool_request(c, Some(echo.clone()), run))
        .await
        .unwrap();
    assert_eq!(echo.count(), 0, "the tool itself never runs");
    out
}

fn only_tool_message(u: &StateUpdate) -> ToolMessage {
    let msgs = u.messages.as_ref().unwrap();
    assert_eq!(msgs.len(), 1);
    msgs[0].as_tool().unwrap().clone()
}

fn env_call() -> antler_protocol::ToolCall {
    call(
        "call-clarify-1",
        TOOL_NAME,
        json!({"question": "Which environment should I use?", "clarification_type": "approach_choice", "options": ["dev", "prod"]}),
    )
}

#[tokio::test]
async fn a_clarification_becomes_a_command_that_ends_the_run() {
    let ToolOutcome::Command(cmd) = intercept(env_call(), plain_run()).await else {
        panic!("expected a command")
    };
    assert_eq!(cmd.goto, Some(Goto::End));
    let msg = only_tool_message(&cmd.update);
    assert_eq!(msg.id.as_deref(), Some("clarification:call-clarify-1"));
    assert_eq!(msg.tool_call_id, "call-clarify-1");
    assert_eq!(msg.name.as_deref(), Some("ask_clarification"));
    assert_eq!(
        msg.content,
        Content::Text("🔀 Which environment should I use?\n\n  1. dev\n  2. prod".into())
    );
    let card = &msg.artifact["human_input"];
    assert_eq!(card["request_id"], "clarification:call-clarify-1");
    assert_eq!(card["tool_call_id"], "call-clarify-1");
    assert_eq!(card["clarification_type"], "approach_choice");
    assert_eq!(card["input_mode"], "choice_with_other");

    // The dumped message keeps the artifact.
    let dumped = serde_json::to_value(Message::Tool(msg)).unwrap();
    assert_eq!(
        dumped["artifact"]["human_input"]["request_id"],
        "clarification:call-clarify-1"
    );
    assert_eq!(
        dumped["artifact"]["human_input"]["options"],
        json!([{"id": "option-1", "label": "dev", "value": "dev"}, {"id": "option-2", "label": "prod", "value": "prod"}])
    );
    assert!(dumped["content"]
        .as_str()
        .unwrap()
        .contains("Which environment should I use?"));
}

#[tokio::test]
async fn a_repeated_call_replaces_rather_than_duplicates() {
    let mut state = ThreadState::default();
    for _ in 0..2 {
        let ToolOutcome::Command(cmd) = intercept(env_call(), plain_run()).await else {
            panic!("expected a command")
        };
        state.apply(cmd.update).unwrap();
    }
    assert_eq!(state.messages.len(), 1);
    assert_eq!(
        state.messages.get(0).unwrap().id(),
        Some("clarification:call-clarify-1")
    );

    // Without a call id the id is a hash of the text: still stable.
    let mut state = ThreadState::default();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut c = call(
            "",
            TOOL_NAME,
            json!({"question": "Which environment should I use?", "clarification_type": "missing_info"}),
        );
        c.id = None;
        let ToolOutcome::Command(cmd) = intercept(c, plain_run()).await else {
            panic!()
        };
        ids.push(only_tool_message(&cmd.update).id.unwrap());
        state.apply(cmd.update).unwrap();
    }
    assert_eq!(ids[0], ids[1]);
    assert_eq!(
        ids[0],
        stable_message_id("", "❓ Which environment should I use?")
    );
    assert!(ids[0].starts_with("clarification:") && ids[0].len() == "clarification:".len() + 16);
    assert_eq!(state.messages.len(), 1);
}

#[tokio::test]
async fn disabled_clarification_tells_the_agent_to_proceed() {
    let ToolOutcome::Message(msg) = intercept(
        call(
            "call-clarify-1",
            TOOL_NAME,
            json!({"question": "Should I create the issue?", "clarification_type": "suggestion"}),
        ),
        disabled_run(),
    )
    .await
    else {
        panic!("expected a plain message, not a command")
    };
    assert_eq!(msg.tool_call_id, "call-clarify-1");
    assert_eq!(msg.id.as_deref(), Some("clarification:call-clarify-1"));
    assert_eq!(msg.name.as_deref(), Some("ask_clarification"));
    assert_eq!(msg.artifact, Value::Null);
    let t = msg.content.text().to_lowercase();
    assert!(t.contains("disabled") && t.contains("proceed"));

    // The flag also works as a run-scoped value.
    let run = plain_run();
    run.set(&DISABLED, true);
    assert!(matches!(
        intercept(env_call(), run).await,
        ToolOutcome::Message(_)
    ));
    // Without it (or with it false) the run ends.
    let run = plain_run();
    run.set(&DISABLED, false);
    assert!(matches!(
        intercept(env_call(), run).await,
        ToolOutcome::Command(Command {
            goto: Some(Goto::End),
            ..
        })
    ));
}

#[tokio::test]
async fn other_tools_are_unaffected_by_the_flag() {
    let echo = Echo::new("bash");
    let chain = Chain::new(vec![Arc::new(ClarificationMiddleware::new())]).unwrap();
    let out = chain
        .call_tool(tool_request(
            call("b1", "bash", json!({"command": "echo hi"})),
            Some(echo.clone()),
            disabled_run(),
        ))
        .await
        .unwrap();
    assert_eq!(echo.count(), 1);
    assert!(matches!(out, ToolOutcome::Message(m) if m.content.text().starts_with("echo")));
}

// ------------------------------------------------------------------------ the loop

fn clarify_reply(id: &str) -> ScriptedReply {
    ScriptedReply::tool_call(
        id,
        TOOL_NAME,
        json!({"question": "Which date and destination?", "clarification_type": "missing_info",
               "options": ["Tomorrow to Tokyo", "Next week to Paris"]}),
    )
}

fn clarifying_agent(model: Arc<ScriptedModel>, tools: ToolRegistry) -> Agent {
    Agent::new(model)
        .with_tools(tools)
        .with_chain(Chain::new(vec![Arc::new(ClarificationMiddleware::new())]).unwrap())
        .with_checkpointer(Arc::new(MemoryCheckpointer::default()))
}

#[tokio::test]
async fn a_clarification_ends_the_run_with_the_question_last() {
    let model = Arc::new(ScriptedModel::new([
        clarify_reply("call_q9"),
        ScriptedReply::text("must not be used"),
    ]));
    let agent = clarifying_agent(model.clone(), ToolRegistry::new());
    let out = run_ok(&agent, "Book me a flight", plain_run()).await;
    assert_eq!(
        model.requests().len(),
        1,
        "no model call after the question"
    );
    assert_eq!(model.remaining(), 1);
    let last = out
        .state
        .messages
        .last()
        .unwrap()
        .as_tool()
        .unwrap()
        .clone();
    assert_eq!(last.id.as_deref(), Some("clarification:call_q9"));
    assert_eq!(
        last.content.text(),
        "❓ Which date and destination?\n\n  1. Tomorrow to Tokyo\n  2. Next week to Paris"
    );
    assert_eq!(
        last.artifact,
        json!({"human_input": {
        "version": 1, "kind": "human_input_request", "source": "ask_clarification",
        "request_id": "clarification:call_q9", "clarification_type": "missing_info",
        "question": "Which date and destination?", "input_mode": "choice_with_other",
        "tool_call_id": "call_q9",
        "options": [
            {"id": "option-1", "label": "Tomorrow to Tokyo", "value": "Tomorrow to Tokyo"},
            {"id": "option-2", "label": "Next week to Paris", "value": "Next week to Paris"},
        ]}})
    );
}

#[tokio::test]
async fn sibling_calls_of_the_batch_still_run_and_are_recorded() {
    let echo = Echo::new("echo");
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([
            ("e1".to_owned(), "echo".to_owned(), json!({"x": 1})),
            (
                "q1".to_owned(),
                TOOL_NAME.to_owned(),
                json!({"question": "Sure?", "clarification_type": "risk_confirmation"}),
            ),
        ]),
        ScriptedReply::text("must not be used"),
    ]));
    let agent = clarifying_agent(model.clone(), ToolRegistry::new().with(echo.clone()));
    let out = run_ok(&agent, "go", plain_run()).await;
    assert_eq!(echo.count(), 1);
    assert_eq!(model.requests().len(), 1);
    let msgs = out.state.messages.to_vec();
    assert_eq!(transcript_violations(&msgs), Vec::<String>::new());
    assert_eq!(msgs.last().unwrap().id(), Some("clarification:q1"));
    assert!(result_for(&msgs, "e1").is_some());
}

#[tokio::test]
async fn the_answer_is_the_next_run_and_the_model_sees_question_and_answer() {
    let model = Arc::new(ScriptedModel::new([
        clarify_reply("call_q9"),
        ScriptedReply::text("Booked Paris."),
    ]));
    let agent = clarifying_agent(model.clone(), ToolRegistry::new());
    let first = agent
        .run(
            RunInput::message(Message::human("Book me a flight")),
            plain_run(),
        )
        .await;
    assert_eq!(first.status, RunStatus::Success);

    let mut answer = hidden(antler_protocol::HumanMessage {
        content: Content::Text("Next week to Paris".into()),
        ..Default::default()
    });
    answer.additional_kwargs.insert(
        "human_input_response".into(),
        json!({"version": 1, "kind": "human_input_response", "source": "ask_clarification",
               "request_id": "clarification:call_q9", "response_kind": "option",
               "option_id": "option-2", "value": "Next week to Paris"}),
    );
    let run2 = Arc::new(RunContext::new("t1", "r2", Arc::new(NullSink)));
    let second = agent
        .run(RunInput::message(Message::Human(answer)), run2)
        .await;
    assert_eq!(second.status, RunStatus::Success);
    assert_eq!(
        second.state.messages.last().unwrap().text(),
        "Booked Paris."
    );

    let sent = &model.requests()[1].messages;
    let kinds: Vec<&str> = sent.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["human", "ai", "tool", "human"]);
    assert_eq!(sent[2].id(), Some("clarification:call_q9"));
    assert!(sent[2].text().contains("Which date and destination?"));
    assert_eq!(sent[3].text(), "Next week to Paris");
    assert_eq!(transcript_violations(sent), Vec::<String>::new());
}

#[tokio::test]
async fn with_clarification_disabled_the_loop_continues() {
    let model = Arc::new(ScriptedModel::new([
        clarify_reply("call_q9"),
        ScriptedReply::text("Assuming Paris next week."),
    ]));
    let agent = clarifying_agent(model.clone(), ToolRegistry::new());
    let out = run_ok(&agent, "Book me a flight", disabled_run()).await;
    assert_eq!(model.requests().len(), 2);
    let sent = &model.requests()[1].messages;
    assert!(sent[2].text().contains("Proceed with your best judgment"));
    assert_eq!(
        out.state.messages.last().unwrap().text(),
        "Assuming Paris next week."
    );
}
