//! The run-create body (spec 70 §4.1) and the run options it resolves to (§6), validated before
//! any run exists: unknown fields and unsupported options are 422, bad messages 400, an unknown
//! model 400 — so a client error never creates a run and never gets a 5xx (the JS SDK retries
//! those and would duplicate runs).

use antler_config::Config;
use antler_protocol::{Message, StateUpdate, StreamModes};
use antler_runtime::RunOptions;
use serde_json::{Map, Value};

use crate::error::ApiError;
use antler_store::MultitaskStrategy as Strategy;

/// Stream modes a run may request.
pub const ALLOWED_MODES: [&str; 7] = [
    "values",
    "messages-tuple",
    "updates",
    "custom",
    "tasks",
    "checkpoints",
    "debug",
];

/// Channels of the serialized state (spec 70 §2.4). Clients may write all of them but
/// [`SERVER_CHANNELS`].
pub const STATE_CHANNELS: [&str; 14] = [
    "messages",
    "title",
    "artifacts",
    "todos",
    "goal",
    "uploaded_files",
    "viewed_images",
    "thread_data",
    "sandbox",
    "summary_text",
    "promoted",
    "delegations",
    "skill_context",
    "background_tasks",
];

/// Channels only the server writes: they record the run's sandbox and thread folders, which are
/// derived from the authenticated user and the thread. A client naming them is refused (422)
/// rather than ignored — no legitimate client sends them (the UI only writes `title`).
pub const SERVER_CHANNELS: [&str; 2] = ["sandbox", "thread_data"];

/// `additional_kwargs` keys only the server may set on incoming messages (spec 10 §1.4 rule 5).
const SERVER_OWNED_KWARGS: [&str; 4] = antler_protocol::markers::SERVER_OWNED_KWARGS;

/// Context keys forwarded into run options (spec 70 §6); everything else is dropped.
const CONTEXT_KEYS: [&str; 12] = [
    "model_name",
    "model",
    "thinking_enabled",
    "reasoning_effort",
    "is_plan_mode",
    "subagent_enabled",
    "max_concurrent_subagents",
    "max_total_subagents",
    "agent_name",
    "is_bootstrap",
    "mode",
    "disable_clarification",
];

/// Fields accepted in a run body; anything else is 422.
const KNOWN_FIELDS: [&str; 26] = [
    "assistant_id",
    "input",
    "command",
    "config",
    "context",
    "metadata",
    "stream_mode",
    "stream_subgraphs",
    "stream_resumable",
    "on_disconnect",
    "multitask_strategy",
    "checkpoint",
    "checkpoint_id",
    "interrupt_before",
    "interrupt_after",
    "if_not_exists",
    "checkpoint_during",
    "durability",
    "langsmith_tracer",
    "feedback_keys",
    "strict_resume",
    "webhook",
    "after_seconds",
    "on_completion",
    "subgraphs",
    "kwargs",
];

/// What happens when the creating client disconnects (spec 70 §4.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDisconnect {
    Cancel,
    Continue,
}

/// A validated run-create body.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub assistant_id: String,
    /// New messages of the input (server-owned kwargs removed).
    pub messages: Vec<Message>,
    /// Other channels written with the input.
    pub update: Option<StateUpdate>,
    /// The body's `input` as sent (kept on the run record).
    pub raw_input: Value,
    /// `command: {resume}` without input: a resume with nothing pending.
    pub resume_only: bool,
    pub config: Map<String, Value>,
    /// Merged `configurable` < `context` < `config.context`, whitelisted.
    pub context: Map<String, Value>,
    pub metadata: Map<String, Value>,
    /// Requested modes, de-duplicated, in order; `None` when the body had none.
    pub stream_modes: Option<Vec<String>>,
    pub on_disconnect: OnDisconnect,
    pub strategy: Strategy,
    /// Fork point.
    pub checkpoint_id: Option<String>,
    pub if_not_exists_create: bool,
    /// `config.configurable.thread_id` (stateless runs only).
    pub config_thread_id: Option<String>,
}

