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

pub use antler_protocol::api::OnDisconnect;
use antler_protocol::api::{IfNotExists, OneOrMany, RunCreate};

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

fn unsupported(name: &str) -> ApiError {
    ApiError::unprocessable(format!("Run option '{name}' is not supported"))
}

/// The 422 detail for a body field of the wrong type or value (by its path in the body).
fn invalid_field(path: &str) -> String {
    let top = path.split(['.', '[']).next().unwrap_or(path);
    match top {
        "" => "The request body must be a JSON object".to_owned(),
        "assistant_id" => "'assistant_id' must be a non-empty string".to_owned(),
        "stream_mode" => "'stream_mode' must be a string or a list of strings".to_owned(),
        "on_disconnect" => "'on_disconnect' must be 'cancel' or 'continue'".to_owned(),
        "multitask_strategy" => {
            "'multitask_strategy' must be one of reject, interrupt, rollback, enqueue".to_owned()
        }
        "if_not_exists" => "'if_not_exists' must be 'create' or 'reject'".to_owned(),
        "on_completion" => "'on_completion' must be 'keep' or 'delete'".to_owned(),
        "checkpoint_id" => "'checkpoint_id' must be a string".to_owned(),
        "checkpoint" if path.starts_with("checkpoint.") => format!("'{path}' must be a string"),
        "checkpoint" => "'checkpoint' must be an object".to_owned(),
        "interrupt_before" | "interrupt_after" => format!("Run option '{top}' is not supported"),
        "stream_subgraphs" | "stream_resumable" | "checkpoint_during" | "strict_resume" => {
            format!("'{top}' must be a boolean")
        }
        "input" => "'input' must be an object or null".to_owned(),
        "command" | "config" | "context" | "metadata" => format!("'{top}' must be an object"),
        other => format!("Invalid run request field '{other}'"),
    }
}

fn object(v: Option<&Value>, what: &str) -> Result<Map<String, Value>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(ApiError::unprocessable(format!(
            "'{what}' must be an object"
        ))),
    }
}

/// Parse `stream_mode` (a string or a list), collapsing duplicates.
pub fn parse_stream_modes(v: &Value) -> Result<Vec<String>, ApiError> {
    let modes: OneOrMany = serde_json::from_value(v.clone())
        .map_err(|_| ApiError::unprocessable(invalid_field("stream_mode")))?;
    stream_modes_of(&modes)
}

/// 422 `"{what}: a, b"` naming the `unknown` names, if there are any.
fn refuse_unknown(what: &str, unknown: &[&str]) -> Result<(), ApiError> {
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ApiError::unprocessable(format!(
        "{what}: {}",
        unknown.join(", ")
    )))
}

