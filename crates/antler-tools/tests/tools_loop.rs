//! Every built-in tool and every bad-input error, through the agent loop with a scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod harness;

use std::sync::Arc;
use std::time::{Duration, Instant};

use antler_models::ScriptedReply;
use antler_protocol::{HumanMessage, Message, Object, ThreadState, ToolStatus};
use antler_runtime::{RunContext, Tool, ToolContext};
use antler_sandbox::{Confine, ConfinementStatus, SandboxSettings};
use harness::*;
use pretty_assertions::assert_eq;
use serde_json::json;

/// The text of the first human message in `msgs`.
fn first_human_text(msgs: &[Message]) -> String {
    let human = msgs.iter().find_map(Message::as_human);
    human.expect("a human message").content.text()
}

fn calls(v: Vec<(&str, &str, serde_json::Value)>) -> ScriptedReply {
    ScriptedReply::tool_calls(
        v.into_iter()
            .map(|(i, n, a)| (i.to_owned(), n.to_owned(), a)),
    )
}

/// One model turn calling `tool` once per `(id, args)`.
fn calls_to(tool: &str, v: Vec<(&str, serde_json::Value)>) -> ScriptedReply {
    ScriptedReply::tool_calls(
        v.into_iter()
            .map(|(i, a)| (i.to_owned(), tool.to_owned(), a)),
    )
}

/// Checks the result of each call: `Ok(text)` a success with that text, `Err(text)` an error.
fn assert_results(state: &ThreadState, expected: &[(&str, Result<&str, &str>)]) {
    for (id, want) in expected {
        let t = last_tool(state, id);
        match want {
            Ok(text) => assert_eq!(ok(&t), *text, "{id}"),
            Err(text) => assert_eq!(err(&t), *text, "{id}"),
        }
    }
}

// ---------------------------------------------------------------- bash

#[tokio::test]
async fn bash_runs_in_the_workspace_with_paths_translated() {
    let h = Harness::new(host_bash());
    let t = h
        .call("t1", "bash", json!({"description": "d", "command": "echo hi > /mnt/user-data/outputs/a.txt && cat /mnt/user-data/outputs/a.txt && pwd && ls /mnt/user-data"}))
        .await;
    assert_eq!(
        ok(&t),
        "hi\n/mnt/user-data/workspace\noutputs\nuploads\nworkspace\n"
    );
    assert_eq!(t.name.as_deref(), Some("bash"));
    assert!(h.thread_dir("t1").join("outputs/a.txt").is_file());
}

#[tokio::test]
async fn the_lazily_acquired_sandbox_is_persisted_and_reused() {
    let h = Harness::new(host_bash());
    let (out, _) = h
        .run(
            "t1",
            vec![
                // Two parallel first calls both acquire: same id, no reducer conflict.
                calls(vec![
                    (
                        "a",
                        "bash",
                        json!({"description": "d", "command": "echo one"}),
                    ),
                    (
                        "b",
                        "ls",
                        json!({"description": "d", "path": "/mnt/user-data/workspace"}),
                    ),
                ]),
                ScriptedReply::tool_call(
                    "c",
                    "bash",
                    json!({"description": "d", "command": "echo two"}),
                ),
            ],
        )
        .await;
    assert_eq!(
        out.state.sandbox.as_ref().unwrap().sandbox_id.as_deref(),
        Some("local:t1")
    );
    assert_eq!(ok(&last_tool(&out.state, "c")), "two\n");
    // The next turn of the thread reuses it.
    let (out2, _) = h
        .run(
            "t1",
            vec![ScriptedReply::tool_call(
                "d",
                "bash",
                json!({"description": "d", "command": "echo three"}),
            )],
        )
        .await;
    assert_eq!(
        out2.state.sandbox.as_ref().unwrap().sandbox_id.as_deref(),
        Some("local:t1")
    );
}

#[tokio::test]
async fn bash_is_removed_and_refuses_when_host_bash_is_off() {
    let settings = SandboxSettings {
        allow_host_bash: false,
        confine: Confine::Off,
        ..Default::default()
    };
    let h = Harness::new(settings);
    assert!(
        antler_tools::builtin_tool("deerflow.sandbox.tools:bash_tool", &Object::new(), &h.env)
            .is_none()
    );
    assert!(!antler_tools::default_tools(&h.env, false)
        .iter()
        .any(|t| t.name() == "bash"));
    // The tool re-checks at call time.
    let tool = antler_tools::bash::BashTool::new(h.env.clone());
    let run = RunContext::new("t1", "r", Arc::new(antler_runtime::NullSink));
    let state = antler_protocol::ThreadState::default();
    let ctx = ToolContext::new("c1", &state, &run);
    let args = json!({"description": "d", "command": "touch /mnt/user-data/workspace/ran"});
    let out = tool
        .call(args.as_object().unwrap().clone(), ctx)
        .await
        .unwrap();
    match out {
        antler_runtime::ToolOutput::Content {
            content, status, ..
        } => {
            assert_eq!(status, ToolStatus::Error);
            assert_eq!(content.text(), antler_tools::bash::HOST_BASH_DISABLED);
        }
        other => panic!("{other:?}"),
    }
    assert!(!h.thread_dir("t1").join("workspace/ran").exists());
}

