//! The middleware contract: four node hooks and two onion wrappers (spec 20 §3).
//!
//! For a chain `[M1, …, Mn]`:
//!
//! | phase           | order                                            |
//! |-----------------|--------------------------------------------------|
//! | before_agent    | M1 → Mn                                          |
//! | before_model    | M1 → Mn                                          |
//! | wrap_model_call | M1 outermost … Mn innermost, model in the middle |
//! | after_model     | Mn → M1                                          |
//! | wrap_tool_call  | M1 outermost … Mn innermost, per tool call       |
//! | after_agent     | Mn → M1                                          |
//!
//! Each node hook's result type admits only the jumps that hook may make ([`HookOutput`]'s
//! parameter): `before_agent` may end the run, the model hooks may restart or end it,
//! `after_agent` cannot jump at all.
//!
//! Control flow is data: a hook's `jump_to` and a tool's [`Command`](crate::Command) live on the
//! `Ok` side of their result types, and the error types ([`MiddlewareError`], [`ModelCallError`],
//! [`ToolError`]) have no variant that can carry them. A middleware that handles errors therefore
//! cannot swallow a control-flow signal by accident; the run's cancellation is observed by the
//! loop itself, outside every middleware.

use std::sync::Arc;

use antler_models::{ChatModel, ModelError};
use antler_protocol::{AiMessage, Message, Object, StateUpdate, ThreadState, ToolCall, ToolSpec};
use async_trait::async_trait;
use serde_json::Value;

use crate::context::RunContext;
use crate::tool::{Tool, ToolError, ToolOutcome};

/// Which hooks a middleware takes part in. A hook not declared here is never called, and (as in
/// LangGraph, where each hook is a graph node) only declared node hooks count as steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookSet(u8);

impl HookSet {
    pub const NONE: HookSet = HookSet(0);
    pub const BEFORE_AGENT: HookSet = HookSet(1);
    pub const BEFORE_MODEL: HookSet = HookSet(1 << 1);
    pub const AFTER_MODEL: HookSet = HookSet(1 << 2);
    pub const AFTER_AGENT: HookSet = HookSet(1 << 3);
    pub const WRAP_MODEL: HookSet = HookSet(1 << 4);
    pub const WRAP_TOOL: HookSet = HookSet(1 << 5);
    /// Both run-boundary hooks: `before_agent` and `after_agent`.
    pub const AGENT: HookSet = HookSet::BEFORE_AGENT.union(HookSet::AFTER_AGENT);
    /// Every model-step hook: `before_model`, `after_model` and `wrap_model`.
    pub const MODEL: HookSet = HookSet::BEFORE_MODEL
        .union(HookSet::AFTER_MODEL)
        .union(HookSet::WRAP_MODEL);

    pub const fn union(self, other: HookSet) -> HookSet {
        HookSet(self.0 | other.0)
    }

    pub const fn contains(self, other: HookSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// The hook names in this set, in lifecycle order (`before_agent`, …, `wrap_tool`).
    pub fn names(self) -> Vec<&'static str> {
        [
            (HookSet::BEFORE_AGENT, "before_agent"),
            (HookSet::BEFORE_MODEL, "before_model"),
            (HookSet::AFTER_MODEL, "after_model"),
            (HookSet::AFTER_AGENT, "after_agent"),
            (HookSet::WRAP_MODEL, "wrap_model"),
            (HookSet::WRAP_TOOL, "wrap_tool"),
        ]
        .into_iter()
        .filter(|(h, _)| self.contains(*h))
        .map(|(_, n)| n)
        .collect()
    }
}

impl std::ops::BitOr for HookSet {
    type Output = HookSet;
    fn bitor(self, rhs: HookSet) -> HookSet {
        self.union(rhs)
    }
}

/// Where a `before_model` or `after_model` hook sends the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JumpTo {
    /// Back to the first before_model hook (the loop entry); remaining after_model hooks are
    /// skipped.
    Model,
    /// To the after_agent hooks; the run then ends.
    End,
}

/// Where a `before_agent` hook may send the run: past the loop, straight to the after_agent
/// hooks. (A jump to the model would be where the run goes anyway.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JumpToEnd {
    End,
}

/// An `after_agent` hook has nowhere to jump: this type has no values, so
/// `HookOutput<NoJump>::jump_to` is always `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoJump {}

/// What a node hook returns: an optional state write and an optional jump. `J` is the jumps
/// the hook may make — [`JumpTo`] for the model hooks, [`JumpToEnd`] for `before_agent`,
/// [`NoJump`] for `after_agent` — so a jump a hook may not make does not type-check.
#[derive(Clone, Debug, PartialEq)]
pub struct HookOutput<J = JumpTo> {
    pub update: Option<StateUpdate>,
    pub jump_to: Option<J>,
}

impl<J> Default for HookOutput<J> {
    fn default() -> Self {
        HookOutput {
            update: None,
            jump_to: None,
        }
    }
}

