//! The sandbox helper installed beside `antler`: confined bash runs under it when it is there
//! and of the same build; `antler` is its own helper when the helper is missing or refuses to
//! serve (built from other sources). Real binaries, real wardens, a mock model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use antler_test_support::MockReply;
use common::{as_text, bash_call, first_with, landlock_available, scripted};
use serde_json::Value;

/// What stands beside `antler` in the install folder.
enum Beside {
    Helper,
    Nothing,
    /// A helper that exits at once, as one of another build does.
    Stale,
    /// A file of that name that cannot be run.
    NotExecutable,
}

/// `antler` (and what `beside` says) in a fresh folder outside /tmp, hard-linked from the
/// build (copied where links fail).
fn install(beside: Beside) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let put = |from: &Path, name: &str| {
        let to = dir.path().join(name);
        if std::fs::hard_link(from, &to).is_err() {
            std::fs::copy(from, &to).unwrap();
        }
    };
    let antler = PathBuf::from(env!("CARGO_BIN_EXE_antler"));
    put(&antler, "antler");
    match beside {
        Beside::Helper => put(
            Path::new(env!("CARGO_BIN_EXE_antler-sandbox-helper")),
            "antler-sandbox-helper",
        ),
        Beside::Nothing => {}
        Beside::Stale | Beside::NotExecutable => {
            use std::os::unix::fs::PermissionsExt;
            let mode = if matches!(beside, Beside::Stale) {
                0o755
            } else {
                0o644
            };
            let file = dir.path().join("antler-sandbox-helper");
            std::fs::write(&file, "#!/bin/sh\nexit 3\n").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    let exe = dir.path().join("antler");
    (dir, exe)
}

/// Run one bash call that prints the command line of the sandbox's PID 1 (the warden), with
/// the `antler` at `exe`: (that command line, antler's stderr).
fn warden_command_line(exe: &Path) -> (String, String) {
    let (_mock, p) = scripted(
        [
            bash_call("call_1", "who is PID 1", "ps -ww -o args= -p 1 | cut -c1-300"),
            MockReply::text("done"),
        ],
        "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  confine: required\ntools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\ntitle:\n  enabled: false\n",
    );
    let out = std::process::Command::new(exe)
        .args(["run", "--output", "json", "show PID 1"])
        .current_dir(p.path())
        .env("ANTLER_HOME", p.home())
        .env("MOCK_KEY", "sk-test")
        .env_remove("ANTLER_SANDBOX_HELPER")
        .env_remove("ANTLER_CONFIG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {stderr}"));
    assert_eq!(v["status"], "success", "{v}\n{stderr}");
    let tool = first_with(&v["values"]["messages"], "type", "tool");
    (as_text(&tool["content"]).to_owned(), stderr)
}

/// With `beside` in the install folder, the sandbox's PID 1 is `expected` (a path with
/// arguments) and antler's stderr mentions every one of `warning`.
fn check(beside: Beside, expected: impl Fn(&Path) -> String, warning: &[&str]) {
    if !landlock_available() {
        return;
    }
    let (_dir, exe) = install(beside);
    let (pid1, stderr) = warden_command_line(&exe);
    let want = expected(&exe);
    assert!(
        pid1.starts_with(&want),
        "PID 1 is {pid1:?}, not {want:?}\n{stderr}"
    );
    for w in warning {
        assert!(stderr.contains(w), "no {w:?} in: {stderr}");
    }
}

fn antler_itself(exe: &Path) -> String {
    format!("{} sandbox-exec --warden-init ", exe.display())
}

#[test]
fn the_helper_beside_antler_parents_the_sandbox() {
    let helper = |exe: &Path| {
        let h = exe.with_file_name("antler-sandbox-helper");
        format!("{} --warden-init ", h.display())
    };
    check(Beside::Helper, helper, &[]);
}

#[test]
fn without_a_helper_antler_is_its_own() {
    check(Beside::Nothing, antler_itself, &[]);
}

#[test]
fn a_helper_that_will_not_serve_is_passed_over_for_antler() {
    check(
        Beside::Stale,
        antler_itself,
        &["antler-sandbox-helper", "did not serve"],
    );
}

#[test]
fn a_helper_that_cannot_be_started_is_passed_over_for_antler() {
    check(
        Beside::NotExecutable,
        antler_itself,
        &["cannot start the sandbox helper"],
    );
}
