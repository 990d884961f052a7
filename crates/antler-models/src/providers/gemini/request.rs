//! The `generateContent` request body, written straight from the borrowed history.
//!
//! The history is grouped into [`Turn`]s of borrowed [`Part`]s (pointers only; no message is
//! cloned), then serialized:
//! - system messages anywhere join the static prompt in `systemInstruction`;
//! - human content becomes `text` / `inlineData` (data-URL and base64 images) / `fileData`
//!   (image URLs) parts of a `user` turn;
//! - an assistant message becomes a `model` turn: its text, then one `functionCall` per entry of
//!   `tool_calls` carrying the `thoughtSignature` the API gave it (Gemini 3 refuses a replayed
//!   call without it); reasoning text is not replayed (the signatures carry the thinking state);
//! - a tool result becomes a `functionResponse` part of a `user` turn, named after the call it
//!   answers (`{"output": text}`, or `{"error": text}` for `status: error`); consecutive results
//!   share one turn, results first;
//! - same-role neighbours merge; blank text and empty turns are dropped (the API rejects them).

use std::sync::Arc;

use antler_protocol::{AiMessage, Content, Message, Object, ToolSpec, ToolStatus};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{GeminiOptions, THOUGHT_SIGNATURES_KEY};
use crate::providers::mapping::{
    self, answered_invalid_calls, base64_data_url, block_type, call_names, image_data, image_url,
    non_blank, push_turn, ToolSchema, TurnRole,
};
use crate::ChatRequest;

/// The request body of one call.
pub(crate) fn body<'a>(options: &'a GeminiOptions, req: ChatRequest<'a>) -> WireBody<'a> {
    let mut generation = options.generation.clone();
    let mut thinking = options.thinking.clone();
    let mut choice_setting = None;
    if !req.settings.is_empty() {
        let mut call = GeminiOptions::default();
        for (k, v) in req.settings {
            match k.as_str() {
                "tool_choice" => choice_setting = Some(v),
                // Foreign request fields the Gemini body has no place for.
                "extra_body" | "reasoning_effort" | "stream_options" | "parallel_tool_calls" => {}
                _ => {
                    if !call.set(k, v) {
                        tracing::debug!(key = %k, "ignoring a call setting the Gemini API has no field for");
                    }
                }
            }
        }
        generation.extend(call.generation);
        thinking.extend(call.thinking);
    }
    if !thinking.is_empty() {
        generation.insert("thinkingConfig".into(), Value::Object(thinking));
    }
    let tool_config = if req.tools.is_empty() {
        None
    } else {
        req.tool_choice
            .or(choice_setting)
            .filter(|c| !c.is_null())
            .map(map_tool_choice)
    };
    WireBody {
        system: system_text(&req),
        turns: turns(req.messages),
        tools: req.tools,
        tool_config,
        generation,
        safety: options.safety_settings.as_ref(),
        rest: &options.extra,
    }
}

/// Provider-neutral tool choice → `toolConfig.functionCallingConfig`: `auto` → `AUTO`, `none` →
/// `NONE`, `required`/`any` → `ANY`, a name (or `{"name": n}`, OpenAI's function shape) → `ANY`
/// restricted to that function.
fn map_tool_choice(choice: &Value) -> Value {
    use serde_json::json;
    let mode = |mode: &str| json!({"functionCallingConfig": {"mode": mode}});
    let only = |name: &str| json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}});
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => mode("AUTO"),
            "none" => mode("NONE"),
            "any" | "required" => mode("ANY"),
            name => only(name),
        },
        Value::Bool(true) => mode("ANY"),
        Value::Bool(false) => mode("NONE"),
        Value::Object(o) => match choice
            .pointer("/function/name")
            .or_else(|| o.get("name"))
            .and_then(Value::as_str)
        {
            Some(name) => only(name),
            None if o.contains_key("functionCallingConfig") => choice.clone(),
            None => mode("AUTO"),
        },
        _ => mode("AUTO"),
    }
}

/// The static prompt and the text of every system message, blank-line separated.
fn system_text(req: &ChatRequest<'_>) -> Option<String> {
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
            add(&sys.content.text());
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The body of one `generateContent` call, borrowed from the request.
pub struct WireBody<'a> {
    system: Option<String>,
    turns: Vec<Turn<'a>>,
    tools: &'a [Arc<ToolSpec>],
    tool_config: Option<Value>,
    generation: Object,
    safety: Option<&'a Value>,
    rest: &'a Object,
}

