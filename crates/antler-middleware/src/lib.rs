//! DeerFlow's middlewares for antler's runtime, one file each, listed in chain order (spec 20
//! §12: S = shared runtime segment, L = lead-only segment):
//!
//! | #   | module | hooks |
//! |-----|--------|-------|
//! | S1  | [`input_sanitization`] | wrap_model |
//! | S2  | [`tool_output_budget`] | wrap_model, wrap_tool |
//! | S3  | [`tool_result_sanitization`] | wrap_tool |
//! | S4  | [`thread_data`] | before_agent |
//! | S5  | [`uploads`] | before_agent |
//! | S6  | [`sandbox`] | before_agent, after_agent, wrap_tool |
//! | S7  | [`dangling_tool_call`] | wrap_model |
//! | S8  | [`llm_error_handling`] | wrap_model |
//! | S9/S10 | [`guardrail`] | wrap_tool |
//! | S11 | [`sandbox_audit`] | wrap_tool |
//! | S12 | [`read_before_write`] | wrap_tool |
//! | S13 | [`tool_progress`] | before_agent, wrap_model, wrap_tool |
//! | S14 | [`tool_error_handling`] | wrap_tool |
//! | L1  | [`dynamic_context`] | before_agent |
//! | L2/U1 | [`skill_activation`] | wrap_model |
//! | L3/U2 | [`skill_tool_policy`] | wrap_model, wrap_tool |
//! | L4  | [`durable_context`] | before_model, after_model, wrap_model |
//! | L5  | [`summarization`] | before_model |
//! | L6  | [`todo`] | before_agent, before_model, after_model, wrap_model, after_agent |
//! | L7  | [`token_usage`] | after_model |
//! | L8  | [`title`] | after_model |
//! | L9  | [`memory`] | after_agent |
//! | L10 | [`view_image`] | before_model, after_model |
//! | L11 | [`mcp_routing`] | before_model |
//! | L12 | [`deferred_tool_filter`] | wrap_model, wrap_tool |
//! | L13 | [`system_message_coalescing`] | wrap_model |
//! | L14 | [`subagent_limit`] | after_model |
//! | L15 | [`loop_detection`] | before_agent, after_model, after_agent, wrap_model |
//! | L16 | [`token_budget`] | before_agent, after_model, after_agent, wrap_model |
//! | L19 | [`terminal_response`] | before_agent, after_model, after_agent, wrap_model |
//! | L20 | [`finish_reason::model_length`] | after_model |
//! | L21/U9 | [`finish_reason::safety`] | after_model |
//! | L22 | [`clarification`] | wrap_tool |
//!
//! A middleware sees only `antler-runtime`'s public API, never another middleware. Helpers
//! several share are modules of their own: [`posix`] (path normalization), `py` (Python truthiness),
//! [`skill_registry`] (the skill registry and `/skill` grammar of the two skill middlewares).

// `middleware_identity!` (and the runtime's other macros) in every module.
#[macro_use]
extern crate antler_runtime;

/// The runtime's macro, still reachable at its old path.
pub use antler_runtime::middleware_identity;

/// `Default` as the type's argument-free `new()`, for the middlewares that have one.
macro_rules! default_is_new {
    ($ty:ty) => {
        impl Default for $ty {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

pub mod hook;

pub mod clarification;
pub mod dangling_tool_call;
pub mod deferred_tool_filter;
pub mod durable_context;
pub mod dynamic_context;
pub mod finish_reason;
pub mod guardrail;
pub mod input_sanitization;
pub mod llm_error_handling;
pub mod loop_detection;
pub mod mcp_routing;
pub mod memory;
pub mod posix;
mod py;
pub mod read_before_write;
pub mod sandbox;
pub mod sandbox_audit;
mod side_model;
pub mod skill_activation;
pub mod skill_registry;
pub mod skill_tool_policy;
pub mod subagent_limit;
pub mod summarization;
pub mod system_message_coalescing;
pub mod terminal_response;
pub mod thread_data;
pub mod title;
pub mod todo;
pub mod token_budget;
pub mod token_usage;
pub mod tool_error_handling;
pub mod tool_output_budget;
pub mod tool_progress;
pub mod tool_result_sanitization;
pub mod uploads;
pub mod view_image;
