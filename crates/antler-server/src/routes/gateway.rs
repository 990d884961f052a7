//! DeerFlow's gateway routes the UI calls besides runs and threads (spec 70 §1.2): health,
//! models, features, skills, suggestions, token usage, the message feed, memory, assistants.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::access::owned_thread;
use crate::assistants;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, JsonBody, QueryPairs, ThreadScope};
use antler_protocol::api::SearchAssistants;

use crate::memory::{FactPatch, MemoryError, NewFact};
use crate::{AppState, User};

/// `GET /health`.
pub async fn health() -> Json<Value> {
    Json(json!({"status": "healthy", "service": "antler"}))
}

fn model_json(m: &antler_config::ModelConfig) -> Value {
    json!({
        "name": m.name,
        "model": m.model,
        "display_name": m.display_name.clone().unwrap_or_else(|| m.name.clone()),
        "description": m.description,
        "supports_thinking": m.supports_thinking,
        "supports_reasoning_effort": m.supports_reasoning_effort,
        "supports_vision": m.supports_vision,
    })
}

/// G1 `GET /models` (never keys or base URLs).
pub async fn models(State(state): State<AppState>) -> Json<Value> {
    let cfg = &state.app.config;
    Json(json!({
        "models": cfg.models.iter().map(model_json).collect::<Vec<_>>(),
        "token_usage": {"enabled": cfg.token_usage.enabled},
    }))
}

/// G2 `GET /models/{name}`.
pub async fn model(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    state
        .app
        .config
        .model(&name)
        .map(|m| Json(model_json(m)))
        .ok_or_else(|| ApiError::not_found(format!("Model '{name}' not found")))
}

/// G3 `GET /features`: nothing optional is offered yet.
pub async fn features() -> Json<Value> {
    Json(json!({
        "agents_api": {"enabled": false},
        "browser_control": {"enabled": false},
        "mcp_tasks": {"enabled": false},
    }))
}

/// G20 `GET /skills`.
pub async fn skills(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"skills": state.skills.list()}))
}

/// `GET /skills/{name}`.
pub async fn skill(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    state
        .skills
        .list()
        .into_iter()
        .find(|s| s["name"] == name.as_str())
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("Skill '{name}' not found")))
}

/// G11 `GET /suggestions/config`: follow-up suggestions are off.
pub async fn suggestions_config() -> Json<Value> {
    Json(json!({"enabled": false, "max_suggestions": 3}))
}

/// G11 `POST /threads/{id}/suggestions`.
pub async fn suggestions(scope: ThreadScope) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    owned_thread(&state, &user, &thread_id).await?;
    Ok(Json(json!({"suggestions": []})))
}

/// G10 `GET /threads/{id}/token-usage`, summed over the thread's runs.
pub async fn token_usage(scope: ThreadScope) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    owned_thread(&state, &user, &thread_id).await?;
    let runs = state.app.store.list_runs(&thread_id, 100_000).await?;
    let mut by_model: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let (mut total, mut input, mut output) = (0i64, 0i64, 0i64);
    for r in &runs {
        total += r.total_tokens;
        input += r.total_input_tokens;
        output += r.total_output_tokens;
        let model = r
            .kwargs
            .pointer("/context/model_name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| state.app.config.default_model().map(|m| m.name.clone()))
            .unwrap_or_default();
        let e = by_model.entry(model).or_default();
        e.0 += r.total_tokens;
        e.1 += 1;
    }
    Ok(Json(json!({
        "thread_id": thread_id,
        "total_tokens": total,
        "total_input_tokens": input,
        "total_output_tokens": output,
        "total_runs": runs.len(),
        "by_model": by_model.into_iter().map(|(k, (t, n))| (k, json!({"tokens": t, "runs": n}))).collect::<serde_json::Map<_, _>>(),
        "by_caller": {"lead_agent": total, "subagent": 0, "middleware": 0},
        "context_usage": null,
    })))
}

/// G9 `GET /threads/{id}/messages/page?limit=&before_seq=`.
pub async fn messages_page(scope: ThreadScope, q: QueryPairs) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    if q.has("after_seq") {
        return Err(ApiError::unprocessable(
            "after_seq is not supported by this backward-only endpoint",
        ));
    }
    let limit = q.int("limit", 1, 200)?.unwrap_or(50) as usize;
    let before = q.int("before_seq", 1, i64::MAX)?;
    crate::access::check_thread_id(&thread_id)?;
    let empty = Json(json!({"data": [], "has_more": false, "next_before_seq": null}));
    match state.app.store.get_thread(&thread_id).await? {
        Some(t) if user.owns(&t) => {}
        Some(_) => return Err(ApiError::thread_not_found(&thread_id)),
        None => return Ok(empty),
    }
    let page = state
        .feed
        .page(&thread_id, limit, before)
        .await
        .map_err(ApiError::internal)?;
    let next = if page.has_more {
        page.data.first().map(|r| r["seq"].clone())
    } else {
        None
    };
    Ok(Json(json!({
        "data": page.data,
        "has_more": page.has_more,
        "next_before_seq": next,
    })))
}

fn memory_error(e: MemoryError) -> ApiError {
    match e {
        MemoryError::NotSupported(m) => ApiError::not_implemented(m),
        e @ MemoryError::NotFound(_) => ApiError::not_found(e.to_string()),
        MemoryError::Conflict(m) => ApiError::conflict(m),
        MemoryError::Invalid(m) => ApiError::unprocessable(m),
        MemoryError::Unavailable(m) => ApiError::internal(m),
    }
}

