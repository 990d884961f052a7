//! `ask_clarification`: its schema, `return_direct`, its own body (no ClarificationMiddleware),
//! and the middleware intercepting it through the loop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use antler_middleware::clarification::{self, ClarificationMiddleware};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Message, Object, ThreadState, ToolMessage};
use antler_runtime::*;
use antler_tools::ask_clarification::{ask_clarification_tool, render_question, FIELD_TYPES, NAME};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn args(v: Value) -> Object {
    v.as_object().cloned().unwrap()
}

#[test]
fn the_schema_matches_deerflows_arguments() {
    let tool = ask_clarification_tool();
    assert_eq!(tool.name(), "ask_clarification");
    assert_eq!(NAME, "ask_clarification");
    assert!(tool.return_direct());
    let p = &tool.spec().parameters;
    assert_eq!(p["type"], "object");
    assert_eq!(p["required"], json!(["question", "clarification_type"]));
    let props = p["properties"].as_object().unwrap();
    let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "clarification_type",
            "context",
            "fields",
            "options",
            "question"
        ]
    );
    assert_eq!(props["question"]["type"], "string");
    assert_eq!(
        props["clarification_type"]["enum"],
        json!([
            "missing_info",
            "ambiguous_requirement",
            "approach_choice",
            "risk_confirmation",
            "suggestion"
        ])
    );
    assert_eq!(
        props["context"]["anyOf"],
        json!([{"type": "string"}, {"type": "null"}])
    );
    assert_eq!(
        props["options"]["anyOf"],
        json!([{"type": "array", "items": {"type": "string"}}, {"type": "null"}])
    );
    // The form parameter is typed; there is no top-level multi-select mode.
    assert!(!props.contains_key("multi_select"));
    let items = &props["fields"]["anyOf"][0]["items"];
    assert_eq!(items["required"], json!(["name"]));
    let mut item_keys: Vec<&str> = items["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    item_keys.sort();
    assert_eq!(
        item_keys,
        [
            "label",
            "name",
            "options",
            "placeholder",
            "required",
            "type"
        ]
    );
    // The offered field types are the documented ones, exactly those the middleware renders.
    assert_eq!(items["properties"]["type"]["enum"], json!(FIELD_TYPES));
    assert_eq!(FIELD_TYPES, clarification::FIELD_TYPES);
    assert!(!tool.spec().description.is_empty());
}

#[test]
fn the_body_renders_the_question() {
    assert_eq!(
        render_question(&args(json!({
            "question": "Which env?", "clarification_type": "approach_choice",
            "context": "Need target env for config", "options": ["dev", "prod"]
        }))),
        "🔀 Need target env for config\n\nWhich env?\n\n  1. dev\n  2. prod"
    );
    assert_eq!(
        render_question(&args(json!({
            "question": "Which env?", "clarification_type": "approach_choice",
            "options": r#"["dev", " ", "dev", "staging"]"#
        }))),
        "🔀 Which env?\n\n  1. dev\n  2. staging"
    );
    assert_eq!(
        render_question(&args(
            json!({"question": "Delete it?", "clarification_type": "risk_confirmation", "context": null})
        )),
        "⚠️ Delete it?"
    );
    assert_eq!(
        render_question(&args(json!({
            "question": "Expense details?", "clarification_type": "missing_info",
            "fields": [
                {"name": "amount", "label": "Amount", "type": "number", "required": true},
                {"name": "receipts", "type": "multi_select", "options": ["A-1", "A-2"]}
            ]
        }))),
        "❓ Expense details?\n\n  1. Amount (required)\n  2. receipts — options: A-1 / A-2 (multiple allowed)\n\nPlease reply with a value for each field."
    );
}

fn clarify() -> ScriptedReply {
    ScriptedReply::tool_call(
        "call_q9",
        NAME,
        json!({"question": "Which date and destination?", "clarification_type": "missing_info",
               "options": ["Tomorrow to Tokyo", "Next week to Paris"]}),
    )
}

async fn run(chain: Chain) -> (RunOutcome, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new([
        clarify(),
        ScriptedReply::text("must not be used"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(ask_clarification_tool()))
        .with_chain(chain);
    let out = agent
        .run(
            RunInput::message(Message::human("Book me a flight")),
            Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink))),
        )
        .await;
    (out, model)
}

fn last_tool_message(state: &ThreadState) -> ToolMessage {
    state.messages.last().unwrap().as_tool().unwrap().clone()
}

#[tokio::test]
async fn without_the_middleware_the_tool_answers_and_return_direct_ends_the_run() {
    let (out, model) = run(Chain::empty()).await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(model.requests().len(), 1);
    let last = last_tool_message(&out.state);
    assert_eq!(last.tool_call_id, "call_q9");
    assert_eq!(last.name.as_deref(), Some(NAME));
    assert_eq!(
        last.content.text(),
        "❓ Which date and destination?\n\n  1. Tomorrow to Tokyo\n  2. Next week to Paris"
    );
    assert_eq!(last.artifact, Value::Null);
}

#[tokio::test]
async fn with_the_middleware_the_question_carries_its_card() {
    let (out, model) =
        run(Chain::new(vec![Arc::new(ClarificationMiddleware::new())]).unwrap()).await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(model.requests().len(), 1);
    let last = last_tool_message(&out.state);
    assert_eq!(last.id.as_deref(), Some("clarification:call_q9"));
    assert_eq!(
        last.content.text(),
        "❓ Which date and destination?\n\n  1. Tomorrow to Tokyo\n  2. Next week to Paris"
    );
    assert_eq!(
        last.artifact["human_input"]["input_mode"],
        "choice_with_other"
    );
    assert_eq!(
        last.artifact["human_input"]["request_id"],
        "clarification:call_q9"
    );
}
