//! A thread folder replaced by a symlink (what confined bash can do with `rm -rf outputs &&
//! ln -s /somewhere outputs`) must never be followed by the unconfined file operations: every
//! operation on it fails with a clear error and nothing outside the thread is read or written.
//! The swap is done from the test itself; no bash needed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_sandbox::{GrepQuery, Sandbox, SandboxError};
use common::*;
use pretty_assertions::assert_eq;

const CANARY: &str = "CANARY-CONTENT-7f3a";

/// A grep for every line (up to 100).
fn any_line() -> GrepQuery {
    GrepQuery {
        pattern: ".".into(),
        glob: None,
        literal: false,
        case_sensitive: false,
        max_results: 100,
    }
}

/// A directory outside the data home holding a secret file (and, for a swapped `user-data`,
/// the three thread folders, so that following the swap would find something).
fn canary() -> tempfile::TempDir {
    let c = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    std::fs::write(c.path().join("secret.txt"), CANARY).unwrap();
    for d in ["workspace", "uploads", "outputs"] {
        std::fs::create_dir_all(c.path().join(d)).unwrap();
        std::fs::write(c.path().join(d).join("secret.txt"), CANARY).unwrap();
    }
    c
}

/// Every file and its content under `dir` (symlinks not followed), to prove nothing changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<String>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
                out.push((e.path(), None));
            } else {
                out.push((e.path(), std::fs::read_to_string(e.path()).ok()));
            }
        }
    }
    out.sort();
    out
}

#[derive(Clone, Copy, Debug)]
enum Target {
    Canary,
    ProcSelf,
}

/// The virtual root of each swappable folder and its name under `user-data`.
const ROOTS: &[(&str, &str)] = &[
    ("/mnt/user-data/workspace", "workspace"),
    ("/mnt/user-data/uploads", "uploads"),
    ("/mnt/user-data/outputs", "outputs"),
    ("/mnt/user-data", ""),
];

fn swap(ud: &Path, name: &str, to: &Path) {
    let victim = if name.is_empty() {
        ud.to_path_buf()
    } else {
        ud.join(name)
    };
    std::fs::remove_dir_all(&victim).unwrap();
    std::os::unix::fs::symlink(to, &victim).unwrap();
}

fn leaks(text: &str, proc_comm: &str) -> bool {
    text.contains(CANARY)
        || text.contains("secret.txt")
        || text.contains(proc_comm)
        || text.contains("cmdline")
}

/// Run every file operation against the swapped root `virt` and check each fails without
/// leaking anything.
fn assert_all_refused(sb: &Arc<dyn Sandbox>, virt: &str, target: Target, proc_comm: &str) {
    let file = match target {
        Target::Canary => "secret.txt",
        Target::ProcSelf => "comm",
    };
    let f = format!("{virt}/{file}");
    let ctx = format!("{virt} -> {target:?}");
    let refused = |what: &str, e: SandboxError| {
        let msg = e.to_string();
        assert!(
            msg.contains("is not a directory") || msg.starts_with("Access denied"),
            "{ctx} {what}: unclear error {msg:?}"
        );
        assert!(!leaks(&msg, proc_comm), "{ctx} {what}: leaked in {msg:?}");
    };
    match sb.read_file(&f, None, None) {
        Ok(c) => panic!("{ctx} read_file succeeded: {c:?}"),
        Err(e) => refused("read_file", e),
    }
    match sb.read_file(&f, Some(1), Some(1)) {
        Ok(c) => panic!("{ctx} ranged read_file succeeded: {c:?}"),
        Err(e) => refused("ranged read_file", e),
    }
    match sb.download_file(&f) {
        Ok(c) => panic!(
            "{ctx} download_file succeeded: {:?}",
            String::from_utf8_lossy(&c)
        ),
        Err(e) => refused("download_file", e),
    }
    match sb.list_dir(virt, 2) {
        Ok(l) => panic!("{ctx} list_dir succeeded: {l:?}"),
        Err(e) => refused("list_dir", e),
    }
    match sb.glob(virt, "*", true, 100) {
        Ok(g) => panic!("{ctx} glob succeeded: {g:?}"),
        Err(e) => refused("glob", e),
    }
    let q = any_line();
    match sb.grep(virt, &q) {
        Ok(m) => panic!("{ctx} grep succeeded: {m:?}"),
        Err(e) => refused("grep", e),
    }
    match sb.grep(&f, &q) {
        Ok(m) => panic!("{ctx} grep on a file succeeded: {m:?}"),
        Err(e) => refused("grep on a file", e),
    }
    let new = format!("{virt}/antler-canary-new.txt");
    if let Err(e) = sb.write_file(&new, "pwned", false) {
        refused("write_file", e);
    } else {
        panic!("{ctx} write_file succeeded");
    }
    if let Err(e) = sb.write_file(&new, "pwned", true) {
        refused("append", e);
    } else {
        panic!("{ctx} append succeeded");
    }
    if let Err(e) = sb.update_file(&format!("{virt}/antler-canary-new.bin"), b"pwned") {
        refused("update_file", e);
    } else {
        panic!("{ctx} update_file succeeded");
    }
    if matches!(target, Target::Canary) {
        if let Err(e) = sb.write_file(&f, "pwned", false) {
            refused("overwrite", e);
        } else {
            panic!("{ctx} overwrite succeeded");
        }
        if let Err(e) = sb.update_file(&f, b"pwned") {
            refused("update_file overwrite", e);
        } else {
            panic!("{ctx} update_file overwrite succeeded");
        }
        let nested = format!("{virt}/sub/dir/x.txt");
        if let Err(e) = sb.write_file(&nested, "pwned", false) {
            refused("nested write", e);
        } else {
            panic!("{ctx} nested write succeeded");
        }
    }
}

