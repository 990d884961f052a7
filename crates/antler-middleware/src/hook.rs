//! Short names for the `Middleware` hook signatures (defined by the runtime, so that every
//! middleware spells its hooks the same way in one line), and what the tool wrappers share.

pub use antler_runtime::{
    AfterAgentResult, BeforeAgentResult, HookResult, HookSet, ModelResult, ToolResult,
};

/// The hooks of a middleware that guards a whole run against running away (loop detection,
/// token budget, terminal response): reset when the run starts, judge every answer, clean up
/// when it ends, and adjust each request.
pub const RUN_GUARD_HOOKS: HookSet = HookSet::BEFORE_AGENT
    .union(HookSet::AFTER_MODEL)
    .union(HookSet::AFTER_AGENT)
    .union(HookSet::WRAP_MODEL);

/// The id an answer to `call` carries: the call's own, or `missing` when it has none.
pub(crate) fn answer_id(call: &antler_protocol::ToolCall, missing: &str) -> String {
    match call.id_str() {
        "" => missing.to_owned(),
        id => id.to_owned(),
    }
}