#[tokio::test]
async fn bash_refuses_paths_outside_the_sandbox() {
    let h = Harness::new(host_bash());
    let t = h
        .call(
            "t1",
            "bash",
            json!({"description": "d", "command": "cat /etc/passwd"}),
        )
        .await;
    assert_eq!(
        err(&t),
        "Error: Unsafe absolute paths in command: /etc/passwd. Use paths under /mnt/user-data"
    );
    let t = h
        .call(
            "t1",
            "bash",
            json!({"description": "d", "command": "cat ../../x"}),
        )
        .await;
    assert_eq!(err(&t), "Error: Access denied: path traversal detected");
}

#[tokio::test]
async fn a_sixty_second_sleep_is_killed_at_the_timeout_with_its_children() {
    let h = Harness::new(SandboxSettings {
        bash_command_timeout: Duration::from_millis(1500),
        ..host_bash()
    });
    let started = Instant::now();
    let (out, model) = h
        .run("t1", vec![ScriptedReply::tool_call("c1", "bash", json!({"description": "d", "command": "echo begin; sleep 60 & echo $! > kid.pid; sleep 60"}))])
        .await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(8), "took {elapsed:?}");
    let t = last_tool(&out.state, "c1");
    let text = err(&t);
    assert!(
        text.starts_with("Error: Command timed out after 1.5 seconds and was terminated."),
        "{text}"
    );
    assert!(
        text.ends_with("Output before the timeout:\nbegin"),
        "{text}"
    );
    let pid: u32 = std::fs::read_to_string(h.thread_dir("t1").join("workspace/kid.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(harness::exits_soon(pid), "child {pid} survived the timeout");
    // The run continued: the model saw the error and answered.
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn cancelling_the_run_kills_the_command_and_its_children() {
    let h = Harness::new(host_bash());
    let model = Arc::new(antler_models::ScriptedModel::new([
        ScriptedReply::tool_call(
            "c1",
            "bash",
            json!({"description": "d", "command": "sleep 60 & echo $! > kid.pid; sleep 60"}),
        ),
    ]));
    let agent = h.agent(model);
    let cancel = antler_runtime::CancellationToken::new();
    let run = Arc::new(
        RunContext::new("t1", "r1", Arc::new(antler_runtime::NullSink)).with_cancel(cancel.clone()),
    );
    let pidfile = h.thread_dir("t1").join("workspace/kid.pid");
    let watcher = {
        let pidfile = pidfile.clone();
        tokio::spawn(async move {
            // Cancel as soon as the command has started its child.
            while std::fs::read_to_string(&pidfile)
                .map(|s| s.trim().is_empty())
                .unwrap_or(true)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            cancel.cancel();
        })
    };
    let started = Instant::now();
    let out = agent
        .run(antler_runtime::RunInput::message(Message::human("go")), run)
        .await;
    watcher.await.unwrap();
    assert_eq!(out.status, antler_runtime::RunStatus::Interrupted);
    assert!(started.elapsed() < Duration::from_secs(20));
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        harness::exits_soon(pid),
        "child {pid} survived the cancellation"
    );
}

#[tokio::test]
async fn oversize_bash_output_is_middle_truncated_with_a_marker() {
    let h = Harness::new(SandboxSettings {
        bash_output_max_chars: 500,
        ..host_bash()
    });
    let t = h
        .call(
            "t1",
            "bash",
            json!({"description": "d", "command": "seq 1 20000"}),
        )
        .await;
    let text = ok(&t);
    assert!(text.chars().count() <= 500);
    assert!(text.starts_with("1\n2\n3\n"));
    assert!(text.ends_with("19999\n20000\n"));
    assert!(text.contains("chars skipped] ..."), "{text}");
}

#[tokio::test]
async fn the_audit_blocks_warns_and_logs_every_bash_call() {
    let h = Harness::new(host_bash());
    let (out, _) = h
        .run(
            "t1",
            vec![calls(vec![
                (
                    "p",
                    "bash",
                    json!({"description": "d", "command": "echo safe"}),
                ),
                (
                    "w",
                    "bash",
                    json!({"description": "d", "command": "echo pip install requests"}),
                ),
                (
                    "b",
                    "bash",
                    json!({"description": "d", "command": "rm -rf / --no-preserve-root"}),
                ),
                ("e", "bash", json!({"description": "d", "command": "   "})),
                (
                    "x",
                    "ls",
                    json!({"description": "d", "path": "/mnt/user-data"}),
                ),
            ])],
        )
        .await;
    assert_results(
        &out.state,
        &[
            ("p", Ok("safe\n")),
            ("w", Ok("pip install requests\n\n\n⚠️ Warning: `echo pip install requests` is a medium-risk command that may modify the runtime environment.")),
        ],
    );
    let b = last_tool(&out.state, "b");
    assert_eq!(
        err_text(&b),
        "Command blocked: security violation detected. Please use a safer alternative approach."
    );
    assert_eq!(
        err_text(&last_tool(&out.state, "e")),
        "Command blocked: empty command. Please use a safer alternative approach."
    );
    let records = h.audit.records();
    let verdicts: Vec<(String, &str)> = records
        .iter()
        .map(|r| (r.command.clone(), r.verdict.as_str()))
        .collect();
    assert_eq!(
        verdicts.len(),
        4,
        "one record per bash call, none for ls: {verdicts:?}"
    );
    assert!(verdicts.contains(&("echo safe".into(), "pass")));
    assert!(verdicts.contains(&("echo pip install requests".into(), "warn")));
    assert!(verdicts.contains(&("rm -rf / --no-preserve-root".into(), "block")));
    assert!(records.iter().all(|r| r.thread_id == "t1"));
}

fn err_text(t: &antler_protocol::ToolMessage) -> String {
    assert_eq!(t.status, ToolStatus::Error);
    t.content.text()
}

#[tokio::test]
async fn required_confinement_refuses_clearly_where_unsupported() {
    let status = ConfinementStatus {
        mode: Confine::Required,
        active: false,
        reason: "this kernel does not support Landlock (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)".into(),
    };
    let settings = SandboxSettings {
        confine: Confine::Required,
        ..host_bash()
    };
    let h = Harness::with_status(settings, status);
    let t = h
        .call(
            "t1",
            "bash",
            json!({"description": "d", "command": "touch ran"}),
        )
        .await;
    assert_eq!(
        err(&t),
        "Error: Landlock confinement is required (sandbox.confine: required) but unavailable: this kernel does not support Landlock (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK). The command was not run."
    );
    assert!(!h.thread_dir("t1").join("workspace/ran").exists());
}

#[tokio::test]
async fn confined_bash_is_offered_by_default_and_cannot_write_outside() {
    if let Err(why) = antler_sandbox::confine::landlock_support() {
        eprintln!("skipping: Landlock unavailable: {why}");
        return;
    }
    // allow_host_bash stays false: confinement alone turns bash on.
    let settings = SandboxSettings {
        confine: Confine::Auto,
        ..Default::default()
    };
    let h = Harness::with_status(
        settings.clone(),
        antler_sandbox::confinement_status(Confine::Auto),
    );
    assert!(h.env.bash_available());
    let outside = scratch_dir();
    let target = outside.path().join("pwned");
    // Spell the path without a literal `/` so the best-effort validation does not stop it first:
    // Landlock is what must refuse the write.
    let octal: String = target
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c == '/' {
                "\\057".to_owned()
            } else {
                c.to_string()
            }
        })
        .collect();
    let cmd = format!("p=$(printf '{octal}'); echo x > \"$p\"; echo wrote-inside > /mnt/user-data/outputs/in.txt; cat /mnt/user-data/outputs/in.txt");
    let t = h
        .call("t1", "bash", json!({"description": "d", "command": cmd}))
        .await;
    let text = ok(&t);
    // Landlock refuses with "Permission denied"; under the sandbox helper the read-only view
    // of the system refuses first.
    assert!(
        text.contains("Permission denied") || text.contains("Read-only file system"),
        "{text}"
    );
    assert!(text.starts_with("wrote-inside\n"), "{text}");
    assert!(
        !target.exists(),
        "confined bash wrote outside the thread folders"
    );
}

