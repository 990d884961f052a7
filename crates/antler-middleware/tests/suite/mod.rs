//! One module per middleware (or group of them), each restating DeerFlow's expectations and
//! running the middleware through the agent loop.

mod budgets;
mod context;
mod dangling_incremental;
mod deferred_tools;
mod finish_guards;
mod governance;
mod loop_detection;
mod mcp_routing;
mod memory;
mod observability;
mod read_before_write;
mod sandbox_middlewares;
mod skills;
mod subagent_limit;
mod summarization;
mod summarization_window;
mod todo;
mod tool_progress;
