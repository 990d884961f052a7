//! Fixtures shared by the crate's unit tests.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

/// A temp folder holding an `extensions_config.json` with `contents`: the folder (kept alive by
/// the caller) and the file's path.
pub(crate) fn extensions_config(contents: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("extensions_config.json");
    std::fs::write(&file, contents).unwrap();
    (dir, file)
}
