//! Two Rust middlewares placed into antler's chains at named slots — the Rust counterpart of
//! DeerFlow's `extensions_config.json` `middlewares` (Python classes, which antler skips).
//!
//! - [`ToolAudit`] (wrap_tool) goes right after SandboxAudit (`S11`): inside the guardrails, so a
//!   denied call never reaches it, and outside ToolErrorHandling, so it sees each result as the
//!   model will. It also runs in every subagent.
//! - [`LogicalCallCounter`] (wrap_model) goes right before LLMErrorHandling (`S8`), DeerFlow's
//!   "logical model call" position: one count per model step, however often the call is retried.
//!
//! [`register`] adds both to an [`App`]; [`demo`] runs a whole turn offline against a scripted
//! model and reports what the middlewares saw. `cargo run -p antler-example-extension-middleware`
//! prints it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use antler_agent::extensions::{Extension, ExtensionError, Placement};
use antler_agent::{App, TurnRequest};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::Message;
use antler_runtime::{
    HookSet, Middleware, ModelNext, ModelRequest, ModelResult, NullSink, ToolCallRequest, ToolNext,
    ToolOutcome, ToolResult,
};
use async_trait::async_trait;

/// Records `"<tool>: <status>"` for every tool call, in completion order.
#[derive(Clone, Default)]
pub struct ToolAudit {
    log: Arc<Mutex<Vec<String>>>,
}

impl ToolAudit {
    pub fn entries(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Middleware for ToolAudit {
    antler_runtime::middleware_identity!("ToolAuditMiddleware", HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let tool = req.call.name.clone();
        let out = next.run(req).await;
        let status = match &out {
            Ok(ToolOutcome::Message(m)) => serde_json::to_value(m.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            Ok(ToolOutcome::Command(_)) => "command".to_owned(),
            Err(e) => format!("failed ({e})"),
        };
        tracing::info!(tool = %tool, status = %status, "tool audit");
        if let Ok(mut log) = self.log.lock() {
            log.push(format!("{tool}: {status}"));
        }
        out
    }
}

/// Counts logical model calls (retries inside LLMErrorHandling are not counted again).
#[derive(Clone, Default)]
pub struct LogicalCallCounter {
    calls: Arc<AtomicUsize>,
}

impl LogicalCallCounter {
    pub fn count(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Middleware for LogicalCallCounter {
    antler_runtime::middleware_identity!("LogicalCallCounterMiddleware", HookSet::WRAP_MODEL);

    async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        self.calls.fetch_add(1, Ordering::Relaxed);
        next.run(req).await
    }
}

/// Add both middlewares to `app` at their slots.
pub fn register(
    app: App,
    audit: &ToolAudit,
    counter: &LogicalCallCounter,
) -> Result<App, ExtensionError> {
    app.with_extension(
        Extension::new(Placement::after("S11"), Arc::new(audit.clone())).in_subagents(),
    )?
    .with_middleware(Placement::before("S8"), counter.clone())
}

/// What [`demo`] observed.
#[derive(Debug)]
pub struct DemoReport {
    /// The lead chain as `antler chain` prints it: `"<slot> <name>"`.
    pub chain: Vec<String>,
    pub audit: Vec<String>,
    pub logical_model_calls: usize,
    pub answer: String,
}

const DEMO_CONFIG: &str = "models:\n  - name: demo\n    use: langchain_openai:ChatOpenAI\n    model: scripted\n    api_key: unused\n    base_url: http://127.0.0.1:9/v1\nsandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\nmemory:\n  enabled: false\ntitle:\n  enabled: false\n";

/// One turn in a temporary data home: the scripted model lists the workspace, then answers.
pub async fn demo() -> anyhow::Result<DemoReport> {
    let home = tempfile::tempdir()?;
    let config = antler_config::Config::load_str(
        DEMO_CONFIG,
        std::path::Path::new("demo-config.yaml"),
        &|_| None,
    )?
    .config;
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call(
            "call_ls",
            "ls",
            serde_json::json!({"description": "look", "path": "/mnt/user-data/workspace"}),
        ),
        ScriptedReply::text("Your workspace is empty."),
    ]));
    let audit = ToolAudit::default();
    let counter = LogicalCallCounter::default();
    let app = App::open(config, home.path())?.with_model_override(model);
    let app = register(app, &audit, &counter)?;

    let chain = app
        .lead_entries(&app.run_options(&TurnRequest::default()), None)?
        .iter()
        .map(|e| format!("{} {}", e.slot, e.middleware.name()))
        .collect();
    let turn = TurnRequest {
        message: Some(Message::human("What is in my workspace?")),
        ..Default::default()
    };
    let outcome = app.run_turn(turn, Arc::new(NullSink)).await?;
    let answer = outcome
        .state
        .last_ai()
        .map(|m| m.content.text())
        .unwrap_or_default();
    Ok(DemoReport {
        chain,
        audit: audit.entries(),
        logical_model_calls: counter.count(),
        answer,
    })
}

/// A placement naming a slot that does not exist fails at registration, naming the slot.
pub fn unknown_slot_error() -> Option<String> {
    let ext = Extension::new(Placement::after("L99"), Arc::new(ToolAudit::default()));
    antler_agent::extensions::validate(&ext, &[])
        .err()
        .map(|e| e.to_string())
}
