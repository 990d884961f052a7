#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use pretty_assertions::assert_eq;

/// A [`mapper`] over a fresh temporary root (kept alive by the returned guard).
fn temp_mapper() -> (tempfile::TempDir, PathBuf, Mapper) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let m = mapper(&root);
    (t, root, m)
}

fn mapper(root: &Path) -> Mapper {
    let ud = root.join("user-data");
    for d in ["workspace", "uploads", "outputs"] {
        std::fs::create_dir_all(ud.join(d)).unwrap();
    }
    std::fs::create_dir_all(root.join("skills")).unwrap();
    Mapper::new(vec![
        PathMapping::new("/mnt/user-data", &ud, false),
        PathMapping::new("/mnt/user-data/workspace", ud.join("workspace"), false),
        PathMapping::new("/mnt/user-data/uploads", ud.join("uploads"), false),
        PathMapping::new("/mnt/user-data/outputs", ud.join("outputs"), false),
        PathMapping::new("/mnt/skills", root.join("skills"), true),
    ])
}

#[test]
fn forward_resolution_picks_the_longest_prefix_on_a_segment_boundary() {
    let (_t, root, m) = temp_mapper();
    let r = m.resolve("/mnt/user-data/workspace/a/b.txt").unwrap();
    assert_eq!(r.host, root.join("user-data/workspace/a/b.txt"));
    assert!(!r.read_only);
    assert_eq!(
        m.resolve("/mnt/user-data").unwrap().host,
        root.join("user-data")
    );
    assert!(m.resolve("/mnt/skills/x/SKILL.md").unwrap().read_only);
    // No mapping: resolve refuses, resolve_forward keeps the path.
    assert!(m.resolve("/mnt/skills-extra/x").is_err());
    assert_eq!(
        m.resolve_forward("/mnt/skills-extra/x").unwrap(),
        "/mnt/skills-extra/x"
    );
    assert_eq!(m.resolve_forward("/etc/passwd").unwrap(), "/etc/passwd");
}

#[test]
fn traversal_and_symlink_escapes_are_refused() {
    let (_t, root, m) = temp_mapper();
    let e = m.resolve("/mnt/user-data/workspace/../../x").unwrap_err();
    assert_eq!(e.to_string(), "Access denied: path traversal detected");
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("user-data/uploads/escape")).unwrap();
    let e = m.resolve("/mnt/user-data/uploads/escape/f").unwrap_err();
    assert_eq!(
        e.to_string(),
        "Access denied: path escapes mounted directory"
    );
    // A dangling symlink is refused too (a write would follow it anywhere).
    std::os::unix::fs::symlink("/nonexistent/zzz", root.join("user-data/workspace/dangle"))
        .unwrap();
    assert!(m.resolve("/mnt/user-data/workspace/dangle").is_err());
    // An internal symlink is fine; one into a sibling mount leaves its own mount.
    std::fs::create_dir_all(root.join("user-data/workspace/real")).unwrap();
    std::os::unix::fs::symlink(
        root.join("user-data/workspace/real"),
        root.join("user-data/workspace/alias"),
    )
    .unwrap();
    assert_eq!(
        m.resolve("/mnt/user-data/workspace/alias/r.md")
            .unwrap()
            .host,
        root.join("user-data/workspace/real/r.md")
    );
    std::os::unix::fs::symlink(
        root.join("user-data/outputs"),
        root.join("user-data/workspace/out"),
    )
    .unwrap();
    assert!(m.resolve("/mnt/user-data/workspace/out/r.md").is_err());
}

#[test]
fn symlink_into_a_read_only_mount_is_read_only() {
    let (_t, root, m) = temp_mapper();
    std::os::unix::fs::symlink(root.join("skills"), root.join("user-data/workspace/sk")).unwrap();
    // Canonical target is outside the workspace mount → escape.
    assert!(m.resolve("/mnt/user-data/workspace/sk/x").is_err());
    // Through the aggregate /mnt/user-data mount the target is still outside.
    assert!(m.resolve("/mnt/user-data/workspace/sk").is_err());
}

#[test]
fn reverse_and_masking_respect_segment_boundaries() {
    let (_t, root, m) = temp_mapper();
    let ws = root.join("user-data/workspace");
    let ws_s = ws.to_string_lossy();
    assert_eq!(
        m.reverse(&ws.join("a.txt")),
        "/mnt/user-data/workspace/a.txt"
    );
    assert_eq!(m.reverse(&ws), "/mnt/user-data/workspace");
    let ud_s = root.join("user-data").to_string_lossy().into_owned();
    let text = format!("x {ws_s}/a, {ws_s}: {ud_s}-backup/f {ws_s}-old {ws_s}");
    assert_eq!(
        m.mask(&text),
        format!("x /mnt/user-data/workspace/a, /mnt/user-data/workspace: {ud_s}-backup/f /mnt/user-data/workspace-old /mnt/user-data/workspace")
    );
}

#[test]
fn commands_are_rewritten_only_on_whole_segments() {
    let (_t, root, m) = temp_mapper();
    let ud = root.join("user-data").to_string_lossy().into_owned();
    let cmd = "ls /mnt/user-data; cat '/mnt/user-data/uploads/a b' /mnt/user-data-backup/x >/mnt/skills/s";
    assert_eq!(
        m.rewrite_command(cmd),
        format!(
            "ls {ud}; cat '{ud}/uploads/a b' /mnt/user-data-backup/x >{}/s",
            root.join("skills").to_string_lossy()
        )
    );
    assert!(!m.rewrite_command(cmd).contains('\\'));
}

#[test]
fn lenient_canonicalisation_appends_missing_parts() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    assert_eq!(
        canonicalize_lenient(&root.join("a/b/c")).unwrap(),
        root.join("a/b/c")
    );
}
