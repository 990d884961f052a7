//! `read_file` (spec 50 §4.5): UTF-8 text, whole or a 1-indexed inclusive line range.

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use antler_sandbox::truncate::{head_truncate, READ_FILE_HINT};
use antler_sandbox::SandboxError;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::env::{blocking, detail, fail, prepare, sandbox_tool, why, Prepared, Step, ToolEnv};

/// What the model reads for a file that is not UTF-8 text.
pub fn binary_file_message(path: &str) -> String {
    format!(
        "Error: cannot read '{path}' as text — it appears to be a binary file (e.g. .xlsx, .pdf, or an image). read_file only supports UTF-8 text. Use bash with a suitable library instead (pandas/openpyxl for spreadsheets), or view_image for images."
    )
}

/// `read_file` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("reading this file"))]
    description: Option<String>,
    /// The **absolute** path of the file to read.
    path: String,
    /// First line to read, 1-indexed and inclusive. Omit to start at the top.
    #[serde(default)]
    start_line: Option<i64>,
    /// Last line to read, 1-indexed and inclusive. Omit to read to the end.
    #[serde(default)]
    end_line: Option<i64>,
}

const DESCRIPTION: &str = "Read a text file (source code, configuration, logs, documents converted to Markdown). Large files can be read in parts with a line range.";

pub struct ReadFileTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

/// Map a read failure to the line the model sees.
pub(crate) fn read_error(p: &Prepared, path: &str, e: SandboxError) -> crate::env::Fail {
    match e {
        SandboxError::NotFound(_) => fail(format!("Error: File not found: {path}")),
        SandboxError::PermissionDenied(r) => fail(format!("Error: Permission denied reading file: {path} ({r})")),
        SandboxError::IsADirectory(_) => fail(format!("Error: Path is a directory, not a file: {path}")),
        SandboxError::NotText(_) => fail(binary_file_message(path)),
        SandboxError::TooLarge { size, limit, .. } => fail(format!(
            "Error: File is too large to read at once: {path} ({size} bytes; the limit is {limit} bytes). Read a part with start_line/end_line, or search it with grep."
        )),
        SandboxError::Runtime(_) => fail(format!("Error: {e}")),
        other => fail(format!("Error: Unexpected error reading file: {}", detail(p, &other))),
    }
}

impl ReadFileTool {
    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        if a.start_line.is_some_and(|s| s < 1) {
            return Ok(ToolOutput::text("(start_line must be >= 1)"));
        }
        let start = a.start_line.unwrap_or(1);
        if a.end_line.is_some_and(|e| e < 1) {
            return Ok(ToolOutput::text("(end_line must be >= 1)"));
        }
        if a.end_line.is_some_and(|e| start > e) {
            return Ok(ToolOutput::text(
                "(start_line > end_line — no lines in range)",
            ));
        }
        let path = a.path;
        let p = prepare(&self.env, &ctx)?;
        if let Some(policy) = &p.policy {
            if let Err(e) = policy.check_read(&path) {
                return Err(read_error(&p, &path, e));
            }
        }
        let ranged = a.start_line.is_some() || a.end_line.is_some();
        let (s, e) = if ranged {
            (a.start_line.map(|v| v as u64), a.end_line.map(|v| v as u64))
        } else {
            (None, None)
        };
        let (sb, vp) = (p.sandbox.clone(), path.clone());
        let content = blocking(move || sb.read_file(&vp, s, e))
            .await
            .map_err(|e| read_error(&p, &path, e))?;
        if content.is_empty() {
            if a.start_line.is_some_and(|s| s > 1) {
                return Ok(ToolOutput::text("(start_line exceeds file length)"));
            }
            return Ok(ToolOutput::text("(empty)"));
        }
        let mut out = ToolOutput::text(head_truncate(
            &content,
            self.env.settings.read_file_output_max_chars,
            READ_FILE_HINT,
        ));
        if let Some(entry) = self.skill_entry(&p, &path, &content).await {
            if let ToolOutput::Content {
                additional_kwargs, ..
            } = &mut out
            {
                additional_kwargs.insert("skill_context_entry".into(), entry);
            }
        }
        Ok(out)
    }

    /// `{name, path, description}` when `path` is a `SKILL.md` under the skills mount (spec 50
    /// §5.6): DurableContext keeps these references across summarization.
    async fn skill_entry(
        &self,
        p: &Prepared,
        path: &str,
        content: &str,
    ) -> Option<serde_json::Value> {
        let root = self
            .env
            .settings
            .skills_container_path
            .trim_end_matches('/');
        let rest = path.strip_prefix(root)?.strip_prefix('/')?;
        if !rest.ends_with("SKILL.md") || rest.split('/').any(|seg| seg == ".." || seg == ".") {
            return None;
        }
        if rest.rsplit('/').next() != Some("SKILL.md") {
            return None;
        }
        // A ranged read may not include the front matter: read the (small) file whole.
        let text = if content.starts_with("---") {
            content.to_owned()
        } else {
            let (sb, vp) = (p.sandbox.clone(), path.to_owned());
            blocking(move || sb.read_file(&vp, None, None)).await.ok()?
        };
        let fm = crate::skill_md::parse_skill_md(&text).ok()?;
        Some(json!({"name": fm.name, "path": path, "description": fm.description}))
    }
}

sandbox_tool!(ReadFileTool, Args, "read_file", DESCRIPTION);
