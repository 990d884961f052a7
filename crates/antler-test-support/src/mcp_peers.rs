//! The reference MCP server (`@modelcontextprotocol/server-everything`) for end-to-end tests,
//! installed by `crates/antler-mcp/tests/peers/setup.sh` into `$ANTLER_MCP_PEERS` (default
//! `~/.cache/antler-mcp-peers`).

use std::path::{Path, PathBuf};

/// server-everything's entry point; `None` (the reason printed) when node is absent. With node
/// present but the package missing, `setup_script` is run first; it failing fails the test.
#[allow(clippy::print_stderr)] // the SKIP note is for whoever reads the test output
pub fn server_everything(setup_script: &Path) -> Option<PathBuf> {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("SKIP: node is not installed; the server-everything tests need it");
        return None;
    }
    let dir = std::env::var_os("ANTLER_MCP_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/antler-mcp-peers")
        });
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        let ok = std::process::Command::new("bash")
            .arg(setup_script)
            .env("ANTLER_MCP_PEERS", &dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{} failed", setup_script.display());
    }
    assert!(
        entry.is_file(),
        "server-everything missing at {}",
        entry.display()
    );
    Some(entry)
}
