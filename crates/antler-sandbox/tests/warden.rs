//! The warden (the helper process that parents confined bash) through the sandbox's public
//! API, with the `antler-sandbox-helper` binary and real processes: what confined commands can
//! and cannot see, read, write, reach and consume (security issue #10, findings 3 and 4, the
//! network policy and the limits).
//!
//! Every test skips with a printed reason where Landlock is missing; where Landlock is there
//! (CI), a missing namespace or cgroup is a failure, not a skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use antler_sandbox::{
    CommandRequest, Confine, HelperCommand, Limits, LocalSandboxProvider, Network, Sandbox,
    SandboxError, SandboxProvider, SandboxSettings,
};
use common::*;

fn helper() -> HelperCommand {
    HelperCommand {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_antler-sandbox-test-helper")),
        args: vec![],
    }
}

fn settings() -> SandboxSettings {
    SandboxSettings {
        confine: Confine::Required,
        helper: Some(helper()),
        ..quick()
    }
}

fn skip() -> bool {
    match landlock_missing() {
        Some(why) => {
            eprintln!("skipping: Landlock unavailable: {why}");
            true
        }
        None => false,
    }
}

/// A fixture with the default warden settings; `None` (reason printed) without Landlock.
fn confined() -> Option<Fixture> {
    (!skip()).then(|| Fixture::new(settings()))
}

struct Fixture {
    home: tempfile::TempDir,
    provider: LocalSandboxProvider,
}

impl Fixture {
    fn new(settings: SandboxSettings) -> Fixture {
        let home = home();
        let provider = LocalSandboxProvider::new(home.path(), settings);
        assert!(provider.confinement().active);
        Fixture { home, provider }
    }

    fn sandbox(&self, thread: &str) -> Arc<dyn Sandbox> {
        sandbox(&self.provider, thread)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.path().join(rel)
    }
}

async fn sh(sb: &Arc<dyn Sandbox>, cmd: &str) -> String {
    match exec(sb, cmd).await {
        Ok(o) => o.text,
        Err(e) => format!("ERR {e}"),
    }
}

#[tokio::test]
async fn output_lines_stream_through_the_warden() {
    let Some(f) = confined() else { return };
    let sb = f.sandbox("t1");
    let (text, mut got) = run_streaming(&sb, "echo first; echo second >&2; pwd").await;
    got.sort();
    assert_eq!(got, ["/mnt/user-data/workspace", "first", "second"]);
    assert_eq!(text, sh(&sb, "echo first; echo second >&2; pwd").await);
}

/// A reply far longer than the client's read buffer (one JSON line carrying 200 KB of output,
/// with characters that need escaping) arrives whole, and the warden keeps answering after it.
#[tokio::test]
async fn a_long_reply_arrives_whole() {
    let Some(f) = confined() else { return };
    let sb = f.sandbox("t1");
    let out = sh(
        &sb,
        r#"for i in $(seq 1 20000); do printf '"%04d"\t\n' $((i % 10000)); done"#,
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 20000, "{}", &out[..out.len().min(200)]);
    assert_eq!(lines[0], "\"0001\"\t");
    assert_eq!(lines[19998], "\"9999\"\t");
    assert_eq!(lines[19999], "\"0000\"\t");
    assert_eq!(sh(&sb, "echo after").await.trim(), "after");
}

/// Callers write their own request lines to the warden: a request longer than the pipe's
/// buffer (a 120 KB command) arrives whole, commands sent at once on one sandbox each get their
/// own answer, and a call dropped while its long request is still being written leaves no half
/// line behind for the next one.
#[tokio::test]
async fn long_concurrent_and_dropped_requests_keep_the_lines_whole() {
    let Some(f) = confined() else { return };
    let sb = f.sandbox("t1");
    let filler = "x".repeat(120_000);
    let long = format!(": '{filler}'; echo long-done");
    assert_eq!(sh(&sb, &long).await.trim(), "long-done");

    let mut calls = tokio::task::JoinSet::new();
    for i in 0..16 {
        let sb = sb.clone();
        let cmd = if i % 4 == 0 {
            format!(": '{filler}'; echo call-{i}")
        } else {
            format!("echo call-{i}")
        };
        calls.spawn(async move { (i, sh(&sb, &cmd).await) });
    }
    let mut answered = 0;
    while let Some(done) = calls.join_next().await {
        let (i, out) = done.unwrap();
        assert_eq!(out.trim(), format!("call-{i}"));
        answered += 1;
    }
    assert_eq!(answered, 16);

    // Polled once (the request is partly written: the pipe holds 64 KiB), then dropped.
    let dropped = tokio::time::timeout(
        Duration::ZERO,
        exec(&sb, &format!(": '{filler}'; sleep 30; echo never")),
    )
    .await;
    assert!(dropped.is_err(), "{dropped:?}");
    assert_eq!(sh(&sb, "echo after").await.trim(), "after");
    assert_eq!(sh(&sb, &long).await.trim(), "long-done");
}

