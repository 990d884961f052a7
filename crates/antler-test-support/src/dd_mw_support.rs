//! Scratch folders for sandbox tests, shared by the middleware and tool suites.

use std::path::{Path, PathBuf};

/// A scratch base outside `/tmp`: confined commands may write `/tmp`, so "cannot write outside"
/// checks need a place that is not under it. Prefers the test crate's per-target temp dir
/// (`CARGO_TARGET_TMPDIR`), else `/var/tmp`, else the crate folder's (`CARGO_MANIFEST_DIR`)
/// `target/`. Both are the calling crate's, so they are passed in.
pub fn scratch_base(target_tmpdir: &str, manifest_dir: &str) -> PathBuf {
    let under_tmp = |p: &Path| {
        std::fs::canonicalize(p)
            .map(|c| c.starts_with("/tmp") || c.starts_with("/dev/shm"))
            .unwrap_or(true)
    };
    let candidates = [
        PathBuf::from(target_tmpdir),
        PathBuf::from("/var/tmp/antler-tests"),
        Path::new(manifest_dir).join("target/test-scratch"),
    ];
    for c in candidates {
        if std::fs::create_dir_all(&c).is_ok() && !under_tmp(&c) {
            return c;
        }
    }
    PathBuf::from(target_tmpdir)
}
