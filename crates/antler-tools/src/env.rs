//! What every sandbox tool shares: the provider, the settings, per-file locks, and the steps
//! DeerFlow runs before each call (ensure the sandbox, ensure the thread folders, load the
//! local path policy).
//!
//! The sandbox and its folders are derived from the run's (user, thread), never read from the
//! `sandbox` / `thread_data` state channels: those are informational records.

use std::sync::Arc;

use antler_runtime::{keys, RunKey, ToolContext, ToolOutput};
use antler_sandbox::{
    is_local_sandbox_id, LocalPolicy, Sandbox, SandboxError, SandboxProvider, SandboxSettings,
    ThreadDirs, ThreadPaths,
};

/// Everything a built-in tool needs from the rest of antler.
#[derive(Clone)]
pub struct ToolEnv {
    pub provider: Arc<dyn SandboxProvider>,
    pub settings: Arc<SandboxSettings>,
    pub locks: Arc<FileLocks>,
}

impl ToolEnv {
    pub fn new(provider: Arc<dyn SandboxProvider>, settings: Arc<SandboxSettings>) -> ToolEnv {
        ToolEnv {
            provider,
            settings,
            locks: Arc::new(FileLocks::default()),
        }
    }

    /// Whether `bash` is offered (see [`antler_sandbox::bash_available`]); non-local providers
    /// always offer it.
    pub fn bash_available(&self) -> bool {
        !self.provider.is_local()
            || antler_sandbox::bash_available(&self.settings, &self.provider.confinement())
    }
}

/// Per-(sandbox, file) async mutexes (the runtime's, shared with the middlewares).
pub use antler_runtime::FileLocks;

/// A tool failure already worded for the model (`Error: …`).
pub(crate) struct Fail(pub String);

impl Fail {
    /// The message without its `Error: ` prefix (for tools that add their own).
    pub(crate) fn detail(self) -> String {
        match self.0.strip_prefix("Error: ") {
            Some(rest) => rest.to_owned(),
            None => self.0,
        }
    }
}

impl From<Fail> for ToolOutput {
    fn from(f: Fail) -> ToolOutput {
        ToolOutput::error(f.0)
    }
}

pub(crate) type Step<T> = Result<T, Fail>;

pub(crate) fn fail(msg: impl Into<String>) -> Fail {
    Fail(msg.into())
}

/// DeerFlow's `ensure_sandbox_initialized` (spec 50 §2.3), with one deliberate difference: the
/// sandbox is always the one of the run's (user, thread) — `RunContext::user_id`/`thread_id`,
/// set by the server from the authenticated caller — and never the id in `state.sandbox`. That
/// channel is a record the SandboxMiddleware writes; an old or corrupted checkpoint (or, before
/// the server refused it, a client) could hold another user's id there, and trusting it would
/// hand that user's files to this run. A differing state id is logged and ignored.
pub(crate) fn ensure_sandbox(env: &ToolEnv, ctx: &ToolContext<'_>) -> Step<Arc<dyn Sandbox>> {
    if ctx.run.thread_id.is_empty() {
        return Err(fail("Error: Thread ID not available in runtime context"));
    }
    // The run key is only ever written with the derived id (here or by the SandboxMiddleware),
    // so it is a safe per-run cache in front of `acquire`.
    let cached = ctx
        .run
        .get(&keys::SANDBOX_ID)
        .and_then(|id| env.provider.get(&id).map(|sb| (id, sb)));
    let (id, sb) = match cached {
        Some(found) => found,
        None => {
            let id = env
                .provider
                .acquire(Some(&ctx.run.thread_id), ctx.run.user_id.as_deref())
                .map_err(|e| match e {
                    SandboxError::Runtime(_)
                    | SandboxError::InvalidId { .. }
                    | SandboxError::PermissionDenied(_) => fail(format!("Error: {e}")),
                    other => fail(format!(
                        "Error: Unexpected error initializing sandbox: {}: {other}",
                        other.kind_name()
                    )),
                })?;
            let sb = env
                .provider
                .get(&id)
                .ok_or_else(|| fail(format!("Error: Sandbox {id} not found")))?;
            (id, sb)
        }
    };
    let recorded = ctx
        .state
        .sandbox
        .as_ref()
        .and_then(|s| s.sandbox_id.as_deref());
    if let Some(other) = recorded.filter(|r| *r != id) {
        tracing::warn!(
            thread = %ctx.run.thread_id,
            state_sandbox = other,
            sandbox = %id,
            "state names a sandbox other than the run's own; ignored"
        );
    }
    ctx.run.set(&keys::SANDBOX_ID, id.clone());
    if recorded != Some(id.as_str()) {
        // Ask the SandboxMiddleware to record the id (it will not overwrite a differing one).
        ctx.run.update(&keys::SANDBOX_ACQUIRED_BY, |calls| {
            calls.insert(ctx.call_id.to_owned())
        });
    }
    Ok(sb)
}