// ---------------------------------------------------------------- ls, glob, grep

#[tokio::test]
async fn ls_lists_masks_and_reports_errors() {
    let h = Harness::new(host_bash());
    let (out, _) = h
        .run(
            "t1",
            vec![
                calls_to("write_file", vec![("w1", json!({"description": "d", "path": "/mnt/user-data/workspace/src/a.py", "content": "print(1)\n"})), ("w2", json!({"description": "d", "path": "/mnt/user-data/workspace/.upload-x.part", "content": "staging"}))]),
                calls_to("ls", vec![("l1", json!({"description": "d", "path": "/mnt/user-data/workspace"})), ("l2", json!({"description": "d", "path": "/mnt/user-data/outputs"})), ("l3", json!({"description": "d", "path": "/mnt/user-data/workspace/nope"})), ("l4", json!({"description": "d", "path": "/etc"})), ("l5", json!({"description": "d", "path": "/mnt/user-data/workspace/src/a.py"}))]),
            ],
        )
        .await;
    assert_results(
        &out.state,
        &[
            ("l1", Ok("/mnt/user-data/workspace/src/\n/mnt/user-data/workspace/src/a.py")),
            ("l2", Ok("(empty)")),
            ("l3", Err("Error: Directory not found: /mnt/user-data/workspace/nope")),
            ("l4", Err("Error: Permission denied: /etc (Only paths under /mnt/user-data/, /mnt/skills/, or configured mount paths are allowed)")),
            ("l5", Err("Error: Path is not a directory: /mnt/user-data/workspace/src/a.py")),
        ],
    );
}

