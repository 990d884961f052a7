#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use antler_protocol::{Object, SandboxState, ThreadState};
use antler_runtime::{keys, NullSink, RunContext, Tool};
use antler_sandbox::{Confine, ConfinementStatus, LocalSandboxProvider};
use serde_json::json;

use super::*;

const SECRET: &str = "ALICE-SECRET-4242";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";

struct Fixture {
    home: tempfile::TempDir,
    provider: Arc<LocalSandboxProvider>,
    env: ToolEnv,
}

fn fixture() -> Fixture {
    // Outside /tmp when cargo's target dir is elsewhere (confined commands may write /tmp).
    let base = option_env!("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let home = tempfile::tempdir_in(base).unwrap();
    let settings = SandboxSettings {
        allow_host_bash: true,
        confine: Confine::Off,
        ..Default::default()
    };
    let off = ConfinementStatus {
        mode: Confine::Off,
        active: false,
        reason: "off".into(),
    };
    let provider = Arc::new(LocalSandboxProvider::with_status(
        home.path(),
        settings.clone(),
        off,
    ));
    let env = ToolEnv::new(provider.clone(), Arc::new(settings));
    Fixture {
        home,
        provider,
        env,
    }
}

/// Alice's thread `a1`: its sandbox acquired (cached in the provider, as after one of her runs)
/// and a secret in each of her folders. Returns her sandbox id and folders.
fn alice(f: &Fixture) -> (String, ThreadPaths) {
    let id = f.provider.acquire(Some("a1"), Some("alice")).unwrap();
    let paths = ThreadPaths::new(f.home.path(), "a1", Some("alice")).unwrap();
    std::fs::write(paths.workspace.join("secret.txt"), SECRET).unwrap();
    std::fs::write(paths.outputs.join("report.md"), SECRET).unwrap();
    std::fs::write(paths.uploads.join("pic.png"), PNG).unwrap();
    (id, paths)
}

/// A state naming Alice's sandbox and folders (a corrupted or legacy checkpoint).
fn forged(id: &str, paths: &ThreadPaths) -> ThreadState {
    ThreadState {
        sandbox: Some(SandboxState {
            sandbox_id: Some(id.to_owned()),
        }),
        thread_data: Some(paths.thread_data()),
        ..Default::default()
    }
}

fn bob_run() -> RunContext {
    RunContext::new("b1", "r", Arc::new(NullSink)).with_user(Some("bob".into()))
}

fn bob_paths(home: &Path) -> ThreadPaths {
    ThreadPaths::new(home, "b1", Some("bob")).unwrap()
}

fn ok<T>(step: Step<T>) -> T {
    match step {
        Ok(v) => v,
        Err(Fail(m)) => panic!("step failed: {m}"),
    }
}

#[test]
fn ensure_sandbox_ignores_a_forged_state_id() {
    let f = fixture();
    let (alice_id, alice_paths) = alice(&f);
    assert_eq!(alice_id, "local:alice:a1");
    let state = forged(&alice_id, &alice_paths);
    let run = bob_run();
    let ctx = ToolContext::new("c1", &state, &run);
    let sb = ok(ensure_sandbox(&f.env, &ctx));
    assert_eq!(sb.id(), "local:bob:b1");
    assert_eq!(
        sb.thread_paths().unwrap().workspace,
        bob_paths(f.home.path()).workspace
    );
    assert_eq!(run.get(&keys::SANDBOX_ID), Some("local:bob:b1".to_owned()));
    // The SandboxMiddleware is asked to record the run's id (it leaves a foreign one alone).
    assert!(run
        .get(&keys::SANDBOX_ACQUIRED_BY)
        .is_some_and(|calls| calls.contains("c1")));
    // A later call of the run reuses the derived id, still ignoring the state.
    let ctx = ToolContext::new("c2", &state, &run);
    assert_eq!(ok(ensure_sandbox(&f.env, &ctx)).id(), "local:bob:b1");
}

#[test]
fn a_state_id_that_matches_needs_no_new_record() {
    let f = fixture();
    let state = ThreadState {
        sandbox: Some(SandboxState {
            sandbox_id: Some("local:bob:b1".into()),
        }),
        ..Default::default()
    };
    let run = bob_run();
    let ctx = ToolContext::new("c1", &state, &run);
    assert_eq!(ok(ensure_sandbox(&f.env, &ctx)).id(), "local:bob:b1");
    assert!(!run
        .get(&keys::SANDBOX_ACQUIRED_BY)
        .is_some_and(|calls| calls.contains("c1")));
}

#[test]
fn prepare_gates_with_the_sandboxs_own_folders_not_thread_data() {
    let f = fixture();
    let (alice_id, alice_paths) = alice(&f);
    let state = forged(&alice_id, &alice_paths);
    let run = bob_run();
    let ctx = ToolContext::new("c1", &state, &run);
    let p = ok(prepare(&f.env, &ctx));
    let mine = bob_paths(f.home.path());
    let policy = p.policy.as_ref().unwrap();
    assert_eq!(policy.dirs, ThreadDirs::from(&mine));
    let host = policy
        .resolve_user_data("/mnt/user-data/workspace/secret.txt")
        .unwrap();
    assert!(host.starts_with(std::fs::canonicalize(&mine.workspace).unwrap()));
    // Commands are rewritten to the run's own folders.
    let cmd = policy.rewrite_user_data("cat /mnt/user-data/workspace/secret.txt");
    assert!(
        !cmd.contains(&*alice_paths.workspace.to_string_lossy()),
        "{cmd}"
    );
    assert!(mine.workspace.is_dir());
}

fn text_of(out: ToolOutput) -> String {
    match out {
        ToolOutput::Content { content, .. } => content.text(),
        ToolOutput::Command(c) => c
            .update
            .messages
            .unwrap_or_default()
            .iter()
            .map(|m| m.text())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

async fn call(tool: &dyn Tool, args: serde_json::Value, state: &ThreadState) -> String {
    let run = bob_run();
    let ctx = ToolContext::new("c1", state, &run);
    text_of(
        tool.call(args.as_object().unwrap().clone(), ctx)
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn every_tool_stays_in_the_runs_own_thread_whatever_state_says() {
    let f = fixture();
    let (alice_id, alice_paths) = alice(&f);
    let state = forged(&alice_id, &alice_paths);
    let tool = |name: &str| crate::builtin_tool(name, &Object::new(), &f.env).unwrap();

    let read = call(
        &*tool("read_file"),
        json!({"description": "d", "path": "/mnt/user-data/workspace/secret.txt"}),
        &state,
    )
    .await;
    assert!(!read.contains(SECRET), "{read}");
    assert!(read.starts_with("Error:"), "{read}");

    let bash = call(
        &*tool("bash"),
        json!({"description": "d", "command": "cat /mnt/user-data/workspace/secret.txt; ls /mnt/user-data/outputs"}),
        &state,
    )
    .await;
    assert!(!bash.contains(SECRET), "{bash}");
    assert!(!bash.contains("report.md"), "{bash}");

    let wrote = call(
        &*tool("write_file"),
        json!({"description": "d", "path": "/mnt/user-data/workspace/x", "content": "from bob"}),
        &state,
    )
    .await;
    assert!(!wrote.starts_with("Error:"), "{wrote}");
    let mine = bob_paths(f.home.path());
    assert_eq!(
        std::fs::read_to_string(mine.workspace.join("x")).unwrap(),
        "from bob"
    );
    assert!(!alice_paths.workspace.join("x").exists());

    let presented = call(
        &*crate::present_files_tool(&f.env),
        json!({"filepaths": ["/mnt/user-data/outputs/report.md"]}),
        &state,
    )
    .await;
    assert_eq!(
        presented,
        "Error: File not found: /mnt/user-data/outputs/report.md"
    );

    let viewed = call(
        &*crate::view_image_tool(&f.env),
        json!({"image_path": "/mnt/user-data/uploads/pic.png"}),
        &state,
    )
    .await;
    assert_eq!(
        viewed,
        "Error: Image file not found: /mnt/user-data/uploads/pic.png"
    );
}
