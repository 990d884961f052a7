//! The `/api/chat` request body, written straight from the borrowed history.
//!
//! Ollama's messages are flat: `content` is one string (text blocks joined), images ride beside
//! it as bare base64 in `images`, an assistant's calls are `tool_calls` with object `arguments`,
//! and a tool result names its function in `tool_name` (resolved from the call it answers).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use antler_protocol::{AiMessage, Content, Message, Object, ToolSpec};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::OllamaOptions;
use crate::providers::mapping::{
    answered_invalid_calls, block_type, call_names, image_data, image_url, serialize_tools,
    ToolSchema,
};
use crate::ChatRequest;

/// The request body of one call.
pub(crate) fn body<'a>(
    options: &'a OllamaOptions,
    model: &'a str,
    req: ChatRequest<'a>,
    stream: bool,
) -> WireBody<'a> {
    let mut call = options.clone();
    for (k, v) in req.settings {
        match k.as_str() {
            // Foreign request fields the Ollama body has no place for.
            "extra_body"
            | "reasoning_effort"
            | "stream_options"
            | "tool_choice"
            | "parallel_tool_calls" => {}
            _ => {
                if !call.set(k, v) {
                    tracing::debug!(key = %k, "ignoring a call setting Ollama has no field for");
                }
            }
        }
    }
    let names = call_names(req.messages);
    WireBody {
        model,
        system: req.system.filter(|s| !s.is_empty()),
        messages: req.messages,
        names,
        answered: answered_invalid_calls(req.messages),
        tools: req.tools,
        stream,
        options: call,
    }
}

/// The body of one `POST /api/chat`, borrowed from the request (only the settings are owned).
pub struct WireBody<'a> {
    model: &'a str,
    system: Option<&'a str>,
    messages: &'a [Arc<Message>],
    /// Tool-call id → function name.
    names: HashMap<&'a str, &'a str>,
    answered: Option<std::collections::HashSet<&'a str>>,
    tools: &'a [Arc<ToolSpec>],
    stream: bool,
    options: OllamaOptions,
}

impl Serialize for WireBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("messages", &Messages(self))?;
        serialize_tools(&mut m, self.tools, |t| WireTool(t))?;
        // Always said: Ollama streams when `stream` is absent.
        m.serialize_entry("stream", &self.stream)?;
        if let Some(think) = &self.options.think {
            m.serialize_entry("think", think)?;
        }
        if !self.options.options.is_empty() {
            m.serialize_entry("options", &self.options.options)?;
        }
        for (k, v) in &self.options.extra {
            if !matches!(
                k.as_str(),
                "model" | "messages" | "tools" | "stream" | "think" | "options"
            ) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

struct WireTool<'a>(&'a ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry(
            "function",
            &WireFunction {
                name: &self.0.name,
                description: &self.0.description,
                parameters: ToolSchema(self.0),
            },
        )?;
        m.end()
    }
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: ToolSchema<'a>,
}

#[derive(Serialize)]
struct SystemPrompt<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct WireCall<'a> {
    function: WireCallFunction<'a>,
}

#[derive(Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: &'a Object,
}

#[derive(Serialize)]
struct WireToolResult<'a> {
    role: &'static str,
    content: Cow<'a, str>,
    tool_name: &'a str,
    tool_call_id: &'a str,
}

struct Messages<'b, 'a>(&'b WireBody<'a>);

impl Serialize for Messages<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let body = self.0;
        let mut seq = s.serialize_seq(None)?;
        if let Some(system) = body.system {
            seq.serialize_element(&SystemPrompt {
                role: "system",
                content: system,
            })?;
        }
        for msg in body.messages {
            match &**msg {
                Message::Human(h) => seq.serialize_element(&Plain("user", &h.content))?,
                Message::System(sys) => seq.serialize_element(&Plain("system", &sys.content))?,
                Message::Ai(ai) => seq.serialize_element(&Assistant {
                    ai,
                    answered: body.answered.as_ref(),
                })?,
                Message::Tool(t) => {
                    let name = body
                        .names
                        .get(t.tool_call_id.as_str())
                        .copied()
                        .or(t.name.as_deref())
                        .unwrap_or("tool");
                    seq.serialize_element(&WireToolResult {
                        role: "tool",
                        content: text_of(&t.content),
                        tool_name: name,
                        tool_call_id: &t.tool_call_id,
                    })?;
                }
                Message::Remove(_) => {}
            }
        }
        seq.end()
    }
}

/// The text of content: a string as is, text blocks joined with `\n`.
fn text_of(content: &Content) -> Cow<'_, str> {
    match content {
        Content::Text(t) => Cow::Borrowed(t),
        blocks @ Content::Blocks(_) => Cow::Owned(blocks.text()),
    }
}

/// Bare base64 of every image block (data URLs stripped; URLs Ollama cannot fetch dropped).
fn images(content: &Content) -> Vec<&str> {
    let Content::Blocks(blocks) = content else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for block in blocks {
        let Some(obj) = block.as_object() else {
            continue;
        };
        let data = match block_type(obj) {
            "image_url" => image_url(obj),
            "image" => image_data(obj).or_else(|| obj.get("url").and_then(Value::as_str)),
            _ => None,
        };
        match data {
            Some(d) if d.starts_with("data:") => {
                if let Some((_, b64)) = d.split_once(',') {
                    out.push(b64);
                }
            }
            Some(d) if d.starts_with("http://") || d.starts_with("https://") => {
                tracing::debug!("dropping an image URL: Ollama takes only inline images");
            }
            Some(d) => out.push(d),
            None => {}
        }
    }
    out
}

/// A user or system message.
struct Plain<'a>(&'static str, &'a Content);

impl Serialize for Plain<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", self.0)?;
        m.serialize_entry("content", &text_of(self.1))?;
        let images = images(self.1);
        if !images.is_empty() {
            m.serialize_entry("images", &images)?;
        }
        m.end()
    }
}

struct Assistant<'a> {
    ai: &'a AiMessage,
    answered: Option<&'a std::collections::HashSet<&'a str>>,
}

impl Serialize for Assistant<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ai = self.ai;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", "assistant")?;
        m.serialize_entry("content", &text_of(&ai.content))?;
        let invalid: Vec<&str> = match self.answered {
            Some(answered) => ai
                .invalid_tool_calls
                .iter()
                .filter(|c| c.id.as_deref().is_some_and(|id| answered.contains(id)))
                .map(|c| c.name.as_deref().unwrap_or("unknown"))
                .collect(),
            None => Vec::new(),
        };
        if !ai.tool_calls.is_empty() || !invalid.is_empty() {
            let empty = Object::new();
            let calls: Vec<WireCall<'_>> = ai
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), &c.args))
                .chain(invalid.iter().map(|name| (*name, &empty)))
                .map(|(name, arguments)| WireCall {
                    function: WireCallFunction { name, arguments },
                })
                .collect();
            m.serialize_entry("tool_calls", &calls)?;
        }
        m.end()
    }
}