impl<J> HookOutput<J> {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn update(update: StateUpdate) -> Self {
        HookOutput {
            update: Some(update),
            jump_to: None,
        }
    }

    pub fn jump(jump_to: J) -> Self {
        HookOutput {
            update: None,
            jump_to: Some(jump_to),
        }
    }

    pub fn with_jump(mut self, jump_to: J) -> Self {
        self.jump_to = Some(jump_to);
        self
    }
}

/// What `before_agent` returns.
pub type BeforeAgentOutput = HookOutput<JumpToEnd>;
/// What `after_agent` returns.
pub type AfterAgentOutput = HookOutput<NoJump>;

/// A middleware failed; the run fails with status `error`.
#[derive(Debug, thiserror::Error)]
#[error("{middleware}: {message}")]
pub struct MiddlewareError {
    pub middleware: String,
    pub message: String,
}

impl MiddlewareError {
    pub fn new(middleware: impl Into<String>, message: impl Into<String>) -> Self {
        MiddlewareError {
            middleware: middleware.into(),
            message: message.into(),
        }
    }
}

/// One model call as it travels through the `wrap_model_call` onion. Changes made by a wrapper
/// reach only the layers inside it and are never persisted.
#[derive(Clone)]
pub struct ModelRequest {
    pub model: Arc<dyn ChatModel>,
    pub system_prompt: Option<Arc<str>>,
    /// Shared with the state's list; edit with [`ModelRequest::messages_mut`] (copy on write).
    pub messages: Arc<Vec<Arc<Message>>>,
    pub tools: Vec<Arc<ToolSpec>>,
    pub tool_choice: Option<Value>,
    /// Per-call model settings (`temperature`, `max_tokens`, …).
    pub settings: Object,
    /// Stream tokens from the provider.
    pub stream: bool,
    /// Id of the AI message this call produces (the same id for every chunk).
    pub message_id: String,
    /// Snapshot of the state at the start of the step.
    pub state: Arc<ThreadState>,
    pub run: Arc<RunContext>,
}

impl ModelRequest {
    /// Replace the request's messages (request-only; state is untouched).
    pub fn set_messages(&mut self, messages: Vec<Message>) {
        self.messages = Arc::new(messages.into_iter().map(Arc::new).collect());
    }

    /// Mutable access to the request's messages (copies the list if it is shared).
    pub fn messages_mut(&mut self) -> &mut Vec<Arc<Message>> {
        Arc::make_mut(&mut self.messages)
    }
}

/// The model's answer as it travels back out of the onion.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    pub message: AiMessage,
    /// An extra state write applied with the AI message (LangChain's `ExtendedModelResponse`).
    pub update: Option<StateUpdate>,
}

impl From<AiMessage> for ModelResponse {
    fn from(message: AiMessage) -> Self {
        ModelResponse {
            message,
            update: None,
        }
    }
}

/// A model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelCallError {
    /// The provider failed; an error-handling middleware may retry or answer instead.
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Middleware(#[from] MiddlewareError),
}

/// One tool call as it travels through the `wrap_tool_call` onion.
#[derive(Clone)]
pub struct ToolCallRequest {
    pub call: ToolCall,
    /// The registered tool, `None` when the model named an unknown tool.
    pub tool: Option<Arc<dyn Tool>>,
    /// Snapshot of the state before the tool batch (each call gets the same one).
    pub state: Arc<ThreadState>,
    pub run: Arc<RunContext>,
    /// Names of every registered tool (for the "not a valid tool" message).
    pub tool_names: Arc<[String]>,
}

/// One onion continuation: the middlewares still to wrap the call, then the real call.
macro_rules! onion_next {
    ($(#[$doc:meta])* $name:ident, $wrap:ident, $req:ty, $out:ty, $innermost:path) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            pub(crate) rest: &'a [Arc<dyn Middleware>],
        }

        impl $name<'_> {
            pub async fn run(self, req: $req) -> $out {
                match self.rest.split_first() {
                    Some((mw, rest)) => mw.$wrap(req, $name { rest }).await,
                    None => $innermost(req).await,
                }
            }
        }
    };
}

onion_next!(
    /// The rest of the model onion; call [`ModelNext::run`] zero or more times.
    ModelNext,
    wrap_model_call,
    ModelRequest,
    Result<ModelResponse, ModelCallError>,
    crate::exec::call_model
);

onion_next!(
    /// The rest of the tool onion; call [`ToolNext::run`] zero or more times.
    ToolNext,
    wrap_tool_call,
    ToolCallRequest,
    Result<ToolOutcome, ToolError>,
    crate::exec::execute_tool
);

// Short names for the hook signatures, so that every middleware spells its hooks the same
// way in one line instead of repeating the long result types.
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

        fn hooks(&self) -> $crate::HookSet {
            $hooks
        }
    };
    ($name:expr, $hooks:expr, deferrable: $deferrable:expr) => {
        $crate::middleware_identity!($name, $hooks);

        fn deferrable_hooks(&self) -> $crate::HookSet {
            $deferrable
        }
    };
}