/// The thread folders of a local sandbox — from the sandbox itself, never `state.thread_data`.
pub(crate) fn sandbox_paths<'a>(
    sandbox: &'a Arc<dyn Sandbox>,
    ctx: &ToolContext<'_>,
) -> Step<&'a ThreadPaths> {
    let paths = sandbox
        .thread_paths()
        .ok_or_else(|| fail("Error: Thread data not available for local sandbox"))?;
    let recorded = ctx
        .state
        .thread_data
        .as_ref()
        .and_then(ThreadDirs::from_thread_data);
    if recorded.is_some_and(|r| r != ThreadDirs::from(paths)) {
        tracing::warn!(
            thread = %ctx.run.thread_id,
            "state thread_data names folders other than the run's own; ignored"
        );
    }
    Ok(paths)
}

/// The run's sandbox and its thread folders, for tools that work on the folders directly.
pub(crate) fn thread_paths(env: &ToolEnv, ctx: &ToolContext<'_>) -> Step<ThreadPaths> {
    let sandbox = ensure_sandbox(env, ctx)?;
    let paths = sandbox_paths(&sandbox, ctx)?.clone();
    ensure_thread_dirs(ctx, &paths);
    Ok(paths)
}

/// Create the sandbox's thread folders once per run (they may have been removed since the
/// sandbox was cached).
pub(crate) fn ensure_thread_dirs(ctx: &ToolContext<'_>, paths: &ThreadPaths) {
    if ctx.run.get(&keys::THREAD_DIRS_CREATED).is_some() {
        return;
    }
    match paths.ensure_dirs() {
        Ok(()) => ctx.run.set(&keys::THREAD_DIRS_CREATED, true),
        Err(e) => tracing::warn!(error = %e, "could not create the thread folders"),
    }
}

/// The sandbox plus, for the local provider, the tool-layer policy.
pub(crate) struct Prepared {
    pub sandbox: Arc<dyn Sandbox>,
    pub policy: Option<Arc<LocalPolicy>>,
}

impl Prepared {
    /// [`Prepared::mask`] as an owned function (for output lines read by other tasks).
    pub fn masker(&self) -> impl Fn(&str) -> String + Send + Sync + 'static {
        let (sandbox, policy) = (self.sandbox.clone(), self.policy.clone());
        move |text| {
            let once = sandbox.mask(text);
            match &policy {
                Some(p) => p.mask(&once),
                None => once,
            }
        }
    }

    /// `Error: Permission denied: {path} (…)` when the policy refuses reading `path`.
    pub(crate) fn check_read(&self, path: &str) -> Step<()> {
        match &self.policy {
            Some(policy) => policy
                .check_read(path)
                .map_err(|e| fail(format!("Error: Permission denied: {path} ({e})"))),
            None => Ok(()),
        }
    }

    pub fn mask(&self, text: &str) -> String {
        let once = self.sandbox.mask(text);
        match &self.policy {
            Some(p) => p.mask(&once),
            None => once,
        }
    }
}

/// The local policy of a run's sandbox, built at its first tool call: building it resolves every
/// folder for the masker (a few dozen syscalls), which a call per step need not repeat. Nothing
/// it caches decides access: paths are checked through directory handles re-validated on use.
const LOCAL_POLICY: RunKey<(String, Arc<LocalPolicy>)> = RunKey::new("tools.local_policy");

pub(crate) fn prepare(env: &ToolEnv, ctx: &ToolContext<'_>) -> Step<Prepared> {
    let sandbox = ensure_sandbox(env, ctx)?;
    if !is_local_sandbox_id(sandbox.id()) {
        return Ok(Prepared {
            sandbox,
            policy: None,
        });
    }
    let cached = ctx
        .run
        .get(&LOCAL_POLICY)
        .filter(|(id, _)| id == sandbox.id())
        .map(|(_, policy)| policy);
    let policy = match cached {
        Some(policy) => policy,
        None => {
            let paths = sandbox_paths(&sandbox, ctx)?;
            ensure_thread_dirs(ctx, paths);
            let policy = Arc::new(
                LocalPolicy::for_paths(paths, &env.settings)
                    .map_err(|e| fail(format!("Error: {e}")))?,
            );
            ctx.run
                .set(&LOCAL_POLICY, (sandbox.id().to_owned(), policy.clone()));
            policy
        }
    };
    Ok(Prepared {
        sandbox,
        policy: Some(policy),
    })
}

