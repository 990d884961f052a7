//! Subagents: the `task` tool and the executor that runs each delegation as a child agent
//! (spec 50 §4.12).
//!
//! - [`registry`]: the subagent types (`general-purpose`, `bash`, config-defined ones) and their
//!   effective limits (`max_turns`, timeout, model, skills) from `subagents:`.
//! - [`executor`]: runs one delegation inside the `task` call — child agent from a
//!   [`SubagentFactory`], parent's files and sandbox, `task_*` progress events on the parent's
//!   stream, usage summed and reported to the parent's observers.
//! - [`task_tool`]: the `task` tool; answers with DeerFlow's result text, the structured
//!   `subagent_*` metadata and a `delegations` ledger entry.
//! - [`types`]: the status contract shared by all of the above.
//!
//! Wiring: build a [`SubagentRegistry`] from config, a factory that assembles the child's chain
//! (shared runtime segment + subagent segment) over the parent's tools, a
//! [`SubagentExecutor`], then register [`task_tool`] on the lead agent when the run enables
//! subagents, with SubagentLimit in the lead chain.

pub mod executor;
pub mod prompts;
pub mod registry;
pub mod task_tool;
pub mod types;

pub use executor::{
    default_factory, SubagentError, SubagentExecutor, SubagentFactory, SubagentRequest, TaskCall,
    TemplateFactory,
};
pub use registry::{SubagentRegistry, SubagentSpec};
pub use task_tool::{task_tool, TaskTool};
pub use types::{StopReason, SubagentResult, SubagentStatus, TokenUsage};
