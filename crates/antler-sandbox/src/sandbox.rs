//! The two traits every sandbox backend implements (spec 50 §2): a [`Sandbox`] is one execution
//! environment addressed with virtual paths; a [`SandboxProvider`] hands them out per thread.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::confine::ConfinementStatus;
use crate::error::SandboxError;
use crate::paths::ThreadPaths;

/// One command to run.
#[derive(Clone, Debug, Default)]
pub struct CommandRequest {
    pub command: String,
    /// Extra variables for this call only (names must match `^[A-Za-z_][A-Za-z0-9_]*$`).
    pub env: Vec<(String, String)>,
    /// Defaults to the provider's `bash_command_timeout`.
    pub timeout: Option<Duration>,
    /// Receives the output line by line while the command runs (progress reporting). The
    /// result is assembled exactly as without it.
    pub lines: Option<OutputLines>,
}

/// A callback for a running command's output lines (stdout and stderr as they arrive, host
/// paths already masked, at most [`OutputLines::MAX_LINE`] bytes each, without the newline).
#[derive(Clone)]
pub struct OutputLines(Arc<dyn Fn(&str) + Send + Sync>);

impl OutputLines {
    /// Longer lines are delivered in pieces of this size.
    pub const MAX_LINE: usize = 4096;

    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        OutputLines(Arc::new(f))
    }

    pub fn line(&self, line: &str) {
        (self.0)(line)
    }
}

impl std::fmt::Debug for OutputLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputLines(..)")
    }
}

/// What a command produced, already assembled into DeerFlow's text shape with host paths
/// mapped back to virtual ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    /// stdout, `Std Error:` section, then the timeout notice or `Exit Code: N`, or `(no output)`.
    pub text: String,
    pub exit_code: i32,
    pub timed_out: bool,
    /// The timeout that applied.
    pub timeout: Duration,
}

/// A `grep` hit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrepMatch {
    /// Virtual path of the file.
    pub path: String,
    pub line_number: u64,
    /// The line without its newline, cut to 200 chars.
    pub line: String,
}

/// A `grep` request.
#[derive(Clone, Debug)]
pub struct GrepQuery {
    pub pattern: String,
    /// Glob on the path relative to the root.
    pub glob: Option<String>,
    pub literal: bool,
    pub case_sensitive: bool,
    pub max_results: usize,
}

/// One execution environment. Paths are virtual (`/mnt/user-data/…`); results never contain
/// host paths. File operations are blocking (call them off the async executor).
#[async_trait]
pub trait Sandbox: Send + Sync {
    fn id(&self) -> &str;

    /// Run a shell command (spec 50 §3.4).
    async fn execute_command(&self, req: CommandRequest) -> Result<CommandOutput, SandboxError>;

    /// UTF-8 text, optionally lines `start_line..=end_line` (1-indexed, inclusive).
    fn read_file(
        &self,
        path: &str,
        start_line: Option<u64>,
        end_line: Option<u64>,
    ) -> Result<String, SandboxError>;

    /// Raw bytes (only under `/mnt/user-data`, ≤ 100 MiB).
    fn download_file(&self, path: &str) -> Result<Vec<u8>, SandboxError>;

    /// Virtual paths up to `max_depth` levels (1 = children only), directories suffixed `/`,
    /// sorted.
    fn list_dir(&self, path: &str, max_depth: usize) -> Result<Vec<String>, SandboxError>;

    /// Create parent folders, then overwrite or append.
    fn write_file(&self, path: &str, content: &str, append: bool) -> Result<(), SandboxError>;

    /// Paths under `path` matching `pattern`; `true` when more than `max_results` matched.
    fn glob(
        &self,
        path: &str,
        pattern: &str,
        include_dirs: bool,
        max_results: usize,
    ) -> Result<(Vec<String>, bool), SandboxError>;

    /// Matching lines under `path` (a file or a directory); `true` when truncated.
    fn grep(&self, path: &str, query: &GrepQuery) -> Result<(Vec<GrepMatch>, bool), SandboxError>;

    /// Binary write (upload sync).
    fn update_file(&self, path: &str, bytes: &[u8]) -> Result<(), SandboxError>;

    /// Host → virtual masking of arbitrary text (identity for sandboxes without host paths).
    fn mask(&self, text: &str) -> String {
        text.to_owned()
    }

    /// The host folders of the thread this sandbox serves (local sandboxes; `None` elsewhere).
    /// Whatever decides where a thread's files are uses these, never `thread_data` from state:
    /// the sandbox was acquired for the run's (user, thread), state is only a record.
    fn thread_paths(&self) -> Option<&ThreadPaths> {
        None
    }
}

/// Hands out sandboxes per (user, thread); one process-wide instance.
pub trait SandboxProvider: Send + Sync {
    /// Idempotent per (user, thread): the same id for the same pair. May create resources.
    fn acquire(
        &self,
        thread_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<String, SandboxError>;

    /// Cheap lookup, no blocking I/O; unknown ids give `None`.
    fn get(&self, id: &str) -> Option<Arc<dyn Sandbox>>;

    /// End of a run. Local: no-op (sandboxes stay warm across turns).
    fn release(&self, id: &str);

    /// Drop every cached sandbox.
    fn reset(&self);

    /// Release everything (process exit).
    fn shutdown(&self) {
        self.reset();
    }

    /// The sandbox sees the host thread folders directly (uploads need no copying).
    fn uses_thread_data_mounts(&self) -> bool {
        false
    }

    /// Sandbox ids of this provider run on the host (enables the tool-layer path gate).
    fn is_local(&self) -> bool {
        false
    }

    /// Whether bash runs confined.
    fn confinement(&self) -> ConfinementStatus;
}

/// DeerFlow's "is local sandbox" test on an id: `local` or `local:…`.
pub fn is_local_sandbox_id(id: &str) -> bool {
    id == "local" || id.starts_with("local:")
}
