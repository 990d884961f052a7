//! ThreadData (chain S4, before_agent): resolve the thread's host folders, publish them in
//! `thread_data`, and stamp the incoming user message with the run id and a timestamp.
//!
//! First of the thread hooks. Folders are created lazily (by the first sandbox tool call) unless
//! `lazy_init` is off.
//!
//! `thread_data` is a record for clients: the folders come from the data home and the run's
//! (user, thread) — the same inputs the sandbox provider uses — so it always names the folders
//! the tools work in, and each run overwrites whatever an older checkpoint held. Nothing reads it
//! back to decide where files are.

use std::path::PathBuf;

use antler_protocol::{Message, StateUpdate, ThreadState};
use antler_runtime::{HookOutput, HookSet, Middleware, MiddlewareError, RunContext};
use antler_sandbox::ThreadPaths;
use async_trait::async_trait;
use serde_json::Value;

use crate::hook::BeforeAgentResult;

const NAME: &str = "ThreadDataMiddleware";

pub struct ThreadDataMiddleware {
    home: PathBuf,
    lazy_init: bool,
}

impl ThreadDataMiddleware {
    /// `home` is the data home (`$ANTLER_HOME`); folders are created lazily.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        ThreadDataMiddleware {
            home: home.into(),
            lazy_init: true,
        }
    }

    /// `false` creates the folders in before_agent.
    pub fn with_lazy_init(mut self, lazy: bool) -> Self {
        self.lazy_init = lazy;
        self
    }
}

/// UTC ISO-8601 with microseconds and `+00:00`, as Python's `datetime.now(UTC).isoformat()`.
fn timestamp() -> String {
    antler_protocol::checkpoint::rfc3339_micros(chrono::Utc::now(), false)
}

#[async_trait]
impl Middleware for ThreadDataMiddleware {
    middleware_identity!(NAME, HookSet::BEFORE_AGENT);

    async fn before_agent(&self, state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        if run.thread_id.is_empty() {
            return Err(MiddlewareError::new(
                NAME,
                "Thread ID is required in runtime context or config.configurable",
            ));
        }
        let paths = ThreadPaths::new(&self.home, &run.thread_id, run.user_id.as_deref())
            .map_err(|e| MiddlewareError::new(NAME, e.to_string()))?;
        if !self.lazy_init {
            paths.ensure_dirs().map_err(|e| {
                MiddlewareError::new(NAME, format!("could not create the thread folders: {e}"))
            })?;
        }
        let mut update = StateUpdate {
            thread_data: Some(Some(paths.thread_data())),
            ..Default::default()
        };
        if let Some(Message::Human(h)) = state.messages.last() {
            let mut h = h.clone();
            if h.name.is_none() {
                h.name = Some("user-input".to_owned());
            }
            h.additional_kwargs
                .insert("run_id".into(), Value::from(run.run_id.clone()));
            h.additional_kwargs
                .insert("timestamp".into(), Value::from(timestamp()));
            update.messages = Some(vec![Message::Human(h)]);
        }
        Ok(HookOutput::update(update))
    }
}
