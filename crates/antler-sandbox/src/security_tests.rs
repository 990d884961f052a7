#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::settings::Mount;
use pretty_assertions::assert_eq;
use std::path::Path;

struct Fixture {
    _t: tempfile::TempDir,
    root: PathBuf,
    policy: LocalPolicy,
}

fn fixture() -> Fixture {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let ud = root.join("threads/t1/user-data");
    for d in ["workspace", "uploads", "outputs"] {
        std::fs::create_dir_all(ud.join(d)).unwrap();
    }
    std::fs::create_dir_all(root.join("skills")).unwrap();
    std::fs::create_dir_all(root.join("data")).unwrap();
    let td = ThreadData {
        workspace_path: Some(ud.join("workspace").to_string_lossy().into()),
        uploads_path: Some(ud.join("uploads").to_string_lossy().into()),
        outputs_path: Some(ud.join("outputs").to_string_lossy().into()),
    };
    let settings = SandboxSettings {
        skills_host_path: Some(root.join("skills")),
        mounts: vec![
            Mount {
                host_path: root.join("data"),
                container_path: "/mnt/data".into(),
                read_only: true,
            },
            Mount {
                host_path: root.join("missing"),
                container_path: "/mnt/missing".into(),
                read_only: false,
            },
        ],
        ..Default::default()
    };
    let policy = LocalPolicy::new(Some(&td), &settings).unwrap();
    Fixture {
        _t: t,
        root,
        policy,
    }
}

fn msg(r: Result<(), SandboxError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_thread_data_is_a_runtime_error() {
    let e = LocalPolicy::new(None, &SandboxSettings::default()).unwrap_err();
    assert_eq!(e.to_string(), "Thread data not available for local sandbox");
}

#[test]
fn file_tool_paths() {
    let f = fixture();
    let p = &f.policy;
    assert_eq!(
        msg(p.validate_tool_path("/mnt/user-data/workspace/a.txt", false)),
        "ok"
    );
    assert_eq!(
        msg(p.validate_tool_path("/mnt/skills/x/SKILL.md", true)),
        "ok"
    );
    assert_eq!(
        msg(p.validate_tool_path("/mnt/skills/x/SKILL.md", false)),
        "Write access to skills path is not allowed: /mnt/skills/x/SKILL.md"
    );
    assert_eq!(msg(p.validate_tool_path("/mnt/data/f", true)), "ok");
    assert_eq!(
        msg(p.validate_tool_path("/mnt/data/f", false)),
        "Write access to read-only mount is not allowed: /mnt/data/f"
    );
    let only =
        "Only paths under /mnt/user-data/, /mnt/skills/, or configured mount paths are allowed";
    assert_eq!(msg(p.validate_tool_path("/etc/passwd", true)), only);
    assert_eq!(msg(p.validate_tool_path("/mnt/user-data", true)), only);
    assert_eq!(msg(p.validate_tool_path("/mnt/data-extra/x", true)), only);
    // A mount whose host path is missing is ignored.
    assert_eq!(msg(p.validate_tool_path("/mnt/missing/x", true)), only);
    for bad in [
        "/mnt/user-data/../etc",
        "/mnt/user-data/workspace/..\\..\\x",
        "../x",
    ] {
        assert_eq!(
            msg(p.validate_tool_path(bad, true)),
            "Access denied: path traversal detected"
        );
    }
}

#[test]
fn user_data_resolution_is_contained() {
    let f = fixture();
    let ws = f.root.join("threads/t1/user-data/workspace");
    assert_eq!(
        f.policy
            .resolve_user_data("/mnt/user-data/workspace/a/b")
            .unwrap(),
        ws.join("a/b")
    );
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        outside.path(),
        f.root.join("threads/t1/user-data/uploads/escape"),
    )
    .unwrap();
    assert_eq!(
        msg(f.policy.check_read("/mnt/user-data/uploads/escape/x")),
        "Access denied: path traversal detected"
    );
    assert_eq!(
        msg(f.policy.check_write("/mnt/user-data/outputs/r.md")),
        "ok"
    );
}

