//! MCP end to end through the real `antler` binary and the mock model, with the reference
//! server (`@modelcontextprotocol/server-everything`, installed by
//! crates/antler-mcp/tests/peers/setup.sh) over stdio.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};

use antler_test_support::{MockOpenAi, MockReply};
use common::{as_text, first_with, scripted, tool_names, Project};
use serde_json::{json, Value};

/// server-everything's entry point; `None` (reason printed) without node.
fn everything() -> Option<PathBuf> {
    let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("../antler-mcp/tests/peers/setup.sh");
    antler_test_support::mcp_peers::server_everything(&setup)
}

fn write_extensions(p: &Project, servers: Value) {
    std::fs::write(
        p.path().join("extensions_config.json"),
        json!({ "mcpServers": servers }).to_string(),
    )
    .unwrap();
}

fn tool_text(messages: &[Value], id: &str) -> String {
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no tool message {id}"))
}

/// The model calls server-everything's echo tool with `message`.
fn echo_call(id: &str, message: &str) -> MockReply {
    MockReply::tool_call(id, "everything_echo", json!({ "message": message }))
}

fn system_prompt(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_model_calls_everything_echo_and_a_broken_server_beside_it_changes_nothing() {
    let Some(entry) = everything() else { return };
    let (mock, p) = scripted(
        [
            echo_call("call_e", "ping"),
            MockReply::text("The server said ping back."),
        ],
        "",
    );
    write_extensions(
        &p,
        json!({
            "broken": {"type": "stdio", "command": "/nonexistent/mcp-server"},
            "everything": {"type": "stdio", "command": "node", "args": [entry, "stdio"]},
        }),
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "m1", "Echo ping, please."]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success", "{out}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    let offered = tool_names(&reqs[0].body);
    assert!(
        offered.iter().any(|n| n == "everything_echo"),
        "{offered:?}"
    );
    assert!(
        offered.iter().any(|n| n == "everything_get-sum"),
        "{offered:?}"
    );
    assert!(!offered.iter().any(|n| n.starts_with("broken_")));
    assert_eq!(tool_text(reqs[1].messages(), "call_e"), "Echo: ping");
    // The state's tool message is a success named after the tool.
    let tool = first_with(&out["values"]["messages"], "type", "tool").clone();
    assert_eq!(tool["name"], "everything_echo");
    assert_eq!(tool["status"], "success");
    // The stdio server ran in the thread's workspace, with its temp dir under it.
    assert!(p
        .home()
        .join("threads/m1/user-data/workspace/.mcp/tmp")
        .is_dir());
}

#[test]
fn with_tool_search_mcp_schemas_stay_hidden_until_promoted() {
    let Some(entry) = everything() else { return };
    let (mock, p) = scripted(
        [
            MockReply::tool_call(
                "call_s",
                "tool_search",
                json!({"query": "select:everything_echo"}),
            ),
            echo_call("call_e", "found"),
            MockReply::text("done"),
        ],
        "tool_search:\n  enabled: true\n",
    );
    write_extensions(
        &p,
        json!({"everything": {"command": "node", "args": [entry, "stdio"]}}),
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "m2", "Use the echo tool."]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success", "{out}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    let first = tool_names(&reqs[0].body);
    assert!(first.iter().any(|n| n == "tool_search"), "{first:?}");
    assert!(
        !first.iter().any(|n| n.starts_with("everything_")),
        "{first:?}"
    );
    let prompt = system_prompt(&reqs[0].body);
    assert!(prompt.contains("<available-deferred-tools>"), "{prompt}");
    assert!(prompt.contains("\neverything_echo\n"), "{prompt}");
    let second = tool_names(&reqs[1].body);
    assert!(second.iter().any(|n| n == "everything_echo"), "{second:?}");
    assert!(
        !second.iter().any(|n| n == "everything_get-sum"),
        "{second:?}"
    );
    assert_eq!(tool_text(reqs[2].messages(), "call_e"), "Echo: found");
    assert_eq!(
        out["values"]["promoted"]["names"],
        json!(["everything_echo"])
    );
}

#[test]
fn routing_prefer_promotes_matching_tools_without_tool_search() {
    let Some(entry) = everything() else { return };
    let (mock, p) = scripted(
        [echo_call("call_e", "routed"), MockReply::text("done")],
        "tool_search:\n  enabled: true\n",
    );
    write_extensions(
        &p,
        json!({"everything": {
            "command": "node",
            "args": [entry, "stdio"],
            "tools": {"echo": {"routing": {"mode": "prefer", "priority": 90, "keywords": ["Repeat After Me"]}}},
        }}),
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "m3", "repeat after me: routed"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success", "{out}");
    let reqs = mock.requests();
    let first = tool_names(&reqs[0].body);
    assert!(first.iter().any(|n| n == "everything_echo"), "{first:?}");
    assert!(
        !first.iter().any(|n| n == "everything_get-sum"),
        "{first:?}"
    );
    let prompt = system_prompt(&reqs[0].body);
    assert!(prompt.contains("<mcp_routing_hints>\nWhen the user's request involves Repeat After Me:\n  use `tool_search` to fetch `everything_echo`, then prefer that MCP tool.\n</mcp_routing_hints>"), "{prompt}");
    assert_eq!(tool_text(reqs[1].messages(), "call_e"), "Echo: routed");
}

#[test]
fn mcp_list_shows_servers_status_and_tools() {
    let Some(entry) = everything() else { return };
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "");
    write_extensions(
        &p,
        json!({
            "everything": {"command": "node", "args": [entry, "stdio"], "description": "reference"},
            "broken": {"command": "/nonexistent/mcp-server"},
            "off": {"enabled": false, "type": "http", "url": "http://127.0.0.1:9/mcp"},
        }),
    );
    let out = p.run(&["mcp", "list", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers[0]["name"], "everything");
    assert_eq!(servers[0]["status"], "ready");
    assert_eq!(servers[0]["type"], "stdio");
    assert!(servers[0]["tools"]
        .as_array()
        .unwrap()
        .contains(&json!("everything_echo")));
    assert_eq!(servers[1]["status"], "failed");
    assert!(as_text(&servers[1]["error"]).contains("could not start `/nonexistent/mcp-server`"));
    assert_eq!(servers[2]["status"], "disabled");
    let text = p.run(&["mcp", "list"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("everything_get-sum"), "{text}");
}

#[test]
fn config_check_validates_the_extensions_file() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "");
    write_extensions(
        &p,
        json!({"ok": {"command": "true"}, "bad": {"type": "sse"}}),
    );
    let out = p.run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mcpServers.bad.url: an sse server needs `url`"),
        "{err}"
    );
    write_extensions(
        &p,
        json!({"ok": {"command": "true"}, "gh": {"type": "websocket"}}),
    );
    let err = String::from_utf8_lossy(&p.run(&["config", "check"]).stderr).into_owned();
    assert!(
        err.contains("mcpServers.gh.type: unknown transport 'websocket'"),
        "{err}"
    );
    write_extensions(&p, json!({"ok": {"command": "true"}}));
    let out = p.run(&["config", "check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("mcp: "));
}

#[test]
fn a_general_purpose_subagent_inherits_mcp_tools() {
    let Some(entry) = everything() else { return };
    let (mock, p) = scripted(
        [
            MockReply::tool_call(
                "call_t",
                "task",
                json!({"description": "echo via subagent", "prompt": "Call everything_echo with 'sub'.", "subagent_type": "general-purpose"}),
            ),
            echo_call("call_se", "sub"),
            MockReply::text("The subagent echoed sub."),
            MockReply::text("Done."),
        ],
        "",
    );
    write_extensions(
        &p,
        json!({"everything": {"command": "node", "args": [entry, "stdio"]}}),
    );
    let (code, out, stderr) =
        p.run_json(&["--subagents", "--thread-id", "m4", "Delegate the echo."]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success", "{out}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    let child = tool_names(&reqs[1].body);
    assert!(child.iter().any(|n| n == "everything_echo"), "{child:?}");
    assert!(!child.iter().any(|n| n == "task"), "{child:?}");
    assert_eq!(tool_text(reqs[2].messages(), "call_se"), "Echo: sub");
}
