//! The run journal's cost on the agent loop: what `on_event` takes per agent step (a model
//! response, a tool result and the state update), buffering included, flushing off the loop.
//! `cargo run --release -p antler-agent --example bench_journal_observer`
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use antler_agent::journal::RunJournal;
use antler_protocol::{AiMessage, Message, StateUpdate, ToolCall, ToolMessage, UsageMetadata};
use antler_runtime::{NullSink, RunContext, RunEvent, RunObserver};
use antler_store::SqliteStore;
use serde_json::json;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(&dir.path().join("bench.db"))?;
    let ctx = RunContext::new("t", "r", Arc::new(NullSink));
    let args = json!({"description": "list", "command": "ls -la /mnt/user-data/workspace"});
    let call = ToolCall::new(
        "call_1",
        "bash",
        args.as_object().cloned().unwrap_or_default(),
    );
    let mut ai = AiMessage {
        content: "Let me look at the workspace first.".into(),
        usage_metadata: Some(UsageMetadata::new(1200, 90)),
        ..Default::default()
    };
    ai.set_tool_calls(vec![call.clone()]);
    ai.id = Some("lc_run--1".into());
    let mut tool = ToolMessage::new("call_1", "x".repeat(400));
    tool.id = Some("tool-1".into());
    let update = StateUpdate::message(Message::Tool(tool.clone()));
    let mut samples = Vec::new();
    for round in 0..50 {
        let journal = RunJournal::new(store.clone(), "t", format!("r{round}"), None);
        let started = std::time::Instant::now();
        for _ in 0..100 {
            journal.on_event(
                &ctx,
                &RunEvent::ModelResponse {
                    caller: "lead_agent",
                    model: "main",
                    request_messages: 40,
                    response: &ai,
                    latency: std::time::Duration::from_millis(800),
                },
            );
            journal.on_event(
                &ctx,
                &RunEvent::ToolResult {
                    call: &call,
                    message: &tool,
                    duration: std::time::Duration::from_millis(5),
                },
            );
            journal.on_event(
                &ctx,
                &RunEvent::Update {
                    node: "tools",
                    update: &update,
                },
            );
        }
        samples.push(started.elapsed() / 100);
        journal.finish().await;
    }
    samples.sort();
    println!(
        "journal observer: median {:?} per step (3 events), p90 {:?}",
        samples[samples.len() / 2],
        samples[samples.len() * 9 / 10]
    );
    Ok(())
}
