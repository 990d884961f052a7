//! DanglingToolCall checks only the new tail within a run; a bad call that appears later in the
//! run must still be patched.

use std::sync::Arc;

use antler_middleware::dangling_tool_call::DanglingToolCallMiddleware;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, InvalidToolCall, Message, Object, ToolCall};
use antler_runtime::*;
use serde_json::json;

use crate::common::run_ok;
use crate::common::FnTool;

#[tokio::test]
async fn an_invalid_call_later_in_the_run_is_still_patched() {
    let mut second = AiMessage {
        tool_calls: vec![ToolCall::new("c2", "t", Object::new())].into(),
        invalid_tool_calls: vec![InvalidToolCall {
            kind: "invalid_tool_call".into(),
            id: Some("bad".into()),
            name: Some("t".into()),
            args: Some("{oops".into()),
            error: Some("bad json".into()),
        }]
        .into(),
        ..Default::default()
    };
    second
        .response_metadata
        .insert("finish_reason".into(), json!("tool_calls"));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "t", json!({})),
        ScriptedReply::Message(second),
        ScriptedReply::text("done"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(
            ToolRegistry::new().with(FnTool::named("t", |_, _| Ok(ToolOutput::text("fine")))),
        )
        .with_chain(Chain::new(vec![Arc::new(DanglingToolCallMiddleware::new())]).unwrap());
    let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)));
    run_ok(&agent, "go", run).await;
    let third = &model.requests()[2].messages;
    // human, ai(c1), tool(c1), ai(c2 + bad), tool(c2), synthetic(bad)
    let ai = third.iter().rposition(|m| m.kind() == "ai").unwrap();
    let answered: Vec<&str> = third[ai + 1..]
        .iter()
        .filter_map(Message::as_tool)
        .map(|t| t.tool_call_id.as_str())
        .collect();
    assert!(
        answered.contains(&"c2") && answered.contains(&"bad"),
        "{answered:?}"
    );
    // The first two requests were already well-formed and went out unchanged.
    assert_eq!(model.requests()[1].messages.len(), 3);
}
