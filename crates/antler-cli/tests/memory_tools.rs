//! Memory tool mode end to end (spec 40 §4.3, §4.8, §4.9): with `memory.mode: tool` the model
//! writes and reads its memory through `memory_add` / `memory_search`, the passive writer is not
//! in the chain, and injection carries summaries only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::{MockOpenAi, MockReply};
use common::{scripted, tool_names, Project};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const TOOL_MODE: &str = "title:\n  enabled: false\nmemory:\n  enabled: true\n  mode: tool\n";

/// The JSON text of the tool message answering `call_id`.
fn tool_result(body: &Value, call_id: &str) -> Value {
    let m = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool result for {call_id}: {body}"));
    serde_json::from_str(m["content"].as_str().unwrap()).unwrap()
}

#[test]
fn the_model_adds_a_fact_then_finds_it_with_search() {
    let (mock, p) = scripted(
        [
            MockReply::tool_call(
                "call_add",
                "memory_add",
                json!({"content": "Prefers green tea over coffee", "category": "preference", "confidence": 0.95}),
            ),
            MockReply::tool_call(
                "call_search",
                "memory_search",
                json!({"query": "green tea"}),
            ),
            MockReply::text("You prefer green tea."),
        ],
        TOOL_MODE,
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "a", "Remember: I prefer green tea."]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success", "{out}");

    let reqs = mock.requests();
    assert_eq!(
        reqs.len(),
        3,
        "no memory-model call: the passive writer is off"
    );
    let names = tool_names(&reqs[0].body);
    for tool in [
        "memory_search",
        "memory_add",
        "memory_update",
        "memory_delete",
    ] {
        assert_eq!(
            names.iter().filter(|n| *n == tool).count(),
            1,
            "{tool} in {names:?}"
        );
    }
    let system = reqs[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("<memory_tool_system>"), "{system}");

    let added = tool_result(&reqs[1].body, "call_add");
    assert_eq!(added["status"], "added");
    let fact_id = added["fact_id"].as_str().unwrap().to_owned();
    let found = tool_result(&reqs[2].body, "call_search");
    assert_eq!(found["count"], 1, "{found}");
    assert_eq!(found["results"][0]["id"], json!(fact_id));
    assert_eq!(
        found["results"][0]["content"],
        "Prefers green tea over coffee"
    );
    mock.assert_no_violations();

    // The fact is stored for the user, as a manual one.
    let shown = p.run(&["memory", "show", "--output", "json"]);
    let doc: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(doc["facts"][0]["id"], json!(fact_id), "{doc}");
    assert_eq!(doc["facts"][0]["source"], "manual");

    // A new thread: the fact is not injected (summaries only), so the model must search.
    mock.push(MockReply::text("Hello."));
    let (code, _, stderr) = p.run_json(&["--thread-id", "b", "hi"]);
    assert_eq!(code, 0, "{stderr}");
    let sent = mock.requests()[3].body["messages"].to_string();
    assert!(!sent.contains("green tea"), "{sent}");

    // And the chain has no passive memory writer.
    let chain = p.run(&["chain", "--output", "json"]);
    let chain: Value = serde_json::from_slice(&chain.stdout).unwrap();
    let slots: Vec<&str> = chain
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["slot"].as_str())
        .collect();
    assert!(slots.contains(&"L8") && !slots.contains(&"L9"), "{slots:?}");
}

#[test]
fn tool_mode_with_memory_disabled_warns_and_offers_no_memory_tools() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::text("ok")]);
    let p = Project::new(
        &mock,
        "title:\n  enabled: false\nmemory:\n  enabled: false\n  mode: tool\n",
    );
    let (code, _, stderr) = p.run_json(&["hi"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("memory.mode is 'tool' but memory is disabled"),
        "{stderr}"
    );
    let names = tool_names(&mock.requests()[0].body);
    assert!(!names.iter().any(|n| n.starts_with("memory_")), "{names:?}");
    let system = mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!system.contains("<memory_tool_system>"));
}
