//! `glob` (spec 50 §4.3): paths matching a pattern under a folder.

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{
    blocking, clamp_results, folder_error, prepare_search, sandbox_tool, why, Step, ToolEnv,
};

pub const DEFAULT_MAX_RESULTS: usize = 200;
pub const MAX_MAX_RESULTS: usize = 1_000;

/// `glob` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("searching for these paths"))]
    description: Option<String>,
    /// Glob pattern relative to `path`, e.g. `**/*.py`. `*` does not cross `/`.
    pattern: String,
    /// The **absolute** folder to search under.
    path: String,
    /// Also return matching folders.
    #[serde(default)]
    include_dirs: bool,
    /// Most paths to return (default 200).
    #[serde(default = "default_max_results")]
    max_results: i64,
}

fn default_max_results() -> i64 {
    DEFAULT_MAX_RESULTS as i64
}

pub struct GlobTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
    /// `max_results` from the tool's config entry.
    configured_max: usize,
}

impl GlobTool {
    pub fn new(env: ToolEnv, configured_max: Option<i64>) -> GlobTool {
        GlobTool {
            spec: TypedSpec::new(
                "glob",
                "Find files (and optionally folders) under a folder whose paths match a glob pattern.",
            ),
            env,
            configured_max: clamp_results(configured_max.unwrap_or(DEFAULT_MAX_RESULTS as i64), DEFAULT_MAX_RESULTS, MAX_MAX_RESULTS),
        }
    }

    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        let path = a.path;
        let bounds = (DEFAULT_MAX_RESULTS, MAX_MAX_RESULTS, self.configured_max);
        let (p, limit) = prepare_search(&self.env, &ctx, &path, a.max_results, bounds)?;
        let (sb, vp, pat, dirs) = (p.sandbox.clone(), path.clone(), a.pattern, a.include_dirs);
        let (found, truncated) = blocking(move || sb.glob(&vp, &pat, dirs, limit))
            .await
            .map_err(|e| folder_error(&p, &path, "searching paths", e))?;
        if found.is_empty() {
            return Ok(ToolOutput::text(format!("No files matched under {path}")));
        }
        let mut out = format!("Found {} paths under {path}", found.len());
        if truncated {
            out.push_str(&format!(" (showing first {})", found.len()));
        }
        for (i, f) in found.iter().enumerate() {
            out.push_str(&format!("\n{}. {}", i + 1, p.mask(f)));
        }
        if truncated {
            out.push_str("\nResults truncated. Narrow the path or pattern to see fewer matches.");
        }
        Ok(ToolOutput::text(out))
    }
}

sandbox_tool!(GlobTool, Args);
