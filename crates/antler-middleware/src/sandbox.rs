//! Sandbox (chain S6): bind the thread's sandbox and persist its id; release it when the run
//! ends.
//!
//! Lazy mode (the default) acquires nothing up front: the first sandbox tool call does, and this
//! middleware's tool wrapper turns that into a `sandbox` state update for the call (a plain tool
//! message becomes a command carrying both; an existing command gets `sandbox` merged in).
//! Parallel calls that each acquire produce the same id, which the `sandbox` reducer accepts.
//! Eager mode acquires in before_agent. after_agent releases the sandbox this run used (local: a
//! no-op; sandboxes stay warm across turns).
//!
//! The sandbox is always the one of the run's (user, thread); `sandbox` in state is only a
//! record of it. A state id that differs (an old or corrupted checkpoint) is never acquired,
//! released or overwritten — the reducer refuses a second id, and releasing a foreign id could
//! end another user's sandbox — it is logged and left as it is.

use std::sync::Arc;

use antler_protocol::{SandboxState, StateUpdate, ThreadState};
use antler_runtime::{
    keys, Command, HookOutput, HookSet, Middleware, MiddlewareError, RunContext, ToolCallRequest,
    ToolNext, ToolOutcome,
};
use antler_sandbox::SandboxProvider;
use async_trait::async_trait;

use crate::hook::{AfterAgentResult, BeforeAgentResult, ToolResult};

const NAME: &str = "SandboxMiddleware";

pub struct SandboxMiddleware {
    provider: Arc<dyn SandboxProvider>,
    lazy_init: bool,
}

impl SandboxMiddleware {
    /// Lazy acquisition (DeerFlow's default).
    pub fn new(provider: Arc<dyn SandboxProvider>) -> Self {
        SandboxMiddleware {
            provider,
            lazy_init: true,
        }
    }

    pub fn with_lazy_init(mut self, lazy: bool) -> Self {
        self.lazy_init = lazy;
        self
    }
}

fn state_id(state: &ThreadState) -> Option<&str> {
    state.sandbox.as_ref().and_then(|s| s.sandbox_id.as_deref())
}

fn with_sandbox(outcome: ToolOutcome, id: &str) -> ToolOutcome {
    let sandbox = Some(Some(SandboxState {
        sandbox_id: Some(id.to_owned()),
    }));
    match outcome {
        ToolOutcome::Message(m) => ToolOutcome::Command(Command {
            update: StateUpdate {
                sandbox,
                messages: Some(vec![m.into()]),
                ..Default::default()
            },
            goto: None,
        }),
        ToolOutcome::Command(mut c) => {
            if c.update.sandbox.is_none() {
                c.update.sandbox = sandbox;
            }
            ToolOutcome::Command(c)
        }
    }
}

#[async_trait]
impl Middleware for SandboxMiddleware {
    middleware_identity!(NAME, HookSet::AGENT | HookSet::WRAP_TOOL);

    async fn before_agent(&self, state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        if self.lazy_init || run.thread_id.is_empty() {
            return Ok(HookOutput::none());
        }
        // Acquire for the run's (user, thread) even when state names a sandbox: the record is
        // not trusted, and acquiring is idempotent.
        let provider = self.provider.clone();
        let (thread, user) = (run.thread_id.clone(), run.user_id.clone());
        let id =
            tokio::task::spawn_blocking(move || provider.acquire(Some(&thread), user.as_deref()))
                .await
                .map_err(|e| MiddlewareError::new(NAME, e.to_string()))?
                .map_err(|e| MiddlewareError::new(NAME, e.to_string()))?;
        run.set(&keys::SANDBOX_ID, id.clone());
        match state_id(state) {
            None => Ok(HookOutput::update(StateUpdate {
                sandbox: Some(Some(SandboxState {
                    sandbox_id: Some(id),
                })),
                ..Default::default()
            })),
            Some(recorded) => {
                if recorded != id {
                    tracing::warn!(
                        thread = %run.thread_id,
                        state_sandbox = recorded,
                        sandbox = %id,
                        "state names a sandbox other than the run's own; ignored"
                    );
                }
                Ok(HookOutput::none())
            }
        }
    }

    async fn after_agent(&self, _state: &ThreadState, run: &RunContext) -> AfterAgentResult {
        // Only the id this run derived (set by the tools or before_agent), never the state's.
        if let Some(id) = run.get(&keys::SANDBOX_ID) {
            let provider = self.provider.clone();
            let _ = tokio::task::spawn_blocking(move || provider.release(&id)).await;
        }
        Ok(HookOutput::none())
    }

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        // A recorded id is either this run's (nothing to write) or a foreign one the tool has
        // logged (writing ours would fail the reducer): only an empty record is filled in.
        let unrecorded = state_id(&req.state).is_none();
        let run = req.run.clone();
        let call_id = req.call.id_str().to_owned();
        let res = next.run(req).await;
        let acquired = run
            .update(&keys::SANDBOX_ACQUIRED_BY, |calls| calls.remove(&call_id))
            .unwrap_or(false);
        let outcome = res?;
        match run.get(&keys::SANDBOX_ID) {
            Some(id) if acquired && unrecorded => Ok(with_sandbox(outcome, &id)),
            _ => Ok(outcome),
        }
    }
}
