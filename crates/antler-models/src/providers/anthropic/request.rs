//! The Messages request body, written straight from the borrowed history.
//!
//! LangChain's history does not map one-to-one onto Anthropic's alternating `user`/`assistant`
//! turns, so the history is first grouped into [`Turn`]s of borrowed [`Block`]s (pointers only; no
//! message is cloned), then serialized:
//! - system messages anywhere in the history join the system prompt in the top-level `system`;
//! - tool results become `tool_result` blocks (`is_error` for `status: error`) of a user turn;
//!   consecutive tool and human messages share one user turn, tool results first (the API
//!   rejects a result after other content);
//! - an assistant message replays its thinking blocks (signature kept), its text, and one
//!   `tool_use` per entry of `tool_calls` — a `tool_use` left in `content` for a call a
//!   middleware removed is dropped, since the API demands a result for every `tool_use`;
//! - blank text, reasoning blocks of other providers and unsigned thinking are dropped (the API
//!   rejects them); `image_url` data URLs become base64 `image` blocks.

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::{AiMessage, Content, Message, Object, ToolSpec, ToolStatus};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{AnthropicOptions, DEFAULT_MAX_TOKENS};
use crate::providers::mapping::{
    self, answered_invalid_calls, base64_data_url, block_type, call_fields, end_body, image_data,
    image_url, insert_some, non_blank, push_turn, serialize_tools, ToolSchema, TurnRole,
};
use crate::{ChatRequest, ModelError};

/// Body keys owned by the adapter; configured extras and per-call settings cannot replace them.
const RESERVED_KEYS: [&str; 5] = ["model", "messages", "system", "tools", "stream"];

/// Settings other providers understand that the Messages API rejects as unknown fields.
const FOREIGN_KEYS: [&str; 2] = ["reasoning_effort", "stream_options"];

/// Smallest thinking budget the API accepts.
pub(crate) const MIN_THINKING_BUDGET: u64 = 1024;

const TEXT_KEYS: &[&str] = &["type", "text", "cache_control", "citations"];
const THINKING_KEYS: &[&str] = &["type", "thinking", "signature"];
const REDACTED_THINKING_KEYS: &[&str] = &["type", "data"];
const IMAGE_KEYS: &[&str] = &["type", "source", "cache_control"];

/// The request body of one call.
pub(crate) fn body<'a>(
    options: &'a AnthropicOptions,
    model: &'a str,
    req: ChatRequest<'a>,
    stream: bool,
) -> Result<WireBody<'a>, ModelError> {
    let params = params(options, model, &req)?;
    Ok(WireBody {
        model,
        max_tokens: params.max_tokens,
        system: system_prompt(&req),
        turns: turns(req.messages),
        tools: req.tools,
        tool_choice: params.tool_choice,
        thinking: params.thinking,
        stream,
        rest: params.rest,
    })
}

/// Whether `thinking` turns thinking on, checking an `enabled` budget against `max_tokens`
/// (the API wants `1024 <= budget_tokens < max_tokens`).
pub(crate) fn check_thinking(thinking: &Value, max_tokens: u64) -> Result<bool, ModelError> {
    let Some(obj) = thinking.as_object() else {
        return Err(ModelError::InvalidRequest(format!(
            "thinking must be a mapping like {{type: enabled, budget_tokens: 2048}}, got {thinking}"
        )));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(false),
        Some("enabled") => {
            let Some(budget) = obj.get("budget_tokens").and_then(Value::as_u64) else {
                return Err(ModelError::InvalidRequest(
                    "thinking {type: enabled} needs an integer budget_tokens".into(),
                ));
            };
            if budget < MIN_THINKING_BUDGET {
                return Err(ModelError::InvalidRequest(format!(
                    "thinking budget_tokens must be at least {MIN_THINKING_BUDGET}, got {budget}"
                )));
            }
            if budget >= max_tokens {
                return Err(ModelError::InvalidRequest(format!(
                    "thinking budget_tokens ({budget}) must be less than max_tokens ({max_tokens})"
                )));
            }
            Ok(true)
        }
        // Newer modes (e.g. `adaptive`) are the API's to validate.
        Some(_) => Ok(true),
        None => Err(ModelError::InvalidRequest(format!(
            "thinking needs a type (enabled or disabled), got {thinking}"
        ))),
    }
}

