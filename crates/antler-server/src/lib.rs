//! `antler serve`: the LangGraph Platform-compatible HTTP API and DeerFlow's gateway routes, so
//! DeerFlow's web UI and the official `langgraph-sdk` clients work against antler unchanged
//! (spec 70 is the contract).
//!
//! The server is a thin front end over [`antler_agent::App`] and its run engine
//! ([`antler_agent::run`], the lifecycle `antler run` drives too): routes validate and
//! translate, the engine admits (one active run per thread across processes, multitask
//! strategies), journals and finishes runs, and each run's events are framed once into its stream
//! on the event bus ([`runs::bus`]; in-process: [`sse::RunBuffer`]) that any number of SSE
//! subscribers replay and follow. Runs outlive their HTTP requests (background semantics) and stop when cancelled.
//! Everything is mounted under `/api` and, identically, `/api/langgraph`.
//!
//! Pluggable parts: the message feed ([`feed::MessageFeed`], default: derived from
//! checkpoints), memory ([`memory::MemoryApi`], default: none), skills ([`skills::SkillsApi`]),
//! run observers (the run journal), and an agent hook (tests).
//!
//! Scope: admission is shared with every process on the database; event streams are this
//! process's (a run started elsewhere can be read but not streamed or cancelled here).

pub mod access;
pub mod assistants;
pub mod auth;
pub mod config;
pub mod error;
pub mod extract;
pub mod feed;
mod listen;
pub mod memory;
pub mod routes;
pub mod runs;
pub mod skills;
pub mod sse;
pub mod wire;

use std::future::Future;
use std::sync::Arc;

use antler_agent::{AgentError, App};
use antler_runtime::RunObserver;
use antler_store::ThreadRecord;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, Method};
use axum::routing::get;
use axum::Router;

pub use config::{
    ApiKey, ConfigError, ServerConfig, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_USER,
};
pub use error::ApiError;
pub use feed::{CheckpointFeed, FeedError, FeedPage, MessageFeed};
pub use memory::{ManagedMemory, MemoryApi, MemoryError, NoMemory};
pub use skills::{LocalSkills, SkillsApi};

/// The authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: String,
}

impl User {
    /// The user id for file layout: `None` for the single default user, so its threads live in
    /// `threads/{id}/…` exactly as the CLI's do; named users get `users/{id}/threads/{id}/…`.
    pub fn fs_id(&self) -> Option<&str> {
        (self.id != DEFAULT_USER).then_some(self.id.as_str())
    }

    /// Whether the thread is this user's (threads without an owner — created by the CLI —
    /// belong to the default user).
    pub fn owns(&self, t: &ThreadRecord) -> bool {
        match &t.owner {
            Some(o) => *o == self.id,
            None => self.id == DEFAULT_USER,
        }
    }
}

/// Rewrites the lead agent before a run (tests add tools here).
pub use antler_agent::run::AgentHook;

/// What every handler shares.
pub struct Shared {
    pub app: Arc<App>,
    pub config: ServerConfig,
    pub runs: Arc<runs::RunManager>,
    /// Where runs' event streams live (replay + live follow).
    pub bus: Arc<dyn runs::bus::EventBus>,
    pub feed: Arc<dyn MessageFeed>,
    pub memory: Arc<dyn MemoryApi>,
    pub skills: Arc<dyn SkillsApi>,
    pub agent_hook: Option<AgentHook>,
    pub observers: Vec<Arc<dyn RunObserver>>,
}

/// Cheap-to-clone handle on [`Shared`] (axum state).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The HTTP server over an [`App`].
pub struct Server {
    shared: Shared,
}

