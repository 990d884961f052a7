//! Running one shell command (spec 50 §3.4): own process group, stdin `/dev/null`, scrubbed
//! environment, bounded capture of stdout/stderr, a timeout that kills the whole group, and
//! optional Landlock confinement.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::error::SandboxError;

/// How long to keep draining pipes after the shell exits while background children still hold
/// them; without such children, readers run to EOF (bounded by [`DRAIN_AFTER_KILL`]).
const DRAIN_WITH_BACKGROUND: Duration = Duration::from_millis(200);
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(10);

/// The first usable POSIX shell (`/bin/bash`, `/bin/sh`, `/bin/zsh`, then `sh` on `PATH`).
/// DeerFlow prefers zsh; antler prefers bash, which is what the tool is named after.
pub fn find_shell() -> Option<PathBuf> {
    for s in ["/bin/bash", "/usr/bin/bash", "/bin/sh", "/bin/zsh"] {
        let p = Path::new(s);
        if p.is_file() {
            return Some(p.to_path_buf());
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("sh"))
        .find(|p| p.is_file())
}

/// How to confine one command.
#[derive(Clone, Debug)]
pub enum Confinement {
    /// Run as is.
    None,
    /// Restrict a fresh thread with Landlock and spawn from it (the fallback when no helper
    /// program is available: the command's parent is then antler itself).
    InProcess { rules: crate::confine::RuleSpec },
}

/// A command's environment: its sandbox's base variables (the scrubbed host environment,
/// shared by every command of the sandbox) with the call's own variables on top — a name in
/// `extra` replaces the base one. The base is shared rather than copied per command: a warden
/// receives it once and each command's request carries only `extra`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandEnv {
    pub base: Arc<[(OsString, OsString)]>,
    pub extra: Vec<(OsString, OsString)>,
}

impl CommandEnv {
    pub fn new(base: Arc<[(OsString, OsString)]>) -> Self {
        CommandEnv {
            base,
            extra: Vec::new(),
        }
    }

    /// Set `key` for this command (replacing an earlier call-level value).
    pub fn set(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) {
        let key = key.into();
        self.extra.retain(|(k, _)| *k != key);
        self.extra.push((key, value.into()));
    }

    /// Every variable the command gets: the base ones `extra` does not replace, then `extra`.
    pub fn vars(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.base
            .iter()
            .filter(|(k, _)| !self.extra.iter().any(|(n, _)| n == k))
            .chain(&self.extra)
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }
}

/// One process to run.
#[derive(Clone, Debug)]
pub struct ExecSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: CommandEnv,
    pub cwd: Option<PathBuf>,
    pub timeout: Duration,
    /// Bytes kept per stream.
    pub capture_limit: usize,
    pub confinement: Confinement,
    /// Output lines as they arrive (see [`crate::sandbox::OutputLines`]).
    pub lines: Option<crate::sandbox::OutputLines>,
}

/// What a command produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    /// Exit code; a signal death is `-signal` (as Python reports it).
    pub exit_code: i32,
    pub timed_out: bool,
    /// Process id (= process group id) of the shell.
    pub pid: u32,
}

/// A stream capture that keeps the first `limit` bytes and counts the rest.
#[derive(Debug, Default)]
struct Capture {
    kept: Vec<u8>,
    total: u64,
    limit: usize,
}

impl Capture {
    fn append(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let room = self.limit.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.total > self.kept.len() as u64 {
            s.push_str(&format!(
                "\n... [output truncated after {} of {} bytes; remaining output discarded] ...",
                self.kept.len(),
                self.total
            ));
        }
        s
    }
}

/// Kills the whole process group when dropped while armed (timeouts, cancelled runs).
struct GroupKill {
    pgid: i32,
    armed: bool,
}

