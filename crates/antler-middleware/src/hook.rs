//! Short names for the `Middleware` hook signatures, so that every middleware spells its
//! hooks the same way in one line instead of repeating the trait's long result types.

pub use antler_runtime::HookSet;
use antler_runtime::{
    AfterAgentOutput, BeforeAgentOutput, HookOutput, MiddlewareError, ModelCallError,
    ModelResponse, ToolError, ToolOutcome,
};

/// What `before_model` and `after_model` return.
pub type HookResult = Result<HookOutput, MiddlewareError>;
/// What `before_agent` returns.
pub type BeforeAgentResult = Result<BeforeAgentOutput, MiddlewareError>;
/// What `after_agent` returns.
pub type AfterAgentResult = Result<AfterAgentOutput, MiddlewareError>;
/// What `wrap_model_call` returns.
pub type ModelResult = Result<ModelResponse, ModelCallError>;
/// What `wrap_tool_call` returns.
pub type ToolResult = Result<ToolOutcome, ToolError>;

/// A middleware's identity inside its `impl Middleware`: its chain name and the hooks it runs.
///
/// `middleware_identity!(NAME, HookSet::WRAP_TOOL);` stands for the trait's `name` and
/// `hooks` methods. A name read from `self` (configurable names) keeps the hand-written form.
#[macro_export]
macro_rules! middleware_identity {
    ($name:expr, $hooks:expr) => {
        fn name(&self) -> &str {
            $name
        }

        fn hooks(&self) -> $crate::hook::HookSet {
            $hooks
        }
    };
}
