//! Runs (spec 70 §3.3, R1–R11): create (streamed, background, waited, stateless), list, get,
//! cancel, join (SSE replay + live, or final values).
//!
//! Every run-creating response carries `Content-Location: /api/threads/{t}/runs/{r}` — both SDKs
//! learn the run id from it — and never `Location` (the SDKs would treat it as a reconnect URL).

use std::sync::Arc;

use antler_store::RunStatus;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::access::owned_thread;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, QueryPairs, RunScope, Scope, ThreadScope};
use crate::runs::body::{modes_of, parse_stream_modes, OnDisconnect};
use crate::runs::bus::Subscribe;
use crate::runs::exec::{final_values, start_run, RunKind, Started};
use crate::runs::{CancelAction, RunHandle};
use crate::sse::{self, Cursor};
use crate::{wire, AppState};

fn with_location(mut resp: Response, location: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::CONTENT_LOCATION, v);
    }
    resp
}

/// An SSE response over a run's buffer.
fn sse_response(
    state: &AppState,
    handle: &Arc<RunHandle>,
    cursor: Cursor,
    filter: Option<antler_protocol::StreamModes>,
    cancel_on_disconnect: bool,
) -> Response {
    let on_disconnect: Option<Box<dyn FnOnce() + Send>> = cancel_on_disconnect.then(|| {
        let h = handle.clone();
        Box::new(move || {
            if h.finished().is_none() {
                tracing::info!(run = %h.run_id, "client disconnected; cancelling the run");
                h.cancel(CancelAction::Interrupt);
            }
        }) as Box<dyn FnOnce() + Send>
    });
    let stream = handle.buffer.clone().subscribe(Subscribe {
        cursor,
        filter,
        heartbeat: state.config.heartbeat,
        on_disconnect,
    });
    sse_headers(Response::new(Body::from_stream(stream)))
}

fn sse_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

fn stream_started(state: &AppState, started: &Started) -> Response {
    let resp = sse_response(
        state,
        &started.handle,
        Cursor::Earliest,
        None,
        started.on_disconnect == OnDisconnect::Cancel,
    );
    with_location(resp, &started.content_location())
}

/// R1 `POST /threads/{id}/runs/stream`.
pub async fn stream(s: ThreadScope, body: JsonBody) -> ApiResult<Response> {
    let started = s.start(Some(&s.ids), body, RunKind::Stream).await?;
    Ok(stream_started(&s.state, &started))
}

/// R9 `POST /runs/stream`.
pub async fn stateless_stream(s: Scope<()>, body: JsonBody) -> ApiResult<Response> {
    let started = s.start(None, body, RunKind::Stream).await?;
    Ok(stream_started(&s.state, &started))
}

/// R2 `POST /threads/{id}/runs`: background run, answered with the pending run.
pub async fn create(s: ThreadScope, body: JsonBody) -> ApiResult<Response> {
    let started = s.start(Some(&s.ids), body, RunKind::Background).await?;
    let resp = Json(wire::run_json(&started.record)).into_response();
    Ok(with_location(resp, &started.content_location()))
}

/// Cancels the run if dropped armed (the waiting client went away).
struct CancelOnDrop(Option<Arc<RunHandle>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            if h.finished().is_none() {
                h.cancel(CancelAction::Interrupt);
            }
        }
    }
}

async fn wait_started(state: &AppState, started: Started) -> ApiResult<Response> {
    let mut guard = CancelOnDrop(
        (started.on_disconnect == OnDisconnect::Cancel).then(|| started.handle.clone()),
    );
    started.handle.wait_done().await;
    guard.0 = None;
    let resp = match started.handle.take_final_state() {
        // A success's final state is the thread's latest checkpoint: answered from memory, and
        // serialized straight to the body.
        Some(values) => (
            [(header::CONTENT_TYPE, "application/json")],
            wire::state_string(&values),
        )
            .into_response(),
        None => {
            let values = Box::pin(final_values(
                state,
                &started.handle.thread_id,
                &started.handle.run_id,
            ))
            .await?;
            Json(values).into_response()
        }
    };
    Ok(with_location(resp, &started.content_location()))
}

/// R3 `POST /threads/{id}/runs/wait`.
pub async fn wait(s: ThreadScope, body: JsonBody) -> ApiResult<Response> {
    // Boxed: starting is brief, the wait long; inline, every waiting request would carry the
    // start's state too.
    let started = Box::pin(s.start(Some(&s.ids), body, RunKind::Wait)).await?;
    wait_started(&s.state, started).await
}

/// R10 `POST /runs/wait`.
pub async fn stateless_wait(s: Scope<()>, body: JsonBody) -> ApiResult<Response> {
    let started = Box::pin(s.start(None, body, RunKind::Wait)).await?;
    wait_started(&s.state, started).await
}

/// R4 `GET /threads/{id}/runs`: newest first.
pub async fn list(s: ThreadScope, q: QueryPairs) -> ApiResult<Json<Value>> {
    owned_thread(&s.state, &s.user, &s.ids).await?;
    let limit = q.int("limit", 1, 1000)?.unwrap_or(100) as usize;
    let offset = q.int("offset", 0, i64::MAX)?.unwrap_or(0) as usize;
    let status = q.get("status");
    let fetch = if status.is_some() {
        100_000
    } else {
        offset.saturating_add(limit)
    };
    let runs = s.state.app.store.list_runs(&s.ids, fetch).await?;
    let out: Vec<Value> = runs
        .iter()
        .filter(|r| status.is_none_or(|s| r.status.as_str() == s))
        .skip(offset)
        .take(limit)
        .map(wire::run_json)
        .collect();
    Ok(Json(Value::Array(out)))
}