/// A middleware. Implement the hooks you declare in [`Middleware::hooks`].
#[async_trait]
pub trait Middleware: Send + Sync {
    /// Unique within a chain; also the node name in `updates` events (`<name>.<hook>`).
    fn name(&self) -> &str;

    fn hooks(&self) -> HookSet;

    /// The node hooks (`before_agent`, `before_model`, `after_model`, `after_agent`) that may
    /// run while the checkpoints of the previous supersteps are still queued: they read the
    /// state and the run context and do nothing a client or the outside world can observe —
    /// or call [`RunContext::persist`] first. Before any other hook the loop writes what is
    /// queued, so the default (none) is always correct; declaring a hook saves a transaction
    /// per model step.
    fn deferrable_hooks(&self) -> HookSet {
        HookSet::NONE
    }

    async fn before_agent(&self, _state: &ThreadState, _run: &RunContext) -> BeforeAgentResult {
        Ok(HookOutput::none())
    }

    async fn before_model(&self, _state: &ThreadState, _run: &RunContext) -> HookResult {
        Ok(HookOutput::none())
    }

    async fn after_model(&self, _state: &ThreadState, _run: &RunContext) -> HookResult {
        Ok(HookOutput::none())
    }

    async fn after_agent(&self, _state: &ThreadState, _run: &RunContext) -> AfterAgentResult {
        Ok(HookOutput::none())
    }

    async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        next.run(req).await
    }

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        next.run(req).await
    }
}

/// An ordered, validated middleware list with each phase's participants precomputed.
#[derive(Clone, Default)]
pub struct Chain {
    all: Vec<Arc<dyn Middleware>>,
    pub(crate) before_agent: Vec<Arc<dyn Middleware>>,
    pub(crate) before_model: Vec<Arc<dyn Middleware>>,
    /// Already reversed: run in this order.
    pub(crate) after_model: Vec<Arc<dyn Middleware>>,
    /// Already reversed: run in this order.
    pub(crate) after_agent: Vec<Arc<dyn Middleware>>,
    pub(crate) wrap_model: Vec<Arc<dyn Middleware>>,
    pub(crate) wrap_tool: Vec<Arc<dyn Middleware>>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("duplicate middleware name '{0}': every middleware in a chain needs a unique name")]
    DuplicateName(String),
}

impl Chain {
    /// Build from an ordered list (list order = semantics).
    pub fn new(middlewares: Vec<Arc<dyn Middleware>>) -> Result<Chain, ChainError> {
        // Borrowed names, sized up front: a chain is built for every run.
        let mut seen = std::collections::HashSet::with_capacity(middlewares.len());
        for mw in &middlewares {
            if !seen.insert(mw.name()) {
                return Err(ChainError::DuplicateName(mw.name().to_owned()));
            }
        }
        let pick = |h: HookSet| -> Vec<Arc<dyn Middleware>> {
            middlewares
                .iter()
                .filter(|m| m.hooks().contains(h))
                .cloned()
                .collect()
        };
        let mut after_model = pick(HookSet::AFTER_MODEL);
        after_model.reverse();
        let mut after_agent = pick(HookSet::AFTER_AGENT);
        after_agent.reverse();
        Ok(Chain {
            before_agent: pick(HookSet::BEFORE_AGENT),
            before_model: pick(HookSet::BEFORE_MODEL),
            wrap_model: pick(HookSet::WRAP_MODEL),
            wrap_tool: pick(HookSet::WRAP_TOOL),
            after_model,
            after_agent,
            all: middlewares,
        })
    }

    pub fn empty() -> Chain {
        Chain::default()
    }

    pub fn middlewares(&self) -> &[Arc<dyn Middleware>] {
        &self.all
    }

    pub fn names(&self) -> Vec<&str> {
        self.all.iter().map(|m| m.name()).collect()
    }

    /// Run a model request through the whole model onion.
    pub async fn call_model(&self, req: ModelRequest) -> Result<ModelResponse, ModelCallError> {
        ModelNext {
            rest: &self.wrap_model,
        }
        .run(req)
        .await
    }

    /// Run a tool call through the whole tool onion.
    pub async fn call_tool(&self, req: ToolCallRequest) -> Result<ToolOutcome, ToolError> {
        ToolNext {
            rest: &self.wrap_tool,
        }
        .run(req)
        .await
    }
}

#[cfg(test)]
mod hook_set_tests {
    use super::HookSet;

    #[test]
    fn the_named_groups_hold_their_hooks() {
        assert_eq!(HookSet::AGENT.names(), ["before_agent", "after_agent"]);
        assert_eq!(
            HookSet::MODEL.names(),
            ["before_model", "after_model", "wrap_model"]
        );
    }
}
