//! `antler run --output json|jsonl` pinned as snapshots (CONTRACT.md "Running one turn"): the
//! object's keys, the event names and order, the ThreadState and message shapes. Volatile values
//! (ids, timestamps, the temporary data home, today's date) are placeholders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::redact::redact;
use antler_test_support::{MockOpenAi, MockReply};
use common::{ls_call, ok_jsonl, Project};
use serde_json::Value;

/// One tool round (`ls` of the empty workspace) and an answer; no title or memory model calls.
const CONFIG: &str = "title:\n  enabled: false\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\n";

fn mock() -> MockOpenAi {
    MockOpenAi::start_on_thread().with_replies([
        // Pinned: an estimate follows the prompt's length, which holds today's weekday.
        ls_call("call_1", "look around", "/mnt/user-data/workspace").usage(757, 16),
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
    let events: Vec<Value> = ok_jsonl(&out).iter().map(redact).collect();
    mock.assert_no_violations();
    insta::assert_json_snapshot!("run_output_jsonl", events);
}