fn present<'a>(body: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    body.get(key).filter(|v| !v.is_null())
}

fn unsupported(name: &str) -> ApiError {
    ApiError::unprocessable(format!("Run option '{name}' is not supported"))
}

fn object(v: Option<&Value>, what: &str) -> Result<Map<String, Value>, ApiError> {
    match v {
        None => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(ApiError::unprocessable(format!(
            "'{what}' must be an object"
        ))),
    }
}

/// Parse `stream_mode` (a string or a list), collapsing duplicates.
pub fn parse_stream_modes(v: &Value) -> Result<Vec<String>, ApiError> {
    let raw: Vec<&str> = match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a
            .iter()
            .map(|m| {
                m.as_str().ok_or_else(|| {
                    ApiError::unprocessable("'stream_mode' must be a string or a list of strings")
                })
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::unprocessable(
                "'stream_mode' must be a string or a list of strings",
            ))
        }
    };
    let bad: Vec<&str> = raw
        .iter()
        .copied()
        .filter(|m| !ALLOWED_MODES.contains(m))
        .collect();
    if !bad.is_empty() {
        return Err(ApiError::unprocessable(format!(
            "Unsupported stream mode(s): {}",
            bad.join(", ")
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for m in raw {
        if !out.iter().any(|o| o == m) {
            out.push(m.to_owned());
        }
    }
    Ok(out)
}

/// The runtime modes for a list of requested modes.
pub fn modes_of(modes: &[String]) -> StreamModes {
    let has = |m: &str| modes.iter().any(|x| x == m);
    StreamModes {
        values: has("values"),
        updates: has("updates"),
        messages: has("messages-tuple"),
        custom: has("custom"),
    }
}

/// Parse the incoming messages of `input.messages`.
pub fn parse_messages(v: &Value, field: &str) -> Result<Vec<Message>, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::bad_request(format!("'{field}' must be a list")));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let mut m = Message::from_input(item.clone())
            .map_err(|e| ApiError::bad_request(format!("Invalid message at {field}[{i}]: {e}")))?;
        let kwargs = m.additional_kwargs_mut();
        for k in SERVER_OWNED_KWARGS {
            kwargs.remove(k);
        }
        if m.id().is_some_and(str::is_empty) {
            m.set_id(uuid::Uuid::new_v4().to_string());
        }
        out.push(m);
    }
    Ok(out)
}

/// 422 when `values` (the body field `field`: `values` or `input`) names a server-owned
/// channel, whatever its value (even `null`).
pub fn reject_server_channels(values: &Map<String, Value>, field: &str) -> Result<(), ApiError> {
    let named: Vec<String> = SERVER_CHANNELS
        .iter()
        .filter(|c| values.contains_key(**c))
        .map(|c| format!("{field}.{c}"))
        .collect();
    match named.as_slice() {
        [] => Ok(()),
        [one] => Err(ApiError::unprocessable(format!(
            "{one} is set by the server and cannot be written by clients"
        ))),
        many => Err(ApiError::unprocessable(format!(
            "{} are set by the server and cannot be written by clients",
            many.join(", ")
        ))),
    }
}

/// The non-message channels of an input or state update as a typed update; unknown channel
/// names are 422.
pub fn parse_channels(values: &Map<String, Value>) -> Result<Option<StateUpdate>, ApiError> {
    let unknown: Vec<&str> = values
        .keys()
        .map(String::as_str)
        .filter(|k| !STATE_CHANNELS.contains(k))
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::unprocessable(format!(
            "Unknown thread-state field(s): {}",
            unknown.join(", ")
        )));
    }
    let rest: Map<String, Value> = values
        .iter()
        .filter(|(k, _)| k.as_str() != "messages")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if rest.is_empty() {
        return Ok(None);
    }
    serde_json::from_value::<StateUpdate>(Value::Object(rest))
        .map(Some)
        .map_err(|e| ApiError::unprocessable(format!("Invalid thread-state value: {e}")))
}

