//! The helper side of the warden: three stages of one program (see the module doc of
//! [`crate::warden`]). Each stage re-invokes the same executable with the next stage's flag.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::protocol::{Ready, Reply, Request};
use super::{limits, Guarantees, Policy};
use crate::confine::restrict_current_thread_with;
use crate::exec::{self, CommandEnv, Confinement, ExecSpec};
use crate::sandbox::OutputLines;
use crate::settings::{Confine, Network};

pub(super) const STAGE1: &str = "--warden";
const STAGE2: &str = "--warden-init";
const STAGE3: &str = "--warden-serve";

pub(super) fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "antler sandbox warden: {msg}");
}

/// Write one reply frame on stdout (stage 2 uses it for a fatal setup error).
fn emit(reply: &Reply) {
    let mut out = std::io::stdout().lock();
    if let Ok(mut line) = serde_json::to_vec(reply) {
        line.push(b'\n');
        let _ = out.write_all(&line);
        let _ = out.flush();
    }
}

fn fatal(message: String) -> i32 {
    emit(&Reply::Fatal { message });
    126
}

/// Entry point: `--warden-launcher` (the launcher, [`super::launcher`]), `--warden POLICY`
/// (stage 1), `--warden-init POLICY GUARANTEES` (stage 2), `--warden-serve POLICY GUARANTEES`
/// (stage 3). Returns the exit code.
pub fn warden_main(args: &[OsString]) -> i32 {
    let arg = |i: usize| args.get(i).and_then(|a| a.to_str());
    // How this program was invoked, minus our own arguments: `antler sandbox-exec`, or the
    // bare helper binary.
    let all: Vec<OsString> = std::env::args_os().collect();
    let prefix: Vec<OsString> = all
        .get(1..all.len().saturating_sub(args.len()))
        .map(<[OsString]>::to_vec)
        .unwrap_or_default();
    if arg(0) == Some(super::launcher::LAUNCHER) {
        return super::launcher::launcher_main(&prefix, arg(1));
    }
    let Some(policy) = arg(1).and_then(|p| serde_json::from_str::<Policy>(p).ok()) else {
        say("usage: --warden POLICY_JSON");
        return 125;
    };
    let guarantees = arg(2)
        .and_then(|g| serde_json::from_str::<Guarantees>(g).ok())
        .unwrap_or_default();
    match arg(0) {
        Some(STAGE1) => stage1(&policy, &prefix),
        Some(STAGE2) => stage2(&policy, guarantees),
        Some(STAGE3) => stage3(&policy, guarantees),
        _ => {
            say("unknown stage");
            125
        }
    }
}

/// Run the next stage with the same stdin/stdout/stderr and wait for it.
fn next_stage(prefix: &[OsString], stage: &str, policy: &Policy, g: &Guarantees) -> i32 {
    let (Ok(exe), Ok(p), Ok(gj)) = (
        std::env::current_exe(),
        serde_json::to_string(policy),
        serde_json::to_string(g),
    ) else {
        return fatal("cannot re-invoke the sandbox helper".to_owned());
    };
    match std::process::Command::new(exe)
        .args(prefix)
        .arg(stage)
        .arg(p)
        .arg(gj)
        .status()
    {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => fatal(format!("cannot start the sandbox helper's next stage: {e}")),
    }
}

