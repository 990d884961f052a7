//! `bash` (spec 50 §4.1): run a command in the thread's sandbox.

use antler_runtime::{ToolContext, ToolOutput, TypedSpec};
use antler_sandbox::exec::timeout_notice;
use antler_sandbox::truncate::middle_truncate;
use antler_sandbox::{CommandRequest, OutputLines, SandboxError};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::env::{fail, prepare, sandbox_tool, why, Step, ToolEnv};

/// DeerFlow's message when host bash is off.
pub const HOST_BASH_DISABLED: &str = "Error: Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox boundary. Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: true only in a fully trusted local environment.";

const DESCRIPTION: &str = "Run a bash command in the thread's Linux sandbox and return its output.

- Run Python with `python`; keep a virtual environment at `/mnt/user-data/workspace/.venv` and install packages with `python -m pip` inside it.
- The working directory is `/mnt/user-data/workspace`; refer to other files by absolute `/mnt/user-data/...` paths.
- A command that runs in the foreground until the timeout is killed. Start servers and other long-lived processes in the background with their output redirected, e.g. `your-command > /mnt/user-data/workspace/server.log 2>&1 &`, then read the log or poll the port.";

/// `bash` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    #[allow(dead_code)]
    #[schemars(with = "String", description = why!("running this command"))]
    description: Option<String>,
    /// The bash command to run. Use absolute paths for files and folders.
    command: String,
}

pub struct BashTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

impl BashTool {
    async fn run(&self, a: Args, ctx: ToolContext<'_>) -> Step<ToolOutput> {
        let status = self.env.provider.confinement();
        if self.env.provider.is_local() {
            if status.refuses() {
                return Err(fail(format!(
                    "Error: {}",
                    SandboxError::ConfinementRequired(status.reason)
                )));
            }
            if !self.env.bash_available() {
                return Err(fail(HOST_BASH_DISABLED));
            }
        }
        let p = prepare(&self.env, &ctx)?;
        let command = match &p.policy {
            Some(policy) => {
                policy
                    .validate_bash_command(&a.command)
                    .map_err(|e| fail(format!("Error: {e}")))?;
                policy.with_cwd_prefix(&policy.rewrite_user_data(&a.command))
            }
            None => format!("cd /mnt/user-data/workspace; {}", a.command),
        };
        let timeout = self.env.settings.bash_command_timeout;
        // Live output lines as progress events, only when someone listens.
        let lines = ctx.progress("bash").map(|reporter| {
            let masker = p.masker();
            OutputLines::new(move |line| reporter.report(&masker(line)))
        });
        let out = p
            .sandbox
            .execute_command(CommandRequest {
                command,
                env: Vec::new(),
                timeout: Some(timeout),
                lines,
            })
            .await
            .map_err(|e| match e {
                SandboxError::Runtime(_)
                | SandboxError::PermissionDenied(_)
                | SandboxError::ConfinementRequired(_)
                | SandboxError::InvalidEnvKey(_) => fail(format!("Error: {e}")),
                other => fail(format!(
                    "Error: Unexpected error executing command: {}",
                    crate::env::detail(&p, &other)
                )),
            })?;
        let limit = self.env.settings.bash_output_max_chars;
        if out.timed_out {
            let notice = timeout_notice(out.timeout);
            let partial = out
                .text
                .strip_suffix(&notice)
                .unwrap_or(&out.text)
                .trim_end();
            let mut text = format!("Error: {notice}");
            if !partial.is_empty() {
                text.push_str("\nOutput before the timeout:\n");
                text.push_str(&p.mask(partial));
            }
            return Err(fail(middle_truncate(&text, limit)));
        }
        Ok(ToolOutput::text(middle_truncate(&p.mask(&out.text), limit)))
    }
}

sandbox_tool!(BashTool, Args, "bash", DESCRIPTION);
