//! Landlock confinement of bash, through both launchers (in-process and the helper binary).
//! Tests that need Landlock skip with a printed reason where the kernel lacks it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use antler_sandbox::{
    confinement_status, Confine, ConfinementStatus, HelperCommand, LocalSandboxProvider, Sandbox,
    SandboxError, SandboxProvider, SandboxSettings,
};
use common::*;

fn helper() -> HelperCommand {
    HelperCommand {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_antler-sandbox-test-helper")),
        args: vec![],
    }
}

fn confined(home: &std::path::Path, helper: Option<HelperCommand>) -> Arc<dyn Sandbox> {
    // Without a helper only the weaker in-process confinement exists, which `required`
    // refuses; `auto` takes it.
    let settings = SandboxSettings {
        confine: if helper.is_some() {
            Confine::Required
        } else {
            Confine::Auto
        },
        helper_search: false,
        helper,
        ..quick()
    };
    let p = LocalSandboxProvider::new(home, settings);
    assert!(p.confinement().active);
    let id = p.acquire(Some("t1"), None).unwrap();
    p.get(&id).unwrap()
}

async fn confined_bash_cannot_write_outside(helper: Option<HelperCommand>) {
    if let Some(why) = landlock_missing() {
        eprintln!("skipping: Landlock unavailable: {why}");
        return;
    }
    let h = home();
    let outside = h.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let sb = confined(h.path(), helper);
    let target = outside.join("pwned");
    let out = run(&sb, &format!("echo x > {}", target.display())).await;
    assert!(!target.exists(), "a confined command wrote outside: {out}");
    // Landlock says "Permission denied"; the helper's read-only view of the system says so
    // first as "Read-only file system".
    assert!(
        (out.contains("Permission denied") || out.contains("Read-only file system"))
            && out.contains("Exit Code:"),
        "{out}"
    );
    // Inside the thread folders, /tmp and /dev/null are writable; reads work everywhere.
    let out = run(&sb, "echo ok > /mnt/user-data/outputs/ok.txt && cat /mnt/user-data/outputs/ok.txt && echo t > /tmp/antler-confined-$$ && rm /tmp/antler-confined-$$ && echo quiet > /dev/null && head -c 3 /etc/hostname >/dev/null && echo done").await;
    assert_eq!(out, "ok\ndone\n");
    assert!(h
        .path()
        .join("threads/t1/user-data/outputs/ok.txt")
        .is_file());
    // Other threads' folders are outside too.
    let other = h.path().join("threads/t2/user-data/workspace");
    std::fs::create_dir_all(&other).unwrap();
    let _ = run(&sb, &format!("touch {}/x", other.display())).await;
    assert!(!other.join("x").exists());
    // Writing to stderr still works.
    assert_eq!(run(&sb, "echo e >&2").await, "e\n");
}

#[tokio::test]
async fn in_process_confinement_blocks_writes_outside() {
    confined_bash_cannot_write_outside(None).await;
}

#[tokio::test]
async fn helper_confinement_blocks_writes_outside() {
    confined_bash_cannot_write_outside(Some(helper())).await;
}

#[tokio::test]
async fn a_confined_command_cannot_signal_antler() {
    if let Some(why) = landlock_missing() {
        eprintln!("skipping: Landlock unavailable: {why}");
        return;
    }
    let h = home();
    let sb = confined(h.path(), None);
    let me = std::process::id();
    let out = run(
        &sb,
        &format!("kill -0 {me} && echo reachable || echo blocked"),
    )
    .await;
    // Signal scoping needs Landlock ABI 6; older kernels still confine the filesystem.
    let abi: u32 = antler_sandbox::confine::landlock_support()
        .unwrap()
        .split("ABI v")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if abi >= 6 {
        assert!(out.starts_with("blocked"), "{out}");
    } else {
        eprintln!(
            "Landlock ABI {abi} < 6: signals are not scoped ({})",
            out.trim()
        );
    }
}

#[tokio::test]
async fn required_refuses_clearly_where_unsupported() {
    let h = home();
    let status = ConfinementStatus {
        mode: Confine::Required,
        active: false,
        reason: "this kernel does not support Landlock".into(),
    };
    let settings = SandboxSettings {
        confine: Confine::Required,
        ..quick()
    };
    let p = LocalSandboxProvider::with_status(h.path(), settings, status);
    let err = exec(&sandbox(&p, "t1"), "touch /mnt/user-data/workspace/ran")
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::ConfinementRequired(_)));
    assert_eq!(
        err.to_string(),
        "Landlock confinement is required (sandbox.confine: required) but unavailable: this kernel does not support Landlock. The command was not run."
    );
    assert!(!h.path().join("threads/t1/user-data/workspace/ran").exists());
}

#[test]
fn the_probe_reports_this_kernel() {
    let st = confinement_status(Confine::Auto);
    eprintln!(
        "Landlock on this kernel: active={} ({})",
        st.active, st.reason
    );
    assert_eq!(st.active, landlock_missing().is_none());
}

#[test]
fn the_helper_fails_closed_on_bad_usage() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_antler-sandbox-test-helper"))
        .arg("/bin/true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: sandbox-exec"));
}