/// Stage 1, in the host's namespaces: cgroup, rlimits, then new namespaces for stage 2.
fn stage1(policy: &Policy, prefix: &[OsString]) -> i32 {
    use nix::sched::{unshare, CloneFlags};
    let mut g = Guarantees::default();
    let cgroup = limits::Cgroup::create(&policy.limits, &policy.cgroup);
    g.cgroup = cgroup.memory || cgroup.processes;
    g.missing.extend(limits::apply_rlimits(
        &policy.limits,
        cgroup.memory,
        cgroup.processes,
    ));

    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    // A user namespace even for root: the sandbox's "root" then holds capabilities only over
    // its own namespaces (no module loading, no host network or clock changes, no mounts that
    // matter outside).
    let base = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS;
    let with_net = policy.network == Network::Deny;
    let attempts: &[CloneFlags] = if with_net {
        &[base.union(CloneFlags::CLONE_NEWNET), base]
    } else {
        &[base]
    };
    let mut ns = false;
    let mut last_err = None;
    for flags in attempts {
        match unshare(*flags) {
            Ok(()) => {
                ns = true;
                g.network_namespace = flags.contains(CloneFlags::CLONE_NEWNET);
                break;
            }
            Err(e) => last_err = Some(e),
        }
    }
    if ns {
        // Map ourselves (root or not) to root of the new user namespace (needed to mount
        // there); every other host uid stays unmapped.
        let maps = std::fs::write("/proc/self/setgroups", "deny")
            .and_then(|_| std::fs::write("/proc/self/uid_map", format!("0 {uid} 1")))
            .and_then(|_| std::fs::write("/proc/self/gid_map", format!("0 {gid} 1")));
        if let Err(e) = maps {
            return fatal(format!("cannot map the user namespace: {e}"));
        }
    }
    if !ns {
        let why = last_err.map(|e| e.to_string()).unwrap_or_default();
        g.missing.push(format!(
            "no user/PID/mount namespace ({why}): other processes are visible, /tmp is shared and the system is not mounted read-only"
        ));
        if with_net {
            g.missing
                .push("no network namespace: only TCP is blocked (by Landlock)".to_owned());
        }
        return next_stage(prefix, STAGE3, policy, &g);
    }
    if with_net && !g.network_namespace {
        g.missing
            .push("no network namespace: only TCP is blocked (by Landlock)".to_owned());
    }
    let code = next_stage(prefix, STAGE2, policy, &g);
    drop(cgroup);
    code
}

fn under_tmp(p: &Path) -> bool {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .starts_with("/tmp")
}

/// Stage 2, PID 1 of the new PID namespace: private mounts, a fresh /proc, the thread's own
/// /tmp; then it confines itself and serves, reaping every orphan as well as its commands.
/// (It used to start a third stage for that, which cost another exec of the helper.)
fn stage2(policy: &Policy, mut g: Guarantees) -> i32 {
    use nix::mount::{mount, MsFlags};
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let none: Option<&str> = None;
    let private = mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none);
    match private {
        Err(e) => g.missing.push(format!(
            "cannot make mounts private ({e}): /proc shows host processes"
        )),
        Ok(()) => {
            read_only_system(&mut g);
            let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            match mount(Some("proc"), "/proc", Some("proc"), proc_flags, none) {
                Ok(()) => g.pid_namespace = true,
                Err(e) => g.missing.push(format!(
                    "cannot mount a private /proc ({e}): host processes are visible"
                )),
            }
            private_tmp(policy, &mut g);
            for dir in policy.user_data.iter().chain(&policy.writable) {
                if let Err(e) = writable_bind(dir) {
                    g.missing
                        .push(format!("cannot make {} writable: {e}", dir.display()));
                }
            }
        }
    }
    confine_and_serve(policy, g, true)
}

/// Per-mount flags that a remount must keep (a user namespace may not drop them).
fn kept_flags(options: &str) -> nix::mount::MsFlags {
    use nix::mount::MsFlags;
    let mut f = MsFlags::empty();
    for o in options.split(',') {
        f |= match o {
            "nosuid" => MsFlags::MS_NOSUID,
            "nodev" => MsFlags::MS_NODEV,
            "noexec" => MsFlags::MS_NOEXEC,
            "noatime" => MsFlags::MS_NOATIME,
            "nodiratime" => MsFlags::MS_NODIRATIME,
            "relatime" => MsFlags::MS_RELATIME,
            _ => MsFlags::empty(),
        };
    }
    f
}

