//! DeerFlow's middlewares for antler's runtime, one file each, in chain order:
//!
//! | # | middleware | hooks |
//! |---|------------|-------|
//! | S4 | [`ThreadDataMiddleware`](thread_data) | before_agent |
//! | S5 | [`UploadsMiddleware`](uploads) | before_agent |
//! | S6 | [`SandboxMiddleware`](sandbox) | before_agent, after_agent, wrap_tool |
//! | S11 | [`SandboxAuditMiddleware`](sandbox_audit) | wrap_tool |
//! | S14 | [`ToolErrorHandlingMiddleware`](tool_error_handling) | wrap_tool |
//!
//! A middleware sees only `antler-runtime`'s public API, never another middleware.

pub mod sandbox;
pub mod sandbox_audit;
pub mod thread_data;
pub mod tool_error_handling;
pub mod uploads;