fn as_bool(v: &Value, name: &str) -> Result<bool, ApiError> {
    v.as_bool()
        .ok_or_else(|| ApiError::unprocessable(format!("'{name}' must be a boolean")))
}

/// Parse and validate a run-create body. `path_thread` is the thread of the URL (`None` for
/// stateless runs).
pub fn parse_run_request(body: Value, path_thread: Option<&str>) -> Result<RunRequest, ApiError> {
    let body = match body {
        Value::Object(o) => o,
        Value::Null => Map::new(),
        _ => {
            return Err(ApiError::unprocessable(
                "The request body must be a JSON object",
            ))
        }
    };
    let mut unknown: Vec<&str> = body
        .keys()
        .map(String::as_str)
        .filter(|k| !KNOWN_FIELDS.contains(k))
        .collect();
    unknown.sort_unstable();
    if !unknown.is_empty() {
        return Err(ApiError::unprocessable(format!(
            "Unknown field(s) in run request: {}",
            unknown.join(", ")
        )));
    }
    for name in ["webhook", "after_seconds", "subgraphs", "kwargs"] {
        if present(&body, name).is_some() {
            return Err(unsupported(name));
        }
    }
    if let Some(v) = present(&body, "on_completion") {
        match v.as_str() {
            Some("keep") => {}
            Some("delete") => return Err(unsupported("on_completion")),
            _ => {
                return Err(ApiError::unprocessable(
                    "'on_completion' must be 'keep' or 'delete'",
                ))
            }
        }
    }
    if let Some(v) = present(&body, "strict_resume") {
        if as_bool(v, "strict_resume")? {
            return Err(unsupported("strict_resume"));
        }
    }
    for name in ["interrupt_before", "interrupt_after"] {
        match present(&body, name) {
            None => {}
            Some(Value::Array(a)) if a.is_empty() => {}
            Some(_) => return Err(unsupported(name)),
        }
    }
    for name in ["stream_subgraphs", "stream_resumable", "checkpoint_during"] {
        if let Some(v) = present(&body, name) {
            as_bool(v, name)?;
        }
    }

    let assistant_id = match present(&body, "assistant_id") {
        None => "lead_agent".to_owned(),
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(_) => {
            return Err(ApiError::unprocessable(
                "'assistant_id' must be a non-empty string",
            ))
        }
    };

    let stream_modes = match present(&body, "stream_mode") {
        None => None,
        Some(v) => Some(parse_stream_modes(v)?),
    };

    let on_disconnect = match present(&body, "on_disconnect").map(Value::as_str) {
        None => OnDisconnect::Cancel,
        Some(Some("cancel")) => OnDisconnect::Cancel,
        Some(Some("continue")) => OnDisconnect::Continue,
        Some(_) => {
            return Err(ApiError::unprocessable(
                "'on_disconnect' must be 'cancel' or 'continue'",
            ))
        }
    };
    let strategy = match present(&body, "multitask_strategy").map(Value::as_str) {
        None | Some(Some("reject")) => Strategy::Reject,
        Some(Some("interrupt")) => Strategy::Interrupt,
        Some(Some("rollback")) => Strategy::Rollback,
        Some(Some("enqueue")) => Strategy::Enqueue,
        Some(_) => {
            return Err(ApiError::unprocessable(
                "'multitask_strategy' must be one of reject, interrupt, rollback, enqueue",
            ))
        }
    };
    let if_not_exists_create = match present(&body, "if_not_exists").map(Value::as_str) {
        None | Some(Some("reject")) => false,
        Some(Some("create")) => true,
        Some(_) => {
            return Err(ApiError::unprocessable(
                "'if_not_exists' must be 'create' or 'reject'",
            ))
        }
    };

    // Fork point: `checkpoint` object or `checkpoint_id` string.
    let mut checkpoint_id = match present(&body, "checkpoint_id") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(ApiError::unprocessable("'checkpoint_id' must be a string")),
    };
    if let Some(cp) = present(&body, "checkpoint") {
        let Value::Object(cp) = cp else {
            return Err(ApiError::unprocessable("'checkpoint' must be an object"));
        };
        if let (Some(t), Some(path)) = (cp.get("thread_id").and_then(Value::as_str), path_thread) {
            if t != path {
                return Err(ApiError::bad_request(format!(
                    "Checkpoint thread_id '{t}' does not match thread '{path}'"
                )));
            }
        }
        match cp.get("checkpoint_id") {
            Some(Value::String(s)) if !s.is_empty() => checkpoint_id = Some(s.clone()),
            None | Some(Value::Null) => {}
            Some(_) => {
                return Err(ApiError::unprocessable(
                    "'checkpoint.checkpoint_id' must be a string",
                ))
            }
        }
    }

    // Input.
    let raw_input = present(&body, "input").cloned().unwrap_or(Value::Null);
    let (messages, update) = match &raw_input {
        Value::Null => (Vec::new(), None),
        Value::Object(o) => {
            reject_server_channels(o, "input")?;
            let update = parse_channels(o)?;
            let messages = match o.get("messages") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => parse_messages(v, "input.messages")?,
            };
            (messages, update)
        }
        _ => return Err(ApiError::unprocessable("'input' must be an object or null")),
    };

    let mut resume_only = false;
    if let Some(cmd) = present(&body, "command") {
        let Value::Object(cmd) = cmd else {
            return Err(ApiError::unprocessable("'command' must be an object"));
        };
        for k in cmd.keys() {
            match k.as_str() {
                "resume" => {}
                "update" | "goto" if cmd.get(k).is_some_and(Value::is_null) => {}
                "update" | "goto" => return Err(unsupported(&format!("command.{k}"))),
                other => {
                    return Err(ApiError::unprocessable(format!(
                        "Unknown field in command: {other}"
                    )))
                }
            }
        }
        resume_only = messages.is_empty() && update.is_none();
    }

    let config = object(present(&body, "config"), "config")?;
    let body_context = object(present(&body, "context"), "context")?;
    let metadata = object(present(&body, "metadata"), "metadata")?;
    let configurable = object(
        config.get("configurable").filter(|v| !v.is_null()),
        "config.configurable",
    )?;
    let config_context = object(
        config.get("context").filter(|v| !v.is_null()),
        "config.context",
    )?;
    let config_thread_id = configurable
        .get("thread_id")
        .and_then(Value::as_str)
        .map(str::to_owned);

    // Precedence: config.context > context > config.configurable (ignored when config.context
    // is present).
    let mut merged = Map::new();
    let layers: [&Map<String, Value>; 3] = if config.get("context").is_some_and(|v| !v.is_null()) {
        [&Map::new(), &body_context, &config_context]
    } else {
        [&configurable, &body_context, &config_context]
    };
    for layer in layers {
        for (k, v) in layer {
            if CONTEXT_KEYS.contains(&k.as_str()) && !v.is_null() {
                merged.insert(k.clone(), v.clone());
            }
        }
    }

    Ok(RunRequest {
        assistant_id,
        messages,
        update,
        raw_input,
        resume_only,
        config,
        context: merged,
        metadata,
        stream_modes,
        on_disconnect,
        strategy,
        checkpoint_id,
        if_not_exists_create,
        config_thread_id,
    })
}

