//! G21 MCP settings (DeerFlow UI › Settings › Tools): `GET/PUT/PATCH /mcp/config`,
//! `POST /mcp/cache/reset`.
//!
//! Responses are `{"mcp_servers": {name: server}}` with every field DeerFlow's response model
//! has (defaults filled in), env and header values masked as `"***"` and OAuth secrets as
//! `null`. A PUT may send those masks back: a masked value keeps the stored one (only for a key
//! that exists), a `null` OAuth secret keeps the stored secret, `""` clears it. Writes keep the
//! file's other top-level keys (`skills`, `middlewares`, …) and `$VAR` placeholders, are
//! validated first (a bad body is a 422 naming the field, the file untouched), land atomically,
//! and reset the MCP tool cache. The file is host-wide and a stdio entry's `command` runs on the
//! host outside the sandbox, so writes are DeerFlow's admin operations: allowed when the server
//! has one user (no keys, or every key of the same user), refused with 403 when keys name several
//! users — then one user could start programs that read every other user's data. Reading stays
//! open (secrets are masked).

use std::path::PathBuf;

use antler_mcp::config::{parse_server, read_raw, resolve_env, write_atomic};
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::AppState;

const MASK: &str = "***";

/// One read-modify-write of the file at a time.
static WRITE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config_error(e: antler_mcp::McpError) -> ApiError {
    ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The file in force (`None` = there is none yet).
fn current_path(state: &AppState) -> ApiResult<Option<PathBuf>> {
    state.app.mcp.lookup().resolve().map_err(config_error)
}

fn read_doc(path: Option<&PathBuf>) -> ApiResult<Map<String, Value>> {
    match path {
        Some(p) if p.is_file() => read_raw(p).map_err(config_error),
        _ => Ok(Map::new()),
    }
}

fn servers_of(doc: &Map<String, Value>) -> Map<String, Value> {
    match doc.get("mcpServers") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    }
}

/// An entry with DeerFlow's response defaults filled in.
fn normalized(entry: &Value) -> Value {
    let mut out = match entry {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let kind = out
        .get("type")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| out.get("transport").and_then(Value::as_str))
        .unwrap_or("stdio")
        .to_owned();
    out.insert("type".into(), Value::String(kind));
    let defaults = [
        ("enabled", json!(true)),
        ("command", Value::Null),
        ("args", json!([])),
        ("env", json!({})),
        ("url", Value::Null),
        ("headers", json!({})),
        ("oauth", Value::Null),
        ("description", json!("")),
        (
            "routing",
            json!({"mode": "off", "priority": 0, "keywords": []}),
        ),
        ("tools", json!({})),
        ("tool_name_prefix", json!(true)),
        ("tool_call_timeout", Value::Null),
        ("session_init_timeout", json!(60.0)),
    ];
    for (k, v) in defaults {
        out.entry(k).or_insert(v);
    }
    Value::Object(out)
}

fn mask(entry: &Value) -> Value {
    let mut v = normalized(entry);
    for key in ["env", "headers"] {
        if let Some(Value::Object(m)) = v.get_mut(key) {
            for val in m.values_mut() {
                *val = Value::String(MASK.into());
            }
        }
    }
    if let Some(Value::Object(o)) = v.get_mut("oauth") {
        for k in ["client_secret", "refresh_token"] {
            if o.contains_key(k) {
                o.insert(k.into(), Value::Null);
            }
        }
    }
    v
}

fn response(servers: &Map<String, Value>) -> Json<Value> {
    let out: Map<String, Value> = servers.iter().map(|(k, v)| (k.clone(), mask(v))).collect();
    Json(json!({ "mcp_servers": out }))
}

