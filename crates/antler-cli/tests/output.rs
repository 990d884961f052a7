//! `antler run --output json|jsonl` pinned as snapshots (CONTRACT.md "Running one turn"): the
//! object's keys, the event names and order, the ThreadState and message shapes. Volatile values
//! (ids, timestamps, the temporary data home, today's date) are placeholders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::redact::redact;
use antler_test_support::{MockOpenAi, MockReply};
use common::Project;
use serde_json::{json, Value};

/// One tool round (`ls` of the empty workspace) and an answer; no title or memory model calls.
const CONFIG: &str = "title:\n  enabled: false\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\n";

fn mock() -> MockOpenAi {
    MockOpenAi::start_on_thread().with_replies([
        MockReply::tool_call(
            "call_1",
            "ls",
            json!({"description": "look around", "path": "/mnt/user-data/workspace"}),
        ),
        MockReply::text("The workspace is empty.").usage(120, 8),
    ])
}

#[test]
fn json_output_snapshot() {
    let mock = mock();
    let p = Project::new(&mock, CONFIG);
    let (code, out, stderr) = p.run_json(&["--thread-id", "snap", "what is in the workspace?"]);
    assert_eq!(code, 0, "{stderr}");
    mock.assert_no_violations();
    insta::assert_json_snapshot!("run_output_json", redact(&out));
}

#[test]
fn jsonl_output_snapshot() {
    let mock = mock();
    let p = Project::new(&mock, CONFIG);
    let out = p.run(&[
        "run",
        "--output",
        "jsonl",
        "--thread-id",
        "snap",
        "what is in the workspace?",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    mock.assert_no_violations();
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| redact(&serde_json::from_str(l).unwrap()))
        .collect();
    insta::assert_json_snapshot!("run_output_jsonl", events);
}