#[tokio::test]
async fn glob_and_grep_return_virtual_paths() {
    let h = Harness::new(host_bash());
    let ws = h.thread_dir("t1").join("workspace");
    std::fs::create_dir_all(ws.join("pkg")).unwrap();
    std::fs::create_dir_all(ws.join("node_modules")).unwrap();
    std::fs::write(ws.join("a.py"), "import os\nTODO: one\n").unwrap();
    std::fs::write(ws.join("pkg/b.py"), "todo two\n").unwrap();
    std::fs::write(ws.join("node_modules/c.py"), "TODO ignored\n").unwrap();
    let (out, _) = h
        .run(
            "t1",
            vec![calls(vec![
                ("g1", "glob", json!({"description": "d", "pattern": "**/*.py", "path": "/mnt/user-data/workspace"})),
                ("g2", "glob", json!({"description": "d", "pattern": "*.py", "path": "/mnt/user-data/workspace", "max_results": 1})),
                ("g3", "glob", json!({"description": "d", "pattern": "*.rs", "path": "/mnt/user-data/workspace"})),
                ("g4", "glob", json!({"description": "d", "pattern": "*", "path": "/mnt/user-data/workspace/missing"})),
                ("r1", "grep", json!({"description": "d", "pattern": "todo", "path": "/mnt/user-data/workspace"})),
                ("r2", "grep", json!({"description": "d", "pattern": "TODO", "path": "/mnt/user-data/workspace", "case_sensitive": true, "glob": "*.py"})),
                ("r3", "grep", json!({"description": "d", "pattern": "(", "path": "/mnt/user-data/workspace"})),
                ("r4", "grep", json!({"description": "d", "pattern": "nothing-here", "path": "/mnt/user-data/workspace/a.py"})),
                ("r5", "grep", json!({"description": "d", "pattern": "root", "path": "/etc/passwd"})),
            ])],
        )
        .await;
    assert_results(
        &out.state,
        &[
            ("g1", Ok("Found 2 paths under /mnt/user-data/workspace\n1. /mnt/user-data/workspace/a.py\n2. /mnt/user-data/workspace/pkg/b.py")),
            ("g2", Ok("Found 1 paths under /mnt/user-data/workspace (showing first 1)\n1. /mnt/user-data/workspace/a.py\nResults truncated. Narrow the path or pattern to see fewer matches.")),
            ("g3", Ok("No files matched under /mnt/user-data/workspace")),
            ("g4", Err("Error: Directory not found: /mnt/user-data/workspace/missing")),
            ("r1", Ok("Found 2 matches under /mnt/user-data/workspace\n/mnt/user-data/workspace/a.py:2: TODO: one\n/mnt/user-data/workspace/pkg/b.py:1: todo two")),
            ("r2", Ok("Found 1 matches under /mnt/user-data/workspace\n/mnt/user-data/workspace/a.py:2: TODO: one")),
        ],
    );
    assert!(err(&last_tool(&out.state, "r3")).starts_with("Error: Invalid regex pattern: "));
    assert_eq!(
        ok(&last_tool(&out.state, "r4")),
        "No matches found under /mnt/user-data/workspace/a.py"
    );
    assert!(err(&last_tool(&out.state, "r5")).starts_with("Error: Permission denied: /etc/passwd"));
}

// ---------------------------------------------------------------- read_file

#[tokio::test]
async fn read_file_ranges_limits_and_errors() {
    let h = Harness::new(SandboxSettings {
        read_file_output_max_chars: 300,
        read_file_max_bytes: 4096,
        ..host_bash()
    });
    let ws = h.thread_dir("t1").join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("lines.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join("long.txt"), "z".repeat(1000)).unwrap();
    std::fs::write(ws.join("huge.txt"), "y".repeat(5000)).unwrap();
    std::fs::write(ws.join("empty.txt"), "").unwrap();
    std::fs::write(
        ws.join("img.png"),
        [
            0x89u8, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0xff, 0xfe,
        ],
    )
    .unwrap();
    let outside = scratch_dir();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.join("link.txt")).unwrap();
    let p = |f: &str| format!("/mnt/user-data/workspace/{f}");
    let (out, _) = h
        .run(
            "t1",
            vec![calls_to("read_file", vec![("a", json!({"description": "d", "path": p("lines.txt")})), ("b", json!({"description": "d", "path": p("lines.txt"), "start_line": 2, "end_line": 3})), ("c", json!({"description": "d", "path": p("lines.txt"), "start_line": 9})), ("d", json!({"description": "d", "path": p("lines.txt"), "start_line": 3, "end_line": 2})), ("e", json!({"description": "d", "path": p("empty.txt")})), ("f", json!({"description": "d", "path": p("long.txt")})), ("g", json!({"description": "d", "path": p("missing.txt")})), ("h", json!({"description": "d", "path": p("img.png")})), ("i", json!({"description": "d", "path": "/mnt/user-data/workspace"})), ("j", json!({"description": "d", "path": "/etc/passwd"})), ("k", json!({"description": "d", "path": "/mnt/user-data/workspace/../../../x"})), ("l", json!({"description": "d", "path": p("link.txt")})), ("m", json!({"description": "d", "path": p("huge.txt")})), ("n", json!({"description": "d", "path": p("huge.txt"), "start_line": 1, "end_line": 1}))])],
        )
        .await;
    let s = &out.state;
    assert_results(
        s,
        &[
            ("a", Ok("one\ntwo\nthree\n")),
            ("b", Ok("two\nthree")),
            ("c", Ok("(start_line exceeds file length)")),
            ("d", Ok("(start_line > end_line — no lines in range)")),
            ("e", Ok("(empty)")),
        ],
    );
    let f = ok(&last_tool(s, "f"));
    assert!(
        f.chars().count() <= 300
            && f.contains("of 1000 chars. Use start_line/end_line to read a specific range] ..."),
        "{f}"
    );
    assert_eq!(
        err(&last_tool(s, "g")),
        "Error: File not found: /mnt/user-data/workspace/missing.txt"
    );
    assert!(err(&last_tool(s, "h")).starts_with("Error: cannot read '/mnt/user-data/workspace/img.png' as text — it appears to be a binary file"));
    assert_results(
        s,
        &[
            ("i", Err("Error: Path is a directory, not a file: /mnt/user-data/workspace")),
            ("j", Err("Error: Permission denied reading file: /etc/passwd (Only paths under /mnt/user-data/, /mnt/skills/, or configured mount paths are allowed)")),
            ("k", Err("Error: Permission denied reading file: /mnt/user-data/workspace/../../../x (Access denied: path traversal detected)")),
            ("l", Err("Error: Permission denied reading file: /mnt/user-data/workspace/link.txt (Access denied: path traversal detected)")),
        ],
    );
    assert!(err(&last_tool(s, "m")).starts_with("Error: File is too large to read at once: /mnt/user-data/workspace/huge.txt (5000 bytes; the limit is 4096 bytes)."));
    // A line range streams past the whole-file limit; the output cap still applies.
    let n = ok(&last_tool(s, "n"));
    assert!(
        n.starts_with("yyy") && n.chars().count() <= 300 && n.contains("of 5000 chars"),
        "{n}"
    );
}

