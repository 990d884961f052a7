//! Helpers shared by the agent's integration tests (each test crate uses some of them).
#![allow(dead_code)]

use antler_protocol::{StateUpdate, ThreadState};
use antler_runtime::{
    BeforeAgentOutput, HookOutput, HookSet, Middleware, MiddlewareError, RunContext,
};
use async_trait::async_trait;

/// A middleware whose one hook (`before_agent` or `after_model`) is a closure: the state write
/// it returns, if any.
pub struct Hook<F> {
    name: &'static str,
    hooks: HookSet,
    f: F,
}

impl<F> Hook<F>
where
    F: Fn(&ThreadState, &RunContext) -> Option<StateUpdate> + Send + Sync,
{
    pub fn before_agent(name: &'static str, f: F) -> Self {
        Hook {
            name,
            hooks: HookSet::BEFORE_AGENT,
            f,
        }
    }

    pub fn after_model(name: &'static str, f: F) -> Self {
        Hook {
            name,
            hooks: HookSet::AFTER_MODEL,
            f,
        }
    }

    fn output<J>(&self, state: &ThreadState, run: &RunContext) -> HookOutput<J> {
        (self.f)(state, run).map_or_else(HookOutput::none, HookOutput::update)
    }
}

#[async_trait]
impl<F> Middleware for Hook<F>
where
    F: Fn(&ThreadState, &RunContext) -> Option<StateUpdate> + Send + Sync,
{
    fn name(&self) -> &str {
        self.name
    }
    fn hooks(&self) -> HookSet {
        self.hooks
    }
    async fn before_agent(
        &self,
        state: &ThreadState,
        run: &RunContext,
    ) -> Result<BeforeAgentOutput, MiddlewareError> {
        Ok(self.output(state, run))
    }
    async fn after_model(
        &self,
        state: &ThreadState,
        run: &RunContext,
    ) -> Result<HookOutput, MiddlewareError> {
        Ok(self.output(state, run))
    }
}