/// Put stored secrets back where the client sent masks.
fn unmask(name: &str, incoming: &mut Value, existing: Option<&Value>) -> ApiResult<()> {
    for key in ["env", "headers"] {
        let Some(Value::Object(m)) = incoming.get_mut(key) else {
            continue;
        };
        for (k, v) in m.iter_mut() {
            if v.as_str() != Some(MASK) {
                continue;
            }
            match existing.and_then(|e| e.get(key)).and_then(|e| e.get(k)) {
                Some(stored) => *v = stored.clone(),
                None => {
                    return Err(ApiError::unprocessable(format!(
                        "mcp_servers.{name}.{key}.{k}: the masked value '***' can only keep a stored value; provide a real value"
                    )))
                }
            }
        }
    }
    if let (Some(Value::Object(o)), Some(Value::Object(stored))) = (
        incoming.get_mut("oauth"),
        existing.and_then(|e| e.get("oauth")),
    ) {
        for k in ["client_secret", "refresh_token"] {
            match o.get(k) {
                None | Some(Value::Null) => {
                    if let Some(s) = stored.get(k) {
                        o.insert(k.into(), s.clone());
                    }
                }
                Some(Value::String(s)) if s.is_empty() => {
                    o.remove(k);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Validate an entry as a run would read it (`$VAR`s resolved); 422 names the field.
fn validate(name: &str, entry: &Value) -> ApiResult<()> {
    if !entry.is_object() {
        return Err(ApiError::unprocessable(format!(
            "mcp_servers.{name}: expected an object"
        )));
    }
    let mut resolved = entry.clone();
    resolve_env(&mut resolved, &|k| std::env::var(k).ok());
    parse_server(name, &resolved)
        .map(|_| ())
        .map_err(|e| ApiError::unprocessable(e.to_string()))
}

/// `GET /mcp/config`.
pub async fn get_config(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let path = current_path(&state)?;
    let doc = read_doc(path.as_ref())?;
    Ok(response(&servers_of(&doc)))
}

/// Writes need the server's only user (see the module docs).
fn require_single_user(state: &AppState) -> ApiResult<()> {
    let keys = &state.config.api_keys;
    match keys.first() {
        Some(first) if keys.iter().any(|k| k.user_id != first.user_id) => Err(ApiError::forbidden(
            "The MCP configuration is host-wide and can start programs on the host: with API keys \
             for several users it is changed in extensions_config.json, not over the API",
        )),
        _ => Ok(()),
    }
}

/// `PUT /mcp/config {"mcp_servers": {...}}`: replace the server set.
pub async fn put_config(State(state): State<AppState>, body: JsonBody) -> ApiResult<Json<Value>> {
    require_single_user(&state)?;
    let Some(Value::Object(incoming)) = body.0.get("mcp_servers").cloned() else {
        return Err(ApiError::unprocessable(
            "mcp_servers: required, an object of server entries",
        ));
    };
    let _w = WRITE.lock().await;
    let path = current_path(&state)?;
    let mut doc = read_doc(path.as_ref())?;
    let existing = servers_of(&doc);
    let mut merged = Map::new();
    for (name, mut entry) in incoming {
        if !antler_mcp::valid_tool_name(&name) {
            return Err(ApiError::unprocessable(format!(
                "mcp_servers.{name}: a server name may use only letters, digits, '_' and '-'"
            )));
        }
        unmask(&name, &mut entry, existing.get(&name))?;
        validate(&name, &entry)?;
        merged.insert(name, entry);
    }
    doc.insert("mcpServers".into(), Value::Object(merged.clone()));
    let target = path.unwrap_or_else(|| state.app.mcp.lookup().default_path());
    write_atomic(&target, &Value::Object(doc)).map_err(ApiError::internal)?;
    tracing::info!(path = %target.display(), "MCP configuration written");
    state.app.mcp.reset().await;
    Ok(response(&merged))
}

/// `PATCH /mcp/config {"server_name", "enabled"}`: turn one server on or off.
pub async fn patch_config(State(state): State<AppState>, body: JsonBody) -> ApiResult<Json<Value>> {
    require_single_user(&state)?;
    let name = match body.0.get("server_name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(ApiError::unprocessable("server_name: required, a string")),
    };
    let enabled = match body.0.get("enabled") {
        Some(Value::Bool(b)) => *b,
        _ => return Err(ApiError::unprocessable("enabled: required, a boolean")),
    };
    let _w = WRITE.lock().await;
    let path = current_path(&state)?;
    let not_found = || ApiError::not_found(format!("MCP server '{name}' not found"));
    let Some(path) = path.filter(|p| p.is_file()) else {
        return Err(not_found());
    };
    let mut doc = read_doc(Some(&path))?;
    let mut servers = servers_of(&doc);
    let entry = servers.get_mut(&name).ok_or_else(not_found)?;
    let Value::Object(obj) = entry else {
        return Err(not_found());
    };
    obj.insert("enabled".into(), Value::Bool(enabled));
    if enabled {
        validate(&name, entry)?;
    }
    doc.insert("mcpServers".into(), Value::Object(servers.clone()));
    write_atomic(&path, &Value::Object(doc)).map_err(ApiError::internal)?;
    tracing::info!(server = %name, enabled, "MCP server state written");
    state.app.mcp.reset().await;
    Ok(response(&servers))
}

/// `POST /mcp/cache/reset`: forget discovered tools and close every MCP session.
pub async fn reset_cache(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    // Closes every user's MCP sessions: an admin operation like the writes.
    require_single_user(&state)?;
    state.app.mcp.reset().await;
    Ok(Json(json!({
        "success": true,
        "message": "MCP tools cache reset. Tools will reload on next use.",
    })))
}