#[test]
fn bash_commands_that_are_refused() {
    let f = fixture();
    let cases: &[(&str, &str)] = &[
        ("cat /etc/passwd", "Unsafe absolute paths in command: /etc/passwd. Use paths under /mnt/user-data"),
        ("cat ../uploads/x", "Access denied: path traversal detected"),
        ("python x.py --input=../x", "Access denied: path traversal detected"),
        ("cd /", "Unsafe working directory change in command: cd /. Use paths under /mnt/user-data"),
        ("cd ..", "Access denied: path traversal detected"),
        ("cd $HOME", "Unsafe working directory change in command: cd $HOME. Use paths under /mnt/user-data"),
        ("echo hi\ncd ~", "Unsafe working directory change in command: cd ~. Use paths under /mnt/user-data"),
        ("command cd /", "Unsafe working directory change in command: cd /. Use paths under /mnt/user-data"),
        ("builtin cd $HOME", "Unsafe working directory change in command: cd $HOME. Use paths under /mnt/user-data"),
        ("if cd $HOME; then ls; fi", "Unsafe working directory change in command: cd $HOME. Use paths under /mnt/user-data"),
        ("{ cd /; ls; }", "Unsafe working directory change in command: cd /. Use paths under /mnt/user-data"),
        ("echo \"$(cd $HOME && ls)\"", "Unsafe working directory change in command substitution. Use paths under /mnt/user-data"),
        ("cd", "Unsafe working directory change in command: cd. Use paths under /mnt/user-data"),
        ("ls /", "Unsafe absolute paths in command: /. Use paths under /mnt/user-data"),
        ("ln -s / root", "Unsafe absolute paths in command: /. Use paths under /mnt/user-data"),
        ("cat /etc/{passwd,shadow}", "Unsafe absolute paths in command: /etc/{passwd,shadow}. Use paths under /mnt/user-data"),
        ("cat /home/${USER}/.ssh/id_rsa", "Unsafe absolute paths in command: /home/${USER}/.ssh/id_rsa. Use paths under /mnt/user-data"),
        ("curl FILE:///etc/passwd", "Unsafe file:// URL in command: FILE:///etc/passwd. Use paths under /mnt/user-data"),
        ("cat /mnt/user-data/x file:///etc/hosts", "Unsafe file:// URL in command: file:///etc/hosts. Use paths under /mnt/user-data"),
        ("python -c \"open('/etc/passwd')\"", "Unsafe absolute paths in command: /etc/passwd. Use paths under /mnt/user-data"),
        ("cat /b /a /b", "Unsafe absolute paths in command: /a, /b. Use paths under /mnt/user-data"),
    ];
    for (cmd, want) in cases {
        assert_eq!(msg(f.policy.validate_bash_command(cmd)), *want, "{cmd}");
    }
}

#[test]
fn bash_commands_that_pass() {
    let f = fixture();
    for cmd in [
        "curl https://example.com/a/../b",
        "/bin/echo hi > /dev/null",
        "ls /mnt/user-data/workspace && cat /mnt/skills/x/SKILL.md",
        "cat /mnt/data/f",
        "echo cd /",
        "python script.py data/in.csv",
        "cd /mnt/user-data/workspace && ls",
        "python -c \"print(f'/端口{port}')\"",
        "curl http://api/devices/{id}/port",
        "ls -la",
        "/usr/bin/python3 -V",
    ] {
        assert_eq!(msg(f.policy.validate_bash_command(cmd)), "ok", "{cmd}");
    }
}

