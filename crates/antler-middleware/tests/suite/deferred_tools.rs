//! DeferredToolFilterMiddleware through the agent loop (spec 30 §DeferredToolFilter): deferred
//! schemas hidden until promoted under the current catalog hash, unpromoted calls refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_middleware::deferred_tool_filter::{not_promoted_message, DeferredToolFilterMiddleware};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Message, Promoted, StateUpdate, ToolStatus};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{object_spec, tool_messages, FnTool};

/// Counts its calls into `calls`; answers "<name> ran".
fn tool(name: &str, calls: &Arc<AtomicUsize>) -> Arc<dyn Tool> {
    let (calls, answer) = (calls.clone(), format!("{name} ran"));
    FnTool::with_spec(
        object_spec(name, &format!("the {name} tool")),
        move |_, _| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::text(answer.clone()))
        },
    )
}

struct Setup {
    model: Arc<ScriptedModel>,
    agent: Agent,
    calls: Arc<AtomicUsize>,
}

/// Tools `ls` (normal), `mcp_a`, `mcp_b` (deferred under hash `h1`).
fn setup(replies: Vec<ScriptedReply>, deferred: &[&str]) -> Setup {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(ScriptedModel::new(replies));
    let tools = ToolRegistry::new()
        .with(tool("ls", &calls))
        .with(tool("mcp_a", &calls))
        .with(tool("mcp_b", &calls));
    let mw = DeferredToolFilterMiddleware::new(
        deferred.iter().map(|s| (*s).to_owned()),
        Some("h1".into()),
    );
    let agent = Agent::new(model.clone())
        .with_tools(tools)
        .with_chain(Chain::new(vec![Arc::new(mw)]).unwrap());
    Setup {
        model,
        agent,
        calls,
    }
}

fn promoted(hash: &str, names: &[&str]) -> StateUpdate {
    StateUpdate {
        promoted: Some(Promoted {
            catalog_hash: Some(hash.into()),
            names: names.iter().map(|s| (*s).to_owned()).collect(),
        }),
        ..Default::default()
    }
}

async fn run(agent: &Agent, update: Option<StateUpdate>) -> RunOutcome {
    let input = RunInput {
        messages: vec![Message::human("go")],
        update,
        ..Default::default()
    };
    agent
        .run(
            input,
            Arc::new(RunContext::new("t", "r", Arc::new(NullSink))),
        )
        .await
}

#[tokio::test]
async fn deferred_tools_are_hidden_without_promotion() {
    let s = setup(vec![ScriptedReply::text("hi")], &["mcp_a", "mcp_b"]);
    run(&s.agent, None).await;
    assert_eq!(s.model.requests()[0].tools, ["ls"]);
}

#[tokio::test]
async fn a_promotion_under_the_current_hash_exposes_the_tool() {
    let s = setup(vec![ScriptedReply::text("hi")], &["mcp_a", "mcp_b"]);
    run(&s.agent, Some(promoted("h1", &["mcp_b"]))).await;
    assert_eq!(s.model.requests()[0].tools, ["ls", "mcp_b"]);
}

#[tokio::test]
async fn a_promotion_under_another_hash_is_ignored() {
    let s = setup(vec![ScriptedReply::text("hi")], &["mcp_a", "mcp_b"]);
    run(&s.agent, Some(promoted("stale", &["mcp_a", "mcp_b"]))).await;
    assert_eq!(s.model.requests()[0].tools, ["ls"]);
}

#[tokio::test]
async fn no_deferred_names_is_a_pass_through() {
    let s = setup(
        vec![
            ScriptedReply::tool_call("c1", "mcp_a", json!({})),
            ScriptedReply::text("done"),
        ],
        &[],
    );
    let out = run(&s.agent, None).await;
    assert_eq!(s.model.requests()[0].tools, ["ls", "mcp_a", "mcp_b"]);
    assert_eq!(s.calls.load(Ordering::SeqCst), 1);
    assert_eq!(out.status, RunStatus::Success);
}

/// One turn calling the deferred `mcp_a` and the plain `ls`, then a final answer.
fn call_mcp_a_and_ls() -> Vec<ScriptedReply> {
    vec![
        ScriptedReply::tool_calls([
            ("c1".to_owned(), "mcp_a".to_owned(), json!({})),
            ("c2".to_owned(), "ls".to_owned(), json!({})),
        ]),
        ScriptedReply::text("done"),
    ]
}

#[tokio::test]
async fn calling_an_unpromoted_deferred_tool_is_refused() {
    let s = setup(call_mcp_a_and_ls(), &["mcp_a", "mcp_b"]);
    let out = run(&s.agent, None).await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(s.calls.load(Ordering::SeqCst), 1, "only ls ran");
    let results = tool_messages(&out.state);
    assert_eq!(results[0].tool_call_id, "c1");
    assert_eq!(results[0].name.as_deref(), Some("mcp_a"));
    assert_eq!(results[0].status, ToolStatus::Error);
    assert_eq!(
        results[0].content.text(),
        "Error: Tool 'mcp_a' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry."
    );
    assert_eq!(results[0].content.text(), not_promoted_message("mcp_a"));
    assert_eq!(results[1].content.text(), "ls ran");
}

#[tokio::test]
async fn promoted_and_non_deferred_calls_run() {
    let s = setup(call_mcp_a_and_ls(), &["mcp_a", "mcp_b"]);
    let out = run(&s.agent, Some(promoted("h1", &["mcp_a"]))).await;
    assert_eq!(s.calls.load(Ordering::SeqCst), 2);
    assert!(out
        .state
        .messages
        .iter()
        .filter_map(Message::as_tool)
        .all(|t| t.status == ToolStatus::Success));
}

#[test]
fn hidden_follows_the_state() {
    let mw = DeferredToolFilterMiddleware::new(["a".to_owned()], Some("h".into()));
    let mut st = antler_protocol::ThreadState::default();
    assert!(mw.is_hidden("a", &st));
    assert!(!mw.is_hidden("b", &st));
    st.promoted = Some(Promoted {
        catalog_hash: Some("h".into()),
        names: vec!["a".into()],
    });
    assert!(!mw.is_hidden("a", &st));
    st.promoted = Some(Promoted {
        catalog_hash: None,
        names: vec!["a".into()],
    });
    assert!(
        mw.is_hidden("a", &st),
        "a promotion without a hash never matches"
    );
}
