//! The route table (spec 70 §1), relative to `/api`; [`crate::Server::router`] mounts it under
//! both `/api` and `/api/langgraph`.

pub mod files;
pub mod gateway;
pub mod mcp;
pub mod runs;
pub mod threads;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use crate::AppState;

/// Every `/api` route.
pub fn api(upload_limit: usize) -> Router<AppState> {
    Router::new()
        // Assistants.
        .route("/assistants/search", post(gateway::assistants_search))
        .route("/assistants/{assistant_id}", get(gateway::assistant))
        .route(
            "/assistants/{assistant_id}/graph",
            get(gateway::assistant_graph),
        )
        .route(
            "/assistants/{assistant_id}/schemas",
            get(gateway::assistant_schemas),
        )
        // Threads, state, history.
        .route("/threads", post(threads::create))
        .route("/threads/search", post(threads::search))
        .route(
            "/threads/{thread_id}",
            get(threads::get_one)
                .patch(threads::patch)
                .delete(threads::delete),
        )
        .route(
            "/threads/{thread_id}/state",
            get(threads::state_now).post(threads::update_state),
        )
        .route(
            "/threads/{thread_id}/state/{checkpoint_id}",
            get(threads::state_at),
        )
        .route(
            "/threads/{thread_id}/history",
            post(threads::history).get(threads::history_get),
        )
        // Runs.
        .route(
            "/threads/{thread_id}/runs",
            get(runs::list).post(runs::create),
        )
        .route("/threads/{thread_id}/runs/stream", post(runs::stream))
        .route("/threads/{thread_id}/runs/wait", post(runs::wait))
        .route("/threads/{thread_id}/runs/{run_id}", get(runs::get_one))
        .route(
            "/threads/{thread_id}/runs/{run_id}/cancel",
            post(runs::cancel),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            get(runs::join_stream).post(runs::cancel_stream),
        )
        .route("/threads/{thread_id}/runs/{run_id}/join", get(runs::join))
        .route("/runs/stream", post(runs::stateless_stream))
        .route("/runs/wait", post(runs::stateless_wait))
        // Gateway: thread files and feeds.
        .route(
            "/threads/{thread_id}/uploads",
            post(files::upload).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route("/threads/{thread_id}/uploads/limits", get(files::limits))
        .route("/threads/{thread_id}/uploads/list", get(files::list))
        .route(
            "/threads/{thread_id}/uploads/{filename}",
            axum::routing::delete(files::delete),
        )
        .route(
            "/threads/{thread_id}/artifacts/{*path}",
            get(files::artifact),
        )
        .route(
            "/threads/{thread_id}/messages/page",
            get(gateway::messages_page),
        )
        .route(
            "/threads/{thread_id}/token-usage",
            get(gateway::token_usage),
        )
        .route(
            "/threads/{thread_id}/suggestions",
            post(gateway::suggestions),
        )
        // Gateway: settings and catalogues.
        .route("/models", get(gateway::models))
        .route("/models/{name}", get(gateway::model))
        .route("/features", get(gateway::features))
        .route("/skills", get(gateway::skills))
        .route("/skills/{name}", get(gateway::skill))
        .route("/suggestions/config", get(gateway::suggestions_config))
        .route(
            "/memory",
            get(gateway::memory_get).delete(gateway::memory_clear),
        )
        .route("/memory/facts", post(gateway::memory_create_fact))
        .route(
            "/memory/facts/{fact_id}",
            axum::routing::patch(gateway::memory_update_fact).delete(gateway::memory_delete_fact),
        )
        .route("/memory/export", get(gateway::memory_export))
        .route("/memory/import", post(gateway::memory_import))
        .route("/memory/reload", post(gateway::memory_reload))
        .route("/memory/config", get(gateway::memory_config))
        .route("/memory/status", get(gateway::memory_status))
        // Gateway: MCP settings (G21).
        .route(
            "/mcp/config",
            get(mcp::get_config)
                .put(mcp::put_config)
                .patch(mcp::patch_config),
        )
        .route("/mcp/cache/reset", post(mcp::reset_cache))
        // Auth (mode `none` or API keys: no login flow).
        .route("/v1/auth/me", get(crate::auth::me))
        .route("/v1/auth/setup-status", get(crate::auth::setup_status))
        .route("/v1/auth/providers", get(crate::auth::providers))
}
