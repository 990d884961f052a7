#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_mcp::{Catalog, Lookup, McpManager, McpTool};
use antler_protocol::{Content, ThreadState, ToolStatus};
use antler_runtime::{NullSink, RunContext, Tool, ToolContext, ToolOutput};
use serde_json::{json, Value};

/// The rmcp edge-case server built from this crate.
pub const EDGE: &str = env!("CARGO_BIN_EXE_antler-mcp-testserver");

/// A data home and a folder holding `extensions_config.json`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub manager: McpManager,
}

impl Fixture {
    pub fn new(servers: Value) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("extensions_config.json"),
            serde_json::to_string_pretty(&json!({ "mcpServers": servers })).unwrap(),
        )
        .unwrap();
        let lookup = Lookup::new(Some(&dir.path().join("config.yaml")), dir.path());
        let manager = McpManager::new(dir.path().join("home"), lookup);
        Fixture { dir, manager }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("extensions_config.json")
    }
}

pub fn tool(catalog: &Catalog, name: &str) -> Arc<McpTool> {
    catalog
        .tools
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no tool {name}; have {:?}; servers {:?}",
                catalog.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
                catalog.servers
            )
        })
}

/// Call a tool as thread `thread` of user `user`.
pub async fn call(tool: &McpTool, thread: &str, user: Option<&str>, args: Value) -> ToolOutput {
    let run =
        RunContext::new(thread, "run-1", Arc::new(NullSink)).with_user(user.map(str::to_owned));
    let state = ThreadState::default();
    let ctx = ToolContext {
        call_id: "call-1",
        state: &state,
        run: &run,
    };
    tool.call(args.as_object().cloned().unwrap_or_default(), ctx)
        .await
        .unwrap()
}

/// Call catalog tool `name` as thread `t1` of no user.
pub async fn call_t1(catalog: &Catalog, name: &str, args: Value) -> ToolOutput {
    call(&tool(catalog, name), "t1", None, args).await
}

/// The text and status of a content result.
pub fn text(out: &ToolOutput) -> (String, ToolStatus) {
    match out {
        ToolOutput::Content {
            content, status, ..
        } => (
            match content {
                Content::Text(t) => t.clone(),
                c @ Content::Blocks(_) => c.text(),
            },
            *status,
        ),
        ToolOutput::Command(_) => panic!("unexpected command"),
    }
}

/// `server-everything`'s entry point, installed by tests/peers/setup.sh when missing; `None`
/// (with the reason printed) when node is absent.
pub fn everything() -> Option<PathBuf> {
    antler_test_support::mcp_peers::server_everything(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/setup.sh"),
    )
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed on drop.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start server-everything over HTTP (`streamableHttp` or `sse`) and wait until it listens.
pub fn everything_http(entry: &Path, mode: &str) -> (Child, u16) {
    let port = free_port();
    let child = std::process::Command::new("node")
        .arg(entry)
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start server-everything");
    let child = Child(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "server-everything did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (child, port)
}