/// The request's settings resolved against the Messages API's rules.
struct Params {
    max_tokens: u64,
    thinking: Option<Value>,
    tool_choice: Option<Value>,
    /// Every other body field (`temperature`, `top_p`, `stop_sequences`, `metadata`, …).
    rest: Object,
}

/// Configured fields, `extra`, then the call's `settings`, key by key (later wins; `null`
/// settings are ignored; a `settings.extra_body` object is merged like its keys).
fn params(
    options: &AnthropicOptions,
    model: &str,
    req: &ChatRequest<'_>,
) -> Result<Params, ModelError> {
    let mut configured = Object::new();
    insert_some(&mut configured, "temperature", options.temperature);
    insert_some(&mut configured, "max_tokens", options.max_tokens);
    let thinking = options.thinking.as_ref().filter(|t| !t.is_null());
    insert_some(&mut configured, "thinking", thinking.cloned());
    let mut p = call_fields(
        configured,
        &options.extra,
        req.settings,
        RESERVED_KEYS.into_iter().chain(FOREIGN_KEYS),
        "dropping a body field the Anthropic adapter owns or the API rejects",
    );

    let max_tokens = match p.remove("max_tokens") {
        None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
        Some(v) => positive_int(&v).ok_or_else(|| {
            ModelError::InvalidRequest(format!("max_tokens must be a positive integer, got {v}"))
        })?,
    };
    let thinking = p.remove("thinking").filter(|t| !t.is_null());
    let thinking_on = match &thinking {
        Some(t) => check_thinking(t, max_tokens)?,
        None => false,
    };
    if thinking_on
        && p.get("temperature")
            .is_some_and(|t| t.as_f64() != Some(1.0))
    {
        // The API accepts only temperature 1 with thinking; the configured one cannot apply.
        tracing::debug!("thinking is on: not sending temperature");
        p.remove("temperature");
    }

    let parallel = p.remove("parallel_tool_calls").and_then(|v| v.as_bool());
    let choice_setting = p.remove("tool_choice");
    let mut tool_choice = None;
    if !req.tools.is_empty() {
        tool_choice = req
            .tool_choice
            .or(choice_setting.as_ref())
            .filter(|c| !c.is_null())
            .map(map_tool_choice);
        let forced = tool_choice
            .as_ref()
            .and_then(|c| c.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "any" || t == "tool");
        if thinking_on && forced {
            tracing::warn!(
                model,
                "a forced tool_choice is not allowed with extended thinking; letting the model choose"
            );
            tool_choice = None;
        }
        if parallel == Some(false) {
            let choice = tool_choice.get_or_insert_with(|| serde_json::json!({"type": "auto"}));
            if let Some(obj) = choice.as_object_mut() {
                if obj.get("type").and_then(Value::as_str) != Some("none") {
                    obj.insert("disable_parallel_tool_use".into(), Value::Bool(true));
                }
            }
        }
    }
    Ok(Params {
        max_tokens,
        thinking,
        tool_choice,
        rest: p,
    })
}

fn positive_int(v: &Value) -> Option<u64> {
    match v.as_u64() {
        Some(n) => (n > 0).then_some(n),
        None => v
            .as_f64()
            .filter(|f| *f >= 1.0 && f.fract() == 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64),
    }
}