/// The warden keeps the sandbox's base environment (sent once) and each request carries only
/// its own variables: every command still sees the scrubbed host environment, its own
/// injected values win, and one call's values do not stay behind for the next.
#[tokio::test]
async fn every_confined_command_gets_the_scrubbed_environment_and_only_its_own_values() {
    let Some(f) = confined() else { return };
    // Only this test sets these names; the sandbox reads the host environment at its first
    // command.
    std::env::set_var("ANTLER_WARDEN_TEST_API_KEY", "sk-warden-should-not-leak");
    std::env::set_var("ANTLER_WARDEN_TEST_PLAIN", "base");
    let sb = f.sandbox("t1");
    let env_of = |inject: Vec<(String, String)>| {
        let sb = sb.clone();
        async move {
            sb.execute_command(CommandRequest {
                command: "env".into(),
                env: inject,
                ..Default::default()
            })
            .await
            .unwrap()
            .text
        }
    };
    let first = env_of(vec![("ANTLER_WARDEN_INJECTED".into(), "one".into())]).await;
    let second = env_of(vec![]).await;
    let third = env_of(vec![
        ("ANTLER_WARDEN_INJECTED".into(), "three".into()),
        ("ANTLER_WARDEN_TEST_PLAIN".into(), "call".into()),
    ])
    .await;
    for out in [&first, &second, &third] {
        assert!(!out.contains("sk-warden-should-not-leak"), "{out}");
        assert!(out.contains("\nPATH="), "{out}");
        assert_eq!(out.matches("\nTMPDIR=/tmp\n").count(), 1, "{out}");
    }
    assert!(first.contains("ANTLER_WARDEN_TEST_PLAIN=base"), "{first}");
    assert!(first.contains("ANTLER_WARDEN_INJECTED=one"), "{first}");
    assert!(second.contains("ANTLER_WARDEN_TEST_PLAIN=base"), "{second}");
    assert!(!second.contains("ANTLER_WARDEN_INJECTED"), "{second}");
    assert!(third.contains("ANTLER_WARDEN_INJECTED=three"), "{third}");
    assert_eq!(
        third.matches("ANTLER_WARDEN_TEST_PLAIN=").count(),
        1,
        "{third}"
    );
    assert!(third.contains("ANTLER_WARDEN_TEST_PLAIN=call"), "{third}");
}

/// Host processes whose command line contains `needle`.
fn host_processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(needle) && !process_gone(pid) {
            out.push(pid);
        }
    }
    out
}

