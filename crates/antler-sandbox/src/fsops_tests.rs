#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use pretty_assertions::assert_eq;

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    for d in ["src/pkg", "node_modules/x", "docs", ".hidden"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::write(r.join("src/a.py"), "import os\nprint('Hello')\n").unwrap();
    std::fs::write(r.join("src/pkg/b.py"), "HELLO = 1\n").unwrap();
    std::fs::write(r.join("node_modules/x/c.py"), "hello\n").unwrap();
    std::fs::write(r.join("docs/readme.md"), "hello docs\n").unwrap();
    std::fs::write(r.join("server.log"), "hello log\n").unwrap();
    std::fs::write(r.join(".hidden/h.txt"), "hello hidden\n").unwrap();
    std::fs::write(r.join("bin.dat"), b"hello\0binary").unwrap();
    t
}

fn names(root: &Path, ps: &[PathBuf]) -> Vec<String> {
    ps.iter()
        .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn ignore_list() {
    for n in [
        ".git",
        "node_modules",
        "x.log",
        ".upload-abc.part",
        "foo.egg-info",
        "a~",
        "target",
    ] {
        assert!(is_ignored_name(n), "{n}");
    }
    for n in ["src", "a.py", ".hidden", "main.rs"] {
        assert!(!is_ignored_name(n), "{n}");
    }
}

#[test]
fn glob_is_right_anchored_and_per_segment() {
    let g = PathGlob::new("*.py").unwrap();
    assert!(g.is_match("a.py") && g.is_match("x/y/a.py"));
    let g = PathGlob::new("src/*.py").unwrap();
    assert!(g.is_match("x/src/a.py"));
    assert!(!g.is_match("src/pkg/b.py"));
    let g = PathGlob::new("**/*.py").unwrap();
    assert!(g.is_match("a.py") && g.is_match("src/pkg/b.py"));
}

#[test]
fn glob_skips_ignored_dirs_and_truncates() {
    let t = tree();
    let root = t.path().canonicalize().unwrap();
    let (found, truncated) = glob(&root, "/r", "**/*.py", false, 10).unwrap();
    assert_eq!(names(&root, &found), vec!["src/a.py", "src/pkg/b.py"]);
    assert!(!truncated);
    let (found, truncated) = glob(&root, "/r", "*.py", false, 1).unwrap();
    assert_eq!(found.len(), 1);
    assert!(truncated);
    let (found, _) = glob(&root, "/r", "pkg", true, 10).unwrap();
    assert_eq!(names(&root, &found), vec!["src/pkg"]);
    assert!(matches!(
        glob(&root.join("nope"), "/r/nope", "*", false, 5),
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        glob(&root.join("src/a.py"), "/r/a", "*", false, 5),
        Err(SandboxError::NotADirectory(_))
    ));
}

#[test]
fn grep_modes() {
    let t = tree();
    let root = t.path().canonicalize().unwrap();
    let (m, _) = grep(&root, "/r", "hello", None, false, false, 100).unwrap();
    let got: Vec<(String, u64)> = m
        .iter()
        .map(|m| {
            (
                m.path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                m.line_number,
            )
        })
        .collect();
    // Ignored dirs/files and the binary file are skipped; hidden dirs are searched.
    assert_eq!(
        got,
        vec![
            (".hidden/h.txt".into(), 1),
            ("docs/readme.md".into(), 1),
            ("src/a.py".into(), 2),
            ("src/pkg/b.py".into(), 1)
        ]
    );
    let (m, _) = grep(&root, "/r", "Hello", None, false, true, 100).unwrap();
    assert_eq!(m.len(), 1);
    let (m, _) = grep(&root, "/r", "hello", Some("*.py"), false, false, 100).unwrap();
    assert_eq!(m.len(), 2);
    let (m, truncated) = grep(&root, "/r", "hello", None, false, false, 2).unwrap();
    assert_eq!(m.len(), 2);
    assert!(truncated);
    let (m, _) = grep(&root, "/r", "print(", None, true, false, 10).unwrap();
    assert_eq!(m[0].line, "print('Hello')");
    let (m, _) = grep(
        &root.join("src/a.py"),
        "/r/a",
        "import",
        None,
        false,
        false,
        10,
    )
    .unwrap();
    assert_eq!(m.len(), 1);
    let e = grep(&root, "/r", "(", None, false, false, 10).unwrap_err();
    assert!(e.to_string().starts_with("Invalid regex pattern: "), "{e}");
}

#[test]
fn grep_skips_symlinks_leaving_the_root_and_cuts_long_lines() {
    let t = tree();
    let root = t.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "hello secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link.txt")).unwrap();
    std::fs::write(
        root.join("long.txt"),
        format!("hello {}\n", "x".repeat(300)),
    )
    .unwrap();
    let (m, _) = grep(&root, "/r", "hello", None, false, false, 100).unwrap();
    assert!(m.iter().all(|m| !m.path.ends_with("link.txt")));
    let long = m.iter().find(|m| m.path.ends_with("long.txt")).unwrap();
    assert_eq!(long.line.chars().count(), 200);
    assert!(long.line.ends_with("..."));
}

#[test]
fn list_dir_depth_and_symlinks() {
    let t = tree();
    let root = t.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("escape")).unwrap();
    std::os::unix::fs::symlink(root.join("docs"), root.join("docs-link")).unwrap();
    let e = list_dir(&root, 1);
    let got: Vec<String> = e
        .iter()
        .map(|e| {
            format!(
                "{}{}",
                e.path.strip_prefix(&root).unwrap().display(),
                if e.is_dir { "/" } else { "" }
            )
        })
        .collect();
    // node_modules and *.log ignored; the escaping symlink is dropped; the internal one is
    // listed as its target (deduplicated).
    assert_eq!(got, vec![".hidden/", "bin.dat", "docs/", "src/"]);
    let e = list_dir(&root, 2);
    assert!(e.iter().any(|e| e.path.ends_with("src/pkg")));
    assert!(!e.iter().any(|e| e.path.ends_with("src/pkg/b.py")));
    assert!(list_dir(&root.join("nope"), 2).is_empty());
}

#[test]
fn reads_ranges_and_refuses_binary() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f.txt");
    std::fs::write(&p, "one\r\ntwo\nthree\n").unwrap();
    assert_eq!(read_lines(&p, "/v", 2, None).unwrap(), "two\nthree");
    assert_eq!(read_lines(&p, "/v", 1, Some(2)).unwrap(), "one\ntwo");
    assert_eq!(read_lines(&p, "/v", 9, None).unwrap(), "");
    assert_eq!(read_text(&p, "/v", 0).unwrap(), "one\r\ntwo\nthree\n");
    let b = t.path().join("b.bin");
    std::fs::write(&b, [0xffu8, 0xfe, 0x00, 0x01]).unwrap();
    assert!(matches!(
        read_text(&b, "/v/b", 0),
        Err(SandboxError::NotText(_))
    ));
    assert!(matches!(
        read_lines(&b, "/v/b", 1, Some(1)),
        Err(SandboxError::NotText(_))
    ));
    assert!(matches!(
        read_text(&p, "/v", 3),
        Err(SandboxError::TooLarge { .. })
    ));
    assert!(matches!(
        read_text(&t.path().join("nope"), "/v/nope", 0),
        Err(SandboxError::NotFound(_))
    ));
}
