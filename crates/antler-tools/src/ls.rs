//! `ls` (spec 50 §4.2): a flat, sorted listing two levels deep; folders end with `/`.

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use antler_sandbox::mapping::is_under;
use antler_sandbox::paths::VIRTUAL_USER_DATA;
use antler_sandbox::truncate::{head_truncate, LS_HINT};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{blocking, fail, folder_error, prepare, sandbox_tool, why, Step, ToolEnv};

/// `ls` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("listing this folder"))]
    description: Option<String>,
    /// The **absolute** path of the folder to list.
    path: String,
}

const DESCRIPTION: &str = "List a folder's files and subfolders, two levels deep, one absolute path per line (folders end with `/`).";

pub struct LsTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

impl LsTool {
    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        let path = a.path;
        let p = prepare(&self.env, &ctx)?;
        if let Some(policy) = &p.policy {
            let check = policy.validate_tool_path(&path, true).and_then(|()| {
                if is_under(&path, VIRTUAL_USER_DATA) {
                    policy.resolve_user_data(&path).map(|_| ())
                } else {
                    Ok(())
                }
            });
            if let Err(e) = check {
                return Err(fail(format!("Error: Permission denied: {path} ({e})")));
            }
        }
        let sb = p.sandbox.clone();
        let vp = path.clone();
        let entries = blocking(move || sb.list_dir(&vp, 2))
            .await
            .map_err(|e| folder_error(&p, &path, "listing directory", e))?;
        if entries.is_empty() {
            return Ok(ToolOutput::text("(empty)"));
        }
        let out = p.mask(&entries.join("\n"));
        Ok(ToolOutput::text(head_truncate(
            &out,
            self.env.settings.ls_output_max_chars,
            LS_HINT,
        )))
    }
}

sandbox_tool!(LsTool, Args, "ls", DESCRIPTION);
