//! antler's agent runtime: the model→tools loop wrapped by a middleware chain, over a
//! [`ThreadState`](antler_protocol::ThreadState) folded through reducers and checkpointed after
//! every step. Policy-free: DeerFlow's middlewares live in `antler-middleware`, the lead agent's
//! assembly in `antler-agent`.

pub mod agent;
pub mod clarification;
pub mod context;
mod exec;
pub mod middleware;
pub mod observe;
pub mod tool;

pub use agent::{now_rfc3339, tool_message_for, Agent, RunError, RunInput, RunOutcome, RunStatus};
pub use antler_protocol::checkpoint;
pub use checkpoint::{
    Checkpoint, CheckpointError, CheckpointMeta, CheckpointWrite, Checkpointer, MemoryCheckpointer,
};
pub use context::{
    keys, CollectingSink, CustomSender, Emitter, EventSink, Held, NullSink, RunContext, RunKey,
    RunOptions,
};
pub use middleware::{
    AfterAgentOutput, AfterAgentResult, BeforeAgentOutput, BeforeAgentResult, Chain, ChainError,
    HookOutput, HookResult, HookSet, JumpTo, JumpToEnd, Middleware, MiddlewareError,
    ModelCallError, ModelNext, ModelRequest, ModelResponse, ModelResult, NoJump, ToolCallRequest,
    ToolNext, ToolResult,
};
pub use observe::{RunEvent, RunObserver};
pub use tokio_util::sync::CancellationToken;
pub use tool::{
    canonical_json, canonical_json_entries, canonical_json_object, parameters_schema, parse_args,
    Command, FileLocks, Goto, ProgressReporter, Tool, ToolContext, ToolError, ToolOutcome,
    ToolOutput, ToolRegistry, TypedSpec, TypedTool,
};
