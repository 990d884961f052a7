//! antler's built-in tools with DeerFlow's names, argument schemas and result shapes
//! (spec 50 §4): `bash`, `ls`, `glob`, `grep`, `read_file`, `write_file`, `str_replace`,
//! `present_files`, `view_image`.
//!
//! Every failure the model can act on is a tool message with `status: "error"` whose text starts
//! with `Error:` (DESIGN §7). The seven sandbox tools share [`ToolEnv`]: they lazily acquire the
//! thread's sandbox (the SandboxMiddleware persists its id), check paths with the local policy,
//! and mask host paths out of everything they return.
//!
//! Building a registry: [`builtin_tool`] maps a config `tools:` entry (`use:` or name) to a tool;
//! [`present_files_tool`] and [`view_image_tool`] build the two non-config built-ins (the latter
//! only for vision models).

pub mod ask_clarification;
pub mod bash;
pub mod env;
pub mod glob;
pub mod grep;
pub mod ls;
pub mod present_files;
pub mod read_file;
pub mod skill_md;
pub mod str_replace;
pub mod tool_search;
pub mod view_image;
pub mod write_file;
pub mod write_todos;

use std::sync::Arc;

use antler_protocol::Object;
use antler_runtime::Tool;

pub use env::{FileLocks, ToolEnv};

/// The sandbox tools by DeerFlow `use:` path and by name.
const SANDBOX_TOOLS: &[(&str, &str)] = &[
    ("deerflow.sandbox.tools:bash_tool", "bash"),
    ("deerflow.sandbox.tools:ls_tool", "ls"),
    ("deerflow.sandbox.tools:glob_tool", "glob"),
    ("deerflow.sandbox.tools:grep_tool", "grep"),
    ("deerflow.sandbox.tools:read_file_tool", "read_file"),
    ("deerflow.sandbox.tools:write_file_tool", "write_file"),
    ("deerflow.sandbox.tools:str_replace_tool", "str_replace"),
];

/// The tool name a `use:` path or name refers to, if it is one of the sandbox tools.
pub fn sandbox_tool_name(use_or_name: &str) -> Option<&'static str> {
    SANDBOX_TOOLS
        .iter()
        .find(|(u, n)| *u == use_or_name || *n == use_or_name)
        .map(|(_, n)| *n)
}

/// Whether a config entry is the bash tool (DeerFlow drops it, and `group: bash` entries, when
/// bash is not available).
pub fn is_bash_tool(use_or_name: &str) -> bool {
    sandbox_tool_name(use_or_name) == Some("bash")
}

/// Build a sandbox tool from a config `tools:` entry: `use_or_name` is its `use:` (e.g.
/// `deerflow.sandbox.tools:glob_tool`) or tool name, `options` its extra keys (`max_results`
/// for glob/grep). `None` for unknown tools — and for `bash` when
/// [`ToolEnv::bash_available`] is false (the tool is then removed from the list).
pub fn builtin_tool(use_or_name: &str, options: &Object, env: &ToolEnv) -> Option<Arc<dyn Tool>> {
    let max = options
        .get("max_results")
        .and_then(serde_json::Value::as_i64);
    let env = env.clone();
    Some(match sandbox_tool_name(use_or_name)? {
        "bash" if !env.bash_available() => return None,
        "bash" => Arc::new(bash::BashTool::new(env)),
        "ls" => Arc::new(ls::LsTool::new(env)),
        "glob" => Arc::new(glob::GlobTool::new(env, max)),
        "grep" => Arc::new(grep::GrepTool::new(env, max)),
        "read_file" => Arc::new(read_file::ReadFileTool::new(env)),
        "write_file" => Arc::new(write_file::WriteFileTool::new(env)),
        "str_replace" => Arc::new(str_replace::StrReplaceTool::new(env)),
        _ => return None,
    })
}

/// `present_files` (always offered to the lead agent).
pub fn present_files_tool(env: &ToolEnv) -> Arc<dyn Tool> {
    Arc::new(present_files::PresentFilesTool::new(env.clone()))
}

/// `view_image` — register it only when the model supports vision.
pub fn view_image_tool(env: &ToolEnv) -> Arc<dyn Tool> {
    Arc::new(view_image::ViewImageTool::new(env.clone()))
}

/// DeerFlow's default tool set in config order (`ls read_file glob grep write_file str_replace
/// bash`), then `present_files`, then `view_image` for vision models. `bash` is left out when
/// not available.
pub fn default_tools(env: &ToolEnv, supports_vision: bool) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = [
        "ls",
        "read_file",
        "glob",
        "grep",
        "write_file",
        "str_replace",
        "bash",
    ]
    .iter()
    .filter_map(|n| builtin_tool(n, &Object::new(), env))
    .collect();
    tools.push(present_files_tool(env));
    if supports_vision {
        tools.push(view_image_tool(env));
    }
    tools
}
