//! The launcher: one small helper process per sandbox provider that starts every warden of it.
//!
//! Starting a process copies the starter's descriptor table and then closes it again on exec,
//! so a warden started by antler itself costs O(open descriptors), and a server with 1,000 live
//! sandboxes holds ~3,000 pipe ends: starting sandbox 1,001 then costs more than the sandbox.
//! The launcher holds a handful of descriptors; antler asks it (over a `SOCK_SEQPACKET` pair,
//! one message per request) to start stage 1 with a policy, and the launcher sends back the
//! pipe ends and a pidfd of stage 1 (`SCM_RIGHTS`), then forgets them.
//!
//! ```text
//! antler ──policy JSON──► launcher ──spawn──► stage 1 (see the module doc of crate::warden)
//!        ◄──{stdin, stdout, stderr, pidfd}──┘
//! ```
//!
//! The launcher only ever starts `--warden POLICY` of its own program (a request that is not a
//! policy is refused), exits when antler's end of the socket closes, and reaps the stage-1
//! processes it started. Wardens do not depend on it once started: their lifetime is still
//! their stdin, which antler alone holds.

use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{
    recv, recvmsg, send, sendmsg, socketpair, sockopt, AddressFamily, RecvAncillaryBuffer,
    RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketFlags, SocketType,
};
use serde::{Deserialize, Serialize};

use super::Policy;
use crate::settings::HelperCommand;

/// The launcher's command-line flag; the next argument is antler's [`BUILD`].
pub(crate) const LAUNCHER: &str = "--warden-launcher";
/// Which sources this program was built from (see `build.rs`). A launcher of other sources
/// (a stale helper binary beside antler) exits with [`OTHER_BUILD`] instead of serving.
pub(crate) const BUILD: &str = env!("ANTLER_SANDBOX_BUILD");
const OTHER_BUILD: i32 = 3;
/// The largest policy accepted (a policy is a few KiB of paths).
const MAX_REQUEST: usize = 1 << 20;
/// Descriptors per reply: stdin, stdout, stderr and, where the kernel has pidfds, stage 1's.
const MAX_FDS: usize = 4;
/// How long antler waits for the launcher to answer one request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// How often an idle launcher reaps stage-1 processes that have ended.
const REAP_EVERY: Timespec = Timespec {
    tv_sec: 1,
    tv_nsec: 0,
};

/// The launcher's answer to one request; the descriptors travel beside it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    /// Why stage 1 could not be started (no descriptors then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Whether a pidfd of stage 1 follows the three pipe ends.
    #[serde(default)]
    pidfd: bool,
}

/// Stage 1 as antler receives it: the far ends of its standard streams and, where the kernel
/// has them, a pidfd to kill it with.
pub(crate) struct Started {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub pidfd: Option<OwnedFd>,
}

/// antler's side: the launcher of one provider, started on first use and again if it died.
pub(crate) struct Launcher {
    /// The helper programs to try, best first ([`HelperCommand::candidates`]); `current` is
    /// the one in use. A helper that never serves (built from other sources) is given up
    /// for the next one, once for the provider's life.
    helpers: Vec<HelperCommand>,
    current: std::sync::atomic::AtomicUsize,
    running: tokio::sync::Mutex<Option<Running>>,
}

struct Running {
    sock: std::sync::Arc<OwnedFd>,
    // Killed (and reaped by tokio) when the launcher is replaced or the provider dropped.
    _child: tokio::process::Child,
}

/// Why one exchange with the launcher failed.
enum Failure {
    /// The launcher is gone (or never answered): start a new one and ask again.
    Gone(String),
    /// The launcher answered that stage 1 could not be started.
    Refused(String),
}

impl Launcher {
    /// A launcher of the first of `helpers` that serves (`None` without any).
    pub(crate) fn new(helpers: Vec<HelperCommand>) -> Option<Launcher> {
        (!helpers.is_empty()).then(|| Launcher {
            helpers,
            current: std::sync::atomic::AtomicUsize::new(0),
            running: tokio::sync::Mutex::new(None),
        })
    }