// ---------------------------------------------------------------- write_file, str_replace

#[tokio::test]
async fn write_file_overwrites_appends_and_refuses_outside() {
    let h = Harness::new(host_bash());
    let big = "x".repeat(81 * 1024);
    let (out, _) = h
        .run(
            "t1",
            vec![
                ScriptedReply::tool_call("a", "write_file", json!({"description": "d", "path": "/mnt/user-data/outputs/r.md", "content": "# R\n"})),
                ScriptedReply::tool_call("b", "write_file", json!({"description": "d", "path": "/mnt/user-data/outputs/r.md", "content": "more\n", "append": true})),
                calls_to("write_file", vec![("c", json!({"description": "d", "path": "/etc/antler-test", "content": "x"})), ("d", json!({"description": "d", "path": "/mnt/skills/x/SKILL.md", "content": "x"})), ("e", json!({"description": "d", "path": "/mnt/user-data/outputs/big.txt", "content": big})), ("f", json!({"description": "d", "path": "/mnt/user-data/outputs", "content": "x"})), ("g", json!({"description": "d", "path": "/mnt/user-data/../../escape.txt", "content": "x"}))]),
            ],
        )
        .await;
    let s = &out.state;
    assert_results(s, &[("a", Ok("OK")), ("b", Ok("OK"))]);
    assert_eq!(
        std::fs::read_to_string(h.thread_dir("t1").join("outputs/r.md")).unwrap(),
        "# R\nmore\n"
    );
    assert_results(
        s,
        &[
            ("c", Err("Error: Permission denied writing to file: /etc/antler-test (Only paths under /mnt/user-data/, /mnt/skills/, or configured mount paths are allowed)")),
            ("d", Err("Error: Permission denied writing to file: /mnt/skills/x/SKILL.md (Write access to skills path is not allowed: /mnt/skills/x/SKILL.md)")),
        ],
    );
    assert!(err(&last_tool(s, "e")).starts_with(
        "Error: write_file content (82944 bytes) exceeds the 81920-byte single-call limit."
    ));
    assert_eq!(
        err(&last_tool(s, "f")),
        "Error: Path is a directory, not a file: /mnt/user-data/outputs"
    );
    assert!(err(&last_tool(s, "g")).contains("Access denied: path traversal detected"));
    assert!(!std::path::Path::new("/etc/antler-test").exists());
}

#[tokio::test]
async fn str_replace_requires_a_unique_match() {
    let h = Harness::new(host_bash());
    let f = h.thread_dir("t1").join("workspace/f.txt");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "alpha beta beta gamma\n").unwrap();
    let p = "/mnt/user-data/workspace/f.txt";
    let (out, _) = h
        .run(
            "t1",
            vec![
                ScriptedReply::tool_call("a", "str_replace", json!({"description": "d", "path": p, "old_str": "alpha", "new_str": "ALPHA"})),
                ScriptedReply::tool_call("b", "str_replace", json!({"description": "d", "path": p, "old_str": "beta", "new_str": "B"})),
                ScriptedReply::tool_call("c", "str_replace", json!({"description": "d", "path": p, "old_str": "delta", "new_str": "D"})),
                ScriptedReply::tool_call("d", "str_replace", json!({"description": "d", "path": p, "old_str": "beta", "new_str": "B", "replace_all": true})),
                ScriptedReply::tool_call("e", "str_replace", json!({"description": "d", "path": "/mnt/user-data/workspace/none.txt", "old_str": "x", "new_str": "y"})),
                ScriptedReply::tool_call("f", "str_replace", json!({"description": "d", "path": "/mnt/skills/s/SKILL.md", "old_str": "x", "new_str": "y"})),
            ],
        )
        .await;
    let s = &out.state;
    assert_results(
        s,
        &[
            ("a", Ok("OK")),
            ("b", Err("Error: String to replace appears 2 times in file: /mnt/user-data/workspace/f.txt; it must appear exactly once. Include more surrounding text in old_str, or set replace_all to true.")),
            ("c", Err("Error: String to replace not found in file: /mnt/user-data/workspace/f.txt")),
            ("d", Ok("OK")),
            ("e", Err("Error: File not found: /mnt/user-data/workspace/none.txt")),
        ],
    );
    assert!(err(&last_tool(s, "f"))
        .starts_with("Error: Permission denied accessing file: /mnt/skills/s/SKILL.md"));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "ALPHA B B gamma\n");
}