impl GroupKill {
    fn kill(&self) {
        #[cfg(unix)]
        {
            use nix::sys::signal::{killpg, Signal};
            use nix::unistd::Pid;
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// Whether any process of group `pgid` is still alive.
pub fn group_alive(pgid: i32) -> bool {
    #[cfg(unix)]
    {
        use nix::sys::signal::killpg;
        use nix::unistd::Pid;
        killpg(Pid::from_raw(pgid), None).is_ok()
    }
    #[cfg(not(unix))]
    {
        let _ = pgid;
        false
    }
}

/// Splits a byte stream into lines for an [`OutputLines`](crate::sandbox::OutputLines).
struct LineSplitter {
    sink: crate::sandbox::OutputLines,
    partial: Vec<u8>,
}

impl LineSplitter {
    fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.push(&chunk[..i]);
            self.flush();
            chunk = &chunk[i + 1..];
        }
        self.push(chunk);
    }

    /// Append `bytes` to the pending line, sending full [`MAX_LINE`] pieces on the way, so a
    /// long line is cut the same whether it arrives in one read or in many.
    ///
    /// [`MAX_LINE`]: crate::sandbox::OutputLines::MAX_LINE
    fn push(&mut self, mut bytes: &[u8]) {
        const MAX: usize = crate::sandbox::OutputLines::MAX_LINE;
        loop {
            let room = MAX - self.partial.len();
            if bytes.len() <= room {
                self.partial.extend_from_slice(bytes);
                return;
            }
            self.partial.extend_from_slice(&bytes[..room]);
            bytes = &bytes[room..];
            self.flush();
        }
    }

    fn flush(&mut self) {
        let bytes = std::mem::take(&mut self.partial);
        let text = String::from_utf8_lossy(&bytes);
        self.sink.line(text.strip_suffix('\r').unwrap_or(&text));
    }
}

fn spawn_reader<R>(
    mut r: R,
    cap: Arc<Mutex<Capture>>,
    lines: Option<crate::sandbox::OutputLines>,
) -> tokio::task::JoinHandle<()>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        // Filled through its spare capacity (`read_buf`): zeroing 64 KiB per stream per command
        // was a measurable part of a short command's cost.
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut split = lines.map(|sink| LineSplitter {
            sink,
            partial: Vec::new(),
        });
        loop {
            buf.clear();
            match r.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut c) = cap.lock() {
                        c.append(&buf[..n]);
                    }
                    if let Some(s) = &mut split {
                        s.feed(&buf[..n]);
                    }
                }
            }
        }
        if let Some(s) = split.as_mut().filter(|s| !s.partial.is_empty()) {
            s.flush();
        }
    })
}

async fn spawn(
    mut cmd: tokio::process::Command,
    confinement: &Confinement,
) -> std::io::Result<tokio::process::Child> {
    match confinement {
        Confinement::None => cmd.spawn(),
        Confinement::InProcess { rules } => {
            // Landlock binds to the calling thread: restrict a fresh thread (never a pooled
            // one) and spawn from it, so only the child inherits the restriction.
            let rules = rules.clone();
            let handle = tokio::runtime::Handle::current();
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name("antler-confined-spawn".into())
                .spawn(move || {
                    let _rt = handle.enter();
                    let res = match crate::confine::restrict_current_thread_with(&rules) {
                        Ok(_) => cmd.spawn(),
                        Err(e) => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, e)),
                    };
                    let _ = tx.send(res);
                })?;
            rx.await.unwrap_or_else(|_| {
                Err(std::io::Error::other(
                    "the confined spawn thread exited early",
                ))
            })
        }
    }
}

/// Run `spec` to completion or timeout.
pub async fn run(spec: ExecSpec) -> Result<ExecResult, SandboxError> {
    run_with(spec, None).await
}

/// The command's process as [`run_with`] waits for it: through tokio, or through a
/// [`Reaper`] (PID 1 of a sandbox, which also reaps orphans).
enum Exit {
    Tokio(tokio::process::Child),
    Reaped(tokio::sync::oneshot::Receiver<i32>),
}

impl Exit {
    /// The exit code (`-signal` for a signal death); `None` if it cannot be known.
    async fn wait(&mut self) -> Option<i32> {
        match self {
            Exit::Tokio(child) => child.wait().await.ok().map(exit_code_of),
            Exit::Reaped(rx) => rx.await.ok(),
        }
    }
}

