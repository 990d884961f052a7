//! The schema of every built-in tool as the model is offered it (name, description, parameters),
//! pinned with snapshots. The first snapshots were taken from the hand-written schemas before
//! the tools derived theirs from their argument types; a change here changes what every model
//! sees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::sync::Arc;

use antler_runtime::Tool;
use antler_sandbox::{Confine, SandboxSettings};
use harness::Harness;
use serde_json::{json, Value};

/// The local sandbox with host bash allowed and confinement off.
fn env() -> Harness {
    Harness::new(SandboxSettings {
        allow_host_bash: true,
        confine: Confine::Off,
        ..Default::default()
    })
}

/// What the model is offered. Keys within each schema are sorted (their order means nothing to
/// a model); the order of `properties` is kept, since models fill arguments in that order.
fn offered(tool: &Arc<dyn Tool>) -> Value {
    let spec = tool.spec();
    json!({"name": spec.name, "description": spec.description, "parameters": canonical(&spec.parameters)})
}

fn canonical(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                let v = match (k.as_str(), &map[k]) {
                    ("properties", Value::Object(props)) => Value::Object(
                        props
                            .iter()
                            .map(|(name, p)| (name.clone(), canonical(p)))
                            .collect(),
                    ),
                    (_, v) => canonical(v),
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[test]
fn sandbox_tool_schemas() {
    let h = env();
    let env = &h.env;
    for name in [
        "bash",
        "ls",
        "glob",
        "grep",
        "read_file",
        "write_file",
        "str_replace",
    ] {
        let tool = antler_tools::builtin_tool(name, &Default::default(), env).unwrap();
        assert_eq!(tool.name(), name);
        insta::assert_json_snapshot!(name, offered(&tool));
    }
}

#[test]
fn present_files_and_view_image_schemas() {
    let h = env();
    let env = &h.env;
    insta::assert_json_snapshot!(
        "present_files",
        offered(&antler_tools::present_files_tool(env))
    );
    insta::assert_json_snapshot!("view_image", offered(&antler_tools::view_image_tool(env)));
}

#[test]
fn ask_clarification_schema() {
    insta::assert_json_snapshot!(
        "ask_clarification",
        offered(&antler_tools::ask_clarification::ask_clarification_tool())
    );
}

#[test]
fn write_todos_schema() {
    insta::assert_json_snapshot!(
        "write_todos",
        offered(&antler_tools::write_todos::write_todos_tool())
    );
}

#[test]
fn tool_search_schema() {
    let tool: Arc<dyn Tool> = Arc::new(antler_tools::tool_search::ToolSearchTool::new(Vec::new()));
    insta::assert_json_snapshot!("tool_search", offered(&tool));
}
