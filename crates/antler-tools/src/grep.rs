//! `grep` (spec 50 §4.4): matching lines in a file or under a folder.

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use antler_sandbox::{GrepQuery, SandboxError};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{
    blocking, clamp_results, fail, folder_error, prepare_search, sandbox_tool, unexpected, why,
    Step, ToolEnv,
};

pub const DEFAULT_MAX_RESULTS: usize = 100;
/// What grep's unexpected errors say it was doing.
const SEARCHING: &str = "searching file contents";
pub const MAX_MAX_RESULTS: usize = 500;

/// `grep` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("searching these files"))]
    description: Option<String>,
    /// Regular expression to look for (or plain text with `literal`).
    pattern: String,
    /// The **absolute** file or folder to search.
    path: String,
    /// Only search files whose relative path matches this glob, e.g. `**/*.py`.
    #[serde(default)]
    glob: Option<String>,
    /// Treat `pattern` as plain text.
    #[serde(default)]
    literal: bool,
    /// Match case exactly.
    #[serde(default)]
    case_sensitive: bool,
    /// Most matching lines to return (default 100).
    #[serde(default = "default_max_results")]
    max_results: i64,
}

fn default_max_results() -> i64 {
    DEFAULT_MAX_RESULTS as i64
}

pub struct GrepTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
    configured_max: usize,
}

impl GrepTool {
    pub fn new(env: ToolEnv, configured_max: Option<i64>) -> GrepTool {
        GrepTool {
            spec: TypedSpec::new(
                "grep",
                "Search a text file, or the files under a folder, for lines matching a pattern.",
            ),
            env,
            configured_max: clamp_results(
                configured_max.unwrap_or(DEFAULT_MAX_RESULTS as i64),
                DEFAULT_MAX_RESULTS,
                MAX_MAX_RESULTS,
            ),
        }
    }

    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        let path = a.path;
        let bounds = (DEFAULT_MAX_RESULTS, MAX_MAX_RESULTS, self.configured_max);
        let (p, limit) = prepare_search(&self.env, &ctx, &path, a.max_results, bounds)?;
        let q = GrepQuery {
            pattern: a.pattern,
            glob: a.glob,
            literal: a.literal,
            case_sensitive: a.case_sensitive,
            max_results: limit,
        };
        let (sb, vp) = (p.sandbox.clone(), path.clone());
        let (found, truncated) = blocking(move || sb.grep(&vp, &q))
            .await
            .map_err(|e| match e {
                SandboxError::InvalidRegex(_) => fail(format!("Error: {e}")),
                // Unlike ls and glob, grep has no message of its own for a path that is a file.
                SandboxError::NotADirectory(_) => unexpected(&p, SEARCHING, &e),
                e => folder_error(&p, &path, SEARCHING, e),
            })?;
        if found.is_empty() {
            return Ok(ToolOutput::text(format!("No matches found under {path}")));
        }
        let mut out = format!("Found {} matches under {path}", found.len());
        if truncated {
            out.push_str(&format!(" (showing first {})", found.len()));
        }
        for m in &found {
            out.push_str(&format!(
                "\n{}:{}: {}",
                p.mask(&m.path),
                m.line_number,
                m.line
            ));
        }
        if truncated {
            out.push_str("\nResults truncated. Narrow the path or add a glob filter.");
        }
        Ok(ToolOutput::text(out))
    }
}

sandbox_tool!(GrepTool, Args);
