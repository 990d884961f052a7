//! Threads, state and history (spec 70 §3.2, T1–T9): create/search/get/patch/delete, the state
//! snapshot (`GET/POST …/state`), and checkpoint history shaped so `useStream` never mistakes an
//! entry for a fork point (no `checkpoint` objects, no task errors).

use std::collections::{HashMap, HashSet};

use antler_protocol::api::{CreateThread, HistoryQuery, PatchThread, SearchThreads, UpdateState};
use antler_protocol::{Message, Messages, ThreadState};
use antler_runtime::{Checkpoint, CheckpointMeta, Checkpointer};
use antler_store::{ThreadQuery, ThreadRecord, ThreadUpdate};
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::access::{self, owned_thread};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, JsonBody, ThreadScope};
use crate::feed::run_durations;
use crate::runs::body::{parse_channels, parse_messages, reject_server_channels};
use crate::runs::Busy;
use crate::{wire, AppState, User};

/// T1 `POST /threads`.
pub async fn create(
    State(state): State<AppState>,
    user: User,
    Body(body): Body<CreateThread>,
) -> ApiResult<Json<Value>> {
    if body.supersteps.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unprocessable("'supersteps' is not supported"));
    }
    let raise = match body.if_exists.as_deref() {
        None | Some("do_nothing") => false,
        Some("raise") => true,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "'if_exists' must be 'raise' or 'do_nothing', not '{other}'"
            )))
        }
    };
    let thread_id = body
        .thread_id
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    access::check_thread_id(&thread_id)?;
    if let Some(existing) = state.app.store.get_thread(&thread_id).await? {
        if raise || !user.owns(&existing) {
            return Err(ApiError::conflict(format!(
                "Thread {thread_id} already exists"
            )));
        }
        let status = access::live_status(&state, &existing);
        return Ok(Json(wire::thread_json(&existing, &status, json!({}))));
    }
    let metadata = wire::clean_metadata(body.metadata.unwrap_or_default());
    let record = access::create_thread(&state, &user, &thread_id, metadata).await?;
    Ok(Json(wire::thread_json(
        &record,
        ThreadRecord::IDLE,
        json!({}),
    )))
}

/// T2 `POST /threads/search`: the caller's threads, pinned first.
pub async fn search(
    State(state): State<AppState>,
    user: User,
    body: JsonBody,
) -> ApiResult<Json<Value>> {
    // An unknown field is 400 here, as before the bodies were typed.
    let body: SearchThreads = body.parse_as(axum::http::StatusCode::BAD_REQUEST)?;
    let limit = body.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::unprocessable("'limit' must be from 1 to 1000"));
    }
    let offset = body.offset.unwrap_or(0);
    if offset < 0 {
        return Err(ApiError::unprocessable("'offset' must not be negative"));
    }
    if let Some(s) = &body.status {
        if ![
            ThreadRecord::IDLE,
            ThreadRecord::BUSY,
            ThreadRecord::INTERRUPTED,
            ThreadRecord::ERROR,
        ]
        .contains(&s.as_str())
        {
            return Err(ApiError::unprocessable(format!(
                "Unknown thread status '{s}'"
            )));
        }
    }
    let sort_by = body.sort_by.as_deref().unwrap_or("updated_at");
    if !["thread_id", "status", "created_at", "updated_at"].contains(&sort_by) {
        return Err(ApiError::unprocessable(format!(
            "Cannot sort by '{sort_by}'"
        )));
    }
    let desc = match body.sort_order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(o) => return Err(ApiError::unprocessable(format!("Unknown sort order '{o}'"))),
    };
    let query = ThreadQuery {
        limit: usize::MAX >> 1,
        offset: 0,
        owner: None,
        status: None,
    };
    let ids: Option<HashSet<&str>> = body
        .ids
        .as_ref()
        .map(|ids| ids.iter().map(String::as_str).collect());
    let mut found: Vec<(ThreadRecord, String)> = state
        .app
        .store
        .list_threads(query)
        .await?
        .into_iter()
        .filter(|t| user.owns(t))
        .filter(|t| {
            ids.as_ref()
                .is_none_or(|ids| ids.contains(t.thread_id.as_str()))
        })
        .filter(|t| {
            body.metadata
                .as_ref()
                .is_none_or(|want| want.iter().all(|(k, v)| t.metadata.get(k) == Some(v)))
        })
        .map(|t| {
            let status = access::live_status(&state, &t);
            (t, status)
        })
        .filter(|(_, s)| body.status.as_deref().is_none_or(|want| want == s))
        .collect();
    let pinned = |t: &ThreadRecord| t.metadata.get("deerflow_pinned") == Some(&Value::Bool(true));
    found.sort_by(|(a, sa), (b, sb)| {
        let key = |t: &ThreadRecord, s: &str| -> String {
            match sort_by {
                "thread_id" => t.thread_id.clone(),
                "status" => s.to_owned(),
                "created_at" => t.created_at.clone(),
                _ => t.updated_at.clone(),
            }
        };
        let ord = key(a, sa).cmp(&key(b, sb));
        let ord = if desc { ord.reverse() } else { ord };
        pinned(b)
            .cmp(&pinned(a))
            .then(ord)
            .then_with(|| b.thread_id.cmp(&a.thread_id))
    });
    let out: Vec<Value> = found
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(usize::try_from(limit).unwrap_or(100))
        .map(|(t, status)| {
            let values = match &t.title {
                Some(title) => json!({"title": title}),
                None => json!({}),
            };
            wire::thread_json(&t, &status, values)
        })
        .collect();
    Ok(Json(Value::Array(out)))
}

