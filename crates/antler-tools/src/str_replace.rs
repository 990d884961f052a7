//! `str_replace` (spec 50 §4.7): replace a substring in a file. antler requires the match to be
//! unique unless `replace_all` is set (DESIGN §7; DeerFlow silently replaces the first).

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use antler_sandbox::SandboxError;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{blocking, detail, fail, prepare, sandbox_tool, why, Prepared, Step, ToolEnv};
use crate::read_file::binary_file_message;
use crate::write_file::lock_for_write;

/// `str_replace` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("changing this file"))]
    description: Option<String>,
    /// The **absolute** path of the file to edit. Give it second.
    path: String,
    /// The exact text to replace. Give it third.
    old_str: String,
    /// The replacement text. Give it fourth.
    new_str: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    replace_all: bool,
}

const DESCRIPTION: &str = "Replace text in a file. Unless `replace_all` is true, `old_str` must occur exactly once: include enough surrounding lines to make it unique.";

pub struct StrReplaceTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

fn replace_error(p: &Prepared, path: &str, e: SandboxError) -> crate::env::Fail {
    match e {
        SandboxError::NotFound(_) => fail(format!("Error: File not found: {path}")),
        SandboxError::PermissionDenied(r) => fail(format!(
            "Error: Permission denied accessing file: {path} ({r})"
        )),
        SandboxError::NotText(_) => fail(binary_file_message(path)),
        SandboxError::IsADirectory(_) => {
            fail(format!("Error: Path is a directory, not a file: {path}"))
        }
        SandboxError::Runtime(_) => fail(format!("Error: {e}")),
        other => fail(format!(
            "Error: Unexpected error replacing string: {}",
            detail(p, &other)
        )),
    }
}

impl StrReplaceTool {
    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        let path = a.path;
        let p = prepare(&self.env, &ctx)?;
        let _guard = lock_for_write(&self.env, &p, &path, replace_error).await?;
        let (sb, vp) = (p.sandbox.clone(), path.clone());
        let content = blocking(move || sb.read_file(&vp, None, None))
            .await
            .map_err(|e| replace_error(&p, &path, e))?;
        if a.old_str.is_empty() {
            return Ok(ToolOutput::text("OK"));
        }
        let count = content.matches(a.old_str.as_str()).count();
        if count == 0 {
            return Err(fail(format!(
                "Error: String to replace not found in file: {path}"
            )));
        }
        if count > 1 && !a.replace_all {
            return Err(fail(format!(
                "Error: String to replace appears {count} times in file: {path}; it must appear exactly once. Include more surrounding text in old_str, or set replace_all to true."
            )));
        }
        let updated = if a.replace_all {
            content.replace(&a.old_str, &a.new_str)
        } else {
            content.replacen(&a.old_str, &a.new_str, 1)
        };
        let (sb, vp) = (p.sandbox.clone(), path.clone());
        blocking(move || sb.write_file(&vp, &updated, false))
            .await
            .map_err(|e| replace_error(&p, &path, e))?;
        Ok(ToolOutput::text("OK"))
    }
}

sandbox_tool!(StrReplaceTool, Args, "str_replace", DESCRIPTION);
