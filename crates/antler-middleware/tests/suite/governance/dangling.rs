//! DanglingToolCall: spec 30's expectations, then through the loop after an interrupted run.

use std::sync::Arc;

use antler_middleware::dangling_tool_call::{
    build_patched, is_well_formed, DanglingToolCallMiddleware, SYNTHETIC_ID_PREFIX, UNKNOWN_TOOL,
};
use antler_middleware::hook::ModelResult;
use antler_middleware::middleware_identity;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Content, HumanMessage, InvalidToolCall, Message, Object, ToolCall, ToolMessage,
    ToolStatus,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::common::*;

// ---------------------------------------------------------------------------- builders

fn tc(name: &str, id: Option<&str>) -> ToolCall {
    ToolCall {
        name: name.into(),
        args: Object::new(),
        id: id.map(str::to_owned),
        kind: "tool_call".into(),
    }
}

fn ai(calls: Vec<ToolCall>) -> Message {
    Message::Ai(AiMessage {
        tool_calls: calls.into(),
        ..Default::default()
    })
}

fn ai_full(calls: Vec<ToolCall>, invalid: Vec<InvalidToolCall>, raw: Option<Value>) -> Message {
    let mut m = AiMessage {
        tool_calls: calls.into(),
        invalid_tool_calls: invalid.into(),
        ..Default::default()
    };
    if let Some(raw) = raw {
        m.additional_kwargs.insert("tool_calls".into(), raw);
    }
    Message::Ai(m)
}

fn raw_entry(id: &str, name: Value, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

const BAD_WRITE_ARGS: &str = r#"{"description":"write report","path":"/mnt/user-data/outputs/report.md","content":"bad {"json"}"}"#;

fn invalid_tc(name: Option<&str>, id: Option<&str>, error: Option<&str>) -> InvalidToolCall {
    InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        args: Some(BAD_WRITE_ARGS.into()),
        error: error.map(str::to_owned),
    }
}

fn bad_write() -> InvalidToolCall {
    invalid_tc(
        Some("write_file"),
        Some("write_file:36"),
        Some("Failed to parse tool arguments: malformed JSON"),
    )
}

fn tool(id: &str, name: &str) -> Message {
    tool_text(id, Some(name), "result")
}

fn tool_text(id: &str, name: Option<&str>, text: &str) -> Message {
    Message::Tool(ToolMessage {
        content: Content::Text(text.into()),
        tool_call_id: id.into(),
        name: name.map(str::to_owned),
        ..Default::default()
    })
}

fn human(text: &str) -> Message {
    Message::human(text)
}

fn arcs(msgs: &[Message]) -> Vec<Arc<Message>> {
    msgs.iter().cloned().map(Arc::new).collect()
}

/// `build_patched`, owned; also checks the fast path never claims a transcript that needs work.
fn patch(msgs: &[Message]) -> Option<Vec<Message>> {
    let input = arcs(msgs);
    let patched = build_patched(&input);
    if is_well_formed(&input) {
        assert!(
            patched.is_none(),
            "fast path accepted a transcript that needs repair"
        );
    }
    patched.map(|p| p.iter().map(|m| (**m).clone()).collect())
}

fn ai_of(m: &Message) -> &AiMessage {
    m.as_ai().expect("an AI message")
}

/// The tool-call ids of the AI message `m`, in order.
fn call_ids(m: &Message) -> Vec<String> {
    ai_of(m)
        .tool_calls
        .iter()
        .map(|c| c.id_str().to_owned())
        .collect()
}

/// `result` is the tool message answering call `index` of `ai`.
fn assert_answers(result: &Message, ai: &Message, index: usize) {
    assert_eq!(
        Some(tm(result).tool_call_id.clone()),
        ai_of(ai).tool_calls[index].id
    );
}

fn tm(m: &Message) -> &ToolMessage {
    m.as_tool().expect("a tool message")
}

fn text(m: &Message) -> String {
    m.text()
}