/// T3 `GET /threads/{id}`: the thread with its full current values.
pub async fn get_one(scope: ThreadScope) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    let t = owned_thread(&state, &user, &thread_id).await?;
    let values = match state.app.store.latest_checkpoint(&thread_id).await? {
        Some(cp) => wire::state_value(&cp.state),
        None => json!({}),
    };
    let status = access::live_status(&state, &t);
    Ok(Json(wire::thread_json(&t, &status, values)))
}

/// T4 `PATCH /threads/{id}`: shallow-merge metadata.
pub async fn patch(scope: ThreadScope, Body(body): Body<PatchThread>) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    owned_thread(&state, &user, &thread_id).await?;
    let update = ThreadUpdate {
        metadata: Some(wire::clean_metadata(body.metadata.unwrap_or_default())),
        ..Default::default()
    };
    let t = state.app.update_thread(&thread_id, update).await?;
    let status = access::live_status(&state, &t);
    Ok(Json(wire::thread_json(&t, &status, json!({}))))
}

/// T5 `DELETE /threads/{id}`: record, checkpoints, runs and files.
pub async fn delete(scope: ThreadScope) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    owned_thread(&state, &user, &thread_id).await?;
    let _guard = state.runs.begin_op(&thread_id).map_err(|_| {
        ApiError::conflict("Thread has work in flight. Delete it after the work finishes.")
    })?;
    state.app.delete_thread(&thread_id).await?;
    state.runs.forget_thread(&thread_id);
    let paths = antler_sandbox::ThreadPaths::new(&state.app.home, &thread_id, user.fs_id())
        .map_err(ApiError::internal)?;
    let dir = paths.thread_dir;
    let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    })
    .await
    .map_err(ApiError::internal)?;
    if let Err(e) = removed {
        tracing::warn!(thread = %thread_id, error = %e, "could not remove the thread's files");
    }
    Ok(Json(json!({
        "success": true,
        "message": format!("Deleted local thread data for {thread_id}"),
    })))
}

fn checkpoint_ref(thread_id: &str, id: &str) -> Value {
    json!({"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": id, "checkpoint_map": null})
}

/// The T6 snapshot of one checkpoint.
pub fn snapshot_json(cp: &Checkpoint) -> Value {
    let m = &cp.meta;
    let mut checkpoint = checkpoint_ref(&m.thread_id, &m.checkpoint_id);
    checkpoint["id"] = json!(m.checkpoint_id);
    checkpoint["ts"] = json!(wire::iso(&m.created_at));
    json!({
        "values": wire::state_value(&cp.state),
        "next": [],
        "tasks": [],
        "checkpoint": checkpoint,
        "checkpoint_id": m.checkpoint_id,
        "parent_checkpoint": m.parent_id.as_deref().map(|p| checkpoint_ref(&m.thread_id, p)),
        "parent_checkpoint_id": m.parent_id,
        "metadata": m.metadata,
        "created_at": wire::iso(&m.created_at),
        "interrupts": [],
    })
}

/// T6 `GET /threads/{id}/state`.
pub async fn state_now(scope: ThreadScope) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    owned_thread(&state, &user, &thread_id).await?;
    let cp = state
        .app
        .store
        .latest_checkpoint(&thread_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Thread {thread_id} has no state")))?;
    Ok(Json(snapshot_json(&cp)))
}