#[tokio::test]
async fn parallel_edits_of_one_file_both_land() {
    let h = Harness::new(host_bash());
    let f = h.thread_dir("t1").join("workspace/f.txt");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "one\ntwo\n").unwrap();
    let p = "/mnt/user-data/workspace/f.txt";
    let (out, _) = h
        .run(
            "t1",
            vec![calls(vec![
                (
                    "a",
                    "str_replace",
                    json!({"description": "d", "path": p, "old_str": "one", "new_str": "ONE"}),
                ),
                (
                    "b",
                    "str_replace",
                    json!({"description": "d", "path": p, "old_str": "two", "new_str": "TWO"}),
                ),
                (
                    "c",
                    "write_file",
                    json!({"description": "d", "path": p, "content": "three\n", "append": true}),
                ),
            ])],
        )
        .await;
    for id in ["a", "b", "c"] {
        assert_eq!(ok(&last_tool(&out.state, id)), "OK");
    }
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "ONE\nTWO\nthree\n");
    assert!(h.env.locks.is_empty(), "locks are released");
}

// ---------------------------------------------------------------- present_files, view_image

#[tokio::test]
async fn present_files_updates_artifacts_through_the_reducer() {
    let h = Harness::new(host_bash());
    let outd = h.thread_dir("t1").join("outputs");
    std::fs::create_dir_all(outd.join("sub")).unwrap();
    for f in ["a.md", "b.md", "sub/c.png"] {
        std::fs::write(outd.join(f), "x").unwrap();
    }
    std::fs::write(h.thread_dir("t1").join("workspace/w.txt"), "x").ok();
    let (out, _) = h
        .run(
            "t1",
            vec![calls_to("present_files", vec![("p1", json!({"filepaths": ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]})), ("p2", json!({"filepaths": ["/mnt/user-data/outputs/b.md", "/mnt/user-data/outputs/sub/c.png"]})), ("p3", json!({"filepaths": [outd.join("a.md").to_string_lossy()]})), ("e1", json!({"filepaths": ["/mnt/user-data/outputs/a.md", "/mnt/user-data/workspace/w.txt"]})), ("e2", json!({"filepaths": ["/mnt/user-data/outputs/../../../etc/passwd"]})), ("e3", json!({"filepaths": ["/mnt/user-data/outputs/missing.md"]}))])],
        )
        .await;
    let s = &out.state;
    assert_results(
        s,
        &[
            ("p1", Ok("Successfully presented files")),
            ("p3", Ok("Successfully presented files")),
        ],
    );
    assert_eq!(
        s.artifacts,
        vec![
            "/mnt/user-data/outputs/a.md",
            "/mnt/user-data/outputs/b.md",
            "/mnt/user-data/outputs/sub/c.png"
        ]
    );
    assert_results(
        s,
        &[
            ("e1", Err("Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/workspace/w.txt")),
            ("e2", Err("Error: Access denied: path traversal detected")),
            ("e3", Err("Error: File not found: /mnt/user-data/outputs/missing.md")),
        ],
    );
}

#[tokio::test]
async fn view_image_checks_and_records_metadata_only() {
    let h = Harness::new(host_bash());
    let up = h.thread_dir("t1").join("uploads");
    std::fs::create_dir_all(&up).unwrap();
    let png = [0x89u8, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3];
    std::fs::write(up.join("pic.png"), png).unwrap();
    std::fs::write(up.join("fake.png"), b"GIF89a....").unwrap();
    std::fs::write(up.join("notes.txt"), b"hello").unwrap();
    std::fs::write(up.join("junk.jpg"), b"hello").unwrap();
    let outside = scratch_dir();
    std::fs::write(outside.path().join("o.png"), png).unwrap();
    std::os::unix::fs::symlink(outside.path().join("o.png"), up.join("escape.png")).unwrap();
    let (out, _) = h
        .run(
            "t1",
            vec![calls_to(
                "view_image",
                vec![
                    ("a", json!({"image_path": "/mnt/user-data/uploads/pic.png"})),
                    ("b", json!({"image_path": "/etc/x.png"})),
                    (
                        "c",
                        json!({"image_path": "/mnt/user-data/uploads/escape.png"}),
                    ),
                    (
                        "d",
                        json!({"image_path": "/mnt/user-data/uploads/none.png"}),
                    ),
                    (
                        "e",
                        json!({"image_path": "/mnt/user-data/uploads/notes.txt"}),
                    ),
                    (
                        "f",
                        json!({"image_path": "/mnt/user-data/uploads/fake.png"}),
                    ),
                    (
                        "g",
                        json!({"image_path": "/mnt/user-data/uploads/junk.jpg"}),
                    ),
                ],
            )],
        )
        .await;
    let s = &out.state;
    assert_eq!(ok(&last_tool(s, "a")), "Successfully read image");
    let v = &s.viewed_images["/mnt/user-data/uploads/pic.png"];
    assert_eq!(v["mime_type"], "image/png");
    assert_eq!(v["size"], 11);
    assert_eq!(s.viewed_images.len(), 1);
    assert_results(
        s,
        &[
            ("b", Err("Error: Only image paths under /mnt/user-data/workspace, /mnt/user-data/uploads, /mnt/user-data/outputs are allowed")),
            ("c", Err("Error: Access denied: path traversal detected")),
            ("d", Err("Error: Image file not found: /mnt/user-data/uploads/none.png")),
            ("e", Err("Error: Unsupported image format: .txt. Supported formats: .jpg, .jpeg, .png, .webp, .gif")),
            ("f", Err("Error: Image contents are image/gif, but file extension indicates image/png")),
            ("g", Err("Error: File contents do not match a supported image format")),
        ],
    );
}