/// Run `spec` to completion or timeout; with a `reaper`, the process is waited for by it
/// (the caller reaps every child of its process, see [`Reaper`]).
pub(crate) async fn run_with(
    spec: ExecSpec,
    reaper: Option<&Reaper>,
) -> Result<ExecResult, SandboxError> {
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.vars())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let failed =
        |e: std::io::Error| SandboxError::Runtime(format!("Failed to start the command: {e}"));
    let (pid, stdout, stderr, mut exit) = match reaper {
        None => {
            let mut child = spawn(cmd, &spec.confinement).await.map_err(failed)?;
            let pid = child.id().unwrap_or(0);
            let (o, e) = (child.stdout.take(), child.stderr.take());
            (pid, o, e, Exit::Tokio(child))
        }
        Some(reaper) => {
            let (mut child, rx) = reaper.spawn(cmd.as_std_mut()).map_err(failed)?;
            let o = child
                .stdout
                .take()
                .map(tokio::process::ChildStdout::from_std);
            let e = child
                .stderr
                .take()
                .map(tokio::process::ChildStderr::from_std);
            let pid = child.id();
            let (o, e) = match (o.transpose(), e.transpose()) {
                (Ok(o), Ok(e)) => (o, e),
                (Err(err), _) | (_, Err(err)) => {
                    let started = GroupKill {
                        pgid: pid as i32,
                        armed: false,
                    };
                    started.kill();
                    return Err(failed(err));
                }
            };
            (pid, o, e, Exit::Reaped(rx))
        }
    };
    let mut guard = GroupKill {
        pgid: pid as i32,
        armed: pid != 0,
    };
    let out_cap = Arc::new(Mutex::new(Capture {
        limit: spec.capture_limit,
        ..Default::default()
    }));
    let err_cap = Arc::new(Mutex::new(Capture {
        limit: spec.capture_limit,
        ..Default::default()
    }));
    let mut readers = Vec::new();
    if let Some(o) = stdout {
        readers.push(spawn_reader(o, out_cap.clone(), spec.lines.clone()));
    }
    if let Some(e) = stderr {
        readers.push(spawn_reader(e, err_cap.clone(), spec.lines.clone()));
    }

    let (status, timed_out) = match tokio::time::timeout(spec.timeout, exit.wait()).await {
        Ok(status) => (status, false),
        Err(_) => {
            guard.kill();
            (exit.wait().await, true)
        }
    };
    let grace = if timed_out || !group_alive(pid as i32) {
        DRAIN_AFTER_KILL
    } else {
        DRAIN_WITH_BACKGROUND
    };
    // Past this point background children keep running, as in DeerFlow (after a timeout the
    // whole group is already gone); only a cancelled call kills them, through the guard.
    guard.armed = false;
    let drain = futures_join_all(&mut readers);
    let _ = tokio::time::timeout(grace, drain).await;
    for r in &readers {
        r.abort();
    }

    let exit_code = status.unwrap_or(-1);
    let stdout = out_cap.lock().map(|c| c.text()).unwrap_or_default();
    let stderr = err_cap.lock().map(|c| c.text()).unwrap_or_default();
    Ok(ExecResult {
        stdout,
        stderr,
        exit_code,
        timed_out,
        pid,
    })
}

/// Waits for every child of this process: the commands it started and the orphans that the
/// kernel hands to PID 1 of a PID namespace. A command's exit code goes to the call waiting
/// for it; an orphan's is dropped.
///
/// Spawning and reaping take the same lock, so a command that ends at once is never taken
/// for an orphan: its pid is registered before the reaper can look it up.
#[derive(Default)]
pub(crate) struct Reaper {
    waiting: Mutex<std::collections::HashMap<u32, tokio::sync::oneshot::Sender<i32>>>,
}

impl Reaper {
    fn spawn(
        &self,
        cmd: &mut std::process::Command,
    ) -> std::io::Result<(std::process::Child, tokio::sync::oneshot::Receiver<i32>)> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let child = cmd.spawn()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        waiting.insert(child.id(), tx);
        Ok((child, rx))
    }

    /// Reap every child that has ended (call on `SIGCHLD`; signals coalesce, so it loops).
    pub(crate) fn reap(&self) {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let (pid, code) = match waitpid(None::<nix::unistd::Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, code),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, -(sig as i32)),
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => continue,
            };
            if let Some(tx) = u32::try_from(pid.as_raw())
                .ok()
                .and_then(|p| waiting.remove(&p))
            {
                let _ = tx.send(code);
            }
        }
    }
}

async fn futures_join_all(readers: &mut [tokio::task::JoinHandle<()>]) {
    for r in readers.iter_mut() {
        let _ = r.await;
    }
}