/// What an OpenAI-compatible provider sends for an AI message's calls once every call is
/// answered: structured and invalid calls, or the raw copy when both are empty.
fn wire(m: &AiMessage) -> Vec<(String, String, String)> {
    if m.tool_calls.is_empty() && m.invalid_tool_calls.is_empty() {
        return match m.additional_kwargs.get("tool_calls") {
            Some(Value::Array(raw)) => raw
                .iter()
                .map(|e| {
                    (
                        e["id"].as_str().unwrap_or_default().to_owned(),
                        e["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        e["function"]["arguments"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
    }
    let mut out: Vec<(String, String, String)> = m
        .tool_calls
        .iter()
        .map(|c| {
            (
                c.id_str().to_owned(),
                c.name.clone(),
                Value::Object(c.args.clone()).to_string(),
            )
        })
        .collect();
    out.extend(m.invalid_tool_calls.iter().map(|c| {
        (
            c.id.clone().unwrap_or_default(),
            c.name.clone().unwrap_or_default(),
            c.args.clone().unwrap_or_default(),
        )
    }));
    out
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

// ------------------------------------------------------------------------------ no-ops

#[test]
fn no_patch_for_valid_transcripts() {
    assert_eq!(patch(&[]), None);
    assert_eq!(patch(&[human("hello")]), None);
    assert_eq!(patch(&[Message::ai("hello")]), None);
    assert_eq!(
        patch(&[ai(vec![tc("bash", Some("call_1"))]), tool("call_1", "bash")]),
        None
    );
    let with_raw = ai_full(
        vec![tc("bash", Some("call_1"))],
        vec![],
        Some(json!([raw_entry("call_1", json!("bash"), json!("{}"))])),
    );
    assert_eq!(patch(&[with_raw, tool("call_1", "bash")]), None);
}

#[test]
fn valid_adjacent_results_are_unchanged() {
    let msgs = [
        ai(vec![tc("bash", Some("call_1"))]),
        tool("call_1", "bash"),
        human("next"),
    ];
    assert_eq!(patch(&msgs), None);
}

#[test]
fn reused_ids_across_turns_keep_their_own_results() {
    let ws = |id: &str| tc("web_search", Some(id));
    let summary = hidden(HumanMessage {
        content: "summary".into(),
        name: Some("summary".into()),
        ..Default::default()
    });
    let msgs = [
        Message::Human(summary),
        ai(vec![
            ws("web_search:11"),
            ws("web_search:12"),
            ws("web_search:13"),
        ]),
        tool("web_search:11", "web_search"),
        tool("web_search:12", "web_search"),
        tool("web_search:13", "web_search"),
        ai(vec![
            ws("web_search:9"),
            ws("web_search:10"),
            ws("web_search:11"),
        ]),
        tool("web_search:9", "web_search"),
        tool("web_search:10", "web_search"),
        tool("web_search:11", "web_search"),
    ];
    assert_eq!(patch(&msgs), None);
}

#[test]
fn valid_invalid_call_arguments_are_a_no_op() {
    let call = InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: Some("valid_args_call".into()),
        name: Some("read_file".into()),
        args: Some(r#"{"path": "/tmp/data.csv"}"#.into()),
        error: Some("schema validation failed".into()),
    };
    let msgs = [
        ai_full(vec![], vec![call], None),
        tool("valid_args_call", "read_file"),
    ];
    assert_eq!(patch(&msgs), None);
}

// ---------------------------------------------------------------------------- patching

#[test]
fn a_single_dangling_call_gets_an_interrupted_placeholder() {
    let p = patch(&[ai(vec![tc("bash", Some("call_1"))])]).unwrap();
    assert_eq!(p.len(), 2);
    let t = tm(&p[1]);
    assert_eq!(t.tool_call_id, "call_1");
    assert_eq!(t.status, ToolStatus::Error);
    assert_eq!(t.name.as_deref(), Some("bash"));
    assert_eq!(
        text(&p[1]),
        "[Tool call was interrupted and did not return a result.]"
    );
}

#[test]
fn multiple_dangling_calls_of_one_message() {
    let p = patch(&[ai(vec![
        tc("bash", Some("call_1")),
        tc("read", Some("call_2")),
    ])])
    .unwrap();
    assert_eq!(p.len(), 3);
    let ids: Vec<&str> = p[1..].iter().map(|m| tm(m).tool_call_id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2"]);
}

#[test]
fn the_patch_goes_right_after_the_offending_ai_message() {
    let p = patch(&[
        human("hi"),
        ai(vec![tc("bash", Some("call_1"))]),
        human("still here"),
    ])
    .unwrap();
    let kinds: Vec<&str> = p.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["human", "ai", "tool", "human"]);
    assert_eq!(tm(&p[2]).tool_call_id, "call_1");
}

#[test]
fn only_the_unanswered_call_is_patched() {
    let p = patch(&[
        ai(vec![tc("bash", Some("call_1")), tc("read", Some("call_2"))]),
        tool("call_1", "bash"),
    ])
    .unwrap();
    let synthetic: Vec<&ToolMessage> = p
        .iter()
        .filter_map(Message::as_tool)
        .filter(|t| t.status == ToolStatus::Error)
        .collect();
    assert_eq!(synthetic.len(), 1);
    assert_eq!(synthetic[0].tool_call_id, "call_2");
}

#[test]
fn each_ai_message_is_patched() {
    let p = patch(&[
        ai(vec![tc("bash", Some("call_1"))]),
        human("next turn"),
        ai(vec![tc("read", Some("call_2"))]),
    ])
    .unwrap();
    assert_eq!(p.iter().filter_map(Message::as_tool).count(), 2);
    assert!(transcript_violations(&p).is_empty());
}

#[test]
fn raw_provider_calls_are_patched() {
    let msgs = [ai_full(
        vec![],
        vec![],
        Some(json!([raw_entry(
            "call_1",
            json!("bash"),
            json!(r#"{"command":"ls"}"#)
        )])),
    )];
    let p = patch(&msgs).unwrap();
    assert_eq!(p.len(), 2);
    let t = tm(&p[1]);
    assert_eq!(
        (t.tool_call_id.as_str(), t.name.as_deref(), t.status),
        ("call_1", Some("bash"), ToolStatus::Error)
    );
}

#[test]
fn an_empty_structured_name_becomes_unknown_tool() {
    let p = patch(&[ai(vec![tc("", Some("empty_name_call"))])]).unwrap();
    assert_eq!(ai_of(&p[0]).tool_calls[0].name, UNKNOWN_TOOL);
    assert_eq!(wire(ai_of(&p[0]))[0].1, UNKNOWN_TOOL);
    let t = tm(&p[1]);
    assert_eq!(t.tool_call_id, "empty_name_call");
    assert_eq!(t.name.as_deref(), Some(UNKNOWN_TOOL));
    assert_eq!(t.status, ToolStatus::Error);
    assert_eq!(
        text(&p[1]),
        "[Tool call could not be executed because its name was missing or empty. Use one of the available tool names when retrying.]"
    );
}

#[test]
fn malformed_raw_names_are_sanitized() {
    for entry in [
        json!({"id": "missing_name_call", "type": "function", "function": {"arguments": "{}"}}),
        json!({"id": "non_string_name_call", "type": "function", "function": {"name": 42, "arguments": "{}"}}),
        raw_entry("raw_empty_name_call", json!(""), json!("{}")),
    ] {
        let p = patch(&[ai_full(vec![], vec![], Some(json!([entry])))]).unwrap();
        let raw = &ai_of(&p[0]).additional_kwargs["tool_calls"][0];
        assert_eq!(raw["function"]["name"], UNKNOWN_TOOL);
        assert_eq!(wire(ai_of(&p[0]))[0].1, UNKNOWN_TOOL);
        let t = tm(&p[1]);
        assert_eq!(t.name.as_deref(), Some(UNKNOWN_TOOL));
        assert_eq!(t.status, ToolStatus::Error);
        assert!(text(&p[1]).contains("name was missing or empty"));
    }
}

#[test]
fn the_raw_view_is_skipped_when_the_invalid_view_carries_the_call() {
    let invalid = InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: Some("call_x".into()),
        name: Some("read_file".into()),
        args: None,
        error: Some("parse".into()),
    };
    let p = patch(&[ai_full(
        vec![],
        vec![invalid],
        Some(json!([raw_entry(
            "call_x",
            json!("read_file"),
            json!("{}")
        )])),
    )])
    .unwrap();
    let results: Vec<&ToolMessage> = p.iter().filter_map(Message::as_tool).collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].tool_call_id, "call_x");
    assert_eq!(results[0].status, ToolStatus::Error);
}

#[test]
fn an_answered_call_still_gets_its_empty_name_sanitized() {
    let p = patch(&[
        ai(vec![tc(" ", Some("empty_name_call"))]),
        tool_text("empty_name_call", Some(""), "Error: invalid tool"),
    ])
    .unwrap();
    assert_eq!(ai_of(&p[0]).tool_calls[0].name, UNKNOWN_TOOL);
    let t = tm(&p[1]);
    assert_eq!(t.tool_call_id, "empty_name_call");
    assert_eq!(t.name.as_deref(), Some(UNKNOWN_TOOL));
    assert_eq!(text(&p[1]), "Error: invalid tool");
}

#[test]
fn a_valid_structured_call_with_an_empty_raw_name_is_sanitized() {
    let p = patch(&[
        ai_full(
            vec![tc("bash", Some("call_1"))],
            vec![],
            Some(json!([raw_entry("call_1", json!(""), json!("{}"))])),
        ),
        tool("call_1", "bash"),
    ])
    .unwrap();
    let m = ai_of(&p[0]);
    assert_eq!(m.tool_calls[0].name, "bash");
    assert_eq!(
        m.additional_kwargs["tool_calls"][0]["function"]["name"],
        UNKNOWN_TOOL
    );
    assert_eq!(wire(m)[0].1, "bash");
    assert_eq!(tm(&p[1]).tool_call_id, "call_1");
    assert_eq!(tm(&p[1]).name.as_deref(), Some("bash"));
}

#[test]
fn an_empty_name_invalid_call_gets_the_name_recovery_text() {
    let p = patch(&[ai_full(
        vec![],
        vec![invalid_tc(
            Some(""),
            Some("empty_invalid_call"),
            Some("boom"),
        )],
        None,
    )])
    .unwrap();
    let t = tm(&p[1]);
    assert_eq!(t.tool_call_id, "empty_invalid_call");
    assert_eq!(t.name.as_deref(), Some(UNKNOWN_TOOL));
    assert!(text(&p[1]).contains("name was missing or empty"));
    assert!(!text(&p[1]).contains("arguments were invalid"));
    // The invalid call's name and arguments are replayable too.
    let w = wire(ai_of(&p[0]));
    assert_eq!(w[0].1, UNKNOWN_TOOL);
    assert_eq!(parse(&w[0].2), json!({}));
}

#[test]
fn mixed_valid_and_invalid_calls_serialize_with_valid_names_and_arguments() {
    let invalid_args = r#"{"description": "读取CSV数据文件前部内容", "path": "/mnt/user-data/uploads/test2.csv"}}"#;
    let original = AiMessage {
        tool_calls: vec![
            tc("read_file", Some("valid_call")),
            tc("", Some("empty_name_call")),
        ]
        .into(),
        invalid_tool_calls: vec![InvalidToolCall {
            kind: "invalid_tool_call".into(),
            id: Some("invalid_args_call".into()),
            name: Some("read_file".into()),
            args: Some(invalid_args.into()),
            error: None,
        }]
        .into(),
        ..Default::default()
    };
    let msgs = [
        Message::Ai(original.clone()),
        tool("valid_call", "read_file"),
        Message::Tool(ToolMessage {
            status: ToolStatus::Error,
            ..ToolMessage::new("empty_name_call", "Error: invalid tool").with_name("")
        }),
    ];
    let p = patch(&msgs).unwrap();
    let w = wire(ai_of(&p[0]));
    assert!(w.iter().all(|(_, name, _)| !name.is_empty()));
    let args: Vec<Value> = w.iter().map(|(_, _, a)| parse(a)).collect();
    assert_eq!(args, [json!({}), json!({}), json!({})]);
    // The input is not touched.
    assert_eq!(msgs[0], Message::Ai(original));
    let results: Vec<&ToolMessage> = p.iter().filter_map(Message::as_tool).collect();
    let ids: Vec<&str> = results.iter().map(|t| t.tool_call_id.as_str()).collect();
    assert_eq!(ids, ["valid_call", "empty_name_call", "invalid_args_call"]);
    assert_eq!(results[1].name.as_deref(), Some(UNKNOWN_TOOL));
    assert_eq!(results[2].status, ToolStatus::Error);
    assert_eq!(
        results[2].content,
        Content::Text(
            "[Tool call could not be executed because its arguments were invalid.]".into()
        )
    );
}

#[test]
fn malformed_raw_argument_strings_become_an_empty_object() {
    for (arguments, expected) in [
        (json!(r#"{"path":"/tmp/data.csv"}}"#), json!({})),
        (Value::Null, json!({})),
        (json!(r#"["not", "an", "object"]"#), json!({})),
        (
            json!({"path": "/tmp/data.csv"}),
            json!({"path": "/tmp/data.csv"}),
        ),
    ] {
        let p = patch(&[ai_full(
            vec![],
            vec![],
            Some(json!([raw_entry(
                "raw_invalid_args_call",
                json!("read_file"),
                arguments
            )])),
        )])
        .unwrap();
        let raw = &ai_of(&p[0]).additional_kwargs["tool_calls"][0]["function"]["arguments"];
        assert_eq!(parse(raw.as_str().unwrap()), expected);
    }
}

#[test]
fn an_invalid_call_with_empty_name_and_bad_arguments_is_sanitized() {
    let p = patch(&[ai_full(
        vec![],
        vec![invalid_tc(
            Some(""),
            Some("empty_invalid_call"),
            Some("Failed to parse tool arguments: malformed JSON"),
        )],
        None,
    )])
    .unwrap();
    let w = wire(ai_of(&p[0]));
    assert_eq!(w[0].1, UNKNOWN_TOOL);
    assert_eq!(parse(&w[0].2), json!({}));
}

#[test]
fn a_non_adjacent_result_is_moved_next_to_its_call() {
    let p = patch(&[
        ai(vec![tc("bash", Some("call_1"))]),
        human("interruption"),
        tool("call_1", "bash"),
    ])
    .unwrap();
    let kinds: Vec<&str> = p.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["ai", "tool", "human"]);
    assert_eq!(tm(&p[1]).tool_call_id, "call_1");
}

#[test]
fn results_are_grouped_in_call_order() {
    for msgs in [
        vec![
            ai(vec![tc("bash", Some("call_1")), tc("read", Some("call_2"))]),
            human("interruption"),
            tool("call_2", "read"),
            tool("call_1", "bash"),
        ],
        vec![
            ai(vec![tc("bash", Some("call_1")), tc("read", Some("call_2"))]),
            tool("call_1", "bash"),
            human("interruption"),
            tool("call_2", "read"),
        ],
    ] {
        let p = patch(&msgs).unwrap();
        let kinds: Vec<&str> = p.iter().map(Message::kind).collect();
        assert_eq!(kinds, ["ai", "tool", "tool", "human"]);
        assert_eq!(
            [
                tm(&p[1]).tool_call_id.as_str(),
                tm(&p[2]).tool_call_id.as_str()
            ],
            ["call_1", "call_2"]
        );
    }
}

#[test]
fn a_reused_id_whose_second_occurrence_dangles_gets_a_placeholder() {
    let ws = || tc("web_search", Some("web_search:11"));
    let p = patch(&[
        ai(vec![ws()]),
        tool("web_search:11", "web_search"),
        ai(vec![ws()]),
    ])
    .unwrap();
    assert_eq!(tm(&p[1]).status, ToolStatus::Success);
    assert_eq!(tm(&p[3]).tool_call_id, "web_search:11");
    assert_eq!(tm(&p[3]).status, ToolStatus::Error);
}

#[test]
fn a_reused_ids_later_result_is_consumed_by_the_first_occurrence() {
    let ws = || tc("web_search", Some("web_search:11"));
    let msgs = [
        ai(vec![ws()]),
        ai(vec![ws()]),
        tool("web_search:11", "web_search"),
    ];
    let input = arcs(&msgs);
    let p = build_patched(&input).unwrap();
    // The very same result object, moved up.
    assert!(Arc::ptr_eq(&p[1], &input[2]));
    assert_eq!(tm(&p[3]).status, ToolStatus::Error);
}

#[test]
fn results_regroup_with_their_own_turn_across_several_ai_messages() {
    let p = patch(&[
        ai(vec![tc("bash", Some("call_1"))]),
        human("interruption"),
        ai(vec![tc("read", Some("call_2"))]),
        tool("call_1", "bash"),
        tool("call_2", "read"),
    ])
    .unwrap();
    let kinds: Vec<&str> = p.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["ai", "tool", "human", "ai", "tool"]);
    assert_eq!(tm(&p[1]).tool_call_id, "call_1");
    assert_eq!(tm(&p[4]).tool_call_id, "call_2");
}

#[test]
fn orphan_results_are_dropped() {
    // After a call, leading, and with a null id.
    let p = patch(&[
        ai(vec![tc("bash", Some("call_1"))]),
        tool("orphan_call", "orphan"),
        human("interruption"),
        tool("call_1", "bash"),
    ])
    .unwrap();
    let kinds: Vec<&str> = p.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["ai", "tool", "human"]);
    assert!(result_for(&p, "orphan_call").is_none());

    let p = patch(&[
        tool("stale_call", "stale"),
        ai(vec![tc("bash", Some("call_1"))]),
        tool("call_1", "bash"),
    ])
    .unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(tm(&p[1]).tool_call_id, "call_1");

    let null_id: Message =
        serde_json::from_value(json!({"type": "tool", "content": "ghost", "tool_call_id": null}))
            .unwrap();
    let p = patch(&[
        ai(vec![tc("bash", Some("call_1"))]),
        null_id,
        tool("call_1", "bash"),
    ])
    .unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(tm(&p[1]).tool_call_id, "call_1");
}

#[test]
fn invalid_calls_are_patched_write_file_with_its_own_text() {
    let p = patch(&[ai_full(vec![], vec![bad_write()], None)]).unwrap();
    assert_eq!(p.len(), 2);
    let t = tm(&p[1]);
    assert_eq!(t.tool_call_id, "write_file:36");
    assert_eq!(t.name.as_deref(), Some("write_file"));
    assert_eq!(t.status, ToolStatus::Error);
    let body = text(&p[1]);
    for needle in [
        "write_file failed before execution",
        "no file was written",
        "very large Markdown file in a single tool call",
        "Do not retry the same large `write_file` payload",
        "split the file into smaller sections",
        "normal assistant text",
        "Parser error: Failed to parse tool arguments",
    ] {
        assert!(body.contains(needle), "missing {needle:?} in {body}");
    }
    assert!(!body.contains(r#"bad {"json"}"#));

    let p = patch(&[ai_full(
        vec![],
        vec![invalid_tc(
            Some("search"),
            Some("search:1"),
            Some("Failed to parse tool arguments: malformed JSON"),
        )],
        None,
    )])
    .unwrap();
    assert_eq!(tm(&p[1]).name.as_deref(), Some("search"));
    assert_eq!(
        text(&p[1]),
        "[Tool call could not be executed because its arguments were invalid: Failed to parse tool arguments: malformed JSON]"
    );

    // The quoted parser error is capped at 500 characters.
    let long = "e".repeat(900);
    let p = patch(&[ai_full(
        vec![],
        vec![invalid_tc(Some("search"), Some("s"), Some(&long))],
        None,
    )])
    .unwrap();
    assert_eq!(
        text(&p[1]),
        format!(
            "[Tool call could not be executed because its arguments were invalid: {}]",
            "e".repeat(500)
        )
    );
}

#[test]
fn valid_and_invalid_calls_are_both_patched() {
    let p = patch(&[ai_full(
        vec![tc("bash", Some("call_1"))],
        vec![bad_write()],
        None,
    )])
    .unwrap();
    let mut ids: Vec<&str> = p
        .iter()
        .filter_map(Message::as_tool)
        .map(|t| t.tool_call_id.as_str())
        .collect();
    ids.sort();
    assert_eq!(ids, ["call_1", "write_file:36"]);
}

#[test]
fn an_answered_invalid_call_is_sanitized_without_a_placeholder() {
    let original = ai_full(vec![], vec![bad_write()], None);
    let msgs = [original.clone(), tool("write_file:36", "write_file")];
    let input = arcs(&msgs);
    let p = build_patched(&input).unwrap();
    assert!(Arc::ptr_eq(&p[1], &input[1]));
    assert_eq!(parse(&wire(ai_of(&p[0]))[0].2), json!({}));
    assert_eq!(
        ai_of(&msgs[0]).invalid_tool_calls[0].args.as_deref(),
        Some(BAD_WRITE_ARGS)
    );
}

// -------------------------------------------------------------------------- id recovery

#[test]
fn malformed_structured_ids_are_normalized() {
    for id in [Some(""), Some("   "), None] {
        let p = patch(&[ai(vec![tc("bash", id)])]).unwrap();
        let new_id = ai_of(&p[0]).tool_calls[0].id.clone().unwrap();
        assert!(!new_id.trim().is_empty());
        assert!(new_id.starts_with(SYNTHETIC_ID_PREFIX));
        assert_eq!(wire(ai_of(&p[0]))[0].0, new_id);
        assert_eq!(tm(&p[1]).tool_call_id, new_id);
        assert_eq!(tm(&p[1]).status, ToolStatus::Error);
    }
    // Deterministic: `<prefix><message index>_<view>_<position>`.
    let p = patch(&[
        human("hi"),
        ai(vec![tc("bash", Some("ok")), tc("ls", None)]),
    ])
    .unwrap();
    assert_eq!(
        ai_of(&p[1]).tool_calls[1].id.as_deref(),
        Some("deerflow_synthetic_tool_call_1_call_1")
    );
}

#[test]
fn an_empty_id_keeps_its_paired_result() {
    let p = patch(&[
        ai(vec![tc("bash", Some(""))]),
        tool_text("", Some("bash"), "REAL RESULT"),
    ])
    .unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(text(&p[1]), "REAL RESULT");
    assert_answers(&p[1], &p[0], 0);
    assert_eq!(tm(&p[1]).status, ToolStatus::Success);
}

#[test]
fn several_empty_ids_get_distinct_ids_and_pair_in_order() {
    let p = patch(&[
        ai(vec![tc("bash", Some("")), tc("ls", Some(""))]),
        tool_text("", Some("bash"), "first"),
        tool_text("", Some("ls"), "second"),
    ])
    .unwrap();
    let ids: Vec<String> = call_ids(&p[0]);
    assert_ne!(ids[0], ids[1]);
    assert_eq!([text(&p[1]), text(&p[2])], ["first", "second"]);
    assert_eq!(
        [
            tm(&p[1]).tool_call_id.clone(),
            tm(&p[2]).tool_call_id.clone()
        ],
        [ids[0].clone(), ids[1].clone()]
    );
}

#[test]
fn invalid_and_raw_views_get_ids_too() {
    let p = patch(&[ai_full(
        vec![],
        vec![invalid_tc(Some("write_file"), Some(""), Some("x"))],
        None,
    )])
    .unwrap();
    let id = ai_of(&p[0]).invalid_tool_calls[0].id.clone().unwrap();
    assert!(!id.is_empty());
    assert_eq!(wire(ai_of(&p[0]))[0].0, id);
    assert_eq!(tm(&p[1]).tool_call_id, id);

    let p = patch(&[ai_full(
        vec![],
        vec![],
        Some(json!([raw_entry("", json!("bash"), json!("{}"))])),
    )])
    .unwrap();
    let id = ai_of(&p[0]).additional_kwargs["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!id.is_empty());
    assert_eq!(wire(ai_of(&p[0]))[0].0, id);
    assert_eq!(tm(&p[1]).tool_call_id, id);
}

#[test]
fn only_the_serialized_view_gets_a_recovered_id() {
    let p = patch(&[ai_full(
        vec![tc("bash", Some(""))],
        vec![],
        Some(json!([raw_entry("", json!("bash"), json!("{}"))])),
    )])
    .unwrap();
    let m = ai_of(&p[0]);
    let id = m.tool_calls[0].id.clone().unwrap();
    assert_eq!(wire(m), [(id.clone(), "bash".to_owned(), "{}".to_owned())]);
    assert_eq!(tm(&p[1]).tool_call_id, id);
    // antler keeps the mirrors consistent (spec 10 §1.5): the raw copy no longer claims a call
    // with an id the structured view does not have (DeerFlow leaves `id: ""` there).
    assert!(!m.additional_kwargs.contains_key("tool_calls"));
}

#[test]
fn a_raw_view_shadowed_by_invalid_calls_gets_no_placeholder() {
    let bad = r###"{"path": "/mnt/user-data/outputs/report.md", "content": "## Report {""###;
    let invalid = InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: Some(String::new()),
        name: Some("write_file".into()),
        args: Some(bad.into()),
        error: Some("Unterminated string".into()),
    };
    let p = patch(&[
        ai_full(
            vec![],
            vec![invalid],
            Some(json!([raw_entry("", json!("write_file"), json!(bad))])),
        ),
        tool_text("", Some("write_file"), "REAL RESULT"),
    ])
    .unwrap();
    let call_ids: Vec<String> = wire(ai_of(&p[0])).into_iter().map(|w| w.0).collect();
    let result_ids: Vec<String> = p
        .iter()
        .filter_map(Message::as_tool)
        .map(|t| t.tool_call_id.clone())
        .collect();
    assert_eq!(call_ids.len(), 1);
    assert_eq!(result_ids, call_ids);
    assert_eq!(text(&p[1]), "REAL RESULT");
}

#[test]
fn a_null_id_call_reclaims_its_own_null_id_result() {
    let null_result: Message = serde_json::from_value(
        json!({"type": "tool", "content": "REAL RESULT", "tool_call_id": null}),
    )
    .unwrap();
    let p = patch(&[ai(vec![tc("bash", None)]), null_result]).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(text(&p[1]), "REAL RESULT");
    assert_answers(&p[1], &p[0], 0);
}

#[test]
fn a_dangling_call_never_consumes_a_later_turns_result() {
    let p = patch(&[
        ai(vec![tc("bash", Some(""))]),
        ai(vec![tc("bash", Some(""))]),
        tool_text("", Some("bash"), "REAL RESULT"),
    ])
    .unwrap();
    assert_eq!(p.len(), 4);
    assert_answers(&p[1], &p[0], 0);
    assert_eq!(tm(&p[1]).status, ToolStatus::Error);
    assert_answers(&p[3], &p[2], 0);
    assert_eq!(text(&p[3]), "REAL RESULT");
}

#[test]
fn an_orphan_is_not_adopted_by_a_later_malformed_call() {
    let p = patch(&[
        tool_text("", Some("search"), "STALE ORPHAN"),
        human("continue"),
        ai(vec![tc("write_file", Some(""))]),
    ])
    .unwrap();
    assert!(p.iter().all(|m| text(m) != "STALE ORPHAN"));
    assert_eq!(p.len(), 3);
    assert_answers(&p[2], &p[1], 0);
    assert_eq!(tm(&p[2]).status, ToolStatus::Error);
}

#[test]
fn names_keep_siblings_from_taking_each_others_results() {
    let p = patch(&[
        ai(vec![tc("search", Some("")), tc("write_file", Some(""))]),
        tool_text("", Some("write_file"), "REAL RESULT"),
    ])
    .unwrap();
    let ids: Vec<String> = call_ids(&p[0]);
    assert_eq!(
        result_for(&p, &ids[1]).unwrap().content,
        Content::Text("REAL RESULT".into())
    );
    assert_eq!(result_for(&p, &ids[0]).unwrap().status, ToolStatus::Error);
}

#[test]
fn ambiguous_malformed_results_are_dropped() {
    // A nameless result with several eligible siblings; a lone result for two identical calls;
    // a result naming no call.
    for (calls, result) in [
        (
            vec![tc("search", Some("")), tc("write_file", Some(""))],
            tool_text("", None, "X"),
        ),
        (
            vec![tc("bash", Some("")), tc("bash", Some(""))],
            tool_text("", Some("bash"), "X"),
        ),
        (
            vec![tc("search", Some("")), tc("write_file", Some(""))],
            tool_text("", Some("grep"), "X"),
        ),
    ] {
        let p = patch(&[ai(calls), result]).unwrap();
        assert!(p.iter().all(|m| text(m) != "X"));
        let statuses: Vec<ToolStatus> = p[1..].iter().map(|m| tm(m).status).collect();
        assert_eq!(statuses, [ToolStatus::Error, ToolStatus::Error]);
    }
}

#[test]
fn identical_parallel_calls_pair_in_order_when_all_answered() {
    let p = patch(&[
        ai(vec![tc("bash", Some("")), tc("bash", Some(""))]),
        tool_text("", Some("bash"), "RESULT A"),
        tool_text("", Some("bash"), "RESULT B"),
    ])
    .unwrap();
    let ids: Vec<String> = call_ids(&p[0]);
    assert_eq!(
        [
            tm(&p[1]).tool_call_id.clone(),
            tm(&p[2]).tool_call_id.clone()
        ],
        [ids[0].clone(), ids[1].clone()]
    );
    assert_eq!([text(&p[1]), text(&p[2])], ["RESULT A", "RESULT B"]);
}

#[test]
fn valid_ids_are_left_byte_for_byte_unchanged() {
    let p = patch(&[
        ai(vec![tc("bash", Some(" call_1 ")), tc("ls", Some(""))]),
        tool_text(" call_1 ", Some("bash"), "result"),
    ])
    .unwrap();
    let ids: Vec<String> = call_ids(&p[0]);
    assert_eq!(ids[0], " call_1 ");
    assert!(!ids[1].is_empty() && ids[1] != " call_1 ");
    assert_eq!(
        result_for(&p, " call_1 ").unwrap().content,
        Content::Text("result".into())
    );
    assert_eq!(result_for(&p, &ids[1]).unwrap().status, ToolStatus::Error);
}

// ------------------------------------------------------------------------------ wrapper

async fn through_wrapper(msgs: Vec<Message>) -> Vec<Message> {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("ok")]));
    let (run, _) = run_ctx();
    let req = model_request(model.clone(), run, msgs);
    let chain = Chain::new(vec![Arc::new(DanglingToolCallMiddleware::new())]).unwrap();
    let resp = chain.call_model(req).await.unwrap();
    assert_eq!(resp.message.content.text(), "ok");
    model.requests()[0].messages.clone()
}

#[tokio::test]
async fn the_wrapper_passes_valid_requests_and_forwards_patched_ones() {
    let valid = vec![ai(vec![tc("bash", Some("call_1"))]), tool("call_1", "bash")];
    assert_eq!(through_wrapper(valid.clone()).await, valid);

    let sent = through_wrapper(vec![ai(vec![tc("bash", Some("call_1"))])]).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(tm(&sent[1]).tool_call_id, "call_1");
}

#[tokio::test]
async fn a_valid_request_is_forwarded_without_copying_the_history() {
    /// Checks the request it receives shares the caller's list.
    struct SameList(Arc<Vec<Arc<Message>>>);
    #[async_trait::async_trait]
    impl Middleware for SameList {
        middleware_identity!("SameList", HookSet::WRAP_MODEL);
        async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
            assert!(Arc::ptr_eq(&req.messages, &self.0));
            next.run(req).await
        }
    }
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("ok")]));
    let (run, _) = run_ctx();
    let req = model_request(
        model,
        run,
        vec![
            human("hi"),
            ai(vec![tc("bash", Some("c"))]),
            tool("c", "bash"),
            Message::ai("done"),
        ],
    );
    let chain = Chain::new(vec![
        Arc::new(DanglingToolCallMiddleware::new()),
        Arc::new(SameList(req.messages.clone())),
    ])
    .unwrap();
    chain.call_model(req).await.unwrap();
}