/// A memory operation's answer as JSON, its failure as the matching API error.
fn memory_json(result: Result<Value, MemoryError>) -> ApiResult<Json<Value>> {
    result.map(Json).map_err(memory_error)
}

/// G19 `GET /memory`.
pub async fn memory_get(State(state): State<AppState>, user: User) -> ApiResult<Json<Value>> {
    memory_json(state.memory.get(&user.id).await)
}

/// G19 `DELETE /memory`.
pub async fn memory_clear(State(state): State<AppState>, user: User) -> ApiResult<Json<Value>> {
    memory_json(state.memory.clear(&user.id).await)
}

/// G19 `POST /memory/facts`.
pub async fn memory_create_fact(
    State(state): State<AppState>,
    user: User,
    Body(fact): Body<NewFact>,
) -> ApiResult<Json<Value>> {
    if fact.content.trim().is_empty() || !(0.0..=1.0).contains(&fact.confidence) {
        return Err(ApiError::unprocessable(
            "A fact needs non-empty content and a confidence from 0 to 1",
        ));
    }
    memory_json(state.memory.create_fact(&user.id, fact).await)
}

/// G19 `PATCH /memory/facts/{id}`.
pub async fn memory_update_fact(
    State(state): State<AppState>,
    user: User,
    Path(fact_id): Path<String>,
    Body(patch): Body<FactPatch>,
) -> ApiResult<Json<Value>> {
    memory_json(state.memory.update_fact(&user.id, &fact_id, patch).await)
}

/// G19 `DELETE /memory/facts/{id}`.
pub async fn memory_delete_fact(
    State(state): State<AppState>,
    user: User,
    Path(fact_id): Path<String>,
) -> ApiResult<Json<Value>> {
    memory_json(state.memory.delete_fact(&user.id, &fact_id).await)
}

/// G19 `GET /memory/export`.
pub async fn memory_export(State(state): State<AppState>, user: User) -> ApiResult<Json<Value>> {
    memory_json(state.memory.export(&user.id).await)
}

/// G19 `POST /memory/import`.
pub async fn memory_import(
    State(state): State<AppState>,
    user: User,
    body: JsonBody,
) -> ApiResult<Json<Value>> {
    memory_json(state.memory.import(&user.id, body.0).await)
}

/// G19 `POST /memory/reload`.
pub async fn memory_reload(State(state): State<AppState>, user: User) -> ApiResult<Json<Value>> {
    memory_json(state.memory.reload(&user.id).await)
}

/// G19 `GET /memory/config`.
pub async fn memory_config(State(state): State<AppState>) -> Json<Value> {
    Json(state.memory.config())
}

/// G19 `GET /memory/status`.
pub async fn memory_status(State(state): State<AppState>, user: User) -> ApiResult<Json<Value>> {
    let data = state.memory.get(&user.id).await.map_err(memory_error)?;
    Ok(Json(json!({"config": state.memory.config(), "data": data})))
}

/// A1 `POST /assistants/search`.
pub async fn assistants_search(
    State(state): State<AppState>,
    user: User,
    Body(q): Body<SearchAssistants>,
) -> ApiResult<Json<Value>> {
    let limit = q.limit.unwrap_or(10).clamp(1, 1000) as usize;
    let offset = q.offset.unwrap_or(0).max(0) as usize;
    let name = q.name.map(|n| n.to_lowercase());
    let out: Vec<Value> = assistants::list(&state, &user)
        .into_iter()
        .map(|a| a.to_json())
        .filter(|a| {
            q.graph_id
                .as_ref()
                .is_none_or(|g| a["graph_id"] == g.as_str())
        })
        .filter(|a| {
            name.as_ref().is_none_or(|n| {
                a["name"]
                    .as_str()
                    .is_some_and(|s| s.to_lowercase().contains(n.as_str()))
            })
        })
        .filter(|a| {
            q.metadata
                .as_ref()
                .is_none_or(|m| m.iter().all(|(k, v)| a["metadata"].get(k) == Some(v)))
        })
        .skip(offset)
        .take(limit)
        .collect();
    Ok(Json(Value::Array(out)))
}

fn assistant_or_404(state: &AppState, user: &User, id: &str) -> ApiResult<assistants::Assistant> {
    assistants::find(state, user, id)
        .ok_or_else(|| ApiError::not_found(format!("Assistant {id} not found")))
}

/// A2 `GET /assistants/{id}`.
pub async fn assistant(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(assistant_or_404(&state, &user, &id)?.to_json()))
}

/// A3 `GET /assistants/{id}/graph`.
pub async fn assistant_graph(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    assistant_or_404(&state, &user, &id)?;
    Ok(Json(
        json!({"graph_id": "lead_agent", "nodes": [], "edges": []}),
    ))
}

/// A3 `GET /assistants/{id}/schemas`.
pub async fn assistant_schemas(
    State(state): State<AppState>,
    user: User,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    assistant_or_404(&state, &user, &id)?;
    Ok(Json(json!({
        "graph_id": "lead_agent",
        "input_schema": {}, "output_schema": {}, "state_schema": {},
        "config_schema": {}, "context_schema": {},
    })))
}

/// Fallback for unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::not_found("Not Found")
}

/// Fallback for known routes with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}