/// Remount every mount of this (private) namespace read-only, so that nothing outside the
/// thread's folders can be changed even where Landlock has no say (chmod, chown, utimes,
/// xattrs). The writable folders are bound back read-write afterwards.
fn read_only_system(g: &mut Guarantees) {
    use nix::mount::{mount, MsFlags};
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        g.missing
            .push("cannot read the mount table: the system stays writable".to_owned());
        return;
    };
    let none: Option<&str> = None;
    let mut root_ok = false;
    for line in info.lines() {
        let mut f = line.split(' ');
        let (Some(mp), Some(opts)) = (f.nth(4), f.next()) else {
            continue;
        };
        let mp = unescape_mountinfo(mp);
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | kept_flags(opts);
        let res = mount(none, mp.as_str(), none, flags, none);
        if mp == "/" {
            root_ok = res.is_ok();
        }
    }
    g.read_only_system = root_ok;
    if !root_ok {
        g.missing.push(
            "cannot remount / read-only: file modes and owners outside the thread could be changed"
                .to_owned(),
        );
    }
}

/// mountinfo escapes space, tab, newline and backslash as three octal digits.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                let v = u32::from(d[0] - b'0') * 64
                    + u32::from(d[1] - b'0') * 8
                    + u32::from(d[2] - b'0');
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Bind `dir` onto itself read-write (inside the read-only system).
fn writable_bind(dir: &Path) -> nix::Result<()> {
    use nix::mount::{mount, MsFlags};
    let none: Option<&str> = None;
    mount(
        Some(dir),
        dir,
        none,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        none,
    )?;
    mount(
        none,
        dir,
        none,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        none,
    )
}

/// Bind the thread's tmp folder over /tmp and a fresh tmpfs over /dev/shm, unless something
/// the sandbox needs lives under /tmp (it would be hidden); then the thread's tmp folder is
/// made writable where it is, and TMPDIR names it.
fn private_tmp(policy: &Policy, g: &mut Guarantees) {
    use nix::mount::{mount, MsFlags};
    let Some(tmp) = &policy.tmp else {
        return;
    };
    let needed = policy
        .user_data
        .iter()
        .chain(&policy.writable)
        .chain(&policy.readable)
        .cloned()
        .chain(std::env::current_exe().ok());
    let none: Option<&str> = None;
    if let Some(p) = needed.into_iter().find(|p| under_tmp(p)) {
        g.missing.push(format!(
            "/tmp is not private: {} lives under /tmp (move the data home out of /tmp)",
            p.display()
        ));
        if let Err(e) = std::fs::create_dir_all(tmp)
            .map_err(|e| e.to_string())
            .and_then(|_| writable_bind(tmp).map_err(|e| e.to_string()))
        {
            g.missing
                .push(format!("cannot make the thread's tmp folder writable: {e}"));
        }
        return;
    }
    let bound = std::fs::create_dir_all(tmp).and_then(|_| {
        mount(
            Some(tmp.as_path()),
            "/tmp",
            none,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            none,
        )
        .and_then(|_| {
            mount(
                none,
                "/tmp",
                none,
                MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                none,
            )
        })
        .map_err(std::io::Error::from)
    });
    match bound {
        Ok(()) => g.private_tmp = true,
        Err(e) => {
            g.missing
                .push(format!("cannot give the sandbox its own /tmp ({e})"));
            return;
        }
    }
    if Path::new("/dev/shm").is_dir() {
        let _ = mount(
            Some("tmpfs"),
            "/dev/shm",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777,size=64m"),
        );
    }
}

/// Stage 3, without namespaces: restrict ourselves, then serve requests until stdin ends.
fn stage3(policy: &Policy, g: Guarantees) -> i32 {
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    confine_and_serve(policy, g, false)
}

/// Apply Landlock (and the `required` check), then serve until stdin ends. `pid1`: this
/// process is PID 1 of the sandbox and reaps every child itself.
fn confine_and_serve(policy: &Policy, mut g: Guarantees, pid1: bool) -> i32 {
    let spec = policy.rules(g.private_tmp);
    let landlock = match restrict_current_thread_with(&spec) {
        Ok(e) => {
            g.landlock = true;
            g.landlock_net = e.net;
            e.description
        }
        Err(e) => {
            g.missing.push(format!("Landlock: {e}"));
            e
        }
    };
    if policy.mode == Confine::Required && !g.meets_required(policy.network) {
        return fatal(format!(
            "sandbox.confine is required but bash cannot be confined here: {}",
            g.missing.join("; ")
        ));
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fatal(format!("cannot start the warden's runtime: {e}")),
    };
    rt.block_on(serve(
        Ready {
            guarantees: g,
            landlock,
        },
        pid1,
    ));
    0
}