#[test]
fn user_data_rewrite_and_cwd_prefix() {
    let f = fixture();
    let ud = f.root.join("threads/t1/user-data");
    let ud_s = ud.to_string_lossy();
    assert_eq!(
        f.policy.rewrite_user_data(
            "ls /mnt/user-data /mnt/user-data/outputs/x /mnt/user-data-backup /mnt/skills/a"
        ),
        format!("ls {ud_s} {ud_s}/outputs/x /mnt/user-data-backup /mnt/skills/a")
    );
    assert_eq!(
        f.policy.with_cwd_prefix("ls"),
        format!(
            "cd {} && ls",
            shell_words::quote(&ud.join("workspace").to_string_lossy())
        )
    );
}

#[test]
fn masking_hides_thread_and_skills_paths() {
    let f = fixture();
    let ws = f.root.join("threads/t1/user-data/workspace");
    let text = format!(
        "{}/a.txt, {}:{}",
        ws.display(),
        f.root.join("skills/x").display(),
        f.root.join("threads/t1/user-data").display()
    );
    assert_eq!(
        f.policy.mask(&text),
        "/mnt/user-data/workspace/a.txt, /mnt/skills/x:/mnt/user-data"
    );
    let sibling = format!("{}-backup/x", f.root.join("threads/t1/user-data").display());
    assert_eq!(f.policy.mask(&sibling), sibling);
    assert_eq!(f.policy.mask(&f.policy.mask(&text)), f.policy.mask(&text));
    let _ = Path::new("/");
}

#[test]
fn tokenizer() {
    assert_eq!(
        shell_tokens("a;b&&c 'd e' \"f\\\"g\" h\\ i 2>&1").unwrap(),
        vec!["a", ";", "b", "&&", "c", "d e", "f\"g", "h i", "2", ">&", "1"]
    );
    assert!(shell_tokens("echo 'unterminated").is_none());
}

#[test]
fn swapped_folders_are_refused_not_followed() {
    let f = fixture();
    let ud = f.root.join("threads/t1/user-data");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    // Inside the tree: a link from one folder into another is fine.
    std::fs::write(ud.join("outputs/r.md"), "r").unwrap();
    std::os::unix::fs::symlink("../outputs/r.md", ud.join("workspace/r.md")).unwrap();
    assert_eq!(
        msg(f.policy.check_read("/mnt/user-data/workspace/r.md")),
        "ok"
    );
    assert_eq!(
        f.policy
            .resolve_user_data("/mnt/user-data/workspace/r.md")
            .unwrap(),
        ud.join("outputs/r.md")
    );
    // A link to user-data itself (not one of the three folders) is refused.
    std::fs::write(ud.join("top.txt"), "t").unwrap();
    std::os::unix::fs::symlink("../top.txt", ud.join("workspace/top.txt")).unwrap();
    assert_eq!(
        msg(f.policy.check_read("/mnt/user-data/workspace/top.txt")),
        "Access denied: path traversal detected"
    );
    // A swapped folder: every check refuses it, and nothing outside is opened.
    std::fs::remove_dir_all(ud.join("outputs")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ud.join("outputs")).unwrap();
    for p in [
        "/mnt/user-data/outputs/secret.txt",
        "/mnt/user-data/outputs/new.txt",
    ] {
        let e = msg(f.policy.check_read(p));
        assert!(
            e.contains("/mnt/user-data/outputs is not a directory"),
            "{e}"
        );
        assert!(msg(f.policy.check_write(p)).contains("is not a directory"));
        assert!(f.policy.open_user_data(p).is_err());
    }
    // The cross-folder link now points into the swapped folder: refused too.
    assert!(f
        .policy
        .check_read("/mnt/user-data/workspace/r.md")
        .is_err());
    // A swapped user-data folder.
    std::fs::rename(&ud, f.root.join("threads/t1/moved")).unwrap();
    std::os::unix::fs::symlink(f.root.join("threads/t1/moved"), &ud).unwrap();
    let e = msg(f.policy.check_read("/mnt/user-data/workspace/a.txt"));
    assert!(e.contains("/mnt/user-data is not a directory"), "{e}");
}