/// Provider-neutral tool choice → Anthropic's `{type: auto|any|tool|none}`: `required`/`any`
/// mean `any`, `{"name": n}`, OpenAI's `{"type": "function", …}` or any other string name a tool.
fn map_tool_choice(choice: &Value) -> Value {
    use serde_json::json;
    let tool = |name: &str| json!({"type": "tool", "name": name});
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "any" | "required" => json!({"type": "any"}),
            name => tool(name),
        },
        Value::Bool(true) => json!({"type": "any"}),
        Value::Bool(false) => json!({"type": "none"}),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => match choice.pointer("/function/name").and_then(Value::as_str) {
                Some(name) => tool(name),
                None => json!({"type": "any"}),
            },
            Some(_) => choice.clone(),
            None => match o.get("name").and_then(Value::as_str) {
                Some(name) => tool(name),
                None => choice.clone(),
            },
        },
        other => other.clone(),
    }
}

/// The static prompt and the text of every system message in the history, blank-line separated.
fn system_prompt(req: &ChatRequest<'_>) -> Option<String> {
    let mut out = String::new();
    let mut add = |text: &str| {
        if text.trim().is_empty() {
            return;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(text);
    };
    if let Some(s) = req.system {
        add(s);
    }
    for msg in req.messages {
        if let Message::System(sys) = &**msg {
            match &sys.content {
                Content::Text(t) => add(t),
                blocks @ Content::Blocks(_) => add(&blocks.text()),
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The body of one `POST /v1/messages`, borrowed from the request (only the system prompt,
/// joined from several messages, is owned).
pub struct WireBody<'a> {
    model: &'a str,
    max_tokens: u64,
    system: Option<String>,
    turns: Vec<Turn<'a>>,
    tools: &'a [Arc<ToolSpec>],
    tool_choice: Option<Value>,
    thinking: Option<Value>,
    stream: bool,
    rest: Object,
}

impl Serialize for WireBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("max_tokens", &self.max_tokens)?;
        if let Some(system) = &self.system {
            m.serialize_entry("system", system)?;
        }
        if let Some(thinking) = &self.thinking {
            m.serialize_entry("thinking", thinking)?;
        }
        m.serialize_entry("messages", &self.turns)?;
        serialize_tools(&mut m, self.tools, |t| WireTool(t))?;
        end_body(m, self.tool_choice.as_ref(), self.stream, &self.rest)
    }
}

struct WireTool<'a>(&'a ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tool = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &tool.name)?;
        if !tool.description.is_empty() {
            m.serialize_entry("description", &tool.description)?;
        }
        m.serialize_entry("input_schema", &ToolSchema(tool))?;
        m.end()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

impl TurnRole for Role {
    const ITEMS: &'static str = "content";
}

/// One content block of the outgoing request, borrowed from the history.
enum Block<'a> {
    Text(&'a str),
    /// A stored block sent with only the keys the API accepts for its type.
    Pick(&'a Object, &'static [&'static str]),
    /// A block of a type this adapter does not interpret, sent as stored (minus a streaming
    /// `index`).
    Verbatim(&'a Object),
    Image(ImageSource<'a>),
    ToolUse {
        id: &'a str,
        name: &'a str,
        /// `None` for a replayed invalid call (its raw arguments are not an object).
        input: Option<&'a Object>,
    },
    ToolResult {
        id: &'a str,
        content: &'a Content,
        is_error: bool,
    },
}

enum ImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url(&'a str),
}

type Turn<'a> = mapping::Turn<Role, Block<'a>>;

/// Group the history into alternating turns (system and remove messages skipped, messages that
/// contribute no block skipped, same-role neighbours merged).
fn turns(messages: &[Arc<Message>]) -> Vec<Turn<'_>> {
    let answered = answered_invalid_calls(messages);
    let mut out: Vec<Turn<'_>> = Vec::new();
    for msg in messages {
        let mut blocks = Vec::new();
        let role = match &**msg {
            Message::Human(h) => {
                user_blocks(&h.content, &mut blocks);
                Role::User
            }
            Message::Tool(t) => {
                blocks.push(Block::ToolResult {
                    id: &t.tool_call_id,
                    content: &t.content,
                    is_error: t.status == ToolStatus::Error,
                });
                Role::User
            }
            Message::Ai(ai) => {
                assistant_blocks(ai, answered.as_ref(), &mut blocks);
                Role::Assistant
            }
            Message::System(_) | Message::Remove(_) => continue,
        };
        push_turn(&mut out, role, blocks, |b| {
            matches!(b, Block::ToolResult { .. })
        });
    }
    out
}

/// `data:<mime>;base64,<data>` or an http(s) URL.
fn image_source(url: &str) -> Option<ImageSource<'_>> {
    if url.starts_with("data:") {
        let (media_type, data) = base64_data_url(url)?;
        return Some(ImageSource::Base64 { media_type, data });
    }
    (url.starts_with("https://") || url.starts_with("http://")).then_some(ImageSource::Url(url))
}

/// Walks `content` in order: non-blank text (the whole content, or a string item) becomes a
/// text block, a `text` block with non-blank text is kept, other object blocks go to `other`.
fn content_blocks<'a>(
    content: &'a Content,
    out: &mut Vec<Block<'a>>,
    mut other: impl FnMut(&'a Object, &mut Vec<Block<'a>>),
) {
    let blocks = match content {
        Content::Text(t) => {
            if !t.trim().is_empty() {
                out.push(Block::Text(t));
            }
            return;
        }
        Content::Blocks(blocks) => blocks,
    };
    for block in blocks {
        match block {
            Value::String(t) if !t.trim().is_empty() => out.push(Block::Text(t)),
            Value::Object(obj) => match block_type(obj) {
                "text" => {
                    out.extend(non_blank(obj.get("text")).map(|_| Block::Pick(obj, TEXT_KEYS)))
                }
                _ => other(obj, out),
            },
            _ => {}
        }
    }
}

/// Blocks of human content or of a tool result's block content.
fn user_blocks<'a>(content: &'a Content, out: &mut Vec<Block<'a>>) {
    content_blocks(content, out, |obj, out| match block_type(obj) {
        "output_text" => {
            if let Some(t) = non_blank(obj.get("text")) {
                out.push(Block::Text(t));
            }
        }
        "image_url" => {
            let url = image_url(obj);
            match url.and_then(image_source) {
                Some(source) => out.push(Block::Image(source)),
                None => tracing::debug!("dropping an image_url block without a usable url"),
            }
        }
        "image" if obj.contains_key("source") => out.push(Block::Pick(obj, IMAGE_KEYS)),
        "image" => {
            // LangChain's standard image block: base64 data + mime type, or a URL.
            let data = image_data(obj);
            let mime = obj.get("mime_type").and_then(Value::as_str);
            match (data, mime, obj.get("url").and_then(Value::as_str)) {
                (Some(data), Some(media_type), _) => {
                    out.push(Block::Image(ImageSource::Base64 { media_type, data }));
                }
                (_, _, Some(url)) => match image_source(url) {
                    Some(source) => out.push(Block::Image(source)),
                    None => out.push(Block::Verbatim(obj)),
                },
                _ => out.push(Block::Verbatim(obj)),
            }
        }
        // Model-side blocks have no place in a user turn.
        "thinking" | "redacted_thinking" | "reasoning" | "reasoning_content" | "tool_use"
        | "tool_call" | "tool_result" => {
            tracing::debug!(
                kind = block_type(obj),
                "dropping a model-side block from user content"
            );
        }
        _ => out.push(Block::Verbatim(obj)),
    });
}

/// An assistant message's blocks: content in order (a `tool_use` block only for a call still in
/// `tool_calls`, with the call's current arguments), then calls not mentioned in content, then
/// invalid calls that were answered (with `{}` input).
fn assistant_blocks<'a>(
    ai: &'a AiMessage,
    answered: Option<&HashSet<&str>>,
    out: &mut Vec<Block<'a>>,
) {
    let mut used = vec![false; ai.tool_calls.len()];
    let mut use_call = |id: &str, out: &mut Vec<Block<'a>>| {
        let found = ai
            .tool_calls
            .iter()
            .enumerate()
            .find(|(i, c)| !used[*i] && c.id.as_deref() == Some(id));
        if let Some((i, call)) = found {
            used[i] = true;
            out.push(Block::ToolUse {
                id: call.id_str(),
                name: &call.name,
                input: Some(&call.args),
            });
        }
    };
    content_blocks(&ai.content, out, |obj, out| match block_type(obj) {
        "thinking" => {
            if non_blank(obj.get("signature")).is_some() {
                out.push(Block::Pick(obj, THINKING_KEYS));
            } else {
                tracing::debug!("dropping a thinking block without a signature");
            }
        }
        "redacted_thinking" => out.push(Block::Pick(obj, REDACTED_THINKING_KEYS)),
        "tool_use" => {
            if let Some(id) = obj.get("id").and_then(Value::as_str) {
                use_call(id, out);
            }
        }
        // Other providers' reasoning and call shapes; images are not model output.
        "reasoning" | "reasoning_content" | "tool_call" | "function_call" | "image_url"
        | "tool_result" => {}
        _ => out.push(Block::Verbatim(obj)),
    });
    for (call, done) in ai.tool_calls.iter().zip(&used) {
        if !done {
            out.push(Block::ToolUse {
                id: call.id_str(),
                name: &call.name,
                input: Some(&call.args),
            });
        }
    }
    if let Some(answered) = answered {
        for call in &ai.invalid_tool_calls {
            if let Some(id) = call.id.as_deref().filter(|id| answered.contains(id)) {
                out.push(Block::ToolUse {
                    id,
                    name: call.name.as_deref().unwrap_or_default(),
                    input: None,
                });
            }
        }
    }
}