/// `GET /threads/{id}/state/{checkpoint_id}`.
pub async fn state_at(
    State(state): State<AppState>,
    user: User,
    Path((thread_id, checkpoint_id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    owned_thread(&state, &user, &thread_id).await?;
    let cp = state
        .app
        .store
        .get_checkpoint(&thread_id, &checkpoint_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Checkpoint {checkpoint_id} not found")))?;
    Ok(Json(snapshot_json(&cp)))
}

/// T7 `POST /threads/{id}/state`: replace the given channels in a new checkpoint. `sandbox` and
/// `thread_data` are the server's (422).
pub async fn update_state(
    scope: ThreadScope,
    Body(body): Body<UpdateState>,
) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    owned_thread(&state, &user, &thread_id).await?;
    let values = match body.values {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(ApiError::unprocessable("'values' must be an object")),
    };
    // Validate before taking the thread.
    reject_server_channels(&values, "values")?;
    parse_channels(&values)?;
    let new_messages = match values.get("messages") {
        None => None,
        Some(v) => Some(parse_messages(v, "values.messages")?),
    };
    let fork = body.checkpoint_id.clone().or_else(|| {
        body.checkpoint
            .as_ref()
            .and_then(|c| c.get("checkpoint_id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let _guard = state.runs.begin_op(&thread_id).map_err(|b| match b {
        Busy::RunInFlight | Busy::Operation => {
            ApiError::conflict("Thread has a run in flight. Update state after the run finishes.")
        }
    })?;
    let store = &state.app.store;
    let base = match &fork {
        Some(id) => Some(
            store
                .get_checkpoint(&thread_id, id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("Checkpoint {id} not found")))?,
        ),
        None => store.latest_checkpoint(&thread_id).await?,
    };
    let (parent, step, base_state) = match base {
        Some(cp) => (Some(cp.meta.checkpoint_id), cp.meta.step + 1, cp.state),
        None => (None, 0, ThreadState::default()),
    };
    // Non-message channels: replace each given one, then re-validate the whole set.
    let mut fields = base_state.fields_value();
    if let Value::Object(f) = &mut fields {
        for (k, v) in values.iter().filter(|(k, _)| k.as_str() != "messages") {
            f.insert(k.clone(), v.clone());
        }
    }
    let mut new_state = ThreadState::from_parts(fields, Messages::new())
        .map_err(|e| ApiError::unprocessable(format!("Invalid thread-state value: {e}")))?;
    let mut changes = Vec::new();
    match new_messages {
        Some(msgs) => {
            let mut list = Messages::new();
            list.add(msgs)
                .map_err(|e| ApiError::unprocessable(e.to_string()))?;
            changes.push(antler_protocol::Change::Clear);
            changes.extend(list.take_changes());
            new_state.messages = list;
        }
        None => new_state.messages = base_state.messages.clone(),
    }
    let title_changed = new_state.title != base_state.title;
    let writer = body.as_node.as_deref().unwrap_or("manual_state_update");
    let checkpoint_id = state
        .app
        .write_state(
            &thread_id,
            parent,
            step,
            writer,
            changes,
            new_state.fields_value(),
        )
        .await?;
    if title_changed {
        state
            .app
            .update_thread(
                &thread_id,
                ThreadUpdate {
                    title: Some(new_state.title.clone()),
                    ..Default::default()
                },
            )
            .await?;
    }
    let cp = store
        .get_checkpoint(&thread_id, &checkpoint_id)
        .await?
        .ok_or_else(|| ApiError::internal("the written checkpoint is missing"))?;
    Ok(Json(snapshot_json(&cp)))
}

fn checkpoint_id_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Object(o) => o
            .get("checkpoint_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// History metadata: DeerFlow strips bookkeeping keys, keeps `step`.
fn history_metadata(m: &Value) -> Value {
    let mut m = match m {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    for k in [
        "created_at",
        "updated_at",
        "source",
        "writes",
        "parents",
        "run_durations",
    ] {
        m.remove(k);
    }
    Value::Object(m)
}

/// The head entry's messages: `run_id` on ai/tool messages (from the human message that started
/// their run), `turn_duration` on each finished run's last AI message.
fn history_messages(msgs: &Messages, durations: &HashMap<String, i64>) -> Vec<Value> {
    let mut out = Vec::with_capacity(msgs.len());
    let mut run: Option<String> = None;
    let mut runs: Vec<Option<String>> = Vec::with_capacity(msgs.len());
    for m in msgs.iter() {
        let mut v = wire::message_value(m);
        match m {
            Message::Human(h) => {
                if let Some(r) = h.additional_kwargs.get("run_id").and_then(Value::as_str) {
                    run = Some(r.to_owned());
                }
                runs.push(None);
            }
            Message::Ai(_) | Message::Tool(_) => {
                if let Some(r) = &run {
                    v["run_id"] = json!(r);
                }
                runs.push(run.clone());
            }
            Message::System(_) | Message::Remove(_) => runs.push(None),
        }
        out.push(v);
    }
    let mut stamped = HashSet::new();
    for (v, r) in out.iter_mut().zip(runs).rev() {
        let Some(r) = r else { continue };
        if v["type"] != "ai" || stamped.contains(&r) {
            continue;
        }
        if let Some(d) = durations.get(&r) {
            if let Some(kw) = v["additional_kwargs"].as_object_mut() {
                kw.insert("turn_duration".into(), json!(d));
            }
            stamped.insert(r);
        }
    }
    out
}

fn history_entry(cp: &Checkpoint, head: bool, durations: &HashMap<String, i64>) -> Value {
    let mut values = Map::new();
    if head {
        if let Value::Object(all) = wire::state_value(&cp.state) {
            values = all;
        }
        values.insert(
            "messages".into(),
            Value::Array(history_messages(&cp.state.messages, durations)),
        );
    } else {
        if let Some(t) = &cp.state.title {
            values.insert("title".into(), json!(t));
        }
        if let Some(td) = &cp.state.thread_data {
            values.insert("thread_data".into(), json!(td));
        }
    }
    json!({
        "checkpoint_id": cp.meta.checkpoint_id,
        "parent_checkpoint_id": cp.meta.parent_id,
        "metadata": history_metadata(&cp.meta.metadata),
        "values": values,
        "created_at": wire::iso(&cp.meta.created_at),
        "next": [],
    })
}

/// T8 `POST /threads/{id}/history`: newest first; only the first entry carries messages.
pub async fn history(scope: ThreadScope, Body(body): Body<HistoryQuery>) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    access::check_thread_id(&thread_id)?;
    let limit = body.limit.unwrap_or(10);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::unprocessable("'limit' must be from 1 to 100"));
    }
    let limit = usize::try_from(limit).unwrap_or(10);
    let store = &state.app.store;
    match store.get_thread(&thread_id).await? {
        Some(t) if user.owns(&t) => {}
        _ => return Ok(Json(json!([]))),
    }
    let before = body.before.as_ref().and_then(checkpoint_id_of);
    let start = body.checkpoint.as_ref().and_then(checkpoint_id_of);
    let filter = body.metadata.unwrap_or_default();
    let matches = |m: &CheckpointMeta| filter.iter().all(|(k, v)| m.metadata.get(k) == Some(v));

    // Walk the checkpoint list newest first in pages, keeping those the filter admits.
    let mut metas: Vec<CheckpointMeta> = Vec::new();
    let mut cursor = before;
    if let Some(s) = &start {
        match store.get_checkpoint(&thread_id, s).await? {
            Some(cp) => {
                if matches(&cp.meta) {
                    metas.push(cp.meta.clone());
                }
                cursor = Some(s.clone());
            }
            None => return Ok(Json(json!([]))),
        }
    }
    while metas.len() < limit {
        let page = Checkpointer::list(store, &thread_id, 100, cursor.as_deref()).await?;
        let Some(last) = page.last() else { break };
        cursor = Some(last.checkpoint_id.clone());
        let exhausted = page.len() < 100;
        metas.extend(page.into_iter().filter(|m| matches(m)));
        if exhausted {
            break;
        }
    }
    metas.truncate(limit);
    let runs = store.list_runs(&thread_id, 100_000).await?;
    let durations = run_durations(&runs);
    let mut out = Vec::with_capacity(metas.len());
    for (i, m) in metas.iter().enumerate() {
        if let Some(cp) = store.get_checkpoint(&thread_id, &m.checkpoint_id).await? {
            out.push(history_entry(&cp, i == 0, &durations));
        }
    }
    Ok(Json(Value::Array(out)))
}

/// `GET /threads/{id}/history` (LangGraph's query form).
pub async fn history_get(
    scope: ThreadScope,
    q: crate::extract::QueryPairs,
) -> ApiResult<Json<Value>> {
    let query = HistoryQuery {
        limit: q.int("limit", 1, 100)?,
        before: q.get("before").map(|b| json!(b)),
        ..Default::default()
    };
    history(scope, Body(query)).await
}