fn proc_comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .unwrap()
        .trim()
        .to_owned()
}

fn check_swap(name: &str, virt: &str, target: Target, cached: bool) {
    let h = home();
    let c = canary();
    let to = match target {
        Target::Canary => c.path().to_path_buf(),
        Target::ProcSelf => PathBuf::from("/proc/self"),
    };
    let ud = h.path().join("threads/t1/user-data");
    let before_sb = {
        let p = provider(h.path(), quick());
        let sb = sandbox(&p, "t1");
        sb.write_file("/mnt/user-data/workspace/own.txt", "own", false)
            .unwrap();
        (p, sb)
    };
    let before = snapshot(c.path());
    swap(&ud, name, &to);
    let comm = proc_comm();
    if cached {
        // The sandbox was opened before the swap and is reused (cached across turns).
        assert_all_refused(&before_sb.1, virt, target, &comm);
    } else {
        // A sandbox built after the swap (a restart or a cache eviction).
        let p = provider(h.path(), quick());
        let sb = sandbox(&p, "t1");
        assert_all_refused(&sb, virt, target, &comm);
        if !name.is_empty() {
            // The other folders keep working.
            let other = if name == "workspace" {
                "/mnt/user-data/outputs/ok.txt"
            } else {
                "/mnt/user-data/workspace/ok.txt"
            };
            sb.write_file(other, "fine", false).unwrap();
            assert_eq!(sb.read_file(other, None, None).unwrap(), "fine");
            // Listing the parent shows no entry from the swapped target.
            let ls = sb.list_dir("/mnt/user-data", 2).unwrap();
            assert!(ls.iter().all(|l| !leaks(l, &comm)), "{ls:?}");
        }
    }
    assert_eq!(snapshot(c.path()), before, "the canary was touched");
}

#[test]
fn a_swapped_thread_folder_is_never_followed() {
    for (virt, name) in ROOTS {
        for target in [Target::Canary, Target::ProcSelf] {
            for cached in [false, true] {
                check_swap(name, virt, target, cached);
            }
        }
    }
}

#[test]
fn a_folder_replaced_by_a_file_is_an_error() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    let outputs = h.path().join("threads/t1/user-data/outputs");
    std::fs::remove_dir_all(&outputs).unwrap();
    std::fs::write(&outputs, "not a dir").unwrap();
    let e = sb
        .write_file("/mnt/user-data/outputs/a.txt", "x", false)
        .unwrap_err();
    assert!(e.to_string().contains("is not a directory"), "{e}");
    let e = sb.list_dir("/mnt/user-data/outputs", 1).unwrap_err();
    assert!(e.to_string().contains("is not a directory"), "{e}");
    assert_eq!(std::fs::read_to_string(&outputs).unwrap(), "not a dir");
}

#[test]
fn a_recreated_folder_is_picked_up() {
    let h = home();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    sb.write_file("/mnt/user-data/outputs/a.txt", "one", false)
        .unwrap();
    let outputs = h.path().join("threads/t1/user-data/outputs");
    std::fs::remove_dir_all(&outputs).unwrap();
    std::fs::create_dir(&outputs).unwrap();
    sb.write_file("/mnt/user-data/outputs/b.txt", "two", false)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(outputs.join("b.txt")).unwrap(),
        "two"
    );
    assert!(matches!(
        sb.read_file("/mnt/user-data/outputs/a.txt", None, None),
        Err(SandboxError::NotFound(_))
    ));
}