impl Serialize for Block<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Block::Text(text) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", "text")?;
                m.serialize_entry("text", text)?;
                m.end()
            }
            Block::Pick(obj, keys) => {
                let mut m = s.serialize_map(None)?;
                for (k, v) in obj.iter().filter(|(k, _)| keys.contains(&k.as_str())) {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            Block::Verbatim(obj) => {
                let mut m = s.serialize_map(None)?;
                for (k, v) in obj.iter().filter(|(k, _)| k.as_str() != "index") {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            Block::Image(source) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", "image")?;
                m.serialize_entry("source", source)?;
                m.end()
            }
            Block::ToolUse { id, name, input } => {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("type", "tool_use")?;
                m.serialize_entry("id", id)?;
                m.serialize_entry("name", name)?;
                match input {
                    Some(args) => m.serialize_entry("input", args)?,
                    None => m.serialize_entry("input", &Object::new())?,
                }
                m.end()
            }
            Block::ToolResult {
                id,
                content,
                is_error,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "tool_result")?;
                m.serialize_entry("tool_use_id", id)?;
                match content {
                    Content::Text(t) => {
                        if !t.trim().is_empty() {
                            m.serialize_entry("content", t)?;
                        }
                    }
                    Content::Blocks(_) => {
                        let mut blocks = Vec::new();
                        user_blocks(content, &mut blocks);
                        if !blocks.is_empty() {
                            m.serialize_entry("content", &blocks)?;
                        }
                    }
                }
                if *is_error {
                    m.serialize_entry("is_error", &true)?;
                }
                m.end()
            }
        }
    }
}

impl Serialize for ImageSource<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        match self {
            ImageSource::Base64 { media_type, data } => {
                m.serialize_entry("type", "base64")?;
                m.serialize_entry("media_type", media_type)?;
                m.serialize_entry("data", data)?;
            }
            ImageSource::Url(url) => {
                m.serialize_entry("type", "url")?;
                m.serialize_entry("url", url)?;
            }
        }
        m.end()
    }
}