/// `recursion_limit` as sent: integers (or integral floats/strings) only.
fn requested_recursion_limit(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Run options from a request: the model must be configured (400 otherwise), the recursion
/// limit is clamped as DeerFlow does, thinking is off for models that cannot think.
pub fn resolve_options(
    req: &RunRequest,
    config: &Config,
    agent_name: Option<String>,
) -> Result<RunOptions, ApiError> {
    let ctx = &req.context;
    let str_of = |k: &str| ctx.get(k).and_then(Value::as_str).map(str::to_owned);
    let bool_of = |k: &str| ctx.get(k).and_then(Value::as_bool);
    let model_name = str_of("model_name").or_else(|| str_of("model"));
    let model_cfg = match &model_name {
        Some(name) => Some(config.model(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Model '{name}' is not in the configured model allowlist"
            ))
        })?),
        None => config.default_model(),
    };
    let supports_thinking = model_cfg.is_none_or(|m| m.supports_thinking);
    let mut extra = Map::new();
    for k in [
        "max_total_subagents",
        "is_bootstrap",
        "mode",
        "disable_clarification",
    ] {
        if let Some(v) = ctx.get(k) {
            extra.insert(k.to_owned(), v.clone());
        }
    }
    let agent_name = agent_name.or_else(|| str_of("agent_name"));
    Ok(RunOptions {
        model_name,
        thinking_enabled: bool_of("thinking_enabled").unwrap_or(true) && supports_thinking,
        reasoning_effort: str_of("reasoning_effort")
            .filter(|e| matches!(e.as_str(), "minimal" | "low" | "medium" | "high")),
        is_plan_mode: bool_of("is_plan_mode").unwrap_or(false),
        subagent_enabled: bool_of("subagent_enabled").unwrap_or(config.subagents.enabled),
        max_concurrent_subagents: ctx
            .get("max_concurrent_subagents")
            .and_then(Value::as_u64)
            .map_or(3, |n| n as usize),
        agent_name,
        recursion_limit: config
            .clamp_recursion_limit(requested_recursion_limit(req.config.get("recursion_limit"))),
        extra,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<RunRequest, ApiError> {
        parse_run_request(v, Some("t1"))
    }

    #[test]
    fn the_ui_body_parses() {
        let r = parse(json!({
            "input": {"messages": [{"type": "human", "content": [{"type": "text", "text": "hi"}],
                "additional_kwargs": {"files": [], "original_user_content": "x"}}]},
            "config": {"recursion_limit": 1000},
            "context": {"model_name": "main", "mode": "pro", "thinking_enabled": true, "thread_id": "t1", "user_id": "evil", "__x": 1},
            "stream_mode": ["values", "messages-tuple", "updates", "custom", "values"],
            "on_disconnect": "continue",
            "assistant_id": "lead_agent"
        }))
        .unwrap();
        assert_eq!(r.messages.len(), 1);
        assert!(!r.messages[0]
            .additional_kwargs()
            .contains_key("original_user_content"));
        assert_eq!(
            r.stream_modes.as_deref().unwrap(),
            ["values", "messages-tuple", "updates", "custom"]
        );
        assert_eq!(r.on_disconnect, OnDisconnect::Continue);
        assert_eq!(r.context.get("model_name"), Some(&json!("main")));
        assert!(!r.context.contains_key("thread_id"));
        assert!(!r.context.contains_key("user_id"));
        assert!(!r.context.contains_key("__x"));
    }

    #[test]
    fn python_sdk_defaults_are_accepted() {
        let r = parse(json!({
            "input": {"messages": [{"role": "user", "content": "hi"}]},
            "stream_mode": "values", "stream_subgraphs": false, "stream_resumable": true,
            "assistant_id": "lead_agent", "durability": "async", "feedback_keys": ["a"],
            "langsmith_tracer": {"project_name": "x"}, "strict_resume": false,
            "checkpoint_during": true, "on_completion": "keep"
        }))
        .unwrap();
        assert_eq!(r.on_disconnect, OnDisconnect::Cancel);
        assert_eq!(r.strategy, Strategy::Reject);
    }

    #[test]
    fn unsupported_things_are_422_and_bad_messages_400() {
        let status = |v: Value| parse(v).err().map(|e| e.status.as_u16());
        assert_eq!(status(json!({"stream_mode": ["messages"]})), Some(422));
        assert_eq!(
            status(json!({"stream_mode": ["events", "values"]})),
            Some(422)
        );
        assert_eq!(status(json!({"multitask_strategy": "enqueue"})), None);
        assert_eq!(status(json!({"multitask_strategy": "later"})), Some(422));
        assert_eq!(status(json!({"webhook": "http://x"})), Some(422));
        assert_eq!(status(json!({"after_seconds": 5})), Some(422));
        assert_eq!(status(json!({"on_completion": "delete"})), Some(422));
        assert_eq!(status(json!({"strict_resume": true})), Some(422));
        assert_eq!(status(json!({"interrupt_before": ["model"]})), Some(422));
        assert_eq!(status(json!({"command": {"goto": "model"}})), Some(422));
        assert_eq!(status(json!({"bogus": 1})), Some(422));
        assert_eq!(status(json!([1, 2])), Some(422));
        assert_eq!(status(json!({"input": {"nope": 1}})), Some(422));
        assert_eq!(
            status(json!({"input": {"messages": [{"type": "alien", "content": "x"}]}})),
            Some(400)
        );
        let e = parse(json!({"input": {"messages": ["ok", {"role": "tool", "content": "x"}]}}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("input.messages[1]"), "{e}");
        assert_eq!(
            status(json!({"checkpoint": {"thread_id": "other", "checkpoint_id": "c"}})),
            Some(400)
        );
    }

    #[test]
    fn server_channels_in_the_input_are_422_naming_them() {
        let detail = |v: Value| parse(v).err().map(|e| (e.status.as_u16(), e.detail));
        assert_eq!(
            detail(json!({"input": {"messages": [], "sandbox": null}})),
            Some((
                422,
                json!("input.sandbox is set by the server and cannot be written by clients")
            ))
        );
        assert_eq!(
            detail(json!({"input": {"thread_data": {}, "sandbox": {"sandbox_id": "local:x"}}})),
            Some((
                422,
                json!("input.sandbox, input.thread_data are set by the server and cannot be written by clients")
            ))
        );
        assert!(parse(json!({"input": {"messages": [], "title": "t"}})).is_ok());
    }

    #[test]
    fn context_precedence_and_fork_point() {
        let r = parse(json!({
            "config": {"configurable": {"model_name": "a", "is_plan_mode": true, "thread_id": "tx"}},
            "context": {"model_name": "b"},
            "checkpoint": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "cp1"}
        }))
        .unwrap();
        assert_eq!(r.context.get("model_name"), Some(&json!("b")));
        assert_eq!(r.context.get("is_plan_mode"), Some(&json!(true)));
        assert_eq!(r.checkpoint_id.as_deref(), Some("cp1"));
        assert_eq!(r.config_thread_id.as_deref(), Some("tx"));
        // config.context present: configurable is ignored entirely.
        let r = parse(json!({
            "config": {"configurable": {"is_plan_mode": true}, "context": {"model_name": "c"}},
            "context": {"model_name": "b"}
        }))
        .unwrap();
        assert_eq!(r.context.get("model_name"), Some(&json!("c")));
        assert!(!r.context.contains_key("is_plan_mode"));
    }

    #[test]
    fn recursion_limits_are_clamped_and_models_checked() {
        let cfg: Config = Config {
            models: vec![serde_json::from_value(json!({"name": "main", "model": "m"})).unwrap()],
            max_recursion_limit: 1000,
            ..Config::default()
        };
        let opts = |v: Value| {
            let r = parse(json!({"config": {"recursion_limit": v}})).unwrap();
            resolve_options(&r, &cfg, None).unwrap().recursion_limit
        };
        assert_eq!(opts(json!(50)), 50);
        assert_eq!(opts(json!(5000)), 1000);
        assert_eq!(opts(json!(0)), 100);
        assert_eq!(opts(json!(-3)), 100);
        assert_eq!(opts(json!("abc")), 100);
        assert_eq!(opts(json!(null)), 100);
        let r = parse(json!({"context": {"model_name": "nope"}})).unwrap();
        let e = resolve_options(&r, &cfg, None).err().unwrap();
        assert_eq!(e.status.as_u16(), 400);
        assert!(e
            .to_string()
            .contains("Model 'nope' is not in the configured model allowlist"));
        let r =
            parse(json!({"context": {"model_name": "main", "thinking_enabled": true}})).unwrap();
        let o = resolve_options(&r, &cfg, Some("writer".into())).unwrap();
        assert!(!o.thinking_enabled, "the model cannot think");
        assert_eq!(o.agent_name.as_deref(), Some("writer"));
    }
}