#[tokio::test]
async fn view_image_is_only_offered_to_vision_models() {
    let mut h = Harness::new(host_bash());
    h.vision = false;
    let (out, model) = h
        .run(
            "t1",
            vec![ScriptedReply::tool_call(
                "a",
                "view_image",
                json!({"image_path": "/mnt/user-data/uploads/x.png"}),
            )],
        )
        .await;
    assert!(!model.requests()[0].tools.contains(&"view_image".to_owned()));
    assert!(
        err_text(&last_tool(&out.state, "a")).starts_with("Error: view_image is not a valid tool")
    );
}

// ---------------------------------------------------------------- thread data, uploads

#[tokio::test]
async fn thread_data_and_the_user_message_stamp() {
    let h = Harness::new(host_bash());
    let (out, _) = h.run("t1", vec![]).await;
    let td = out.state.thread_data.as_ref().unwrap();
    assert_eq!(
        td.workspace_path.as_deref(),
        Some(h.thread_dir("t1").join("workspace").to_str().unwrap())
    );
    let human = out
        .state
        .messages
        .iter()
        .find_map(Message::as_human)
        .unwrap();
    assert_eq!(human.name.as_deref(), Some("user-input"));
    assert!(human.additional_kwargs["run_id"]
        .as_str()
        .unwrap()
        .starts_with("run-"));
    assert!(human.additional_kwargs["timestamp"]
        .as_str()
        .unwrap()
        .ends_with("+00:00"));
    // Lazy: nothing was created because no tool ran.
    assert!(!h.thread_dir("t1").exists());
}

#[tokio::test]
async fn attached_files_are_listed_for_the_model_and_recomputed_each_turn() {
    let h = Harness::new(host_bash());
    let src = scratch_dir();
    std::fs::write(
        src.path().join("report.md"),
        "# Intro\ntext\n## Results\nnumbers\n",
    )
    .unwrap();
    std::fs::write(src.path().join("data.csv"), "a,b\n1,2\n").unwrap();
    let paths = antler_sandbox::ThreadPaths::new(h.home.path(), "t1", None).unwrap();
    let files = antler_sandbox::attach_files(
        &[src.path().join("report.md"), src.path().join("data.csv")],
        &paths,
        &antler_sandbox::UploadSettings::default(),
    )
    .unwrap();
    let mut kwargs = Object::new();
    kwargs.insert(
        "files".into(),
        json!(files.iter().map(|f| f.kwargs_entry()).collect::<Vec<_>>()),
    );
    let msg = Message::Human(HumanMessage {
        content: "summarise".into(),
        additional_kwargs: kwargs.into(),
        ..Default::default()
    });
    let (out, model) = h
        .run_message(
            "t1",
            msg,
            vec![ScriptedReply::tool_call(
                "r",
                "read_file",
                json!({"description": "d", "path": "/mnt/user-data/uploads/data.csv"}),
            )],
        )
        .await;
    let sent = first_human_text(&model.requests()[0].messages);
    assert!(sent.starts_with("<current_uploads>\nThe following files were uploaded in this message:\n\n- report.md (0.0 KB)\n  Path: /mnt/user-data/uploads/report.md\n  Document outline (use `read_file` with line ranges to read sections):\n    L1: Intro\n    L3: Results\n"), "{sent}");
    assert!(sent.contains("- data.csv (0.0 KB)\n  Path: /mnt/user-data/uploads/data.csv\n"));
    assert!(sent.ends_with("</current_uploads>\n\nsummarise"));
    assert_eq!(ok(&last_tool(&out.state, "r")), "a,b\n1,2\n");
    let uploaded = out.state.uploaded_files.as_ref().unwrap();
    assert_eq!(uploaded.len(), 2);
    assert_eq!(
        uploaded[0],
        json!({"filename": "report.md", "size": 32, "path": "/mnt/user-data/uploads/report.md", "extension": ".md"})
    );
    let human = out
        .state
        .messages
        .iter()
        .find_map(Message::as_human)
        .unwrap();
    assert_eq!(
        human.additional_kwargs["original_user_content"],
        "summarise"
    );
    // Next turn, no files: the list is cleared.
    let (out2, _) = h.run("t1", vec![]).await;
    assert_eq!(out2.state.uploaded_files, Some(vec![]));
}

// ---------------------------------------------------------------- nothing escapes

