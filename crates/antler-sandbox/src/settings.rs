//! What the sandbox needs from `config.yaml`'s `sandbox:` section (spec 60 §13), with DeerFlow's
//! defaults. `antler-agent` maps the parsed config onto [`SandboxSettings`]; this crate never reads
//! config files itself.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `sandbox.confine` (antler extension): Linux Landlock confinement of `bash`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confine {
    /// Confine when the kernel supports Landlock; otherwise run unconfined and say so in the log.
    #[default]
    Auto,
    /// Never confine.
    Off,
    /// Refuse to run `bash` when confinement cannot be enforced.
    Required,
}

/// One `sandbox.mounts` entry: a host directory the agent sees at `container_path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub host_path: PathBuf,
    pub container_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// The program the local sandbox re-invokes to confine a command: `exe args… --write DIR… --
/// SHELL -c CMD`. The `antler` binary passes itself with `["sandbox-exec"]`; the hidden
/// subcommand calls [`crate::sandbox_exec_main`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperCommand {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
}

impl HelperCommand {
    /// `current_exe sandbox-exec` — what the `antler` binary uses.
    pub fn current_exe_subcommand() -> std::io::Result<HelperCommand> {
        Ok(HelperCommand {
            exe: std::env::current_exe()?,
            args: vec![OsString::from("sandbox-exec")],
        })
    }
}

/// Sandbox behaviour knobs (DeerFlow defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxSettings {
    /// `sandbox.allow_host_bash`: offer `bash` on the local provider even when it is not
    /// confined (see [`crate::bash_available`]).
    pub allow_host_bash: bool,
    /// `sandbox.confine` (antler).
    pub confine: Confine,
    /// Middle-truncation cap of bash output in chars; 0 = off.
    pub bash_output_max_chars: usize,
    /// Head-truncation cap of read_file output in chars; 0 = off.
    pub read_file_output_max_chars: usize,
    /// Head-truncation cap of ls output in chars; 0 = off.
    pub ls_output_max_chars: usize,
    /// Per-command timeout of bash.
    pub bash_command_timeout: Duration,
    /// Extra host directories (validated at acquire; invalid entries are skipped with a log).
    pub mounts: Vec<Mount>,
    /// Host directory holding the skills (mounted read-only at `skills_container_path`).
    pub skills_host_path: Option<PathBuf>,
    /// Where skills appear inside the sandbox.
    pub skills_container_path: String,
    /// Confinement launcher. `None` confines in-process: a fresh thread restricts itself with
    /// Landlock and spawns the shell, which inherits the restriction. `Some` re-invokes that
    /// helper program, which restricts itself and execs the shell (DESIGN §5).
    pub helper: Option<HelperCommand>,
    /// Bytes of stdout (and separately stderr) kept per command; the rest is counted and
    /// discarded with a notice.
    pub capture_limit_bytes: usize,
    /// Largest file `read_file` reads whole (a line range streams any size).
    pub read_file_max_bytes: u64,
}

/// DeerFlow's per-stream capture limit (10 MiB).
pub const DEFAULT_CAPTURE_LIMIT_BYTES: usize = 10 * 1024 * 1024;

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            allow_host_bash: false,
            confine: Confine::Auto,
            bash_output_max_chars: 20_000,
            read_file_output_max_chars: 50_000,
            ls_output_max_chars: 20_000,
            bash_command_timeout: Duration::from_secs(600),
            mounts: Vec::new(),
            skills_host_path: None,
            skills_container_path: "/mnt/skills".to_owned(),
            helper: None,
            capture_limit_bytes: DEFAULT_CAPTURE_LIMIT_BYTES,
            read_file_max_bytes: 32 * 1024 * 1024,
        }
    }
}

/// Limits and switches for files attached to a message (`uploads:` in config.yaml, spec 60 §12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadSettings {
    pub max_files: usize,
    pub max_file_size: u64,
    pub max_total_size: u64,
    /// Convert PDF/Office documents to a Markdown companion `{stem}.md`.
    pub auto_convert_documents: bool,
}

impl Default for UploadSettings {
    fn default() -> Self {
        UploadSettings {
            max_files: 10,
            max_file_size: 50 * 1024 * 1024,
            max_total_size: 100 * 1024 * 1024,
            auto_convert_documents: false,
        }
    }
}
