//! antler's side of the warden: start it, send exec requests, route replies back to callers.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{oneshot, OwnedMutexGuard};

use super::protocol::{Ready, Reply, Request};
use super::{Launcher, Policy};
use crate::error::SandboxError;
use crate::exec::{ExecResult, ExecSpec};
use crate::sandbox::OutputLines;

/// How long the helper may take to report ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long past a call's own timeout antler waits for the warden's answer.
const ANSWER_SLACK: Duration = Duration::from_secs(30);
/// Lines of the helper's stderr kept for error messages.
const STDERR_TAIL: usize = 20;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;
type BaseEnv = Arc<[(OsString, OsString)]>;
/// Line sinks of running calls that stream their output.
type Streams = Arc<Mutex<HashMap<u64, OutputLines>>>;

/// A running warden (one per sandbox). Dropping it ends the helper and everything it runs.
pub struct Warden {
    /// The warden's stdin: callers write their request lines themselves.
    stdin: Stdin,
    pending: Pending,
    streams: Streams,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The base environment last sent ([`Request::BaseEnv`]); only changed while the stdin
    /// lock is held, so a request always follows the base it was built on.
    base_env: Mutex<Option<BaseEnv>>,
    ready: Ready,
    // Kills stage 1 (and with it the whole sandbox) when the warden is dropped.
    _kill: KillStage1,
}

/// Stage 1's pidfd: SIGKILL on drop. Stage 2 dies with it (parent-death signal), and with
/// stage 2, PID 1 of the sandbox, every process in it. A pidfd never names a recycled pid.
struct KillStage1(Option<std::os::fd::OwnedFd>);

impl Drop for KillStage1 {
    fn drop(&mut self) {
        if let Some(fd) = &self.0 {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
    }
}

/// The helper's own environment: nothing secret, nothing from antler's environment beyond
/// the locale and the search path (commands get their environment per request).
pub(super) fn helper_env() -> Vec<(OsString, OsString)> {
    ["PATH", "LANG", "LC_ALL"]
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
        .collect()
}

fn tail(stderr: &Mutex<VecDeque<String>>) -> String {
    stderr
        .lock()
        .map(|t| t.iter().cloned().collect::<Vec<_>>().join("; "))
        .unwrap_or_default()
}

impl Warden {
    /// Start a warden for `policy` through the provider's launcher and wait until it is ready.
    pub(crate) async fn start(
        launcher: &Launcher,
        policy: &Policy,
    ) -> Result<Warden, SandboxError> {
        let runtime = |m: String| SandboxError::Runtime(m);
        let policy_json = serde_json::to_string(policy)
            .map_err(|e| runtime(format!("cannot encode the sandbox policy: {e}")))?;
        let started = launcher.start(&policy_json).await.map_err(runtime)?;
        let no_pipe = |e: std::io::Error| {
            runtime(format!(
                "the sandbox helper's pipes are not usable ({}): {e}",
                launcher.helper().exe.display()
            ))
        };
        let stdin = pipe::Sender::from_owned_fd(started.stdin).map_err(no_pipe)?;
        let stdout = pipe::Receiver::from_owned_fd(started.stdout).map_err(no_pipe)?;
        let stderr = pipe::Receiver::from_owned_fd(started.stderr).map_err(no_pipe)?;
        let pidfd = started.pidfd;
        let tail_buf: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let stderr_done = {
            let tail_buf = tail_buf.clone();
            tokio::spawn(async move {
                // Short, rare diagnostics: a small buffer (one per sandbox, thousands at once).
                let mut lines = BufReader::with_capacity(256, stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(target: "antler_sandbox::warden", "{line}");
                    if let Ok(mut t) = tail_buf.lock() {
                        if t.len() == STDERR_TAIL {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }
            })
        };
        let kill = KillStage1(pidfd);
        // Replies are short JSON lines (a command's capture at most); a 2 KiB buffer only costs
        // a few more reads for a long one, and one per sandbox adds up at thousands.
        let mut lines = BufReader::with_capacity(2048, stdout).lines();
        let first = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
        let ready = match first {
            Ok(Ok(Some(line))) => match serde_json::from_str::<Reply>(&line) {
                Ok(Reply::Ready(r)) => r,
                Ok(Reply::Fatal { message }) => {
                    return Err(SandboxError::ConfinementRequired(message))
                }
                _ => return Err(runtime(format!("the sandbox helper said: {line}"))),
            },
            Ok(_) => {
                // Every stage has ended (stdout closed): let the stderr reader catch up on
                // the reason.
                let _ = tokio::time::timeout(Duration::from_secs(2), stderr_done).await;
                return Err(runtime(format!(
                    "the sandbox helper exited during setup: {}",
                    tail(&tail_buf)
                )));
            }
            Err(_) => return Err(runtime("the sandbox helper did not start in time".into())),
        };

        let pending: Pending = Arc::default();
        let streams: Streams = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        {
            let (pending, streams, alive) = (pending.clone(), streams.clone(), alive.clone());
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let (id, reply) = match serde_json::from_str::<Reply>(&line) {
                        Ok(Reply::Output { id, line }) => {
                            let sink = streams.lock().ok().and_then(|s| s.get(&id).cloned());
                            if let Some(sink) = sink {
                                sink.line(&line);
                            }
                            continue;
                        }
                        Ok(r @ (Reply::Exit { id, .. } | Reply::Failed { id, .. })) => {
                            if let Ok(mut s) = streams.lock() {
                                s.remove(&id);
                            }
                            (id, r)
                        }
                        Ok(_) => continue,
                        Err(e) => {
                            tracing::warn!(error = %e, "bad frame from the sandbox helper");
                            continue;
                        }
                    };
                    let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(w) = waiter {
                        let _ = w.send(reply);
                    }
                }
                alive.store(false, Ordering::SeqCst);
                // Waiters see their sender dropped.
                if let Ok(mut p) = pending.lock() {
                    p.clear();
                }
            });
        }
        let stdin = Stdin {
            pipe: Arc::new(tokio::sync::Mutex::new(stdin)),
            alive: alive.clone(),
        };
        for m in &ready.guarantees.missing {
            tracing::warn!(target: "antler_sandbox::warden", "bash confinement is weaker than it could be: {m}");
        }
        Ok(Warden {
            stdin,
            pending,
            streams,
            next_id: AtomicU64::new(1),
            alive,
            stderr: tail_buf,
            base_env: Mutex::new(None),
            ready,
            _kill: kill,
        })
    }