    fn index(&self) -> usize {
        self.current.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The helper program behind this launcher.
    pub(crate) fn helper(&self) -> &HelperCommand {
        let last = self.helpers.len().saturating_sub(1);
        &self.helpers[self.index().min(last)]
    }

    /// Start stage 1 of a warden for `policy` (the policy's JSON).
    pub(crate) async fn start(&self, policy: &str) -> Result<Started, String> {
        let mut running = self.running.lock().await;
        loop {
            let unusable = match self.ask(&mut running, policy).await {
                Ok(started) => return Ok(started),
                Err(Failure::Refused(m)) => return Err(m),
                Err(Failure::Gone(m)) => m,
            };
            if self.index() + 1 >= self.helpers.len() {
                return Err(unusable);
            }
            self.current
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!("{unusable}: using {} instead", self.helper().exe.display());
        }
    }

    /// One request to the current helper's launcher, which is started if need be and
    /// replaced once if it died (killed from outside). `Gone` means this helper is unusable.
    async fn ask(&self, running: &mut Option<Running>, policy: &str) -> Result<Started, Failure> {
        let mut last = String::new();
        for _ in 0..2 {
            let sock = match running.as_ref() {
                Some(r) => r.sock.clone(),
                // Not startable at all (not executable, not a program).
                None => {
                    let r = spawn(self.helper()).map_err(Failure::Gone)?;
                    let sock = r.sock.clone();
                    *running = Some(r);
                    sock
                }
            };
            let request = policy.to_owned();
            let answer = tokio::task::spawn_blocking(move || exchange(&sock, request.as_bytes()))
                .await
                .map_err(|e| {
                    Failure::Refused(format!("the sandbox launcher's request failed: {e}"))
                })?;
            match answer {
                Err(Failure::Gone(m)) => {
                    tracing::debug!(reason = %m, "restarting the sandbox launcher");
                    *running = None;
                    last = m;
                }
                done => return done,
            }
        }
        Err(Failure::Gone(format!(
            "the sandbox helper {} did not serve as a launcher ({last}); is it an antler binary of another version?",
            self.helper().exe.display()
        )))
    }
}

/// Start the launcher: the helper with `--warden-launcher`, its stdin one end of a socket pair.
fn spawn(helper: &HelperCommand) -> Result<Running, String> {
    let (ours, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("cannot create the sandbox launcher's socket: {e}"))?;
    sockopt::set_socket_timeout(&ours, sockopt::Timeout::Recv, Some(ANSWER_TIMEOUT))
        .map_err(|e| format!("cannot set the sandbox launcher's timeout: {e}"))?;
    let child = tokio::process::Command::new(&helper.exe)
        .args(&helper.args)
        .arg(LAUNCHER)
        .arg(BUILD)
        .env_clear()
        .envs(super::client::helper_env())
        .stdin(std::process::Stdio::from(theirs))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start the sandbox helper {}: {e}",
                helper.exe.display()
            )
        })?;
    Ok(Running {
        sock: std::sync::Arc::new(ours),
        _child: child,
    })
}

/// One request and its answer (blocking; antler runs it on a blocking thread).
fn exchange(sock: &OwnedFd, policy: &[u8]) -> Result<Started, Failure> {
    let gone = |what: &str, e: Errno| Failure::Gone(format!("{what}: {e}"));
    send(sock, policy, SendFlags::NOSIGNAL).map_err(|e| gone("send", e))?;
    let mut payload = [0u8; 4096];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut payload)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| gone("receive", e))?;
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(MAX_FDS);
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 {
        return Err(Failure::Gone("the launcher closed its socket".into()));
    }
    let answer: Answer = payload
        .get(..got.bytes)
        .and_then(|p| serde_json::from_slice(p).ok())
        .ok_or_else(|| Failure::Gone("the launcher's answer is not readable".into()))?;
    if let Some(error) = answer.error {
        return Err(Failure::Refused(error));
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next()) {
        (Some(stdin), Some(stdout), Some(stderr)) => Ok(Started {
            stdin,
            stdout,
            stderr,
            pidfd: if answer.pidfd { fds.next() } else { None },
        }),
        _ => Err(Failure::Gone(
            "the launcher's answer came without the warden's pipes".into(),
        )),
    }
}