#[test]
fn symlinks_inside_the_tree() {
    let h = home();
    let c = canary();
    let p = provider(h.path(), quick());
    let sb = sandbox(&p, "t1");
    let ws = h.path().join("threads/t1/user-data/workspace");
    sb.write_file("/mnt/user-data/workspace/real/r.txt", "inside\n", false)
        .unwrap();
    // Pointing outside: refused for every operation, nothing listed or searched.
    std::os::unix::fs::symlink(c.path(), ws.join("evil")).unwrap();
    std::os::unix::fs::symlink(c.path().join("secret.txt"), ws.join("evil.txt")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../../../../../../../proc/self",
        ws.join("rel-evil"),
    )
    .unwrap();
    let before = snapshot(c.path());
    for f in [
        "/mnt/user-data/workspace/evil/secret.txt",
        "/mnt/user-data/workspace/evil.txt",
        "/mnt/user-data/workspace/rel-evil/comm",
    ] {
        assert!(sb.read_file(f, None, None).is_err(), "{f}");
        assert!(sb.download_file(f).is_err(), "{f}");
        assert!(sb.write_file(f, "pwned", false).is_err(), "{f}");
        assert!(sb.update_file(f, b"pwned").is_err(), "{f}");
    }
    assert!(sb
        .write_file("/mnt/user-data/workspace/evil/new.txt", "pwned", false)
        .is_err());
    assert!(sb.list_dir("/mnt/user-data/workspace/evil", 1).is_err());
    assert!(sb
        .glob("/mnt/user-data/workspace/evil", "*", true, 10)
        .is_err());
    let ls = sb.list_dir("/mnt/user-data/workspace", 3).unwrap();
    assert_eq!(
        ls,
        vec![
            "/mnt/user-data/workspace/real/",
            "/mnt/user-data/workspace/real/r.txt"
        ]
    );
    let (g, _) = sb
        .glob("/mnt/user-data/workspace", "**/*", true, 100)
        .unwrap();
    assert!(g.iter().all(|p| !p.contains("secret")), "{g:?}");
    let q = any_line();
    let (m, _) = sb.grep("/mnt/user-data/workspace", &q).unwrap();
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0].path, "/mnt/user-data/workspace/real/r.txt");
    assert_eq!(snapshot(c.path()), before, "the canary was touched");

    // Staying inside: relative and absolute links work, for reads and writes.
    std::os::unix::fs::symlink("real/r.txt", ws.join("rel.txt")).unwrap();
    std::os::unix::fs::symlink(ws.join("real"), ws.join("abs")).unwrap();
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/rel.txt", None, None)
            .unwrap(),
        "inside\n"
    );
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/abs/r.txt", None, None)
            .unwrap(),
        "inside\n"
    );
    sb.write_file("/mnt/user-data/workspace/abs/w.txt", "via link", false)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("real/w.txt")).unwrap(),
        "via link"
    );
    sb.write_file("/mnt/user-data/workspace/rel.txt", "rewritten\n", false)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("real/r.txt")).unwrap(),
        "rewritten\n"
    );
    let ls = sb.list_dir("/mnt/user-data/workspace/abs", 1).unwrap();
    assert_eq!(
        ls,
        vec![
            "/mnt/user-data/workspace/real/r.txt",
            "/mnt/user-data/workspace/real/w.txt"
        ]
    );
    // A link from one folder into a sibling folder leaves its own mount, as before.
    std::os::unix::fs::symlink("../outputs", ws.join("out")).unwrap();
    sb.write_file("/mnt/user-data/outputs/o.txt", "out", false)
        .unwrap();
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/../outputs/o.txt", None, None)
            .map_err(|e| e.to_string())
            .unwrap_err(),
        "Access denied: path traversal detected"
    );
    assert_eq!(
        sb.read_file("/mnt/user-data/workspace/out/o.txt", None, None)
            .map_err(|e| e.to_string())
            .unwrap_err(),
        "Access denied: path escapes mounted directory"
    );
}

#[test]
fn a_swapped_skills_root_is_refused() {
    let h = home();
    let c = canary();
    let skills = h.path().join("skills");
    std::fs::create_dir_all(skills.join("demo")).unwrap();
    std::fs::write(skills.join("demo/SKILL.md"), "demo").unwrap();
    std::os::unix::fs::symlink(c.path(), skills.join("demo/evil")).unwrap();
    let settings = antler_sandbox::SandboxSettings {
        skills_host_path: Some(skills.clone()),
        ..quick()
    };
    let p = provider(h.path(), settings);
    let sb = sandbox(&p, "t1");
    assert_eq!(
        sb.read_file("/mnt/skills/demo/SKILL.md", None, None)
            .unwrap(),
        "demo"
    );
    assert!(sb
        .read_file("/mnt/skills/demo/evil/secret.txt", None, None)
        .is_err());
    assert!(sb.list_dir("/mnt/skills/demo/evil", 1).is_err());
}
