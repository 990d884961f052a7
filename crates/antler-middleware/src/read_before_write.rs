//! ReadBeforeWrite (chain S12, wrap_tool): overwriting an existing file requires that the model
//! read the file's *current* version earlier in the thread (spec 30 §ReadBeforeWrite).
//!
//! The gate keeps no state of its own: a successful `read_file` result is stamped with
//! `deerflow_read_mark = {path, hash}` (sha256 of the whole file, whatever range was shown), and
//! a `write_file`/`str_replace` passes only when the newest mark for the path matches the file
//! as it is now. Writes never refresh marks, so every modification needs a fresh read, and a
//! read that summarization dropped takes its mark with it.
//!
//! Gate check + write (and read + stamping) run under one async mutex per (thread, normalized
//! path), shared by every instance in the process (subagents build their own chains over the
//! same thread): two writes of one model turn cannot both pass on one stale mark.
//!
//! Fail-open: when the gate cannot inspect the file (any failure other than "not found", or a
//! sandbox that reports failures as `Error:` text) the tool runs and reports its own error.

use std::sync::{Arc, LazyLock};

use antler_protocol::markers::READ_MARK;
use antler_protocol::tool_meta;
use antler_protocol::{Message, ThreadState, ToolMessage, ToolStatus};
use antler_runtime::{
    keys, FileLocks, HookSet, Middleware, RunContext, ToolCallRequest, ToolNext, ToolOutcome,
};
use antler_sandbox::{SandboxError, SandboxProvider};
use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::hook::ToolResult;

pub use antler_config::ReadBeforeWriteConfig;

/// Tools whose results are marked.
const READ_TOOLS: &[&str] = &["read_file"];
/// Tools gated on a current mark.
const GATED_TOOLS: &[&str] = &["write_file", "str_replace"];
/// Sandboxes that report read failures as text start them with this.
const ERROR_PREFIX: &str = "Error:";

/// Why the gate could not read a file.
#[derive(Debug)]
pub enum ReadFailure {
    /// The file does not exist (a write creates it).
    NotFound,
    /// Anything else (the gate fails open).
    Other(String),
}

/// Reads a file's full current content the way `read_file` resolves paths. Blocking; called
/// off the executor.
pub trait ContentReader: Send + Sync {
    fn read(&self, run: &RunContext, path: &str) -> Result<String, ReadFailure>;
}

/// Reads through the run's sandbox (the one its (user, thread) maps to, as the file tools do).
pub struct SandboxReader {
    provider: Arc<dyn SandboxProvider>,
}

impl SandboxReader {
    pub fn new(provider: Arc<dyn SandboxProvider>) -> Self {
        SandboxReader { provider }
    }
}

impl ContentReader for SandboxReader {
    fn read(&self, run: &RunContext, path: &str) -> Result<String, ReadFailure> {
        let sandbox = match run
            .get(&keys::SANDBOX_ID)
            .and_then(|id| self.provider.get(&id))
        {
            Some(sb) => sb,
            None => {
                let id = self
                    .provider
                    .acquire(Some(&run.thread_id), run.user_id.as_deref())
                    .map_err(|e| ReadFailure::Other(e.to_string()))?;
                self.provider
                    .get(&id)
                    .ok_or_else(|| ReadFailure::Other(format!("sandbox {id} not found")))?
            }
        };
        sandbox.read_file(path, None, None).map_err(|e| match e {
            SandboxError::NotFound(_) => ReadFailure::NotFound,
            other => ReadFailure::Other(other.to_string()),
        })
    }
}

/// Process-wide gate locks, per (scope, path); entries die with their last holder.
static GATE_LOCKS: LazyLock<FileLocks> = LazyLock::new(FileLocks::default);

fn gate_lock(scope: &str, path: &str) -> Arc<tokio::sync::Mutex<()>> {
    GATE_LOCKS.lock_for(scope, path)
}

pub use crate::posix::normalize_path;

