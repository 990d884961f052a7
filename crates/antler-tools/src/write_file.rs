//! `write_file` (spec 50 §4.6): create or overwrite a text file, or append to it.

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use antler_sandbox::mapping::is_under;
use antler_sandbox::paths::VIRTUAL_USER_DATA;
use antler_sandbox::SandboxError;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{blocking, detail, fail, prepare, sandbox_tool, why, Prepared, Step, ToolEnv};

/// Default cap on one non-append write (80 KiB).
pub const DEFAULT_MAX_BYTES: i64 = 80 * 1024;
/// Environment override of the cap, read per call (≤ 0 disables; unparsable → default).
pub const MAX_BYTES_ENV: &str = "DEERFLOW_WRITE_FILE_MAX_BYTES";
const MAX_ERROR_CHARS: usize = 2_000;

fn effective_max_bytes() -> i64 {
    std::env::var(MAX_BYTES_ENV)
        .ok()
        .map(|v| v.trim().parse().unwrap_or(DEFAULT_MAX_BYTES))
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// Middle-cut an error line to 2,000 chars.
fn bound(detail: String) -> String {
    let n = detail.chars().count();
    if n <= MAX_ERROR_CHARS {
        return detail;
    }
    let marker = |k: usize| format!("\n... [write_file error truncated: {k} chars skipped] ...\n");
    let keep = MAX_ERROR_CHARS.saturating_sub(marker(n).chars().count());
    let head = keep / 2;
    let tail = keep - head;
    let h: String = detail.chars().take(head).collect();
    let t: String = detail.chars().skip(n - tail).collect();
    format!("{h}{}{t}", marker(n - head - tail))
}

/// `write_file` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("writing this file"))]
    description: Option<String>,
    /// The **absolute** path of the file to write. Give it second.
    path: String,
    /// The text to write. Give it third.
    content: String,
    /// Append to the end of the file instead of replacing it.
    #[serde(default)]
    append: bool,
}

const DESCRIPTION: &str = "Write text to a file, creating it and its folders if needed. Overwrites by default; set `append` to add to the end instead.\n\nOne overwriting call may carry at most 80 KB. For longer documents write the first part, then add the rest with `append: true` calls, or edit parts later with `str_replace`.";

pub struct WriteFileTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

/// The lock key for a path: its host path for thread files, else the virtual path.
fn lock_key(p: &Prepared, path: &str) -> String {
    match &p.policy {
        Some(policy) if is_under(path, VIRTUAL_USER_DATA) => policy
            .resolve_user_data(path)
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_owned()),
        _ => path.to_owned(),
    }
}

/// Checks that the policy allows writing `path` (a refusal reported through `error`), then
/// takes the path's lock: writers of one file take turns.
pub(crate) async fn lock_for_write(
    env: &ToolEnv,
    p: &Prepared,
    path: &str,
    error: fn(&Prepared, &str, SandboxError) -> crate::env::Fail,
) -> Step<tokio::sync::OwnedMutexGuard<()>> {
    if let Some(policy) = &p.policy {
        policy.check_write(path).map_err(|e| error(p, path, e))?;
    }
    let lock = env.locks.lock_for(p.sandbox.id(), &lock_key(p, path));
    Ok(lock.lock_owned().await)
}

fn write_error(p: &Prepared, path: &str, e: SandboxError) -> crate::env::Fail {
    fail(bound(match e {
        SandboxError::PermissionDenied(r) => {
            format!("Error: Permission denied writing to file: {path} ({r})")
        }
        SandboxError::IsADirectory(_) => format!("Error: Path is a directory, not a file: {path}"),
        other => format!(
            "Error: Failed to write file '{path}': {}",
            detail(p, &other)
        ),
    }))
}

impl WriteFileTool {
    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        if !a.append {
            let max = effective_max_bytes();
            let n = a.content.len();
            if max > 0 && n as i64 > max {
                return Err(fail(format!(
                    "Error: write_file content ({n} bytes) exceeds the {max}-byte single-call limit. Split it: write the first part now and change later parts with `str_replace`, or call write_file again with append=True for each further part (appends have no size limit)."
                )));
            }
        }
        let path = a.path;
        let p = prepare(&self.env, &ctx)?;
        let _guard = lock_for_write(&self.env, &p, &path, write_error).await?;
        let (sb, vp, content, append) = (p.sandbox.clone(), path.clone(), a.content, a.append);
        blocking(move || sb.write_file(&vp, &content, append))
            .await
            .map_err(|e| write_error(&p, &path, e))?;
        Ok(ToolOutput::text("OK"))
    }
}

sandbox_tool!(WriteFileTool, Args, "write_file", DESCRIPTION);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_bounded() {
        let s = bound(format!("Error: {}", "x".repeat(5000)));
        assert!(s.chars().count() <= MAX_ERROR_CHARS);
        assert!(s.contains("[write_file error truncated: "));
        assert_eq!(bound("short".into()), "short");
    }
}