/// Run a blocking sandbox operation off the async executor.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, SandboxError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, SandboxError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(SandboxError::Runtime(format!("sandbox task failed: {e}"))))
}

/// `"{Type}: {message}"`, masked — DeerFlow's sanitized error detail.
pub(crate) fn detail(p: &Prepared, e: &SandboxError) -> String {
    p.mask(&format!("{}: {e}", e.kind_name()))
}

/// A sandbox error while `doing` something that has no message of its own:
/// `Error: Unexpected error {doing}: {detail}`.
pub(crate) fn unexpected(p: &Prepared, doing: &str, e: &SandboxError) -> Fail {
    fail(format!("Error: Unexpected error {doing}: {}", detail(p, e)))
}

/// The error of a tool that reads the folder `path` (`ls`, `glob`): a missing folder, a file,
/// a refused path and a failed sandbox command have their own message, anything else is
/// [`unexpected`].
pub(crate) fn folder_error(p: &Prepared, path: &str, doing: &str, e: SandboxError) -> Fail {
    match e {
        SandboxError::NotFound(_) => fail(format!("Error: Directory not found: {path}")),
        SandboxError::NotADirectory(_) => fail(format!("Error: Path is not a directory: {path}")),
        SandboxError::PermissionDenied(r) => {
            fail(format!("Error: Permission denied: {path} ({r})"))
        }
        SandboxError::Runtime(_) => fail(format!("Error: {e}")),
        other => unexpected(p, doing, &other),
    }
}

/// The text of the `description` argument every sandbox tool takes first (DeerFlow's "explain
/// why …, ALWAYS PROVIDE THIS PARAMETER FIRST").
macro_rules! why {
    ($what:literal) => {
        concat!(
            "Why you are ",
            $what,
            ", in a few words. Always give this argument first."
        )
    };
}
pub(crate) use why;

/// The [`TypedTool`](antler_runtime::TypedTool) impl of a sandbox tool: a struct with a
/// `spec: TypedSpec<Args>` field and a `run(&self, Args, ToolContext) -> Step<ToolOutput>`
/// method whose failures are already worded for the model.
///
/// With a name and description it also writes the tool's `new(env: ToolEnv)`, for the tools
/// that hold nothing else.
macro_rules! sandbox_tool {
    ($tool:ident, $args:ty, $name:literal, $description:expr) => {
        impl $tool {
            pub fn new(env: $crate::env::ToolEnv) -> $tool {
                $tool {
                    spec: antler_runtime::TypedSpec::new($name, $description),
                    env,
                }
            }
        }

        $crate::env::sandbox_tool!($tool, $args);
    };
    ($tool:ty, $args:ty) => {
        #[async_trait::async_trait]
        impl antler_runtime::TypedTool for $tool {
            type Args = $args;

            antler_runtime::typed_spec!(spec);

            async fn invoke(
                &self,
                args: $args,
                ctx: antler_runtime::ToolContext<'_>,
            ) -> Result<antler_runtime::ToolOutput, antler_runtime::ToolError> {
                Ok(self
                    .run(args, ctx)
                    .await
                    .unwrap_or_else(antler_runtime::ToolOutput::from))
            }
        }
    };
}
pub(crate) use sandbox_tool;

/// A search's sandbox with `path` checked for reading, and its result limit: the `asked`
/// count clamped to `default`/`upper`, and at most `configured_max`.
pub(crate) fn prepare_search(
    env: &ToolEnv,
    ctx: &ToolContext<'_>,
    path: &str,
    asked: i64,
    (default, upper, configured_max): (usize, usize, usize),
) -> Step<(Prepared, usize)> {
    let limit = clamp_results(asked, default, upper).min(configured_max);
    let p = prepare(env, ctx)?;
    p.check_read(path)?;
    Ok((p, limit))
}

/// Clamp a `max_results`: ≤ 0 → `default`, capped at `upper`.
pub(crate) fn clamp_results(v: i64, default: usize, upper: usize) -> usize {
    if v <= 0 {
        default
    } else {
        (v as usize).min(upper)
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
