//! A scripted-model agent wired with the sandbox tools and the sandbox middlewares, as the
//! lead agent chains them: ThreadData → Uploads → Sandbox → SandboxAudit → ToolErrorHandling.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use antler_middleware::sandbox::SandboxMiddleware;
use antler_middleware::sandbox_audit::{MemoryAuditSink, SandboxAuditMiddleware};
use antler_middleware::thread_data::ThreadDataMiddleware;
use antler_middleware::tool_error_handling::ToolErrorHandlingMiddleware;
use antler_middleware::uploads::UploadsMiddleware;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Message, ThreadState, ToolMessage, ToolStatus};
use antler_runtime::{
    Agent, Chain, Checkpointer, MemoryCheckpointer, Middleware, NullSink, RunContext, RunInput,
    RunOutcome, RunStatus, ToolRegistry,
};
use antler_sandbox::{Confine, ConfinementStatus, LocalSandboxProvider, SandboxSettings};
use antler_tools::ToolEnv;
use serde_json::Value;

pub struct Harness {
    pub home: tempfile::TempDir,
    pub provider: Arc<LocalSandboxProvider>,
    pub env: ToolEnv,
    pub audit: Arc<MemoryAuditSink>,
    pub checkpointer: Arc<MemoryCheckpointer>,
    pub vision: bool,
}

pub fn host_bash() -> SandboxSettings {
    SandboxSettings {
        allow_host_bash: true,
        confine: Confine::Off,
        bash_command_timeout: Duration::from_secs(30),
        ..Default::default()
    }
}

pub fn off() -> ConfinementStatus {
    ConfinementStatus {
        mode: Confine::Off,
        active: false,
        reason: "sandbox.confine is off".into(),
    }
}

/// A folder outside `/tmp` (confined commands may write `/tmp`).
pub fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(scratch_base()).unwrap()
}

impl Harness {
    pub fn new(settings: SandboxSettings) -> Harness {
        Self::with_status(settings, off())
    }

    pub fn with_status(settings: SandboxSettings, status: ConfinementStatus) -> Harness {
        let home = scratch_dir();
        let provider = Arc::new(LocalSandboxProvider::with_status(
            home.path(),
            settings.clone(),
            status,
        ));
        let env = ToolEnv::new(provider.clone(), Arc::new(settings));
        Harness {
            home,
            provider,
            env,
            audit: Arc::new(MemoryAuditSink::default()),
            checkpointer: Arc::new(MemoryCheckpointer::new()),
            vision: true,
        }
    }

    pub fn thread_dir(&self, thread: &str) -> PathBuf {
        self.home
            .path()
            .join("threads")
            .join(thread)
            .join("user-data")
    }

    pub fn chain(&self) -> Vec<Arc<dyn Middleware>> {
        vec![
            Arc::new(ThreadDataMiddleware::new(self.home.path())),
            Arc::new(UploadsMiddleware::new(self.home.path())),
            Arc::new(SandboxMiddleware::new(self.provider.clone())),
            Arc::new(SandboxAuditMiddleware::new().with_sink(self.audit.clone())),
            Arc::new(ToolErrorHandlingMiddleware::new()),
        ]
    }

    pub fn agent(&self, model: Arc<ScriptedModel>) -> Agent {
        let mut reg = ToolRegistry::new();
        for t in antler_tools::default_tools(&self.env, self.vision) {
            reg.register(t);
        }
        Agent::new(model)
            .with_tools(reg)
            .with_chain(Chain::new(self.chain()).unwrap())
            .with_checkpointer(self.checkpointer.clone() as Arc<dyn Checkpointer>)
    }

    /// One run on `thread` with `message`; the model answers with `replies` then "done".
    pub async fn run_message(
        &self,
        thread: &str,
        message: Message,
        replies: Vec<ScriptedReply>,
    ) -> (RunOutcome, Arc<ScriptedModel>) {
        let model =
            Arc::new(ScriptedModel::new(replies).with_fallback(|_| ScriptedReply::text("done")));
        let agent = self.agent(model.clone());
        let run = Arc::new(RunContext::new(
            thread,
            format!("run-{}", uuid_like()),
            Arc::new(NullSink),
        ));
        let out = agent.run(RunInput::message(message), run).await;
        if let Some(e) = &out.error {
            panic!("run failed: {e}");
        }
        assert_eq!(out.status, RunStatus::Success);
        (out, model)
    }

    pub async fn run(
        &self,
        thread: &str,
        replies: Vec<ScriptedReply>,
    ) -> (RunOutcome, Arc<ScriptedModel>) {
        self.run_message(thread, Message::human("go"), replies)
            .await
    }

    /// Run a single tool call and return its tool message.
    pub async fn call(&self, thread: &str, tool: &str, args: Value) -> ToolMessage {
        let (out, _) = self
            .run(thread, vec![ScriptedReply::tool_call("c1", tool, args)])
            .await;
        last_tool(&out.state, "c1")
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

/// The last tool message answering `call_id`.
pub fn last_tool(state: &ThreadState, call_id: &str) -> ToolMessage {
    state
        .messages
        .iter()
        .rev()
        .filter_map(Message::as_tool)
        .find(|t| t.tool_call_id == call_id)
        .cloned()
        .unwrap_or_else(|| panic!("no tool message for {call_id}"))
}

pub fn ok(t: &ToolMessage) -> String {
    assert_eq!(t.status, ToolStatus::Success, "{:?}", t.content);
    t.content.text()
}

pub fn err(t: &ToolMessage) -> String {
    assert_eq!(t.status, ToolStatus::Error, "{:?}", t.content);
    let text = t.content.text();
    assert!(
        !text.contains('\n') || text.starts_with("Error: Command timed out"),
        "one-line reason expected: {text}"
    );
    text
}

/// Every file under `dir`, relative, sorted (to prove nothing was written outside).
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(root, &p, out);
                }
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Whether `pid` is dead (gone, or a zombie nobody reaps) — SIGKILL is delivered asynchronously,
/// so allow it up to two seconds to land.
pub fn exits_soon(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("gone");
        if matches!(state, "gone" | "Z" | "X") {
            return true;
        }
        if std::time::Instant::now() > deadline {
            eprintln!("process {pid} is still in state {state}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A scratch base outside `/tmp` (see [`antler_test_support::dd_mw_support::scratch_base`]).
fn scratch_base() -> PathBuf {
    antler_test_support::dd_mw_support::scratch_base(
        env!("CARGO_TARGET_TMPDIR"),
        env!("CARGO_MANIFEST_DIR"),
    )
}