/// Poll (bounded) until some host process matches `needle`; how many do then. A needle that
/// ends in NUL matches a whole argument only (e.g. the `argv[0]` an `exec -a` gave): a process
/// that still carries it inside its script, or is between two execs, is not counted.
fn appeared_within(needle: &str, limit: Duration) -> usize {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let found = host_processes_with(needle).len();
        if found > 0 || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Poll (bounded) until no host process matches `needle`.
fn gone_within(needle: &str, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if host_processes_with(needle).is_empty() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn outside_processes_and_their_secrets_are_invisible() {
    let Some(f) = confined() else { return };
    // A process outside the sandbox holding a secret in its environment (antler's stand-in).
    let mut outsider = std::process::Command::new("sleep")
        .arg("30")
        .env("OUTSIDER_API_KEY", "outsider-secret-4e1f")
        .spawn()
        .unwrap();
    let sb = f.sandbox("t1");
    // The command's parent is the warden, with an environment holding nothing of antler's.
    let out = sh(
        &sb,
        "tr '\\0' '\\n' < /proc/$PPID/environ | cut -d= -f1 | sort | tr '\\n' ' '",
    )
    .await;
    assert_eq!(out.trim(), "LANG PATH", "{out}");
    let out = sh(&sb, "cat /proc/*/environ | tr '\\0' '\\n'; ps -eo pid,args").await;
    assert!(!out.contains("outsider-secret"), "{out}");
    assert!(
        !out.contains("sleep 30"),
        "the outside process is visible: {out}"
    );
    // Only the sandbox's own processes exist for it.
    let out = sh(&sb, "ls /proc | grep -c '^[0-9]'").await;
    let n: u32 = out.trim().parse().unwrap();
    assert!(n <= 6, "{n} processes visible");
    let _ = outsider.kill();
    let _ = outsider.wait();
}

#[tokio::test]
async fn the_data_home_other_threads_and_denied_files_are_unreadable() {
    if skip() {
        return;
    }
    let outside = home();
    let config = outside.path().join("config.yaml");
    std::fs::write(&config, "api_key: cfg-secret-91aa\n").unwrap();
    std::fs::write(outside.path().join("readme.txt"), "public").unwrap();
    let f = Fixture::new(SandboxSettings {
        deny_read: vec![config.clone()],
        ..settings()
    });
    std::fs::write(f.path("antler.db"), "db-secret-77c2").unwrap();
    let other = f.sandbox("t2");
    other
        .write_file("/mnt/user-data/workspace/mine.txt", "t2-secret-0b5d", false)
        .unwrap();
    let sb = f.sandbox("t1");
    let cmd = format!(
        "cat {db}; cat {t2}; ls {home}/threads; cat {cfg}; cat {readme}; echo own > /mnt/user-data/workspace/a && cat /mnt/user-data/workspace/a",
        db = f.path("antler.db").display(),
        t2 = f.path("threads/t2/user-data/workspace/mine.txt").display(),
        home = f.home.path().display(),
        cfg = config.display(),
        readme = outside.path().join("readme.txt").display(),
    );
    let out = sh(&sb, &cmd).await;
    for secret in ["db-secret", "t2-secret", "cfg-secret", "t2\n"] {
        assert!(!out.contains(secret), "{secret} leaked: {out}");
    }
    assert!(
        out.contains("public"),
        "the rest of the system stays readable: {out}"
    );
    assert!(out.contains("own"), "the thread's own folders work: {out}");
    assert_eq!(out.matches("Permission denied").count(), 4, "{out}");
}

#[tokio::test]
async fn the_system_is_read_only_and_tmp_is_private() {
    let Some(f) = confined() else { return };
    let canary_dir = home();
    let canary = canary_dir.path().join("canary.txt");
    std::fs::write(&canary, "canary").unwrap();
    let sb = f.sandbox("t1");
    let marker = format!("antler-warden-test-{}", std::process::id());
    let out = sh(
        &sb,
        &format!(
            "chmod 000 {c}; touch -d 2000-01-01 {c}; echo x >> {c}; rm -f {c}; mount -o remount,rw /; umount /proc; echo private > /tmp/{marker} && cat /tmp/{marker}; ls /tmp",
            c = canary.display()
        ),
    )
    .await;
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "canary", "{out}");
    let meta = std::fs::metadata(&canary).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_ne!(
        meta.permissions().mode() & 0o777,
        0,
        "chmod went through: {out}"
    );
    assert!(out.contains("private"), "{out}");
    assert!(
        !Path::new("/tmp").join(&marker).exists(),
        "the sandbox wrote the host's /tmp: {out}"
    );
    // Another thread has its own /tmp.
    let out = sh(&f.sandbox("t2"), &format!("ls /tmp/{marker}")).await;
    assert!(out.contains("No such file"), "{out}");
    // Capabilities of the sandbox's root do not reach the host.
    let out = sh(
        &sb,
        "date -s 2001-01-01 2>&1; ip link add antler0 type dummy 2>&1; echo done",
    )
    .await;
    assert_eq!(out.matches("not permitted").count(), 2, "{out}");
}

#[tokio::test]
async fn network_deny_blocks_tcp_and_allow_keeps_it() {
    if skip() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; else echo refused; fi"
    );
    let allow = Fixture::new(settings());
    assert_eq!(sh(&allow.sandbox("t1"), &probe).await.trim(), "connected");
    let deny = Fixture::new(SandboxSettings {
        network: Network::Deny,
        ..settings()
    });
    let sb = deny.sandbox("t1");
    assert_eq!(sh(&sb, &probe).await.trim(), "refused");
    // Not even loopback exists for it, and binding fails too.
    let out = sh(
        &sb,
        "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print('bound')\" 2>&1 | tail -1",
    )
    .await;
    assert!(!out.contains("bound"), "{out}");
}

