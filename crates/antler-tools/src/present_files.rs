//! `present_files` (spec 50 §4.9): make files in `/mnt/user-data/outputs` visible to the user by
//! adding them to `artifacts`. The update goes through the artifacts reducer (order-preserving
//! de-duplication), so parallel calls never lose or duplicate paths.

use std::path::{Path, PathBuf};

use antler_protocol::{Message, StateUpdate, ToolMessage};
use antler_runtime::{Command, ToolContext, ToolError, ToolOutput, TypedSpec, TypedTool};
use antler_sandbox::mapping::reject_traversal;
use antler_sandbox::paths::{ThreadDirs, VIRTUAL_OUTPUTS};
use antler_sandbox::{SandboxError, ThreadRoots};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{Fail, ToolEnv};

/// `present_files` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    /// Absolute paths of the files to present. **Only** files under `/mnt/user-data/outputs` can be presented.
    filepaths: Vec<String>,
}

pub struct PresentFilesTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

/// Resolve one path to `/mnt/user-data/outputs/{relative}`. Resolution goes through the
/// thread folder handles: symlinks are followed only inside `user-data`, and a folder that was
/// replaced by a symlink or a file is refused.
fn normalize(dirs: &ThreadDirs, filepath: &str) -> Result<String, String> {
    let only = || format!("Only files in {VIRTUAL_OUTPUTS} can be presented: {filepath}");
    let traversal = || "Access denied: path traversal detected".to_owned();
    let roots = ThreadRoots::from_dirs(dirs);
    let outputs = roots.outputs.open().map_err(|e| match e {
        SandboxError::NotFound(_) => format!("File not found: {filepath}"),
        other => other.to_string(),
    })?;
    let stripped = filepath.trim_start_matches('/');
    // The path below `outputs`, canonical.
    let rel: PathBuf = if stripped == "mnt/user-data" || stripped.starts_with("mnt/user-data/") {
        reject_traversal(filepath).map_err(|e| e.to_string())?;
        let ud = roots
            .user_data
            .as_ref()
            .ok_or_else(|| "Thread outputs path is not available in runtime state".to_owned())?
            .open()
            .map_err(|e| e.to_string())?;
        let rest = stripped["mnt/user-data".len()..].trim_start_matches('/');
        let canon = ud
            .canonical(Path::new(rest), true)
            .map_err(|_| traversal())?;
        let name = dirs.outputs.file_name().ok_or_else(only)?;
        canon.strip_prefix(name).map_err(|_| only())?.to_path_buf()
    } else {
        // A host path: it must spell a path inside the outputs folder.
        let host = Path::new(filepath);
        let inside = host
            .strip_prefix(outputs.canonical_root())
            .or_else(|_| host.strip_prefix(&dirs.outputs))
            .map_err(|_| only())?;
        reject_traversal(&inside.to_string_lossy()).map_err(|_| only())?;
        outputs.canonical(inside, true).map_err(|_| only())?
    };
    let is_file = outputs.metadata(&rel).is_ok_and(|m| m.is_file());
    if rel.as_os_str().is_empty() || !is_file {
        return Err(format!("File not found: {filepath}"));
    }
    let rel = rel.to_string_lossy().replace('\\', "/");
    Ok(format!("{VIRTUAL_OUTPUTS}/{rel}"))
}

impl PresentFilesTool {
    pub fn new(env: ToolEnv) -> PresentFilesTool {
        PresentFilesTool {
            spec: TypedSpec::new(
                "present_files",
                "Show files to the user so they can open, view or download them in the client.\n\nUse it for deliverables once they are written to `/mnt/user-data/outputs` — not for intermediate files or files you only need to read yourself. Several files can be presented in one call, and it is safe to call in parallel with other tools.",
            ),
            env,
        }
    }

    fn resolve(&self, a: &Args, ctx: &ToolContext<'_>) -> Result<Vec<String>, String> {
        if ctx.run.thread_id.is_empty() {
            return Err(
                "Thread ID is not available in runtime context or runtime config".to_owned(),
            );
        }
        // The run's own folders (from its sandbox), never `thread_data` from state.
        let dirs = crate::env::thread_paths(&self.env, ctx)
            .map(|p| ThreadDirs::from(&p))
            .map_err(Fail::detail)?;
        a.filepaths.iter().map(|f| normalize(&dirs, f)).collect()
    }
}

fn reply(ctx: &ToolContext<'_>, text: String, ok: bool) -> ToolMessage {
    let mut m = if ok {
        ToolMessage::new(ctx.call_id, text)
    } else {
        ToolMessage::error(ctx.call_id, text)
    };
    m.name = Some("present_files".to_owned());
    m
}

#[async_trait]
impl TypedTool for PresentFilesTool {
    type Args = Args;

    antler_runtime::typed_spec!(spec);

    async fn invoke(&self, a: Args, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let update = match self.resolve(&a, &ctx) {
            Ok(paths) => StateUpdate {
                artifacts: Some(paths),
                messages: Some(vec![Message::Tool(reply(
                    &ctx,
                    "Successfully presented files".into(),
                    true,
                ))]),
                ..Default::default()
            },
            Err(e) => StateUpdate::message(reply(&ctx, format!("Error: {e}"), false)),
        };
        Ok(ToolOutput::Command(Command { update, goto: None }))
    }
}