fn stream_modes_of(modes: &OneOrMany) -> Result<Vec<String>, ApiError> {
    let bad: Vec<&str> = modes
        .iter()
        .filter(|m| !ALLOWED_MODES.contains(m))
        .collect();
    refuse_unknown("Unsupported stream mode(s)", &bad)?;
    let mut out: Vec<String> = Vec::new();
    for m in modes.iter() {
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
    refuse_unknown("Unknown thread-state field(s)", &unknown)?;
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

/// Parse and validate a run-create body. `path_thread` is the thread of the URL (`None` for
/// stateless runs).
pub fn parse_run_request(body: Value, path_thread: Option<&str>) -> Result<RunRequest, ApiError> {
    let body = match body {
        Value::Null => Value::Object(Map::new()),
        v => v,
    };
    let body: RunCreate = serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        ApiError::unprocessable(invalid_field(if path == "." { "" } else { &path }))
    })?;
    if !body.unknown.is_empty() {
        let mut unknown: Vec<&str> = body.unknown.keys().map(String::as_str).collect();
        unknown.sort_unstable();
        return Err(ApiError::unprocessable(format!(
            "Unknown field(s) in run request: {}",
            unknown.join(", ")
        )));
    }
    if let Some(name) = body.unsupported() {
        return Err(unsupported(name));
    }

    let assistant_id = match body.assistant_id.as_deref().map(str::trim) {
        None => "lead_agent".to_owned(),
        Some(s) if !s.is_empty() => s.to_owned(),
        Some(_) => return Err(ApiError::unprocessable(invalid_field("assistant_id"))),
    };
    let stream_modes = body.stream_mode.as_ref().map(stream_modes_of).transpose()?;
    let on_disconnect = body.on_disconnect.unwrap_or_default();
    let strategy = body.multitask_strategy.unwrap_or_default();
    let if_not_exists_create = body.if_not_exists == Some(IfNotExists::Create);

    // Fork point: `checkpoint` object or `checkpoint_id` string.
    let mut checkpoint_id = match body.checkpoint_id {
        Some(s) if s.is_empty() => {
            return Err(ApiError::unprocessable(invalid_field("checkpoint_id")))
        }
        other => other,
    };
    if let Some(cp) = &body.checkpoint {
        if let (Some(t), Some(path)) = (&cp.thread_id, path_thread) {
            if t != path {
                return Err(ApiError::bad_request(format!(
                    "Checkpoint thread_id '{t}' does not match thread '{path}'"
                )));
            }
        }
        match cp.checkpoint_id.as_deref() {
            Some("") => {
                return Err(ApiError::unprocessable(invalid_field(
                    "checkpoint.checkpoint_id",
                )))
            }
            Some(s) => checkpoint_id = Some(s.to_owned()),
            None => {}
        }
    }

    // Input.
    let raw_input = body.input.unwrap_or(Value::Null);
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
        _ => return Err(ApiError::unprocessable(invalid_field("input"))),
    };

    let mut resume_only = false;
    if let Some(cmd) = &body.command {
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

    let config = body.config.unwrap_or_default();
    let body_context = body.context.unwrap_or_default();
    let metadata = body.metadata.unwrap_or_default();
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
    fn a_field_of_the_wrong_type_is_422_naming_it() {
        let detail = |v: Value| parse(v).err().map(|e| (e.status.as_u16(), e.detail));
        let cases = [
            (json!(["x"]), "The request body must be a JSON object"),
            (
                json!({"assistant_id": 7}),
                "'assistant_id' must be a non-empty string",
            ),
            (
                json!({"assistant_id": "  "}),
                "'assistant_id' must be a non-empty string",
            ),
            (
                json!({"stream_mode": [1]}),
                "'stream_mode' must be a string or a list of strings",
            ),
            (
                json!({"on_disconnect": "later"}),
                "'on_disconnect' must be 'cancel' or 'continue'",
            ),
            (
                json!({"if_not_exists": true}),
                "'if_not_exists' must be 'create' or 'reject'",
            ),
            (
                json!({"on_completion": "drop"}),
                "'on_completion' must be 'keep' or 'delete'",
            ),
            (
                json!({"checkpoint_id": ""}),
                "'checkpoint_id' must be a string",
            ),
            (
                json!({"checkpoint": "cp"}),
                "'checkpoint' must be an object",
            ),
            (
                json!({"checkpoint": {"checkpoint_id": 3}}),
                "'checkpoint.checkpoint_id' must be a string",
            ),
            (
                json!({"interrupt_before": "*"}),
                "Run option 'interrupt_before' is not supported",
            ),
            (
                json!({"stream_resumable": "yes"}),
                "'stream_resumable' must be a boolean",
            ),
            (json!({"input": "hi"}), "'input' must be an object or null"),
            (json!({"config": []}), "'config' must be an object"),
            (
                json!({"zeta": 1, "alpha": 2}),
                "Unknown field(s) in run request: alpha, zeta",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(detail(body.clone()), Some((422, json!(want))), "{body}");
        }
        // `null` is absent, for every field.
        assert!(parse(json!({"on_disconnect": null, "checkpoint": null, "input": null})).is_ok());
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