/// The launcher process: serve requests on stdin until it closes. `prefix` is how this
/// program was invoked (`antler sandbox-exec` or the bare helper binary); `build` is the
/// [`BUILD`] of the antler that started it.
pub(crate) fn launcher_main(prefix: &[OsString], build: Option<&str>) -> i32 {
    let say = |m: &str| super::stages::say(&format!("launcher: {m}"));
    if build != Some(BUILD) {
        say(&format!(
            "this helper was built from other sources ({BUILD}) than the antler that started it ({})",
            build.unwrap_or("unknown")
        ));
        return OTHER_BUILD;
    }
    let sock = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(s) => s,
        Err(e) => {
            say(&format!("no socket on stdin: {e}"));
            return 125;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            say(&format!("cannot find this program: {e}"));
            return 125;
        }
    };
    let mut children: Vec<std::process::Child> = Vec::new();
    let mut request = vec![0u8; MAX_REQUEST];
    loop {
        let ready = {
            let mut fds = [PollFd::new(&sock, PollFlags::IN)];
            poll(&mut fds, Some(&REAP_EVERY))
        };
        // Stage-1 processes that ended are reaped here (they would stay zombies otherwise).
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        match ready {
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => {
                say(&format!("cannot wait for requests: {e}"));
                return 1;
            }
        }
        let (len, full) = match recv(&sock, &mut request[..], RecvFlags::TRUNC) {
            Ok((_, 0)) => return 0,
            Ok(got) => got,
            Err(Errno::INTR) => continue,
            Err(e) => {
                say(&format!("cannot read a request: {e}"));
                return 1;
            }
        };
        let answer = if full > len {
            Err(format!("a sandbox policy of {full} bytes is too large"))
        } else {
            start_stage1(&exe, prefix, request.get(..len).unwrap_or_default())
        };
        let sent = match answer {
            Ok((child, ends)) => {
                children.push(child);
                reply(&sock, None, &ends)
            }
            Err(error) => reply(&sock, Some(error), &Ends::default()),
        };
        if let Err(e) = sent {
            say(&format!("cannot answer: {e}"));
            return 1;
        }
    }
}

/// antler's ends of one stage 1's streams (empty in a refusal).
#[derive(Default)]
struct Ends {
    fds: Vec<OwnedFd>,
    pidfd: Option<OwnedFd>,
}

fn start_stage1(
    exe: &std::path::Path,
    prefix: &[OsString],
    policy: &[u8],
) -> Result<(std::process::Child, Ends), String> {
    // Only a policy is accepted: the launcher starts wardens, nothing else.
    let policy = std::str::from_utf8(policy)
        .ok()
        .filter(|p| serde_json::from_str::<Policy>(p).is_ok())
        .ok_or_else(|| "the request is not a sandbox policy".to_owned())?;
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| format!("cannot create the warden's pipes: {e}"))
    };
    let (stdin_r, stdin_w) = pipe()?;
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    // The command (and with it stage 1's ends) is dropped before the ends go to antler, so
    // that antler's reads see end of file when the warden ends.
    let child = std::process::Command::new(exe)
        .args(prefix)
        .arg(super::stages::STAGE1)
        .arg(policy)
        .stdin(stdin_r)
        .stdout(stdout_w)
        .stderr(stderr_w)
        .spawn()
        .map_err(|e| format!("cannot start the sandbox helper's first stage: {e}"))?;
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .ok();
    Ok((
        child,
        Ends {
            fds: vec![stdin_w, stdout_r, stderr_r],
            pidfd,
        },
    ))
}

fn reply(sock: &OwnedFd, error: Option<String>, ends: &Ends) -> Result<(), Errno> {
    let answer = Answer {
        error,
        pidfd: ends.pidfd.is_some(),
    };
    let payload = serde_json::to_vec(&answer).unwrap_or_default();
    let fds: Vec<BorrowedFd<'_>> = ends
        .fds
        .iter()
        .chain(ends.pidfd.as_ref())
        .map(AsFd::as_fd)
        .collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    sendmsg(
        sock,
        &[IoSlice::new(&payload)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_of_another_build_refuses_to_serve() {
        assert_eq!(
            launcher_main(&[], Some("0.0.0-0000000000000000")),
            OTHER_BUILD
        );
        assert_eq!(launcher_main(&[], None), OTHER_BUILD);
        assert!(BUILD.starts_with(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn the_launcher_starts_nothing_but_a_warden_policy() {
        // `true` would run if the launcher started whatever it was handed.
        let exe = std::path::Path::new("/bin/true");
        for request in [&b"{}"[..], b"--write / -- /bin/sh", b"\xff\xfe"] {
            let refused = start_stage1(exe, &[], request).err();
            assert_eq!(
                refused.as_deref(),
                Some("the request is not a sandbox policy")
            );
        }
    }
}