type Calls = Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>;

/// Variables as the protocol carries them, as a command takes them.
fn os_pairs(env: Vec<(String, String)>) -> impl Iterator<Item = (OsString, OsString)> {
    env.into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
}

async fn serve(ready: Ready, pid1: bool) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    // As PID 1 every process that loses its parent becomes ours: one reaper waits for all
    // of them, commands included (tokio's own child handling would race it for their exits).
    // The SIGCHLD stream exists before the first command starts, so no exit is missed.
    let reaper =
        match pid1.then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())) {
            Some(Ok(mut sigchld)) => {
                let reaper = Arc::new(exec::Reaper::default());
                let r = reaper.clone();
                tokio::spawn(async move {
                    while sigchld.recv().await.is_some() {
                        r.reap();
                    }
                });
                Some(reaper)
            }
            Some(Err(e)) => {
                emit(&Reply::Fatal {
                    message: format!("the sandbox cannot watch its processes: {e}"),
                });
                return;
            }
            None => None,
        };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Reply>();
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(r) = rx.recv().await {
            let Ok(mut line) = serde_json::to_vec(&r) else {
                continue;
            };
            line.push(b'\n');
            if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let _ = tx.send(Reply::Ready(ready));
    let calls: Calls = Arc::default();
    let mut base_env: Arc<[(OsString, OsString)]> = Arc::new([]);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match serde_json::from_str::<Request>(&line) {
            Ok(Request::BaseEnv { env }) => base_env = os_pairs(env).collect(),
            Ok(Request::Exec {
                id,
                program,
                args,
                env,
                cwd,
                timeout_ms,
                capture_limit,
                stream,
            }) => {
                let spec = ExecSpec {
                    program,
                    args: args.into_iter().map(OsString::from).collect(),
                    env: CommandEnv {
                        base: base_env.clone(),
                        extra: os_pairs(env).collect(),
                    },
                    cwd,
                    timeout: Duration::from_millis(timeout_ms),
                    capture_limit,
                    confinement: Confinement::None,
                    lines: stream.then(|| {
                        let tx = tx.clone();
                        OutputLines::new(move |line| {
                            let _ = tx.send(Reply::Output {
                                id,
                                line: line.to_owned(),
                            });
                        })
                    }),
                };
                let (tx, calls2, reaper) = (tx.clone(), calls.clone(), reaper.clone());
                let task = tokio::spawn(async move {
                    let reply = match exec::run_with(spec, reaper.as_deref()).await {
                        Ok(r) => Reply::Exit {
                            id,
                            stdout: r.stdout,
                            stderr: r.stderr,
                            exit_code: r.exit_code,
                            timed_out: r.timed_out,
                        },
                        Err(e) => Reply::Failed {
                            id,
                            message: e.to_string(),
                        },
                    };
                    if let Ok(mut c) = calls2.lock() {
                        c.remove(&id);
                    }
                    let _ = tx.send(reply);
                });
                if let Ok(mut c) = calls.lock() {
                    if !task.is_finished() {
                        c.insert(id, task.abort_handle());
                    }
                }
            }
            Ok(Request::Kill { id }) => {
                // Aborting drops the call, whose guard kills its process group.
                if let Some(h) = calls.lock().ok().and_then(|mut c| c.remove(&id)) {
                    h.abort();
                }
            }
            Err(e) => say(&format!("bad request: {e}")),
        }
    }
    // antler is gone: stop every call (their guards kill the groups) and leave.
    if let Ok(mut c) = calls.lock() {
        for (_, h) in c.drain() {
            h.abort();
        }
    }
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
}
