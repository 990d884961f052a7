//! The local provider and sandbox through their public API, with real processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use antler_sandbox::{
    CommandRequest, GrepQuery, Mount, SandboxError, SandboxProvider, SandboxSettings,
};
use common::*;
use pretty_assertions::assert_eq;

#[test]
fn ids_caching_and_isolation() {
    let h = home();
    let p = provider(h.path(), quick());
    assert_eq!(
        p.acquire(Some("alpha"), Some("alice")).unwrap(),
        "local:alice:alpha"
    );
    assert_eq!(p.acquire(Some("alpha"), None).unwrap(), "local:alpha");
    assert_eq!(p.acquire(None, None).unwrap(), "local");
    assert!(p.get("local:nope").is_none());
    let a = sandbox(&p, "alpha");
    let b = sandbox(&p, "beta");
    assert!(Arc::ptr_eq(&a, &p.get("local:alpha").unwrap()));
    a.write_file("/mnt/user-data/workspace/f.txt", "A", false)
        .unwrap();
    assert!(matches!(
        b.read_file("/mnt/user-data/workspace/f.txt", None, None),
        Err(SandboxError::NotFound(_))
    ));
    // Same thread, different user: different folders.
    let u = p
        .get(&p.acquire(Some("alpha"), Some("bob")).unwrap())
        .unwrap();
    assert!(u
        .read_file("/mnt/user-data/workspace/f.txt", None, None)
        .is_err());
    p.release("local:alpha");
    assert!(p.get("local:alpha").is_some());
    p.reset();
    assert!(p.get("local:alpha").is_none());
    assert!(matches!(
        p.acquire(Some("../x"), None),
        Err(SandboxError::InvalidId { .. })
    ));
    assert!(h.path().join("threads/alpha/user-data/outputs").is_dir());
}

#[test]
fn concurrent_acquire_yields_one_instance() {
    let h = home();
    let p = Arc::new(provider(h.path(), quick()));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || p.acquire(Some("same"), None).unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), "local:same");
    }
    let first = p.get("local:same").unwrap();
    assert!(Arc::ptr_eq(&first, &p.get("local:same").unwrap()));
}

#[test]
fn file_operations_with_virtual_paths() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    sb.write_file(
        "/mnt/user-data/workspace/dir/a.txt",
        "one\ntwo\nthree\n",
        false,
    )
    .unwrap();
    sb.write_file("/mnt/user-data/workspace/dir/a.txt", "four\n", true)
        .unwrap();
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/dir/a.txt", None, None)
            .unwrap(),
        "one\ntwo\nthree\nfour\n"
    );
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/dir/a.txt", Some(2), Some(3))
            .unwrap(),
        "two\nthree"
    );
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/dir/a.txt", None, Some(1))
            .unwrap(),
        "one"
    );
    let ls = sb.list_dir("/mnt/user-data", 1).unwrap();
    assert_eq!(
        ls,
        vec![
            "/mnt/user-data/outputs/",
            "/mnt/user-data/uploads/",
            "/mnt/user-data/workspace/"
        ]
    );
    let ls = sb.list_dir("/mnt/user-data/workspace", 2).unwrap();
    assert_eq!(
        ls,
        vec![
            "/mnt/user-data/workspace/dir/",
            "/mnt/user-data/workspace/dir/a.txt"
        ]
    );
    let (g, _) = sb.glob("/mnt/user-data", "*.txt", false, 10).unwrap();
    assert_eq!(g, vec!["/mnt/user-data/workspace/dir/a.txt"]);
    let q = GrepQuery {
        pattern: "TWO".into(),
        glob: None,
        literal: false,
        case_sensitive: false,
        max_results: 10,
    };
    let (m, _) = sb.grep("/mnt/user-data/workspace", &q).unwrap();
    assert_eq!(
        (m[0].path.as_str(), m[0].line_number, m[0].line.as_str()),
        ("/mnt/user-data/workspace/dir/a.txt", 2, "two")
    );
    sb.update_file("/mnt/user-data/uploads/raw.bin", &[1, 2, 3])
        .unwrap();
    assert_eq!(
        sb.download_file("/mnt/user-data/uploads/raw.bin").unwrap(),
        vec![1, 2, 3]
    );
    assert!(matches!(
        sb.download_file("/mnt/skills/x"),
        Err(SandboxError::PermissionDenied(_))
    ));
    let e = sb
        .read_file("/mnt/user-data/workspace/missing.txt", None, None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "File not found: /mnt/user-data/workspace/missing.txt"
    );
    assert!(matches!(
        sb.read_file("/mnt/user-data/workspace/dir", None, None),
        Err(SandboxError::IsADirectory(_))
    ));
    assert!(matches!(
        sb.read_file("/etc/passwd", None, None),
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(matches!(
        sb.write_file("/etc/x", "x", false),
        Err(SandboxError::PermissionDenied(_))
    ));
}

#[test]
fn written_content_round_trips_virtual_paths_but_uploads_are_untouched() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    let script = "open('/mnt/user-data/outputs/r.txt', 'w').write('x')\n";
    sb.write_file("/mnt/user-data/workspace/s.py", script, false)
        .unwrap();
    let on_disk =
        std::fs::read_to_string(h.path().join("threads/t1/user-data/workspace/s.py")).unwrap();
    assert!(!on_disk.contains("/mnt/user-data"), "{on_disk}");
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/s.py", None, None)
            .unwrap(),
        script
    );
    // A file the agent did not write is returned byte for byte.
    let up = h.path().join("threads/t1/user-data/uploads/u.txt");
    let host_text = format!("{}\n", up.display());
    std::fs::write(&up, &host_text).unwrap();
    assert_eq!(
        sb.read_file("/mnt/user-data/uploads/u.txt", None, None)
            .unwrap(),
        host_text
    );
}

