//! The lead agent factory: model resolution, tools, system prompt and middleware chain in
//! DeerFlow's order; [`App`], the resources; and [`run`], the one run lifecycle (admission,
//! journal, finish) with everything persisted. Front ends (`antler` CLI, `antler serve`) sit on top of this crate.

pub mod agents;
pub mod app;
pub mod chain;
pub mod extensions;
pub mod mcp;
pub mod memory;
pub mod models;
pub mod prompt;
pub mod run;
pub mod skills;
pub mod subagents;
#[cfg(test)]
mod test_fixtures;
mod threads;
pub mod toolset;

pub use app::{App, DB_FILE};
pub use run::journal;
pub use run::{RunHandle, RunRequest, TurnOutcome, TurnRequest};

/// Why a turn could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Bad or unsupported configuration.
    #[error("{0}")]
    Config(String),
    /// A model entry could not be built.
    #[error("{0}")]
    Model(String),
    #[error("unknown model '{0}' — configured models: {1}")]
    UnknownModel(String, String),
    #[error("invalid thread id '{0}': use 1-64 letters, digits, '-' or '_'")]
    BadThreadId(String),
    #[error("{0}")]
    Chain(#[from] antler_runtime::ChainError),
    #[error(transparent)]
    Store(#[from] antler_store::StoreError),
    /// The thread already has an active run and the multitask strategy is `reject`.
    #[error("thread '{thread}' is busy: run {run} is still active — wait for it to finish, or pass --multitask-strategy interrupt|rollback|enqueue")]
    ThreadBusy { thread: String, run: String },
    #[error("{0}")]
    Sandbox(String),
    /// An attachment was refused (missing file, too large, too many).
    #[error("{0}")]
    Upload(String),
}

impl AgentError {
    /// Whether the error is the user's configuration or request (exit code 2) rather than the
    /// environment (store, sandbox).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            AgentError::Config(_)
                | AgentError::Model(_)
                | AgentError::UnknownModel(..)
                | AgentError::BadThreadId(_)
                | AgentError::Chain(_)
                | AgentError::Upload(_)
        )
    }
}