impl Serialize for WireBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("contents", &self.turns)?;
        if let Some(system) = &self.system {
            m.serialize_entry(
                "systemInstruction",
                &serde_json::json!({"parts": [{"text": system}]}),
            )?;
        }
        if !self.tools.is_empty() {
            m.serialize_entry("tools", &[Declarations(self.tools)])?;
        }
        if let Some(config) = &self.tool_config {
            m.serialize_entry("toolConfig", config)?;
        }
        if !self.generation.is_empty() {
            m.serialize_entry("generationConfig", &self.generation)?;
        }
        if let Some(safety) = self.safety {
            m.serialize_entry("safetySettings", safety)?;
        }
        for (k, v) in self.rest {
            if !matches!(
                k.as_str(),
                "contents" | "systemInstruction" | "tools" | "toolConfig" | "generationConfig"
            ) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// `{"functionDeclarations": [...]}` for every tool. The schema goes in `parametersJsonSchema`,
/// which takes JSON Schema as written (`parameters` accepts only an OpenAPI subset).
struct Declarations<'a>(&'a [Arc<ToolSpec>]);

impl<'a> Serialize for Declarations<'a> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(
            "functionDeclarations",
            &crate::providers::mapping::Each(self.0, |t: &'a Arc<ToolSpec>| Decl(t)),
        )?;
        m.end()
    }
}

struct Decl<'a>(&'a ToolSpec);

impl Serialize for Decl<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.0.name)?;
        if !self.0.description.is_empty() {
            m.serialize_entry("description", &self.0.description)?;
        }
        m.serialize_entry("parametersJsonSchema", &ToolSchema(self.0))?;
        m.end()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Model,
}

impl TurnRole for Role {
    const ITEMS: &'static str = "parts";
}

/// One part of the outgoing request, borrowed from the history.
enum Part<'a> {
    Text(&'a str),
    Inline {
        mime_type: &'a str,
        data: &'a str,
    },
    File {
        uri: &'a str,
    },
    Call {
        name: &'a str,
        /// `None` for a replayed invalid call (its raw arguments are not an object).
        args: Option<&'a Object>,
        signature: Option<&'a str>,
    },
    Response {
        name: &'a str,
        content: &'a Content,
        is_error: bool,
    },
}

type Turn<'a> = mapping::Turn<Role, Part<'a>>;

/// Group the history into turns (system and remove messages skipped, messages that contribute
/// no part skipped, same-role neighbours merged).
fn turns(messages: &[Arc<Message>]) -> Vec<Turn<'_>> {
    let answered = answered_invalid_calls(messages);
    // Tool-call id → function name, for naming the responses.
    let names = call_names(messages);
    let mut out: Vec<Turn<'_>> = Vec::new();
    for msg in messages {
        let mut parts = Vec::new();
        let role = match &**msg {
            Message::Human(h) => {
                user_parts(&h.content, &mut parts);
                Role::User
            }
            Message::Tool(t) => {
                let name = names
                    .get(t.tool_call_id.as_str())
                    .copied()
                    .or(t.name.as_deref())
                    .unwrap_or("tool");
                parts.push(Part::Response {
                    name,
                    content: &t.content,
                    is_error: t.status == ToolStatus::Error,
                });
                Role::User
            }
            Message::Ai(ai) => {
                model_parts(ai, answered.as_ref(), &mut parts);
                Role::Model
            }
            Message::System(_) | Message::Remove(_) => continue,
        };
        push_turn(&mut out, role, parts, |p| {
            matches!(p, Part::Response { .. })
        });
    }
    out
}

/// `data:<mime>;base64,<data>` → inline data; an http(s) URL → file data.
fn image_part(url: &str) -> Option<Part<'_>> {
    if url.starts_with("data:") {
        let (mime_type, data) = base64_data_url(url)?;
        return Some(Part::Inline { mime_type, data });
    }
    (url.starts_with("https://") || url.starts_with("http://") || url.starts_with("gs://"))
        .then_some(Part::File { uri: url })
}