    /// What this warden guarantees.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    /// Whether the helper is still there to take requests.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Run `spec` in the sandbox (its `confinement` is ignored: the warden is the confinement).
    pub async fn exec(&self, spec: &ExecSpec) -> Result<ExecResult, SandboxError> {
        let gone = || {
            let why = tail(&self.stderr);
            SandboxError::Runtime(format!(
                "the sandbox ended during the command{}: its processes are gone and the next command starts a fresh one (a command that kills every process, such as `kill -9 -1`, ends the sandbox too)",
                if why.is_empty() { String::new() } else { format!(" ({why})") }
            ))
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (otx, orx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, otx);
        }
        if let Some(sink) = &spec.lines {
            if let Ok(mut s) = self.streams.lock() {
                s.insert(id, sink.clone());
            }
        }
        let lossy = |vars: &[(OsString, OsString)]| -> Vec<(String, String)> {
            vars.iter()
                .map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                })
                .collect()
        };
        let req = Request::Exec {
            id,
            program: spec.program.clone(),
            args: spec
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            env: lossy(&spec.env.extra),
            cwd: spec.cwd.clone(),
            timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
            capture_limit: spec.capture_limit,
            stream: spec.lines.is_some(),
        };
        // A call dropped before its request is written only forgets its id; after, it also
        // kills its process group in the warden.
        let mut guard = KillOnDrop {
            id,
            stdin: self.stdin.clone(),
            pending: self.pending.clone(),
            streams: self.streams.clone(),
            sent: false,
            armed: true,
        };
        // Waiting for the stdin (another caller's long request still being written to a
        // warden that does not read) counts against the call's own deadline.
        let deadline = tokio::time::Instant::now() + spec.timeout + ANSWER_SLACK;
        let late = || SandboxError::Runtime("the sandbox helper did not answer in time".into());
        {
            // The stdin lock orders the base environment before the request built on it.
            let pipe = tokio::time::timeout_at(deadline, self.stdin.lock())
                .await
                .map_err(|_| late())?;
            let mut lines = Vec::new();
            let mut sent = self.base_env.lock().map_err(|_| gone())?;
            if !sent
                .as_ref()
                .is_some_and(|b| Arc::ptr_eq(b, &spec.env.base))
            {
                let base = Request::BaseEnv {
                    env: lossy(&spec.env.base),
                };
                encode(&mut lines, &base);
                *sent = Some(spec.env.base.clone());
            }
            drop(sent);
            encode(&mut lines, &req);
            if !self.stdin.write(pipe, lines) {
                return Err(gone());
            }
            guard.sent = true;
        }
        let reply = tokio::time::timeout_at(deadline, orx).await;
        guard.armed = reply.is_err();
        drop(guard);
        if let Ok(mut s) = self.streams.lock() {
            s.remove(&id);
        }
        match reply {
            Ok(Ok(Reply::Exit {
                stdout,
                stderr,
                exit_code,
                timed_out,
                ..
            })) => Ok(ExecResult {
                stdout,
                stderr,
                exit_code,
                timed_out,
                pid: 0,
            }),
            Ok(Ok(Reply::Failed { message, .. })) => Err(SandboxError::Runtime(format!(
                "Failed to start the command: {message}"
            ))),
            Ok(Ok(_)) | Ok(Err(_)) => Err(gone()),
            Err(_) => Err(late()),
        }
    }
}

