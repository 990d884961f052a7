//! The chain guards end to end through `antler run` against the mock model: ReadBeforeWrite's
//! refusal as the model sees it, a `/skill` activation restricting the tools, and a running
//! tool's progress lines in text mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::{MockOpenAi, MockReply};
use common::{as_text, bash_call, ls_call, scripted, visible, Project};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const TOOLS: &str = "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\n  - {name: read_file, group: file:read, use: deerflow.sandbox.tools:read_file_tool}\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\n";

const NOTES: &str = "/mnt/user-data/workspace/notes.txt";

fn write(id: &str, content: &str) -> MockReply {
    MockReply::tool_call(
        id,
        "write_file",
        json!({"description": "save", "path": NOTES, "content": content}),
    )
}

/// The tool message answering `call_id` in the request the model got next.
fn tool_result(body: &Value, call_id: &str) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

#[test]
fn the_model_must_read_a_file_before_overwriting_it() {
    let (mock, p) = scripted(
        [
            write("w1", "v1"),
            write("w2", "v2"),
            MockReply::tool_call(
                "r",
                "read_file",
                json!({"description": "check", "path": NOTES}),
            ),
            write("w3", "v3"),
            MockReply::text("saved"),
        ],
        TOOLS,
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "t1", "keep notes"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(tool_result(&reqs[1].body, "w1"), "OK");
    let refused = tool_result(&reqs[2].body, "w2");
    assert!(
        refused.starts_with(&format!(
            "Error: write_file blocked — {NOTES} already exists"
        )),
        "{refused}"
    );
    assert!(refused.contains("read_file"), "{refused}");
    assert_eq!(tool_result(&reqs[3].body, "r"), "v1");
    assert_eq!(tool_result(&reqs[4].body, "w3"), "OK");
    let host = p.home().join("threads/t1/user-data/workspace/notes.txt");
    assert_eq!(std::fs::read_to_string(host).unwrap(), "v3");
    // The read result carries its mark in the thread state.
    let read = visible(&out["values"])
        .into_iter()
        .find(|m| m["tool_call_id"] == "r")
        .unwrap();
    assert_eq!(
        read["additional_kwargs"]["deerflow_read_mark"]["path"],
        NOTES
    );
    mock.assert_no_violations();
}

#[test]
fn read_before_write_can_be_turned_off() {
    let mock = MockOpenAi::start_on_thread().with_replies([
        write("w1", "v1"),
        write("w2", "v2"),
        MockReply::text("saved"),
    ]);
    let p = Project::new(
        &mock,
        &format!("{TOOLS}read_before_write:\n  enabled: false\n"),
    );
    let (code, _, stderr) = p.run_json(&["--thread-id", "t1", "keep notes"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(tool_result(&mock.requests()[2].body, "w2"), "OK");
}

fn offered(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_slash_skill_is_injected_and_restricts_the_tools() {
    let (mock, p) = scripted(
        [
            bash_call("b", "go", "echo hi"),
            ls_call("l", "look", "/mnt/user-data"),
            MockReply::text("done"),
        ],
        TOOLS,
    );
    p.public_skill("shell-only", "---\nname: shell-only\ndescription: Do it in the shell\nallowed-tools: [bash]\n---\n# Use bash <only>\n");
    let (code, out, stderr) = p.run_json(&["--thread-id", "t1", "/shell-only say hi"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success");
    let reqs = mock.requests();
    // The skill's text reaches the first call, just before the user's message.
    let msgs = reqs[0].body["messages"].as_array().unwrap();
    let n = msgs.len();
    let reminder = msgs[n - 2]["content"].as_str().unwrap();
    assert!(
        reminder.starts_with("<slash_skill_activation>"),
        "{reminder}"
    );
    assert!(reminder.contains("# Use bash &lt;only&gt;"), "{reminder}");
    assert!(
        reminder.contains("<user_request>\nsay hi\n</user_request>"),
        "{reminder}"
    );
    assert_eq!(
        as_text(&msgs[n - 1]["content"]).contains("/shell-only say hi"),
        true
    );
    // Only the skill's tools and the framework's are offered, and others are refused.
    assert_eq!(offered(&reqs[0].body), ["bash", "read_file"]);
    assert_eq!(tool_result(&reqs[1].body, "b"), "hi\n");
    assert_eq!(
        tool_result(&reqs[2].body, "l"),
        "Error: Tool 'ls' is not allowed by the active skill policy."
    );
    // Request-only: the thread keeps no reminder.
    let kept = out["values"]["messages"].to_string();
    assert!(!kept.contains("slash_skill_activation"), "{kept}");
    mock.assert_no_violations();
}

#[test]
fn an_unknown_slash_skill_is_answered_without_the_model() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, TOOLS);
    let (code, out, stderr) = p.run_json(&["--thread-id", "t1", "/no-such-skill do it"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(mock.requests().is_empty());
    let last = visible(&out["values"]).pop().unwrap();
    assert_eq!(last["content"], "Skill `/no-such-skill` is not installed.");
}

#[test]
fn text_mode_prints_a_running_commands_output_lines() {
    let (mock, p) = scripted(
        [
            bash_call("b", "count", "for i in 1 2 3; do echo step-$i; done; pwd"),
            MockReply::text("Counted."),
        ],
        TOOLS,
    );
    let out = p.run(&["run", "--thread-id", "t1", "count"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let progress: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("    ┆ "))
        .collect();
    assert_eq!(
        progress,
        ["step-1", "step-2", "step-3", "/mnt/user-data/workspace"],
        "{stderr}"
    );
    // The result the model reads is the usual one.
    let result = tool_result(&mock.requests()[1].body, "b");
    assert_eq!(result, "step-1\nstep-2\nstep-3\n/mnt/user-data/workspace\n");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Counted.\n");
}
