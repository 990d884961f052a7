//! McpRoutingMiddleware through the agent loop (spec 30 §McpRouting): keyword matches on the
//! latest real user message promote deferred tools for the same model call; promotions union
//! with earlier ones; priority then name orders them; top-k caps them.

use std::sync::Arc;

use antler_middleware::deferred_tool_filter::DeferredToolFilterMiddleware;
use antler_middleware::mcp_routing::{assert_before_filter, McpRoutingMiddleware};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Message, Promoted, StateUpdate, ThreadState};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::FnTool;

fn tool(name: &str) -> Arc<dyn Tool> {
    FnTool::named(name, |_, _| Ok(ToolOutput::text("ok")))
}

fn index() -> Vec<(String, i64, Vec<String>)> {
    vec![
        ("db_query".into(), 50, vec!["SQL".into(), " 订单 ".into()]),
        ("db_orders".into(), 90, vec!["订单".into()]),
        ("web_fetch2".into(), 50, vec!["sql".into()]),
        ("no_keywords".into(), 99, vec!["  ".into()]),
    ]
}

fn routing(top_k: usize) -> McpRoutingMiddleware {
    McpRoutingMiddleware::new(index(), "h1", top_k).unwrap()
}

fn state(messages: Vec<Message>) -> ThreadState {
    ThreadState {
        messages: messages.into_iter().collect(),
        ..Default::default()
    }
}

#[test]
fn only_entries_with_keywords_are_indexed_and_none_without_any() {
    assert!(McpRoutingMiddleware::new(vec![("a".into(), 1, vec![" ".into()])], "h", 3).is_none());
    let s = state(vec![Message::human("no_keywords please")]);
    assert!(routing(5).matches(&s).iter().all(|n| n != "no_keywords"));
}

#[test]
fn case_folded_and_chinese_keywords_ranked_by_priority_then_name() {
    let r = routing(5);
    assert_eq!(
        r.matches(&state(vec![Message::human("run some sql on 订单")])),
        ["db_orders", "db_query", "web_fetch2"]
    );
    assert_eq!(
        routing(1).matches(&state(vec![Message::human("SQL 订单")])),
        ["db_orders"]
    );
    assert_eq!(
        r.matches(&state(vec![Message::human("nothing relevant")])),
        Vec::<String>::new()
    );
}

#[test]
fn only_the_latest_real_user_message_counts() {
    let mut hidden = Message::human("sql");
    hidden
        .additional_kwargs_mut()
        .insert("hide_from_ui".into(), json!(true));
    let s = state(vec![
        Message::human("about sql"),
        Message::human("thanks"),
        hidden,
    ]);
    assert_eq!(routing(5).matches(&s), Vec::<String>::new());
    let mut framed = Message::human("--- BEGIN USER INPUT ---\nx\n--- END USER INPUT ---");
    framed
        .additional_kwargs_mut()
        .insert("original_user_content".into(), json!("orders in SQL"));
    assert_eq!(
        routing(5).matches(&state(vec![framed])),
        ["db_query", "web_fetch2"]
    );
}

#[test]
fn routing_must_precede_the_filter() {
    assert!(
        assert_before_filter(&["McpRoutingMiddleware", "DeferredToolFilterMiddleware"]).is_ok()
    );
    assert!(
        assert_before_filter(&["DeferredToolFilterMiddleware", "McpRoutingMiddleware"]).is_err()
    );
}

#[tokio::test]
async fn a_matched_tool_is_visible_in_the_same_model_call_and_promotions_union() {
    let model = Arc::new(ScriptedModel::new(vec![ScriptedReply::text("hi")]));
    let deferred = ["db_query", "db_orders", "web_fetch2"];
    let agent = Agent::new(model.clone())
        .with_tools(
            ToolRegistry::new()
                .with(tool("ls"))
                .with(tool("db_query"))
                .with(tool("db_orders"))
                .with(tool("web_fetch2")),
        )
        .with_chain(
            Chain::new(vec![
                Arc::new(routing(1)),
                Arc::new(DeferredToolFilterMiddleware::new(
                    deferred.iter().map(|s| (*s).to_owned()),
                    Some("h1".into()),
                )),
            ])
            .unwrap(),
        );
    let input = RunInput {
        messages: vec![Message::human("count rows with SQL")],
        // An earlier tool_search promotion under the same hash stays.
        update: Some(StateUpdate {
            promoted: Some(Promoted {
                catalog_hash: Some("h1".into()),
                names: vec!["web_fetch2".into()],
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = agent
        .run(
            input,
            Arc::new(RunContext::new("t", "r", Arc::new(NullSink))),
        )
        .await;
    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(model.requests()[0].tools, ["ls", "db_query", "web_fetch2"]);
    let p = out.state.promoted.clone().unwrap();
    assert_eq!(p.catalog_hash.as_deref(), Some("h1"));
    let mut names = p.names.clone();
    names.sort();
    assert_eq!(names, ["db_query", "web_fetch2"]);
}