/// Append `req` to `out` as one line (a request that does not encode — none does — is left out
/// with a warning).
fn encode(out: &mut Vec<u8>, req: &Request) {
    let at = out.len();
    match serde_json::to_writer(&mut *out, req) {
        Ok(()) => out.push(b'\n'),
        Err(e) => {
            out.truncate(at);
            tracing::warn!(error = %e, "a sandbox request does not encode");
        }
    }
}

/// The warden's stdin, shared by its callers. A caller writes its lines on its own task
/// (no hand-off to a writer task: one wake-up fewer per command); what a full pipe does not
/// take at once is finished by a detached task that keeps the lock, so a caller dropped
/// mid-request can never leave half a line for the next one to continue.
#[derive(Clone)]
struct Stdin {
    pipe: Arc<tokio::sync::Mutex<pipe::Sender>>,
    alive: Arc<AtomicBool>,
}

impl Stdin {
    async fn lock(&self) -> OwnedMutexGuard<pipe::Sender> {
        self.pipe.clone().lock_owned().await
    }

    /// Write `lines` (whole lines) under `pipe`'s lock; false once the warden is gone.
    fn write(&self, pipe: OwnedMutexGuard<pipe::Sender>, lines: Vec<u8>) -> bool {
        let mut at = 0;
        while at < lines.len() {
            match pipe.try_write(&lines[at..]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.alive.store(false, Ordering::SeqCst);
                    return false;
                }
            }
        }
        if at == lines.len() {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.alive.store(false, Ordering::SeqCst);
            return false;
        };
        let alive = self.alive.clone();
        runtime.spawn(async move {
            let mut pipe = pipe;
            if pipe.write_all(&lines[at..]).await.is_err() {
                alive.store(false, Ordering::SeqCst);
            }
        });
        true
    }

    /// Send `req` from where nothing can wait (a `Drop`): at once when the pipe is free, else
    /// from a task that waits for it.
    fn send_detached(&self, req: &Request) {
        let mut line = Vec::new();
        encode(&mut line, req);
        if let Ok(pipe) = self.pipe.clone().try_lock_owned() {
            self.write(pipe, line);
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let this = self.clone();
            runtime.spawn(async move {
                let pipe = this.lock().await;
                this.write(pipe, line);
            });
        }
    }
}

/// A call's cleanup if it ends early (dropped, timed out, or failed before its request went
/// out): forget its reply slot and output sink, and once the request was sent, kill it.
struct KillOnDrop {
    id: u64,
    stdin: Stdin,
    pending: Pending,
    streams: Streams,
    sent: bool,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            if self.sent {
                self.stdin.send_detached(&Request::Kill { id: self.id });
            }
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&self.id);
            }
            if let Ok(mut s) = self.streams.lock() {
                s.remove(&self.id);
            }
        }
    }
}