#[tokio::test]
async fn nothing_outside_the_thread_folders_is_ever_written() {
    let h = Harness::new(host_bash());
    let parent = h.home.path().parent().unwrap().to_path_buf();
    let before_parent = tree(&parent)
        .into_iter()
        .filter(|p| !p.starts_with(h.home.path().file_name().unwrap().to_str().unwrap()))
        .collect::<Vec<_>>();
    let (out, _) = h
        .run(
            "t1",
            vec![calls(vec![
                ("a", "write_file", json!({"description": "d", "path": "/mnt/user-data/../escape.txt", "content": "x"})),
                ("b", "write_file", json!({"description": "d", "path": "/mnt/user-data/workspace/../../escape.txt", "content": "x"})),
                ("c", "bash", json!({"description": "d", "command": "echo x > ../escape.txt"})),
                ("d", "bash", json!({"description": "d", "command": "cd .. && touch escape.txt"})),
                ("e", "str_replace", json!({"description": "d", "path": "/mnt/user-data/../x", "old_str": "a", "new_str": "b"})),
                ("f", "write_file", json!({"description": "d", "path": "/tmp/antler-escape.txt", "content": "x"})),
                ("g", "bash", json!({"description": "d", "command": "rm -rf ~"})),
            ])],
        )
        .await;
    for id in ["a", "b", "c", "d", "e", "f", "g"] {
        assert_eq!(last_tool(&out.state, id).status, ToolStatus::Error, "{id}");
    }
    let home_tree = tree(h.home.path());
    assert!(
        home_tree
            .iter()
            .all(|p| p == "threads" || p.starts_with("threads/t1")),
        "{home_tree:?}"
    );
    assert!(!home_tree.iter().any(|p| p.ends_with("escape.txt")));
    let after_parent = tree(&parent)
        .into_iter()
        .filter(|p| !p.starts_with(h.home.path().file_name().unwrap().to_str().unwrap()))
        .collect::<Vec<_>>();
    assert!(after_parent
        .iter()
        .all(|p| before_parent.contains(p) || !p.contains("escape")));
    assert!(!std::path::Path::new("/tmp/antler-escape.txt").exists());
}

#[tokio::test]
async fn a_thread_folder_swapped_for_a_symlink_is_refused_by_every_file_tool() {
    const CANARY: &str = "CANARY-CONTENT-0b7e";
    let png = [0x89u8, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3];
    for (folder, to_proc) in [
        ("outputs", false),
        ("uploads", false),
        ("workspace", true),
        ("outputs", true),
    ] {
        let h = Harness::new(host_bash());
        // First run: the thread folders exist and the sandbox is cached.
        let t = h
            .call(
                "t1",
                "write_file",
                json!({"description": "d", "path": "/mnt/user-data/workspace/own.txt", "content": "own"}),
            )
            .await;
        ok(&t);
        let canary = scratch_dir();
        std::fs::write(canary.path().join("secret.txt"), CANARY).unwrap();
        std::fs::write(canary.path().join("pic.png"), png).unwrap();
        let before = tree(canary.path());
        let victim = h.thread_dir("t1").join(folder);
        std::fs::remove_dir_all(&victim).unwrap();
        let target = if to_proc {
            std::path::PathBuf::from("/proc/self")
        } else {
            canary.path().to_path_buf()
        };
        std::os::unix::fs::symlink(&target, &victim).unwrap();
        let v = format!("/mnt/user-data/{folder}");
        let f = if to_proc {
            format!("{v}/comm")
        } else {
            format!("{v}/secret.txt")
        };
        let img = format!("{v}/pic.png");
        let cases = vec![
            ("r", "read_file", json!({"description": "d", "path": f})),
            (
                "w",
                "write_file",
                json!({"description": "d", "path": f, "content": "pwned"}),
            ),
            (
                "n",
                "write_file",
                json!({"description": "d", "path": format!("{v}/new.txt"), "content": "pwned"}),
            ),
            (
                "s",
                "str_replace",
                json!({"description": "d", "path": f, "old_str": "CANARY", "new_str": "pwned"}),
            ),
            ("l", "ls", json!({"description": "d", "path": v})),
            (
                "g",
                "glob",
                json!({"description": "d", "pattern": "*", "path": v}),
            ),
            (
                "q",
                "grep",
                json!({"description": "d", "pattern": ".", "path": v}),
            ),
            ("i", "view_image", json!({"image_path": img})),
            ("p", "present_files", json!({"filepaths": [f]})),
        ];
        let ids: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let (out, _) = h.run("t1", vec![calls(cases)]).await;
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        for id in ids {
            let t = last_tool(&out.state, id);
            let text = t.content.text();
            assert_eq!(t.status, ToolStatus::Error, "{folder} {id}: {text}");
            assert!(text.starts_with("Error:"), "{folder} {id}: {text}");
            assert!(
                !text.contains(CANARY) && !text.contains(comm.trim()) && !text.contains("cmdline"),
                "{folder} {id} leaked: {text}"
            );
            if id != "p" {
                assert!(text.contains("is not a directory"), "{folder} {id}: {text}");
            }
        }
        assert!(out.state.viewed_images.is_empty());
        assert!(out.state.artifacts.is_empty());
        assert_eq!(tree(canary.path()), before, "{folder}: the canary changed");
        assert_eq!(
            std::fs::read_to_string(canary.path().join("secret.txt")).unwrap(),
            CANARY
        );
        // The other folders keep working.
        let other = if folder == "workspace" {
            "outputs"
        } else {
            "workspace"
        };
        let t = h
            .call(
                "t1",
                "write_file",
                json!({"description": "d", "path": format!("/mnt/user-data/{other}/ok.txt"), "content": "fine"}),
            )
            .await;
        ok(&t);
    }
}
