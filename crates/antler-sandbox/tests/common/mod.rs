//! Shared helpers for the sandbox integration tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use antler_sandbox::{
    CommandOutput, CommandRequest, Confine, ConfinementStatus, LocalSandboxProvider, Sandbox,
    SandboxError, SandboxProvider, SandboxSettings,
};

/// A data home outside `/tmp` (a confined command may write `/tmp`, so "outside" checks need
/// a place that is not).
pub fn home() -> tempfile::TempDir {
    tempfile::tempdir_in(scratch_base()).unwrap()
}

/// The sandbox of `thread`, acquired from `p`.
pub fn sandbox(p: &LocalSandboxProvider, thread: &str) -> Arc<dyn Sandbox> {
    let id = p.acquire(Some(thread), None).unwrap();
    p.get(&id).unwrap()
}

/// `cmd` run in `sb` with the request's defaults.
pub async fn exec(sb: &Arc<dyn Sandbox>, cmd: &str) -> Result<CommandOutput, SandboxError> {
    sb.execute_command(CommandRequest {
        command: cmd.into(),
        ..Default::default()
    })
    .await
}

/// The output of `cmd` run in `sb`.
pub async fn run(sb: &Arc<dyn Sandbox>, cmd: &str) -> String {
    exec(sb, cmd).await.unwrap().text
}

/// Run `cmd` collecting its streamed output lines: (the result's text, the lines).
pub async fn run_streaming(sb: &Arc<dyn Sandbox>, cmd: &str) -> (String, Vec<String>) {
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let out = sb
        .execute_command(CommandRequest {
            command: cmd.into(),
            lines: Some(antler_sandbox::OutputLines::new(move |l| {
                sink.lock().unwrap().push(l.to_owned())
            })),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = lines.lock().unwrap().clone();
    (out.text, got)
}

pub fn unconfined() -> ConfinementStatus {
    ConfinementStatus {
        mode: Confine::Off,
        active: false,
        reason: "off".into(),
    }
}

pub fn provider(home: &Path, settings: SandboxSettings) -> LocalSandboxProvider {
    LocalSandboxProvider::with_status(home, settings, unconfined())
}

pub fn quick() -> SandboxSettings {
    SandboxSettings {
        bash_command_timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

/// [`quick`] settings changed by `tweak`.
pub fn quick_with(tweak: impl FnOnce(&mut SandboxSettings)) -> SandboxSettings {
    let mut settings = quick();
    tweak(&mut settings);
    settings
}

/// `Some(reason)` when Landlock cannot be used here; the caller prints it and skips.
pub fn landlock_missing() -> Option<String> {
    antler_sandbox::confine::landlock_support().err()
}

/// Whether `pid` dies within two seconds (SIGKILL lands asynchronously).
pub fn exits_soon(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !process_gone(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Whether `pid` is gone (no `/proc` entry, or a zombie waiting for a reaper).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// A scratch base outside `/tmp`: confined commands may write `/tmp`, so "cannot write outside"
/// checks need a place that is not under it. Prefers cargo's per-target temp dir, else
/// `/var/tmp`, else the crate folder's `target/`.
fn scratch_base() -> PathBuf {
    let under_tmp = |p: &std::path::Path| {
        std::fs::canonicalize(p)
            .map(|c| c.starts_with("/tmp") || c.starts_with("/dev/shm"))
            .unwrap_or(true)
    };
    let candidates = [
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        PathBuf::from("/var/tmp/antler-tests"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-scratch"),
    ];
    for c in candidates {
        if std::fs::create_dir_all(&c).is_ok() && !under_tmp(&c) {
            return c;
        }
    }
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}
