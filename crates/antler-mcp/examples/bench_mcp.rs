//! MCP stdio round-trip benchmark for the README's performance section.
//!
//! On one warm stdio session of the rmcp test server (`echo`), compares
//! - **raw**: rmcp's client `call_tool` on its own session — the server's time plus JSON-RPC
//!   over the pipes, what any client pays;
//! - **antler**: the same call through antler's `McpTool` (scope lookup, pooled session,
//!   thread folders, result mapping and path rewriting);
//!
//! and reports the median difference (antler's added overhead). Also: discovery time and the
//! cold start of a thread's session.
//!
//! `cargo build --release -p antler-mcp --features test-server --bin antler-mcp-testserver &&
//!  cargo run --release -p antler-mcp --example bench_mcp -- [iterations]`
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use antler_mcp::{Lookup, McpManager};
use antler_protocol::ThreadState;
use antler_runtime::{NullSink, RunContext, Tool, ToolContext};
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn show(name: &str, v: Vec<Duration>) -> Duration {
    let n = v.len();
    let (m, lo, hi) = median(v);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<44} median {:>9.1} µs   min {:>9.1} µs   max {:>9.1} µs   (n={n})",
        us(m),
        us(lo),
        us(hi)
    );
    m
}

async fn call(
    tool: &antler_mcp::McpTool,
    args: &antler_protocol::Object,
    state: &ThreadState,
    run: &RunContext,
) -> antler_runtime::ToolOutput {
    let ctx = ToolContext {
        call_id: "c",
        state,
        run,
    };
    tool.call(args.clone(), ctx).await.unwrap()
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let exe = std::env::current_exe().unwrap();
    let server = exe
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .join("antler-mcp-testserver");
    assert!(
        server.is_file(),
        "build the test server first: cargo build --release -p antler-mcp --features test-server --bin antler-mcp-testserver"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("extensions_config.json"),
        json!({"mcpServers": {"edge": {"command": server}}}).to_string(),
    )
    .unwrap();
    let args = json!({"message": "hello"}).as_object().cloned().unwrap();

    // Raw rmcp client on its own session.
    let raw =
        ().serve(TokioChildProcess::new(tokio::process::Command::new(&server)).unwrap())
            .await
            .unwrap();
    let mut raw_times = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let t = Instant::now();
        let r = raw
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone()))
            .await
            .unwrap();
        let d = t.elapsed();
        assert!(!r.content.is_empty());
        if i >= 50 {
            raw_times.push(d);
        }
    }

    // antler: discovery, cold thread session, warm calls.
    let manager = McpManager::new(
        dir.path().join("home"),
        Lookup::new(Some(&dir.path().join("config.yaml")), dir.path()),
    );
    let t = Instant::now();
    let catalog = manager.refresh().await;
    let discovery = t.elapsed();
    let tool = catalog
        .tools
        .iter()
        .find(|t| t.name() == "edge_echo")
        .unwrap()
        .clone();
    let state = ThreadState::default();
    let run = RunContext::new("bench-thread", "r", Arc::new(NullSink));
    let t = Instant::now();
    call(&tool, &args, &state, &run).await;
    let cold = t.elapsed();
    let mut antler_times = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let t = Instant::now();
        let out = call(&tool, &args, &state, &run).await;
        let d = t.elapsed();
        if let antler_runtime::ToolOutput::Content { status, .. } = out {
            assert_eq!(status, antler_protocol::ToolStatus::Success);
        }
        if i >= 50 {
            antler_times.push(d);
        }
    }
    println!("MCP stdio round trip, rmcp test server `echo`, {n} warm calls each");
    println!(
        "{:<44} {:>9.1} ms",
        "discovery (spawn + initialize + tools/list)",
        discovery.as_secs_f64() * 1e3
    );
    println!(
        "{:<44} {:>9.1} ms",
        "first call of a thread (cold session)",
        cold.as_secs_f64() * 1e3
    );
    let r = show("raw rmcp client call_tool", raw_times);
    let a = show("antler McpTool::call (warm pooled session)", antler_times);
    println!(
        "{:<44} {:>9.1} µs",
        "added by antler (median difference)",
        (a.as_secs_f64() - r.as_secs_f64()) * 1e6
    );
}
