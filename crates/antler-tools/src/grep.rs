//! `grep` (spec 50 §4.4): matching lines in a file or under a folder.

use std::sync::Arc;

use antler_protocol::{Object, ToolSpec};
use antler_runtime::{Tool, ToolContext, ToolError, ToolOutput};
use antler_sandbox::{GrepQuery, SandboxError};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::env::{
    args, blocking, clamp_results, description_prop, detail, fail, opt_prop, prepare, prop, spec,
    Step, ToolEnv,
};

pub const DEFAULT_MAX_RESULTS: usize = 100;
pub const MAX_MAX_RESULTS: usize = 500;

#[derive(Deserialize)]
struct Args {
    #[allow(dead_code)]
    #[serde(default)]
    description: Option<String>,
    pattern: String,
    path: String,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    literal: bool,
    #[serde(default)]
    case_sensitive: bool,
    #[serde(default)]
    max_results: Option<i64>,
}

pub struct GrepTool {
    spec: Arc<ToolSpec>,
    env: ToolEnv,
    configured_max: usize,
}

impl GrepTool {
    pub fn new(env: ToolEnv, configured_max: Option<i64>) -> GrepTool {
        GrepTool {
            spec: spec(
                "grep",
                "Search a text file, or the files under a folder, for lines matching a pattern.",
                json!({
                    "description": description_prop("searching these files"),
                    "pattern": prop("string", "Regular expression to look for (or plain text with `literal`)."),
                    "path": prop("string", "The **absolute** file or folder to search."),
                    "glob": opt_prop("string", "Only search files whose relative path matches this glob, e.g. `**/*.py`.", json!(null)),
                    "literal": {"type": "boolean", "default": false, "description": "Treat `pattern` as plain text."},
                    "case_sensitive": {"type": "boolean", "default": false, "description": "Match case exactly."},
                    "max_results": opt_prop("integer", "Most matching lines to return (default 100).", json!(DEFAULT_MAX_RESULTS)),
                }),
                &["description", "pattern", "path"],
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
                SandboxError::NotFound(_) => fail(format!("Error: Directory not found: {path}")),
                SandboxError::InvalidRegex(_) => fail(format!("Error: {e}")),
                SandboxError::PermissionDenied(r) => {
                    fail(format!("Error: Permission denied: {path} ({r})"))
                }
                SandboxError::Runtime(_) => fail(format!("Error: {e}")),
                other => fail(format!(
                    "Error: Unexpected error searching file contents: {}",
                    detail(&p, &other)
                )),
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

#[async_trait]
impl Tool for GrepTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }

    async fn call(&self, a: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let a: Args = args(a)?;
        Ok(self.run(a, ctx).await.unwrap_or_else(ToolOutput::from))
    }
}