#[tokio::test]
async fn limits_stop_a_memory_hog_a_process_storm_and_a_huge_file() {
    if skip() {
        return;
    }
    let f = Fixture::new(SandboxSettings {
        limits: Limits {
            memory: Some(96 << 20),
            processes: Some(24),
            file_size: Some(1 << 20),
        },
        ..settings()
    });
    let sb = f.sandbox("t1");
    // 1 GiB wanted, 96 MiB allowed: the allocation fails or the process is killed.
    let out = sh(
        &sb,
        "python3 -c \"b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('allocated')\"",
    )
    .await;
    assert!(!out.contains("allocated"), "{out}");
    // 200 children wanted (each sleeps a second), at most 24 processes allowed at once.
    let storm = "import os, time\nn = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n    n += 1\nfor _ in range(n):\n    os.wait()\nprint('forked', n)\n";
    sb.write_file("/mnt/user-data/workspace/storm.py", storm, false)
        .unwrap();
    let out = sh(&sb, "python3 /mnt/user-data/workspace/storm.py").await;
    let forked: u32 = out
        .trim()
        .strip_prefix("forked ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected: {out}"));
    assert!((1..24).contains(&forked), "{forked} children ran: {out}");
    // 4 MiB written, 1 MiB allowed.
    let out = sh(
        &sb,
        "head -c 4194304 /dev/zero > /mnt/user-data/workspace/big; echo rc=$?",
    )
    .await;
    let size = std::fs::metadata(f.path("threads/t1/user-data/workspace/big"))
        .unwrap()
        .len();
    assert!(size <= 1 << 20, "{size} bytes written: {out}");
    assert!(!out.contains("rc=0"), "{out}");
    // The sandbox still works afterwards.
    assert_eq!(sh(&sb, "echo fine").await, "fine\n");
}