fn exit_code_of(s: std::process::ExitStatus) -> i32 {
    if let Some(c) = s.code() {
        return c;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            return -sig;
        }
    }
    -1
}

/// `N seconds` / `1 second` / `1.5 seconds`.
pub fn format_duration(timeout: Duration) -> String {
    let secs = timeout.as_secs_f64();
    let amount = if secs.fract() == 0.0 {
        format!("{}", secs as u64)
    } else {
        let s = format!("{secs:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    let unit = if secs == 1.0 { "second" } else { "seconds" };
    format!("{amount} {unit}")
}

/// What the model is told when a command hits the timeout.
pub fn timeout_notice(timeout: Duration) -> String {
    format!(
        "Command timed out after {} and was terminated. To keep a long-lived process such as a web server running, start it in the background with its output redirected, e.g. `your-command > /mnt/user-data/workspace/server.log 2>&1 &`.",
        format_duration(timeout)
    )
}

/// DeerFlow's output assembly: stdout, then `Std Error:` section, then the timeout notice or
/// `Exit Code: N`; `(no output)` when empty.
pub fn assemble_output(res: &ExecResult, timeout: Duration) -> String {
    let mut out = res.stdout.clone();
    if !res.stderr.is_empty() {
        if out.is_empty() {
            out = res.stderr.clone();
        } else {
            out.push_str("\nStd Error:\n");
            out.push_str(&res.stderr);
        }
    }
    if res.timed_out {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&timeout_notice(timeout));
    } else if res.exit_code != 0 {
        out.push_str(&format!("\nExit Code: {}", res.exit_code));
    }
    if out.is_empty() {
        out = "(no output)".to_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The lines a splitter sends for `reads`, fed one read at a time.
    fn split(reads: &[&[u8]]) -> Vec<String> {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let mut s = LineSplitter {
            sink: crate::sandbox::OutputLines::new(move |l| {
                sink.lock().unwrap().push(l.to_owned())
            }),
            partial: Vec::new(),
        };
        for r in reads {
            s.feed(r);
        }
        if !s.partial.is_empty() {
            s.flush();
        }
        let out = got.lock().unwrap().clone();
        out
    }

    #[test]
    fn long_lines_are_cut_alike_in_one_read_or_many() {
        const MAX: usize = crate::sandbox::OutputLines::MAX_LINE;
        let mut text = vec![b'x'; 2 * MAX + 808];
        text.push(b'\n');
        text.extend_from_slice(b"short\r\n");
        text.extend(std::iter::repeat_n(b'y', MAX));
        text.push(b'\n');
        let lens = |lines: Vec<String>| lines.iter().map(String::len).collect::<Vec<_>>();
        let want = vec![MAX, MAX, 808, 5, MAX];
        assert_eq!(lens(split(&[&text])), want);
        let bytes: Vec<&[u8]> = text.chunks(1000).collect();
        assert_eq!(lens(split(&bytes)), want);
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(lens(split(&bytes)), want);
        assert_eq!(split(&[b"a\nb"]), ["a", "b"]);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_secs(1)), "1 second");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5 seconds");
        assert_eq!(format_duration(Duration::from_secs(600)), "600 seconds");
    }

    #[test]
    fn output_assembly() {
        let mut r = ExecResult {
            stdout: "out".into(),
            ..Default::default()
        };
        assert_eq!(assemble_output(&r, Duration::from_secs(1)), "out");
        r.stderr = "err".into();
        r.exit_code = 3;
        assert_eq!(
            assemble_output(&r, Duration::from_secs(1)),
            "out\nStd Error:\nerr\nExit Code: 3"
        );
        let r = ExecResult::default();
        assert_eq!(assemble_output(&r, Duration::from_secs(1)), "(no output)");
        let r = ExecResult {
            timed_out: true,
            ..Default::default()
        };
        assert!(assemble_output(&r, Duration::from_secs(1))
            .starts_with("Command timed out after 1 second"));
    }

    #[test]
    fn capture_keeps_the_head_and_counts_the_rest() {
        let mut c = Capture {
            limit: 4,
            ..Default::default()
        };
        c.append(b"abcdef");
        c.append(b"gh");
        assert_eq!(
            c.text(),
            "abcd\n... [output truncated after 4 of 8 bytes; remaining output discarded] ..."
        );
    }
}