fn user_parts<'a>(content: &'a Content, out: &mut Vec<Part<'a>>) {
    let blocks = match content {
        Content::Text(t) => {
            if !t.trim().is_empty() {
                out.push(Part::Text(t));
            }
            return;
        }
        Content::Blocks(blocks) => blocks,
    };
    for block in blocks {
        let obj = match block {
            Value::String(t) if !t.trim().is_empty() => {
                out.push(Part::Text(t));
                continue;
            }
            Value::Object(obj) => obj,
            _ => continue,
        };
        match block_type(obj) {
            "text" | "input_text" | "output_text" => {
                if let Some(t) = non_blank(obj.get("text")) {
                    out.push(Part::Text(t));
                }
            }
            "image_url" => {
                let url = image_url(obj);
                match url.and_then(image_part) {
                    Some(part) => out.push(part),
                    None => tracing::debug!("dropping an image_url block without a usable url"),
                }
            }
            "image" => {
                let data = image_data(obj);
                let mime = obj.get("mime_type").and_then(Value::as_str);
                match (data, mime, obj.get("url").and_then(Value::as_str)) {
                    (Some(data), Some(mime_type), _) => {
                        out.push(Part::Inline { mime_type, data });
                    }
                    (_, _, Some(url)) => {
                        if let Some(part) = image_part(url) {
                            out.push(part);
                        }
                    }
                    _ => tracing::debug!("dropping an image block without data or url"),
                }
            }
            other => tracing::debug!(kind = other, "dropping a block Gemini cannot take"),
        }
    }
}

/// An assistant message's parts: its text, then one `functionCall` per call (with its
/// signature), then answered invalid calls (with `{}` arguments).
fn model_parts<'a>(
    ai: &'a AiMessage,
    answered: Option<&std::collections::HashSet<&str>>,
    out: &mut Vec<Part<'a>>,
) {
    match &ai.content {
        Content::Text(t) => {
            if !t.trim().is_empty() {
                out.push(Part::Text(t));
            }
        }
        Content::Blocks(blocks) => {
            for block in blocks {
                match block {
                    Value::String(t) if !t.trim().is_empty() => out.push(Part::Text(t)),
                    Value::Object(obj) if matches!(block_type(obj), "text" | "output_text") => {
                        if let Some(t) = non_blank(obj.get("text")) {
                            out.push(Part::Text(t));
                        }
                    }
                    // Reasoning, other providers' tool-use blocks, images: not model parts.
                    _ => {}
                }
            }
        }
    }
    let signatures = ai
        .additional_kwargs
        .get(THOUGHT_SIGNATURES_KEY)
        .and_then(Value::as_object);
    let signature = |id: &str| signatures.and_then(|s| s.get(id)).and_then(Value::as_str);
    for call in &ai.tool_calls {
        out.push(Part::Call {
            name: &call.name,
            args: Some(&call.args),
            signature: signature(call.id_str()),
        });
    }
    if let Some(answered) = answered {
        for call in &ai.invalid_tool_calls {
            if let Some(id) = call.id.as_deref().filter(|id| answered.contains(id)) {
                out.push(Part::Call {
                    name: call.name.as_deref().unwrap_or("unknown"),
                    args: None,
                    signature: signature(id),
                });
            }
        }
    }
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            Part::Text(text) => m.serialize_entry("text", text)?,
            Part::Inline { mime_type, data } => m.serialize_entry(
                "inlineData",
                &serde_json::json!({"mimeType": mime_type, "data": data}),
            )?,
            Part::File { uri } => {
                m.serialize_entry("fileData", &serde_json::json!({"fileUri": uri}))?
            }
            Part::Call {
                name,
                args,
                signature,
            } => {
                struct Call<'a>(&'a str, Option<&'a Object>);
                impl Serialize for Call<'_> {
                    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                        let mut m = s.serialize_map(Some(2))?;
                        m.serialize_entry("name", self.0)?;
                        match self.1 {
                            Some(args) => m.serialize_entry("args", args)?,
                            None => m.serialize_entry("args", &Object::new())?,
                        }
                        m.end()
                    }
                }
                m.serialize_entry("functionCall", &Call(name, *args))?;
                if let Some(sig) = signature {
                    m.serialize_entry("thoughtSignature", sig)?;
                }
            }
            Part::Response {
                name,
                content,
                is_error,
            } => {
                struct Response<'a>(&'a str, &'a Content, bool);
                impl Serialize for Response<'_> {
                    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                        let mut m = s.serialize_map(Some(2))?;
                        m.serialize_entry("name", self.0)?;
                        let key = if self.2 { "error" } else { "output" };
                        let text = match self.1 {
                            Content::Text(t) => std::borrow::Cow::Borrowed(t.as_str()),
                            blocks @ Content::Blocks(_) => std::borrow::Cow::Owned(blocks.text()),
                        };
                        m.serialize_entry("response", &SingleEntry(key, &text))?;
                        m.end()
                    }
                }
                m.serialize_entry("functionResponse", &Response(name, content, *is_error))?;
            }
        }
        m.end()
    }
}

/// `{key: value}` without building a map.
struct SingleEntry<'a>(&'a str, &'a str);

impl Serialize for SingleEntry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.0, self.1)?;
        m.end()
    }
}
