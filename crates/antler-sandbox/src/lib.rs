//! antler's sandbox: where the agent's files live and where its commands run.
//!
//! - [`Sandbox`] / [`SandboxProvider`]: the backend traits (spec 50 §2).
//! - [`LocalSandboxProvider`]: the embedded default. Virtual paths
//!   `/mnt/user-data/{workspace,uploads,outputs}` (and `/mnt/skills`, read-only) map to the
//!   thread's host folders ([`ThreadPaths`]); paths are translated both ways and host paths never
//!   reach the model.
//! - [`warden`]: the helper process that parents every confined command of a sandbox (own
//!   PID/mount namespaces, Landlock read and write rules, limits, timeouts, dies with antler).
//! - [`confine`]: the Landlock rules, [`bash_available`] (the rule deciding whether bash is
//!   offered) and [`sandbox_exec_main`] (the helper behind `antler sandbox-exec`).
//! - [`security::LocalPolicy`]: the tool-layer gate (allowed paths, bash command validation,
//!   output masking).
//! - [`audit`]: the table-driven bash audit classifier.
//! - [`uploads`]: attaching files to a message, with document → Markdown conversion.
//! - [`beneath`]: mount roots held as directory handles, every file access resolved beneath
//!   them, so a thread folder swapped for a symlink is refused rather than followed.

pub mod audit;
pub mod beneath;
pub mod confine;
pub mod convert;
pub mod env;
pub mod error;
pub mod exec;
pub mod fsops;
pub mod local;
pub mod mapping;
pub mod paths;
pub mod sandbox;
pub mod security;
pub mod settings;
pub mod truncate;
pub mod uploads;
pub mod warden;

pub use beneath::{Beneath, RootDir, ThreadRoots};
pub use confine::{bash_available, confinement_status, sandbox_exec_main, ConfinementStatus};
pub use error::SandboxError;
pub use local::{LocalSandbox, LocalSandboxProvider};
pub use paths::{ThreadDirs, ThreadPaths};
pub use sandbox::{
    is_local_sandbox_id, CommandOutput, CommandRequest, GrepMatch, GrepQuery, OutputLines, Sandbox,
    SandboxProvider,
};
pub use security::LocalPolicy;
pub use settings::{
    Confine, HelperCommand, Limits, Mount, Network, SandboxSettings, UploadSettings,
};
pub use uploads::{attach_files, AttachedFile, UploadError};