impl Server {
    /// A server with the default feed (from checkpoints), no memory store, and skills from the
    /// configured skills folder.
    pub fn new(app: Arc<App>, config: ServerConfig) -> Server {
        let feed = Arc::new(CheckpointFeed::new(app.store.clone()));
        let memory: Arc<dyn MemoryApi> = if app.config.memory.enabled {
            Arc::new(ManagedMemory::new(
                app.memory().clone(),
                app.config.memory.clone(),
            ))
        } else {
            Arc::new(NoMemory::new(app.config.memory.clone()))
        };
        let skills = Arc::new(LocalSkills::from_config(&app.config));
        Server {
            shared: Shared {
                runs: runs::RunManager::new(
                    config.retention,
                    config.max_retained_bytes,
                    Some(Arc::new(app.store.clone())),
                ),
                bus: Arc::new(runs::bus::InProcessBus::new(config.max_buffered_bytes)),
                app,
                config,
                feed,
                memory,
                skills,
                agent_hook: None,
                observers: Vec::new(),
            },
        }
    }

    /// Serve `messages/page` from another journal.
    pub fn with_message_feed(mut self, feed: Arc<dyn MessageFeed>) -> Self {
        self.shared.feed = feed;
        self
    }

    /// Serve the memory routes from a memory store.
    pub fn with_memory(mut self, memory: Arc<dyn MemoryApi>) -> Self {
        self.shared.memory = memory;
        self
    }

    pub fn with_skills(mut self, skills: Arc<dyn SkillsApi>) -> Self {
        self.shared.skills = skills;
        self
    }

    /// Rewrite the lead agent of every run.
    pub fn with_agent_hook(mut self, hook: AgentHook) -> Self {
        self.shared.agent_hook = Some(hook);
        self
    }

    /// Observe every run (the run journal, metrics).
    pub fn with_observer(mut self, observer: Arc<dyn RunObserver>) -> Self {
        self.shared.observers.push(observer);
        self
    }

    /// Freeze the configuration into the shared state.
    pub fn into_state(self) -> AppState {
        AppState(Arc::new(self.shared))
    }
}

fn cors_layer(origins: &[String]) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    let list: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(list))
        .allow_credentials(true)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
            Method::HEAD,
        ])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([header::CONTENT_LOCATION])
}

impl AppState {
    /// The whole application: `/health`, the API under `/api` and `/api/langgraph`, auth, body
    /// limits and (when origins are configured) CORS.
    pub fn router(&self) -> Router {
        let api = routes::api(routes::files::upload_body_limit(&self.app.config));
        let router = Router::new()
            .route("/health", get(routes::gateway::health))
            .nest("/api/langgraph", api.clone())
            .nest("/api", api)
            .fallback(routes::gateway::not_found)
            .method_not_allowed_fallback(routes::gateway::method_not_allowed)
            .layer(DefaultBodyLimit::max(self.config.max_body_bytes))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                auth::authenticate,
            ))
            .with_state(self.clone());
        if self.config.cors_origins.is_empty() {
            router
        } else {
            router.layer(cors_layer(&self.config.cors_origins))
        }
    }

    /// Start-up recovery (the run engine's): runs whose process died become `error`, runs
    /// written without a lease left unfinished become `error` with `stop_reason:
    /// orphan_recovered`, threads left `busy` with no live run become `error`. Live runs of
    /// other processes on the same database (an `antler run`) are left alone. Returns
    /// `(runs, threads)` fixed.
    pub async fn reconcile(&self) -> Result<(usize, usize), AgentError> {
        self.app.reconcile_runs().await
    }

    /// Serve on `listener` until `shutdown` resolves; live runs are then cancelled so their
    /// streams end and connections drain.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let runs = self.runs.clone();
        let router = self.router();
        let limits = listen::Limits {
            header_read_timeout: self.config.header_read_timeout,
            max_connections: self.config.max_connections,
        };
        listen::serve_connections(listener, router, limits, async move {
            shutdown.await;
            runs.cancel_all();
        })
        .await;
        // Background runs nobody streams may still be finalizing: give them a bounded moment so
        // they are recorded as interrupted rather than orphaned.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.runs.live_count() > 0 && tokio::time::Instant::now() < deadline {
            self.runs.cancel_all();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Ok(())
    }
}
