//! What the sandbox needs from `config.yaml`'s `sandbox:` section (spec 60 §13), with DeerFlow's
//! defaults. `antler-agent` maps the parsed config onto [`SandboxSettings`]; this crate never reads
//! config files itself.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

// `sandbox.confine` and `sandbox.network` are the config's own enums, so the mapping from
// `config.yaml` is a copy and the two cannot drift.
pub use antler_config::{Confine, NetworkPolicy as Network};

/// `sandbox.limits` (antler extension): resource caps on what one thread's bash may use. `None`
/// means no cap. Memory and processes are enforced by a cgroup for the thread's sandbox when
/// one can be created, else by rlimits per process; file size is always an rlimit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes of memory.
    pub memory: Option<u64>,
    /// Processes (and threads) at once.
    pub processes: Option<u64>,
    /// Largest file a command may write, in bytes.
    pub file_size: Option<u64>,
}

impl Limits {
    /// antler's defaults: a process cap against fork storms; memory and file size uncapped.
    pub const DEFAULT_PROCESSES: u64 = 1024;
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

    /// Find a helper: `$ANTLER_SANDBOX_HELPER` (a path to `antler` or `antler-sandbox-helper`),
    /// this process when it is the `antler` binary, then an `antler-sandbox-helper` or `antler`
    /// binary beside this executable or one folder up (where cargo puts binaries relative to
    /// test executables in `deps/`). The first of [`HelperCommand::candidates`].
    pub fn locate() -> Option<HelperCommand> {
        Self::candidates().into_iter().next()
    }

    /// The helpers to try, best first. For the `antler` binary that is the small
    /// `antler-sandbox-helper` installed beside it (each warden execs the helper twice, and
    /// the 1.5 MB helper starts in about half the time of the whole `antler`), then `antler`
    /// itself — used when no helper is installed, or when the one beside it was built from
    /// other sources and refuses to serve.
    pub fn candidates() -> Vec<HelperCommand> {
        fn for_path(p: PathBuf) -> Option<HelperCommand> {
            if !p.is_file() {
                return None;
            }
            let is_antler = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "antler" || n == "antler.exe");
            Some(HelperCommand {
                args: if is_antler {
                    vec![OsString::from("sandbox-exec")]
                } else {
                    Vec::new()
                },
                exe: p,
            })
        }
        if let Some(p) = std::env::var_os("ANTLER_SANDBOX_HELPER") {
            return for_path(PathBuf::from(p)).into_iter().collect();
        }
        let Ok(exe) = std::env::current_exe() else {
            return Vec::new();
        };
        if exe.file_stem().is_some_and(|n| n == "antler") {
            let sibling = exe
                .parent()
                .and_then(|d| for_path(d.join("antler-sandbox-helper")));
            return sibling.into_iter().chain(for_path(exe)).collect();
        }
        let Some(dir) = exe.parent() else {
            return Vec::new();
        };
        let dirs = [Some(dir), dir.parent()];
        for name in ["antler-sandbox-helper", "antler"] {
            for d in dirs.iter().flatten() {
                if let Some(h) = for_path(d.join(name)) {
                    return vec![h];
                }
            }
        }
        Vec::new()
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
    /// The sandbox helper program (`antler sandbox-exec`, or the `antler-sandbox-helper`
    /// binary): parent of every confined command (see [`crate::warden`]). `None` looks it up
    /// with [`HelperCommand::candidates`]; when none is found, bash is confined in-process with
    /// Landlock only (weaker: see [`crate::confine`]), and `confine: required` refuses.
    pub helper: Option<HelperCommand>,
    /// Whether to look for a helper when `helper` is `None` (off: in-process Landlock only —
    /// for embedding where no helper binary ships, and to test that fallback).
    pub helper_search: bool,
    /// `sandbox.network` (antler).
    pub network: Network,
    /// `sandbox.limits` (antler).
    pub limits: Limits,
    /// Host paths confined bash may not read, besides other threads' folders: the data home
    /// (database, other threads), config files holding keys. Its own thread folders stay
    /// readable and writable.
    pub deny_read: Vec<PathBuf>,
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
            helper_search: true,
            network: Network::Allow,
            limits: Limits {
                processes: Some(Limits::DEFAULT_PROCESSES),
                ..Limits::default()
            },
            deny_read: Vec::new(),
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
