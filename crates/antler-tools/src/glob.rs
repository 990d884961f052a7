//! `glob` (spec 50 §4.3): paths matching a pattern under a folder.

use std::sync::Arc;

use antler_protocol::{Object, ToolSpec};
use antler_runtime::{Tool, ToolContext, ToolError, ToolOutput};
use antler_sandbox::SandboxError;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::env::{
    args, blocking, clamp_results, description_prop, detail, fail, opt_prop, prepare, prop, spec,
    Step, ToolEnv,
};

pub const DEFAULT_MAX_RESULTS: usize = 200;
pub const MAX_MAX_RESULTS: usize = 1_000;

#[derive(Deserialize)]
struct Args {
    #[allow(dead_code)]
    #[serde(default)]
    description: Option<String>,
    pattern: String,
    path: String,
    #[serde(default)]
    include_dirs: bool,
    #[serde(default)]
    max_results: Option<i64>,
}

pub struct GlobTool {
    spec: Arc<ToolSpec>,
    env: ToolEnv,
    /// `max_results` from the tool's config entry.
    configured_max: usize,
}

impl GlobTool {
    pub fn new(env: ToolEnv, configured_max: Option<i64>) -> GlobTool {
        GlobTool {
            spec: spec(
                "glob",
                "Find files (and optionally folders) under a folder whose paths match a glob pattern.",
                json!({
                    "description": description_prop("searching for these paths"),
                    "pattern": prop("string", "Glob pattern relative to `path`, e.g. `**/*.py`. `*` does not cross `/`."),
                    "path": prop("string", "The **absolute** folder to search under."),
                    "include_dirs": {"type": "boolean", "default": false, "description": "Also return matching folders."},
                    "max_results": opt_prop("integer", "Most paths to return (default 200).", json!(DEFAULT_MAX_RESULTS)),
                }),
                &["description", "pattern", "path"],
            ),
            env,
            configured_max: clamp_results(configured_max.unwrap_or(DEFAULT_MAX_RESULTS as i64), DEFAULT_MAX_RESULTS, MAX_MAX_RESULTS),
        }
    }

    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        let path = a.path;
        let limit = clamp_results(
            a.max_results.unwrap_or(DEFAULT_MAX_RESULTS as i64),
            DEFAULT_MAX_RESULTS,
            MAX_MAX_RESULTS,
        )
        .min(self.configured_max);
        let p = prepare(&self.env, &ctx)?;
        if let Some(policy) = &p.policy {
            policy
                .check_read(&path)
                .map_err(|e| fail(format!("Error: Permission denied: {path} ({e})")))?;
        }
        let (sb, vp, pat, dirs) = (p.sandbox.clone(), path.clone(), a.pattern, a.include_dirs);
        let (found, truncated) = blocking(move || sb.glob(&vp, &pat, dirs, limit))
            .await
            .map_err(|e| match e {
                SandboxError::NotFound(_) => fail(format!("Error: Directory not found: {path}")),
                SandboxError::NotADirectory(_) => {
                    fail(format!("Error: Path is not a directory: {path}"))
                }
                SandboxError::PermissionDenied(r) => {
                    fail(format!("Error: Permission denied: {path} ({r})"))
                }
                SandboxError::Runtime(_) => fail(format!("Error: {e}")),
                other => fail(format!(
                    "Error: Unexpected error searching paths: {}",
                    detail(&p, &other)
                )),
            })?;
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

#[async_trait]
impl Tool for GlobTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }

    async fn call(&self, a: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let a: Args = args(a)?;
        Ok(self.run(a, ctx).await.unwrap_or_else(ToolOutput::from))
    }
}