#[test]
fn read_only_mounts_and_skills() {
    let h = home();
    let skills = h.path().join("skills");
    std::fs::create_dir_all(skills.join("demo")).unwrap();
    std::fs::write(skills.join("demo/SKILL.md"), "---\nname: demo\n---\n").unwrap();
    let data = h.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let settings = SandboxSettings {
        skills_host_path: Some(skills.clone()),
        mounts: vec![
            Mount {
                host_path: data.clone(),
                container_path: "/mnt/data/".into(),
                read_only: true,
            },
            Mount {
                host_path: data.clone(),
                container_path: "/mnt/user-data/evil".into(),
                read_only: false,
            },
            Mount {
                host_path: PathBuf::from("relative"),
                container_path: "/mnt/rel".into(),
                read_only: false,
            },
        ],
        ..quick()
    };
    let p = provider(h.path(), settings);
    let sb = sandbox(&p, "t1");
    assert!(sb
        .read_file("/mnt/skills/demo/SKILL.md", None, None)
        .unwrap()
        .contains("demo"));
    assert!(matches!(
        sb.write_file("/mnt/skills/demo/SKILL.md", "x", false),
        Err(SandboxError::ReadOnly(_))
    ));
    assert!(matches!(
        sb.write_file("/mnt/data/x", "x", false),
        Err(SandboxError::ReadOnly(_))
    ));
    assert!(matches!(
        sb.update_file("/mnt/data/x", b"x"),
        Err(SandboxError::ReadOnly(_))
    ));
    assert!(sb.list_dir("/mnt/data", 1).unwrap().is_empty());
    assert!(sb.list_dir("/mnt", 1).is_err());
    // Reserved and relative mounts were skipped.
    assert!(!data.join("x").exists());
}

#[tokio::test]
async fn commands_translate_paths_both_ways() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    // cwd is the workspace; the host path is masked.
    assert_eq!(run(&sb, "pwd").await, "/mnt/user-data/workspace\n");
    assert_eq!(run(&sb, "echo hi > /mnt/user-data/outputs/x.txt && ls /mnt/user-data/outputs && ls /mnt/user-data").await, "x.txt\noutputs\nuploads\nworkspace\n");
    assert!(h
        .path()
        .join("threads/t1/user-data/outputs/x.txt")
        .is_file());
    let out = run(&sb, "readlink -f /mnt/user-data/outputs/x.txt").await;
    assert_eq!(out, "/mnt/user-data/outputs/x.txt\n");
}