// ------------------------------------------------------------------- through the loop

#[tokio::test]
async fn an_interrupted_runs_dangling_call_is_patched_in_the_next_request() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::default());
    let blocker = Blocker::new("slow");
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([
            ("c1".to_owned(), "slow".to_owned(), json!({})),
            ("c2".to_owned(), "slow".to_owned(), json!({})),
        ]),
        ScriptedReply::text("sorry, starting over"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(blocker.clone()))
        .with_chain(Chain::new(vec![Arc::new(DanglingToolCallMiddleware::new())]).unwrap())
        .with_checkpointer(checkpointer.clone());

    // Run 1 is cancelled while its tools run: the AI message is checkpointed, no results.
    let cancel = CancellationToken::new();
    let run1 =
        Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)).with_cancel(cancel.clone()));
    let entered = blocker.entered.clone();
    let a = agent.clone();
    let handle = tokio::spawn(async move { a.run(RunInput::message(human("do it")), run1).await });
    entered.notified().await;
    cancel.cancel();
    let out1 = handle.await.unwrap();
    assert_eq!(out1.status, RunStatus::Interrupted);
    let stored = checkpointer
        .latest("t1")
        .await
        .unwrap()
        .unwrap()
        .state
        .messages
        .to_vec();
    assert_eq!(
        stored.iter().map(Message::kind).collect::<Vec<_>>(),
        ["human", "ai"]
    );
    assert_eq!(
        transcript_violations(&stored).len(),
        2,
        "the history itself dangles"
    );

    // Run 2: the request carries placeholders right after the AI message.
    let run2 = Arc::new(RunContext::new("t1", "r2", Arc::new(NullSink)));
    let out2 = agent
        .run(RunInput::message(human("hello again")), run2)
        .await;
    assert_eq!(out2.status, RunStatus::Success);
    let sent = &model.requests()[1].messages;
    assert_eq!(
        sent.iter().map(Message::kind).collect::<Vec<_>>(),
        ["human", "ai", "tool", "tool", "human"]
    );
    assert_eq!(transcript_violations(sent), Vec::<String>::new());
    for (i, id) in [(2, "c1"), (3, "c2")] {
        let t = tm(&sent[i]);
        assert_eq!(t.tool_call_id, id);
        assert_eq!(t.status, ToolStatus::Error);
        assert_eq!(t.name.as_deref(), Some("slow"));
        assert_eq!(
            text(&sent[i]),
            "[Tool call was interrupted and did not return a result.]"
        );
    }
    // Request-only: the thread's history is not rewritten.
    let kinds: Vec<&str> = out2.state.messages.iter().map(Message::kind).collect();
    assert_eq!(kinds, ["human", "ai", "human", "ai"]);
}

#[tokio::test]
async fn without_the_middleware_the_same_history_breaks_the_invariant() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("ok")]));
    let mut state = antler_protocol::ThreadState::default();
    state.messages.push(human("do it"));
    state.messages.push(ai(vec![tc("slow", Some("c1"))]));
    let agent = Agent::new(model.clone());
    let run = Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)));
    let input = RunInput {
        messages: vec![human("again")],
        initial_state: Some(state),
        ..Default::default()
    };
    agent.run(input, run).await;
    assert_eq!(
        transcript_violations(&model.requests()[0].messages),
        ["message 1: call 'c1' has no result"]
    );
}
