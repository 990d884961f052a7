//! The Landlock read allow-list: everything under `/` except the denied paths.
//!
//! Landlock can only allow, never carve a hole in an allowed tree. So a denied path is cut out
//! by allowing, at each folder on the way down to it, every *other* entry — `/` minus `/work`,
//! then `/work` minus `/work/app`, then `/work/app` minus `/work/app/.antler`. The folders on the
//! way down are not listable themselves (allowing `ReadDir` on them would allow it beneath
//! too). Symlinks whose target overlaps a denied path are left out (Landlock follows them when
//! the rule is made). Entries created later in a folder on the way down are not readable.

use std::path::{Path, PathBuf};

/// Paths to allow for reading so that everything under `root` is readable except `deny` (and
/// what is beneath them). Deny entries outside `root` or missing are ignored. Pure over the
/// filesystem as it is now.
pub fn read_roots(root: &Path, deny: &[PathBuf]) -> Vec<PathBuf> {
    let deny: Vec<PathBuf> = deny
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .filter(|d| d.starts_with(root))
        .collect();
    let mut out = Vec::new();
    carve(root, &deny, &mut out);
    out.sort();
    out
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn carve(dir: &Path, deny: &[PathBuf], out: &mut Vec<PathBuf>) {
    if deny.iter().any(|d| d == dir) {
        return;
    }
    if !deny.iter().any(|d| d.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            match p.canonicalize() {
                Ok(target) if !deny.iter().any(|d| overlaps(&target, d)) => out.push(p),
                _ => {}
            }
        } else if meta.is_dir() {
            carve(&p, deny, out);
        } else if !deny.iter().any(|d| d == &p) {
            out.push(p);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        for d in ["a/b/home/threads/t1", "a/b/src", "a/c", "etc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "a/b/config.yaml",
            "a/b/home/antler.db",
            "a/b/README",
            "etc/hosts",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        (t, root)
    }

    fn rel(root: &Path, v: Vec<PathBuf>) -> Vec<String> {
        v.iter()
            .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn nothing_denied_allows_the_root() {
        let (_t, root) = tree();
        assert_eq!(read_roots(&root, &[]), vec![root.clone()]);
        // A missing or outside deny entry changes nothing.
        assert_eq!(
            read_roots(
                &root,
                &[root.join("nope"), PathBuf::from("/definitely/not")]
            ),
            vec![root.clone()]
        );
    }

    #[test]
    fn denied_paths_are_cut_out_with_their_siblings_kept() {
        let (_t, root) = tree();
        let got = read_roots(
            &root,
            &[root.join("a/b/home"), root.join("a/b/config.yaml")],
        );
        assert_eq!(rel(&root, got), vec!["a/b/README", "a/b/src", "a/c", "etc"]);
    }

    #[test]
    fn symlinks_into_a_denied_path_are_left_out() {
        let (_t, root) = tree();
        std::os::unix::fs::symlink(root.join("a/b/home"), root.join("a/c/sneaky")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("etc/up")).unwrap();
        std::os::unix::fs::symlink(root.join("a/c"), root.join("a/b/fine")).unwrap();
        let got = read_roots(&root, &[root.join("a/b/home")]);
        // `a/c` is allowed whole (it holds no denied path); the link into the denied tree sits
        // inside it but is harmless: Landlock checks the target's real location, which no rule
        // covers. Links *on the way down* that overlap are dropped.
        assert_eq!(
            rel(&root, got),
            vec![
                "a/b/README",
                "a/b/config.yaml",
                "a/b/fine",
                "a/b/src",
                "a/c",
                "etc"
            ]
        );
    }

    #[test]
    fn denying_the_root_allows_nothing() {
        let (_t, root) = tree();
        assert!(read_roots(&root, std::slice::from_ref(&root)).is_empty());
    }
}