#[tokio::test]
async fn output_assembly_exit_codes_and_stdin() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    assert_eq!(
        run(&sb, "echo out; echo err >&2; exit 3").await,
        "out\n\nStd Error:\nerr\n\nExit Code: 3"
    );
    assert_eq!(run(&sb, "true").await, "(no output)");
    let t = Instant::now();
    assert_eq!(run(&sb, "read x; echo got").await, "got\n");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn background_children_do_not_block_the_return() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    let t = Instant::now();
    let out = run(&sb, "sleep 5 & echo serving").await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(out, "serving\n");
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let h = home();
    let p = provider(
        h.path(),
        quick_with(|s| s.bash_command_timeout = Duration::from_millis(1500)),
    );
    let sb = sandbox(&p, "t1");
    let t = Instant::now();
    let out = exec(
        &sb,
        "echo started; sleep 60 & echo $! > child.pid; sleep 60",
    )
    .await
    .unwrap();
    let elapsed = t.elapsed();
    assert!(out.timed_out);
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    assert!(out.text.starts_with("started\n"), "{}", out.text);
    assert!(
        out.text
            .contains("Command timed out after 1.5 seconds and was terminated."),
        "{}",
        out.text
    );
    let pid: u32 =
        std::fs::read_to_string(h.path().join("threads/t1/user-data/workspace/child.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert!(
        exits_soon(pid),
        "background child {pid} survived the timeout"
    );
}

#[tokio::test]
async fn the_environment_is_scrubbed_and_injected_values_win() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    // Only this test sets these names.
    std::env::set_var("ANTLER_TEST_OPENAI_API_KEY", "sk-should-not-leak");
    std::env::set_var("ANTLER_TEST_PLAIN", "visible");
    let out = sb
        .execute_command(CommandRequest {
            command: "env".into(),
            env: vec![("INJECTED_VALUE".into(), "yes".into())],
            ..Default::default()
        })
        .await
        .unwrap()
        .text;
    assert!(!out.contains("sk-should-not-leak"));
    assert!(out.contains("ANTLER_TEST_PLAIN=visible"));
    assert!(out.contains("INJECTED_VALUE=yes"));
    let bad = sb
        .execute_command(CommandRequest {
            command: "true".into(),
            env: vec![("BAD-NAME".into(), "x".into())],
            ..Default::default()
        })
        .await;
    assert!(matches!(bad, Err(SandboxError::InvalidEnvKey(_))));
}

#[tokio::test]
async fn captures_are_capped_with_a_marker() {
    let h = home();
    let p = provider(h.path(), quick_with(|s| s.capture_limit_bytes = 1000));
    let sb = sandbox(&p, "t1");
    let out = run(&sb, "head -c 5000 /dev/zero | tr '\\0' a").await;
    assert!(out.starts_with(&"a".repeat(1000)));
    assert!(
        out.ends_with(
            "\n... [output truncated after 1000 of 5000 bytes; remaining output discarded] ..."
        ),
        "{}",
        &out[1000..]
    );
}

#[tokio::test]
async fn output_lines_stream_masked_while_the_result_stays_the_same() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    let cmd = "echo one; pwd; printf 'no newline'";
    let (text, lines) = run_streaming(&sb, cmd).await;
    assert_eq!(lines, ["one", "/mnt/user-data/workspace", "no newline"]);
    assert_eq!(
        text,
        run(&sb, cmd).await,
        "streaming does not change the result"
    );
    // Over-long lines arrive in bounded pieces.
    let (_, lines) = run_streaming(&sb, "head -c 9000 /dev/zero | tr '\\0' x; echo").await;
    assert_eq!(
        lines.iter().map(String::len).collect::<Vec<_>>(),
        [4096, 4096, 808]
    );
}
