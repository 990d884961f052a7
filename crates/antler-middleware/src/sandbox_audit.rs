//! SandboxAudit (chain S11, wrap_tool on `bash` only): grade every bash command before it runs,
//! block high-risk ones, warn on medium-risk ones, and write one structured audit record per
//! call.
//!
//! Sits outside ToolErrorHandling, so a blocked command never reaches the tool. The rules are the
//! table in [`antler_sandbox::audit`]. Audit records go to every configured [`AuditSink`]; the
//! default writes them to the log (target `antler::sandbox_audit`), and [`JsonlAuditSink`]
//! appends them to a file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use antler_protocol::{Content, Message, ToolMessage};
use antler_runtime::{HookSet, Middleware, ToolCallRequest, ToolNext, ToolOutcome};
use antler_sandbox::audit::{self, AuditRecord, Verdict};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::hook::ToolResult;

const NAME: &str = "SandboxAuditMiddleware";

/// Where audit records go.
pub trait AuditSink: Send + Sync {
    fn record(&self, record: &AuditRecord);
}

/// Logs each record as JSON (info for pass, warn for warn/block).
#[derive(Debug, Default)]
pub struct TracingAuditSink;

impl AuditSink for TracingAuditSink {
    fn record(&self, r: &AuditRecord) {
        let line = serde_json::to_string(r).unwrap_or_default();
        match r.verdict {
            Verdict::Pass => tracing::info!(target: "antler::sandbox_audit", "{line}"),
            Verdict::Warn | Verdict::Block => {
                tracing::warn!(target: "antler::sandbox_audit", "{line}")
            }
        }
    }
}

/// Appends each record as one JSON line to a file (created with its folder).
pub struct JsonlAuditSink {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl JsonlAuditSink {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonlAuditSink {
            path: path.into(),
            file: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AuditSink for JsonlAuditSink {
    fn record(&self, r: &AuditRecord) {
        let Ok(mut guard) = self.file.lock() else {
            return;
        };
        if guard.is_none() {
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
            {
                Ok(f) => *guard = Some(f),
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot open the sandbox audit log");
                    return;
                }
            }
        }
        // One `write` of the whole line: `writeln!` on a `File` writes the record and its
        // newline separately, and another process appending in between would split the line.
        if let (Some(f), Ok(mut line)) = (guard.as_mut(), serde_json::to_vec(r)) {
            line.push(b'\n');
            let _ = f.write_all(&line);
        }
    }
}

/// Keeps records in memory (tests, embedding).
#[derive(Debug, Default)]
pub struct MemoryAuditSink {
    records: Mutex<Vec<AuditRecord>>,
}

impl MemoryAuditSink {
    pub fn records(&self) -> Vec<AuditRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl AuditSink for MemoryAuditSink {
    fn record(&self, r: &AuditRecord) {
        if let Ok(mut v) = self.records.lock() {
            v.push(r.clone());
        }
    }
}

pub struct SandboxAuditMiddleware {
    sinks: Vec<Arc<dyn AuditSink>>,
}

default_is_new!(SandboxAuditMiddleware);

impl SandboxAuditMiddleware {
    /// Records go to the log.
    pub fn new() -> Self {
        SandboxAuditMiddleware {
            sinks: vec![Arc::new(TracingAuditSink)],
        }
    }

    /// Also send records to `sink`.
    pub fn with_sink(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.sinks.push(sink);
        self
    }

    fn write(
        &self,
        thread_id: &str,
        command: &str,
        verdict: Verdict,
        rule: Option<&str>,
        reason: Option<&str>,
        truncate: bool,
    ) {
        let record = AuditRecord {
            timestamp: antler_protocol::checkpoint::rfc3339_micros(chrono::Utc::now(), false),
            thread_id: if thread_id.is_empty() {
                "unknown".to_owned()
            } else {
                thread_id.to_owned()
            },
            command: audit::audited_command(command, truncate),
            verdict,
            rule: rule.map(str::to_owned),
            reason: reason.map(str::to_owned),
        };
        for s in &self.sinks {
            s.record(&record);
        }
    }
}

/// The message a blocked command gets instead of running.
pub fn blocked_message(reason: &str) -> String {
    format!("Command blocked: {reason}. Please use a safer alternative approach.")
}

/// The text appended to a medium-risk command's result.
pub fn warning_suffix(command: &str) -> String {
    format!("\n\n⚠️ Warning: `{command}` is a medium-risk command that may modify the runtime environment.")
}

fn append_warning(m: &mut ToolMessage, warning: &str) {
    match &mut m.content {
        Content::Text(s) => s.push_str(warning),
        Content::Blocks(b) => b.push(json!({"type": "text", "text": warning})),
    }
}

#[async_trait]
impl Middleware for SandboxAuditMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        if req.call.name != "bash" {
            return next.run(req).await;
        }
        let thread_id = req.run.thread_id.clone();
        let raw = req
            .call
            .args
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let blocked = |reason: &str| {
            let id = crate::hook::answer_id(&req.call, "missing_id");
            let mut m = ToolMessage::error(id, blocked_message(reason)).with_name("bash");
            m.id = Some(uuid::Uuid::new_v4().to_string());
            Ok(ToolOutcome::Message(m))
        };
        let command = match audit::validate_input(raw.as_deref()) {
            Ok(c) => c.to_owned(),
            Err(reason) => {
                self.write(
                    &thread_id,
                    raw.as_deref().unwrap_or(""),
                    Verdict::Block,
                    None,
                    Some(reason),
                    true,
                );
                return blocked(reason);
            }
        };
        let c = audit::classify(&command);
        self.write(&thread_id, &command, c.verdict, c.rule, None, false);
        match c.verdict {
            Verdict::Block => blocked("security violation detected"),
            Verdict::Pass => next.run(req).await,
            Verdict::Warn => {
                let warning = warning_suffix(&command);
                let call_id = req.call.id_str().to_owned();
                Ok(match next.run(req).await? {
                    ToolOutcome::Message(mut m) => {
                        append_warning(&mut m, &warning);
                        ToolOutcome::Message(m)
                    }
                    ToolOutcome::Command(mut cmd) => {
                        for msg in cmd.update.messages.iter_mut().flatten() {
                            if let Message::Tool(t) = msg {
                                if t.tool_call_id == call_id {
                                    append_warning(t, &warning);
                                }
                            }
                        }
                        ToolOutcome::Command(cmd)
                    }
                })
            }
        }
    }
}