impl<P> Scope<P> {
    /// Start a run of `kind` on `thread_id` (`None`: stateless) for the caller.
    async fn start(
        &self,
        thread_id: Option<&str>,
        body: JsonBody,
        kind: RunKind,
    ) -> ApiResult<Started> {
        start_run(&self.state, &self.user, thread_id, body.0, kind).await
    }
}

impl RunScope {
    fn thread_id(&self) -> &str {
        &self.ids.0 .0
    }

    fn run_id(&self) -> &str {
        &self.ids.0 .1
    }

    /// The run record, 404 unless it belongs to the caller's thread.
    async fn owned_run(&self) -> ApiResult<antler_store::RunRecord> {
        owned_thread(&self.state, &self.user, self.thread_id()).await?;
        match self.state.app.store.get_run(self.run_id()).await? {
            Some(r) if r.thread_id == self.thread_id() => Ok(r),
            _ => Err(ApiError::run_not_found(self.run_id())),
        }
    }
}

/// R5 `GET /threads/{id}/runs/{run_id}`.
pub async fn get_one(run: RunScope) -> ApiResult<Json<Value>> {
    let r = run.owned_run().await?;
    Ok(Json(wire::run_json(&r)))
}

/// Cancel per spec 70 §5.4: 202 accepted, 204 once stopped (`wait`), 409 for finished runs.
async fn cancel_run(run: &RunScope, q: &QueryPairs) -> ApiResult<StatusCode> {
    let wait = q.bool("wait")?.unwrap_or(false);
    let action = match q.get("action") {
        None => CancelAction::Interrupt,
        Some(a) => CancelAction::parse(a)
            .ok_or_else(|| ApiError::unprocessable("'action' must be 'interrupt' or 'rollback'"))?,
    };
    let record = run.owned_run().await?;
    let accepted = if wait {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    };
    let run_id = run.run_id();
    let status = match run.state.runs.get(run_id) {
        Some(h) => match h.finished() {
            None => {
                h.cancel(action);
                if wait {
                    h.wait_done().await;
                }
                return Ok(accepted);
            }
            Some(s) => s,
        },
        None => record.status,
    };
    match status {
        RunStatus::Interrupted => Ok(accepted),
        other => Err(ApiError::conflict(format!(
            "Run {run_id} is not cancellable (status: {other})"
        ))),
    }
}

/// R6 `POST /threads/{id}/runs/{run_id}/cancel?wait=&action=`.
pub async fn cancel(run: RunScope, q: QueryPairs) -> ApiResult<Response> {
    let code = cancel_run(&run, &q).await?;
    Ok(code.into_response())
}

/// The join stream of an owned run.
async fn join_response(run: &RunScope, headers: &HeaderMap, q: &QueryPairs) -> ApiResult<Response> {
    let modes = q.all("stream_mode");
    let filter = if modes.is_empty() {
        None
    } else {
        Some(modes_of(&parse_stream_modes(&json!(modes))?))
    };
    let cancel_on_disconnect = q.bool("cancel_on_disconnect")?.unwrap_or(false);
    let record = run.owned_run().await?;
    let run_id = run.run_id();
    match run.state.runs.get(run_id) {
        Some(h) => {
            let cursor = Cursor::from_last_event_id(
                headers.get("last-event-id").and_then(|v| v.to_str().ok()),
            );
            Ok(sse_response(
                &run.state,
                &h,
                cursor,
                filter,
                cancel_on_disconnect,
            ))
        }
        None if record.status.is_terminal() => Ok(sse_headers(Response::new(Body::from_stream(
            sse::end_only(),
        )))),
        None => Err(ApiError::conflict(format!(
            "Run {run_id} is not active on this worker and cannot be streamed"
        ))),
    }
}

/// R7 `GET /threads/{id}/runs/{run_id}/stream`.
pub async fn join_stream(run: RunScope, headers: HeaderMap, q: QueryPairs) -> ApiResult<Response> {
    join_response(&run, &headers, &q).await
}

/// R11 `POST /threads/{id}/runs/{run_id}/stream?action=&wait=`: cancel, then stream the rest.
pub async fn cancel_stream(
    run: RunScope,
    headers: HeaderMap,
    q: QueryPairs,
) -> ApiResult<Response> {
    if q.has("action") {
        let code = cancel_run(&run, &q).await?;
        if code == StatusCode::NO_CONTENT {
            return Ok(code.into_response());
        }
    }
    join_response(&run, &headers, &q).await
}

/// R8 `GET /threads/{id}/runs/{run_id}/join`: wait, then the final values as JSON.
pub async fn join(run: RunScope) -> ApiResult<Json<Value>> {
    let record = run.owned_run().await?;
    let run_id = run.run_id();
    match run.state.runs.get(run_id) {
        Some(h) => {
            h.wait_done().await;
        }
        None if record.status.is_terminal() => {}
        None => {
            return Err(ApiError::conflict(format!(
                "Run {run_id} is not active on this worker and cannot be streamed"
            )))
        }
    }
    Ok(Json(
        final_values(&run.state, run.thread_id(), run_id).await?,
    ))
}