#[tokio::test]
async fn the_warden_enforces_timeouts_and_takes_its_processes_along() {
    let Some(f) = confined() else { return };
    let sb = f.sandbox("t1");
    let tag = format!("antler-timeout-canary-{}", std::process::id());
    let out = sb
        .execute_command(CommandRequest {
            command: format!("(exec -a {tag} sleep 60) & setsid bash -c 'exec -a {tag}-setsid sleep 60' & sleep 60"),
            timeout: Some(Duration::from_millis(500)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(out.timed_out, "{}", out.text);
    // The call's process group is killed at the timeout; what escaped it with setsid keeps
    // running inside the sandbox until the sandbox goes.
    assert!(
        gone_within(&format!("{tag}\0"), Duration::from_secs(5)),
        "the call's process group outlived its timeout"
    );
    assert_eq!(
        appeared_within(&format!("{tag}-setsid\0"), Duration::from_secs(20)),
        1
    );
    drop(sb);
    f.provider.reset();
    assert!(
        gone_within(&tag, Duration::from_secs(5)),
        "processes outlived their sandbox: {:?}",
        host_processes_with(&tag)
    );
}

#[tokio::test]
async fn killing_every_process_spares_the_warden() {
    let Some(f) = confined() else { return };
    let sb = f.sandbox("t1");
    let tag = format!("antler-kill-all-canary-{}", std::process::id());
    sh(
        &sb,
        &format!("setsid bash -c 'exec -a {tag} sleep 60' > /dev/null 2>&1 &"),
    )
    .await;
    // Only the final `sleep` has the tag as a whole argument: the `setsid` and `bash` before it
    // carry it inside their script, and a process between two execs can show no command line
    // at all — matching those made the count flaky on a loaded machine.
    assert_eq!(
        appeared_within(&format!("{tag}\0"), Duration::from_secs(20)),
        1
    );
    // The warden is PID 1 of the sandbox, which the kernel shields from its own namespace:
    // `kill -9 -1` takes every other sandboxed process, and the command itself goes on.
    assert_eq!(sh(&sb, "kill -9 -1; echo survived").await, "survived\n");
    assert!(
        gone_within(&tag, Duration::from_secs(5)),
        "a sandboxed process survived kill -9 -1"
    );
    assert_eq!(sh(&sb, "echo again").await, "again\n");
}

#[tokio::test]
async fn orphans_are_reaped_inside_the_sandbox() {
    let Some(f) = confined() else { return };
    let sb = f.sandbox("t1");
    // A process whose parent exits at once is handed to the warden (PID 1); once it ends it
    // must not stay behind as a zombie. A symlink gives it a name of its own (`comm`).
    let out = sh(
        &sb,
        "ln -sf \"$(command -v sleep)\" /tmp/orphan-nap; (/tmp/orphan-nap 0.05 &); \
         for i in $(seq 200); do n=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -cx orphan-nap); \
         [ \"$n\" = 0 ] && break; sleep 0.05; done; echo \"left=$n\"",
    )
    .await;
    assert_eq!(out, "left=0\n");
}

#[tokio::test]
async fn required_without_a_helper_refuses() {
    if skip() {
        return;
    }
    let h = home();
    let p = LocalSandboxProvider::new(
        h.path(),
        SandboxSettings {
            confine: Confine::Required,
            helper: Some(HelperCommand {
                exe: PathBuf::from("/nonexistent/antler-sandbox-helper"),
                args: vec![],
            }),
            ..quick()
        },
    );
    let err = exec(&sandbox(&p, "t1"), "echo hi").await.unwrap_err();
    assert!(matches!(err, SandboxError::Runtime(_)), "{err}");
    assert!(err.to_string().contains("sandbox helper"), "{err}");
}

/// `(pid, parent pid, command line)` of every host process whose command line contains `needle`.
fn host_process_tree(needle: &str) -> Vec<(u32, u32, Vec<String>)> {
    host_processes_with(needle)
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let ppid = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))?
                .trim()
                .parse()
                .ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, ppid, args))
        })
        .collect()
}

fn cmdline_of(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

#[tokio::test]
async fn one_launcher_starts_every_warden_and_antler_starts_none() {
    let Some(f) = confined() else { return };
    let (a, b) = (f.sandbox("t1"), f.sandbox("t2"));
    assert_eq!(sh(&a, "echo a").await, "a\n");
    assert_eq!(sh(&b, "echo b").await, "b\n");
    // Stage 1 of each warden carries its policy, which names this fixture's data home.
    let home = f.home.path().to_string_lossy().into_owned();
    let stage1: Vec<_> = host_process_tree(&home)
        .into_iter()
        .filter(|(_, _, args)| args.iter().any(|a| a == "--warden"))
        .collect();
    assert_eq!(stage1.len(), 2, "one stage 1 per sandbox: {stage1:?}");
    let parent = stage1[0].1;
    assert!(
        stage1.iter().all(|(_, ppid, _)| *ppid == parent),
        "{stage1:?}"
    );
    assert_ne!(parent, std::process::id(), "antler itself started a warden");
    assert!(
        cmdline_of(parent).contains("--warden-launcher"),
        "the wardens' parent is not the launcher: {}",
        cmdline_of(parent)
    );
}

#[tokio::test]
async fn a_killed_launcher_is_replaced_and_running_wardens_keep_working() {
    let Some(f) = confined() else { return };
    let a = f.sandbox("t1");
    assert_eq!(sh(&a, "echo a").await, "a\n");
    let home = f.home.path().to_string_lossy().into_owned();
    let launcher = host_process_tree(&home)
        .into_iter()
        .find(|(_, _, args)| args.iter().any(|a| a == "--warden"))
        .map(|(_, ppid, _)| ppid)
        .expect("a warden for t1");
    let killed = std::process::Command::new("kill")
        .args(["-9", &launcher.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !process_gone(launcher) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The running warden does not need the launcher; a new sandbox gets a new launcher.
    assert_eq!(sh(&a, "echo still").await, "still\n");
    let b = f.sandbox("t2");
    assert_eq!(sh(&b, "echo b").await, "b\n");
}
