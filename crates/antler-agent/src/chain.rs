//! The lead agent's middleware chain in DeerFlow's order (spec 20 §12). Numbers are spec 20's
//! (S = shared runtime segment, L = lead-only segment).

use std::sync::Arc;

use antler_middleware::sandbox::SandboxMiddleware;
use antler_middleware::sandbox_audit::{JsonlAuditSink, SandboxAuditMiddleware};
use antler_middleware::thread_data::ThreadDataMiddleware;
use antler_middleware::tool_error_handling::ToolErrorHandlingMiddleware;
use antler_middleware::uploads::UploadsMiddleware;
use antler_models::ModelInfo;
use antler_runtime::{Chain, Middleware, RunOptions};
use antler_sandbox::SandboxProvider;

use crate::{AgentError, App};

/// The middlewares of the lead agent, in order.
pub fn lead_middlewares(
    app: &App,
    _model: &ModelInfo,
    _opts: &RunOptions,
) -> Vec<Arc<dyn Middleware>> {
    let provider: Arc<dyn SandboxProvider> = app.sandbox.clone();
    vec![
        // S4–S6: thread folders, uploads, sandbox.
        Arc::new(ThreadDataMiddleware::new(app.home.clone())),
        Arc::new(UploadsMiddleware::new(app.home.clone())),
        Arc::new(SandboxMiddleware::new(provider)),
        // S11: bash audit, also written to $ANTLER_HOME/logs/sandbox-audit.jsonl.
        Arc::new(
            SandboxAuditMiddleware::new().with_sink(Arc::new(JsonlAuditSink::new(
                app.home.join("logs").join("sandbox-audit.jsonl"),
            ))),
        ),
        // S14: tool failures become error results.
        Arc::new(ToolErrorHandlingMiddleware::new()),
    ]
}

/// The lead agent's chain.
pub fn lead_chain(app: &App, model: &ModelInfo, opts: &RunOptions) -> Result<Chain, AgentError> {
    Ok(Chain::new(lead_middlewares(app, model, opts))?)
}