/// sha256 hex of the UTF-8 text.
pub fn content_hash(content: &str) -> String {
    let digest = Sha256::digest(content.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the model reads when a write is refused.
pub fn block_message(tool: &str, path: &str) -> String {
    format!(
        "Error: {tool} blocked — {path} already exists and you have not read its current version. \
Every write invalidates the reads before it, so read again before each change. Call read_file \
on it (reading just the relevant lines is enough, e.g. the last ~30 lines before an append), \
check what is there already, then retry."
    )
}

/// The hash of the newest mark for `path` in the thread's messages.
fn latest_mark(state: &ThreadState, path: &str) -> Option<String> {
    state.messages.iter().rev().find_map(|m| {
        let Message::Tool(t) = m else {
            return None;
        };
        let mark = t.additional_kwargs.get(READ_MARK)?;
        if mark.get("path").and_then(Value::as_str) != Some(path) {
            return None;
        }
        // The newest mark for the path decides, even when malformed.
        Some(
            mark.get("hash")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        )
    })
}

pub struct ReadBeforeWriteMiddleware {
    reader: Arc<dyn ContentReader>,
}

impl ReadBeforeWriteMiddleware {
    pub fn new(reader: Arc<dyn ContentReader>) -> Self {
        ReadBeforeWriteMiddleware { reader }
    }

    pub fn for_sandbox(provider: Arc<dyn SandboxProvider>) -> Self {
        Self::new(Arc::new(SandboxReader::new(provider)))
    }

    async fn read(&self, run: &Arc<RunContext>, path: &str) -> Result<String, ReadFailure> {
        let (reader, run, path) = (self.reader.clone(), run.clone(), path.to_owned());
        tokio::task::spawn_blocking(move || reader.read(&run, &path))
            .await
            .unwrap_or_else(|e| Err(ReadFailure::Other(format!("reader task failed: {e}"))))
    }

    /// The refusal for a gated write, or `None` to let it run.
    async fn check(&self, req: &ToolCallRequest, path: &str, norm: &str) -> Option<ToolMessage> {
        let current = match self.read(&req.run, path).await {
            Ok(c) => c,
            Err(ReadFailure::NotFound) => return None,
            Err(ReadFailure::Other(e)) => {
                tracing::warn!(path, error = %e, "read-before-write gate cannot inspect the file; allowing the write");
                return None;
            }
        };
        if current.starts_with(ERROR_PREFIX) {
            return None;
        }
        if latest_mark(&req.state, norm).as_deref() == Some(content_hash(&current).as_str()) {
            return None;
        }
        let name = req.call.name.clone();
        let mut msg = ToolMessage::error(req.call.id_str(), block_message(&name, path))
            .with_name(name.clone());
        msg.id = Some(uuid::Uuid::new_v4().to_string());
        msg.status = ToolStatus::Error;
        // The refusal bypasses ToolErrorHandling (inner), so classify it here for ToolProgress.
        tool_meta::normalize(&mut msg);
        tracing::info!(tool = %name, path, "write refused: current version not read");
        Some(msg)
    }

    async fn mark(&self, req: &ToolCallRequest, path: &str, norm: &str, outcome: &mut ToolOutcome) {
        let msg = match outcome {
            ToolOutcome::Message(m) => Some(m),
            ToolOutcome::Command(c) => c.update.messages.as_mut().and_then(|msgs| {
                msgs.iter_mut().rev().find_map(|m| match m {
                    Message::Tool(t) => Some(t),
                    _ => None,
                })
            }),
        };
        let Some(msg) = msg.filter(|m| m.status != ToolStatus::Error) else {
            return;
        };
        let Ok(content) = self.read(&req.run, path).await else {
            tracing::debug!(path, "read mark skipped: file not readable");
            return;
        };
        if content.starts_with(ERROR_PREFIX) {
            return;
        }
        msg.additional_kwargs.insert(
            READ_MARK.to_owned(),
            json!({"path": norm, "hash": content_hash(&content)}),
        );
    }
}

fn requested_path(req: &ToolCallRequest) -> Option<String> {
    req.call
        .args
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
}

/// Locks are per thread (else per sandbox) so unrelated runs never contend.
fn lock_scope(req: &ToolCallRequest) -> String {
    if !req.run.thread_id.is_empty() {
        return req.run.thread_id.clone();
    }
    req.state
        .sandbox
        .as_ref()
        .and_then(|s| s.sandbox_id.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "global".to_owned())
}

#[async_trait]
impl Middleware for ReadBeforeWriteMiddleware {
    middleware_identity!("ReadBeforeWriteMiddleware", HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let name = req.call.name.as_str();
        let gated = GATED_TOOLS.contains(&name);
        if !gated && !READ_TOOLS.contains(&name) {
            return next.run(req).await;
        }
        let Some(path) = requested_path(&req) else {
            return next.run(req).await;
        };
        let norm = normalize_path(&path);
        let lock = gate_lock(&lock_scope(&req), &norm);
        let _held = lock.lock().await;
        if gated {
            if let Some(refusal) = self.check(&req, &path, &norm).await {
                return Ok(ToolOutcome::Message(refusal));
            }
            return next.run(req).await;
        }
        let req_copy = req.clone();
        let mut outcome = next.run(req).await?;
        self.mark(&req_copy, &path, &norm, &mut outcome).await;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            content_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
