//! LangChain-compatible messages, serialized in LangChain's `model_dump()` shape.
//!
//! Field names (and, within each struct, field order) follow LangChain so that a message read from
//! DeerFlow, the LangGraph SDKs or the web UI round-trips unchanged. Unknown content blocks and
//! `additional_kwargs` entries are kept verbatim as JSON values.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use crate::shared::Shared;

/// JSON object used for `additional_kwargs`, `response_metadata`, tool args.
pub type Object = Map<String, Value>;

/// The id a `RemoveMessage` carries to clear the whole list (LangGraph's `REMOVE_ALL_MESSAGES`).
pub const REMOVE_ALL_MESSAGES: &str = "__remove_all__";

/// Message content: a plain string or a list of content blocks (strings or typed objects).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_owned())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

impl Content {
    /// LangChain's "text of a message": a string is itself; for blocks, the `text` of every bare
    /// string or object with a string `text`, joined with `\n`, skipping empty parts.
    pub fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Blocks(blocks) => {
                let mut out = String::new();
                for block in blocks {
                    let part = match block {
                        Value::String(s) => s.as_str(),
                        Value::Object(o) => match o.get("text") {
                            Some(Value::String(s)) => s.as_str(),
                            _ => continue,
                        },
                        _ => continue,
                    };
                    if part.is_empty() {
                        continue;
                    }
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(part);
                }
                out
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(s) => s.is_empty(),
            Content::Blocks(b) => b.is_empty(),
        }
    }

    /// Byte length of the content as sent to a model (text length, or JSON length of blocks).
    pub fn approx_len(&self) -> usize {
        match self {
            Content::Text(s) => s.len(),
            Content::Blocks(b) => b
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.len(),
                    other => other.to_string().len(),
                })
                .sum(),
        }
    }
}

fn tool_call_type() -> String {
    "tool_call".to_owned()
}
fn invalid_tool_call_type() -> String {
    "invalid_tool_call".to_owned()
}
fn tool_call_chunk_type() -> String {
    "tool_call_chunk".to_owned()
}

/// A parsed, executable tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    #[serde(default)]
    pub args: Object,
    pub id: Option<String>,
    #[serde(rename = "type", default = "tool_call_type")]
    pub kind: String,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Object) -> Self {
        ToolCall {
            name: name.into(),
            args,
            id: Some(id.into()),
            kind: tool_call_type(),
        }
    }

    /// The call id, or `""` when the provider sent none.
    pub fn id_str(&self) -> &str {
        self.id.as_deref().unwrap_or("")
    }
}

/// A tool call whose arguments failed to parse; never executed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvalidToolCall {
    #[serde(rename = "type", default = "invalid_tool_call_type")]
    pub kind: String,
    pub id: Option<String>,
    pub name: Option<String>,
    pub args: Option<String>,
    pub error: Option<String>,
}

/// A streamed fragment of a tool call; fragments merge by `index`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallChunk {
    pub name: Option<String>,
    pub args: Option<String>,
    pub id: Option<String>,
    pub index: Option<i64>,
    #[serde(rename = "type", default = "tool_call_chunk_type")]
    pub kind: String,
}

/// Token usage of one model response.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageMetadata {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_token_details: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token_details: Option<Object>,
}

impl UsageMetadata {
    pub fn new(input: u64, output: u64) -> Self {
        UsageMetadata {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Default::default()
        }
    }

    /// Field-wise sum (details are merged key by key where both are numbers).
    pub fn add(&self, other: &UsageMetadata) -> UsageMetadata {
        fn merge(a: &Option<Object>, b: &Option<Object>) -> Option<Object> {
            match (a, b) {
                (None, None) => None,
                (Some(x), None) | (None, Some(x)) => Some(x.clone()),
                (Some(x), Some(y)) => {
                    let mut out = x.clone();
                    for (k, v) in y {
                        let sum = match (out.get(k).and_then(Value::as_u64), v.as_u64()) {
                            (Some(p), Some(q)) => Value::from(p + q),
                            _ => v.clone(),
                        };
                        out.insert(k.clone(), sum);
                    }
                    Some(out)
                }
            }
        }
        UsageMetadata {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            total_tokens: self.total_tokens + other.total_tokens,
            input_token_details: merge(&self.input_token_details, &other.input_token_details),
            output_token_details: merge(&self.output_token_details, &other.output_token_details),
        }
    }
}

/// Tool result status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    #[default]
    Success,
    Error,
}

/// A message type: LangChain's base fields — `content`, `additional_kwargs`,
/// `response_metadata`, `name`, `id`, each defaulted when absent — then its own fields.
macro_rules! message {
    ($(#[$meta:meta])* pub struct $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            #[serde(default)]
            pub content: Content,
            #[serde(default)]
            pub additional_kwargs: Shared<Object>,
            #[serde(default)]
            pub response_metadata: Shared<Object>,
            pub name: Option<String>,
            pub id: Option<String>,
            $($own)*
        }
    };
}

message! {
    /// A user message.
    pub struct HumanMessage {}
}

message! {
    /// A system message.
    pub struct SystemMessage {}
}

message! {
    /// A model response.
    pub struct AiMessage {
        #[serde(default)]
        pub tool_calls: Shared<Vec<ToolCall>>,
        #[serde(default)]
        pub invalid_tool_calls: Shared<Vec<InvalidToolCall>>,
        pub usage_metadata: Option<UsageMetadata>,
    }
}

message! {
    /// The result of one tool call.
    pub struct ToolMessage {
        #[serde(deserialize_with = "de_stringish")]
        pub tool_call_id: String,
        /// Side payload not sent to the model (DeerFlow: `artifact.human_input`).
        #[serde(default)]
        pub artifact: Value,
        #[serde(default)]
        pub status: ToolStatus,
    }
}

message! {
    /// A reducer instruction: remove the message with this id (or all, with [`REMOVE_ALL_MESSAGES`]).
    pub struct RemoveMessage {}
}

/// Tool-call ids are coerced to strings on construction (LangChain does the same).
fn de_stringish<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(match v {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// One message of the conversation. Serialized with a `type` discriminator as LangChain does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Message {
    #[serde(rename = "human", alias = "HumanMessageChunk")]
    Human(HumanMessage),
    #[serde(rename = "ai", alias = "AIMessageChunk")]
    Ai(AiMessage),
    #[serde(rename = "system", alias = "SystemMessageChunk")]
    System(SystemMessage),
    #[serde(rename = "tool", alias = "ToolMessageChunk")]
    Tool(ToolMessage),
    #[serde(rename = "remove")]
    Remove(RemoveMessage),
}

macro_rules! common_accessors {
    ($($field:ident : $ty:ty),*) => {
        $(
            pub fn $field(&self) -> &$ty {
                match self {
                    Message::Human(m) => &m.$field,
                    Message::Ai(m) => &m.$field,
                    Message::System(m) => &m.$field,
                    Message::Tool(m) => &m.$field,
                    Message::Remove(m) => &m.$field,
                }
            }
        )*
    };
}

macro_rules! common_accessors_mut {
    ($($name:ident => $field:ident : $ty:ty),*) => {
        $(
            pub fn $name(&mut self) -> &mut $ty {
                match self {
                    Message::Human(m) => &mut m.$field,
                    Message::Ai(m) => &mut m.$field,
                    Message::System(m) => &mut m.$field,
                    Message::Tool(m) => &mut m.$field,
                    Message::Remove(m) => &mut m.$field,
                }
            }
        )*
    };
}

impl Message {
    common_accessors!(content: Content, additional_kwargs: Object, response_metadata: Object, name: Option<String>);
    common_accessors_mut!(
        content_mut => content: Content,
        additional_kwargs_mut => additional_kwargs: Object,
        name_mut => name: Option<String>,
        id_slot => id: Option<String>
    );

    pub fn id(&self) -> Option<&str> {
        match self {
            Message::Human(m) => m.id.as_deref(),
            Message::Ai(m) => m.id.as_deref(),
            Message::System(m) => m.id.as_deref(),
            Message::Tool(m) => m.id.as_deref(),
            Message::Remove(m) => m.id.as_deref(),
        }
    }

    pub fn set_id(&mut self, id: impl Into<String>) {
        *self.id_slot() = Some(id.into());
    }

    /// The LangChain type name (`human`, `ai`, `system`, `tool`, `remove`).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Human(_) => "human",
            Message::Ai(_) => "ai",
            Message::System(_) => "system",
            Message::Tool(_) => "tool",
            Message::Remove(_) => "remove",
        }
    }

    pub fn text(&self) -> String {
        self.content().text()
    }

    pub fn human(content: impl Into<Content>) -> Self {
        Message::Human(HumanMessage {
            content: content.into(),
            ..Default::default()
        })
    }

    pub fn system(content: impl Into<Content>) -> Self {
        Message::System(SystemMessage {
            content: content.into(),
            ..Default::default()
        })
    }

    pub fn ai(content: impl Into<Content>) -> Self {
        Message::Ai(AiMessage {
            content: content.into(),
            ..Default::default()
        })
    }

    pub fn remove(id: impl Into<String>) -> Self {
        Message::Remove(RemoveMessage {
            id: Some(id.into()),
            ..Default::default()
        })
    }

    pub fn remove_all() -> Self {
        Message::remove(REMOVE_ALL_MESSAGES)
    }

    pub fn as_ai(&self) -> Option<&AiMessage> {
        match self {
            Message::Ai(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_tool(&self) -> Option<&ToolMessage> {
        match self {
            Message::Tool(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_human(&self) -> Option<&HumanMessage> {
        match self {
            Message::Human(m) => Some(m),
            _ => None,
        }
    }

    /// `additional_kwargs.hide_from_ui == true`.
    pub fn is_hidden(&self) -> bool {
        crate::markers::is_hidden(self)
    }

    /// DeerFlow's "real user message": human, not the summary, not hidden.
    pub fn is_real_user_message(&self) -> bool {
        matches!(self, Message::Human(_)) && !crate::markers::is_summary(self) && !self.is_hidden()
    }

    /// Serialize to JSON (infallible for these types: all keys are strings).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A borrowed message that serializes exactly as [`Message`] does (the `type` discriminator
/// included), for writers that must not clone the message first.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(tag = "type")]
pub enum MessageRef<'a> {
    #[serde(rename = "human")]
    Human(&'a HumanMessage),
    #[serde(rename = "ai")]
    Ai(&'a AiMessage),
    #[serde(rename = "system")]
    System(&'a SystemMessage),
    #[serde(rename = "tool")]
    Tool(&'a ToolMessage),
    #[serde(rename = "remove")]
    Remove(&'a RemoveMessage),
}

impl<'a> From<&'a Message> for MessageRef<'a> {
    fn from(m: &'a Message) -> Self {
        match m {
            Message::Human(m) => MessageRef::Human(m),
            Message::Ai(m) => MessageRef::Ai(m),
            Message::System(m) => MessageRef::System(m),
            Message::Tool(m) => MessageRef::Tool(m),
            Message::Remove(m) => MessageRef::Remove(m),
        }
    }
}

/// `From<XMessage> for Message`, one per variant.
macro_rules! message_from {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for Message {
            fn from(m: $ty) -> Self {
                Message::$variant(m)
            }
        }
    )*};
}
message_from!(
    Human(HumanMessage),
    Ai(AiMessage),
    Tool(ToolMessage),
    System(SystemMessage),
);

impl ToolMessage {
    pub fn new(tool_call_id: impl Into<String>, content: impl Into<Content>) -> Self {
        ToolMessage {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            ..Default::default()
        }
    }

    pub fn error(tool_call_id: impl Into<String>, content: impl Into<Content>) -> Self {
        ToolMessage {
            status: ToolStatus::Error,
            ..ToolMessage::new(tool_call_id, content)
        }
    }

    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

impl AiMessage {
    /// `response_metadata.finish_reason`, if a string.
    pub fn finish_reason(&self) -> Option<&str> {
        self.response_metadata
            .get("finish_reason")
            .and_then(Value::as_str)
    }

    /// Rewrite the tool calls keeping every provider mirror consistent (spec 10 §1.5):
    /// raw `additional_kwargs.tool_calls` filtered to the kept ids (key removed when none remain),
    /// `function_call` removed and `finish_reason: tool_calls` → `stop` when the list is empty.
    pub fn set_tool_calls(&mut self, calls: Vec<ToolCall>) {
        let kept: Vec<String> = calls
            .iter()
            .filter_map(|c| c.id.clone())
            .filter(|id| !id.is_empty())
            .collect();
        if let Some(Value::Array(raw)) = self.additional_kwargs.get_mut("tool_calls") {
            raw.retain(|entry| {
                entry
                    .get("id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| kept.iter().any(|k| k == id))
            });
            if raw.is_empty() {
                self.additional_kwargs.remove("tool_calls");
            }
        }
        if calls.is_empty() {
            self.additional_kwargs.remove("function_call");
            if self.finish_reason() == Some("tool_calls") {
                self.response_metadata
                    .insert("finish_reason".into(), Value::from("stop"));
            }
        }
        self.tool_calls = calls.into();
    }

    /// Parse raw OpenAI-style `additional_kwargs.tool_calls` into `tool_calls` /
    /// `invalid_tool_calls` when no structured calls are present (spec 10 §1.4 rule 2).
    pub fn backfill_tool_calls_from_raw(&mut self) {
        if !self.tool_calls.is_empty() || !self.invalid_tool_calls.is_empty() {
            return;
        }
        let Some(Value::Array(raw)) = self.additional_kwargs.get("tool_calls") else {
            return;
        };
        for entry in raw {
            let id = entry.get("id").and_then(Value::as_str).map(str::to_owned);
            let func = entry.get("function");
            let name = func
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let args_raw = func.and_then(|f| f.get("arguments"));
            let parsed = match args_raw {
                Some(Value::String(s)) if s.trim().is_empty() => Ok(Object::new()),
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(Value::Object(o)) => Ok(o),
                    Ok(_) => Err((
                        Some(s.clone()),
                        "arguments are not a JSON object".to_owned(),
                    )),
                    Err(e) => Err((Some(s.clone()), e.to_string())),
                },
                Some(Value::Object(o)) => Ok(o.clone()),
                None | Some(Value::Null) => Ok(Object::new()),
                Some(other) => Err((
                    Some(other.to_string()),
                    "arguments are not a JSON object".to_owned(),
                )),
            };
            match (parsed, name) {
                (Ok(args), Some(name)) => self.tool_calls.push(ToolCall {
                    name,
                    args,
                    id,
                    kind: tool_call_type(),
                }),
                (Ok(args), None) => self.invalid_tool_calls.push(InvalidToolCall {
                    kind: invalid_tool_call_type(),
                    id,
                    name: None,
                    args: Some(Value::Object(args).to_string()),
                    error: Some("missing function name".into()),
                }),
                (Err((args, error)), name) => self.invalid_tool_calls.push(InvalidToolCall {
                    kind: invalid_tool_call_type(),
                    id,
                    name,
                    args,
                    error: Some(error),
                }),
            }
        }
    }
}

/// A streamed AI delta (`AIMessageChunk`). Never persisted; the runtime folds chunks into an
/// [`AiMessage`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AiMessageChunk {
    pub content: Content,
    pub additional_kwargs: Object,
    pub response_metadata: Object,
    pub name: Option<String>,
    pub id: Option<String>,
    pub tool_call_chunks: Vec<ToolCallChunk>,
    pub usage_metadata: Option<UsageMetadata>,
    /// `Some("last")` on the final chunk.
    pub chunk_position: Option<String>,
}

impl Serialize for AiMessageChunk {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(12))?;
        m.serialize_entry("content", &self.content)?;
        m.serialize_entry("additional_kwargs", &self.additional_kwargs)?;
        m.serialize_entry("response_metadata", &self.response_metadata)?;
        m.serialize_entry("type", "AIMessageChunk")?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("id", &self.id)?;
        // Best-effort partial parse of this chunk alone; `[]` is acceptable (spec 70 §4.6).
        let calls: Vec<ToolCall> = self
            .tool_call_chunks
            .iter()
            .filter_map(|c| {
                let name = c.name.clone()?;
                let args = c
                    .args
                    .as_deref()
                    .and_then(|a| serde_json::from_str::<Object>(a).ok())
                    .unwrap_or_default();
                Some(ToolCall {
                    name,
                    args,
                    id: c.id.clone(),
                    kind: tool_call_type(),
                })
            })
            .collect();
        m.serialize_entry("tool_calls", &calls)?;
        m.serialize_entry("invalid_tool_calls", &Vec::<InvalidToolCall>::new())?;
        m.serialize_entry("tool_call_chunks", &self.tool_call_chunks)?;
        m.serialize_entry("usage_metadata", &self.usage_metadata)?;
        m.serialize_entry("chunk_position", &self.chunk_position)?;
        m.end()
    }
}

/// Errors turning untrusted JSON into a [`Message`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MessageParseError {
    #[error("unknown message role or type '{0}'")]
    UnknownRole(String),
    #[error("message is not an object, a [role, content] pair or a string")]
    BadShape,
    #[error("tool message needs a tool_call_id")]
    MissingToolCallId,
    #[error("{0}")]
    Invalid(String),
}

impl Message {
    /// Lenient boundary parser (spec 10 §1.4): typed dicts, `{role, content}` dicts with role
    /// aliases, `[role, content]` pairs, bare strings, chunk types and LangChain's serialized
    /// constructor form. Raw OpenAI tool calls on AI messages are backfilled into `tool_calls`.
    pub fn from_input(value: Value) -> Result<Message, MessageParseError> {
        let mut obj = match value {
            Value::String(s) => return Ok(Message::human(s)),
            Value::Array(pair) if pair.len() == 2 => {
                let role = pair[0]
                    .as_str()
                    .ok_or(MessageParseError::BadShape)?
                    .to_owned();
                let mut o = Object::new();
                o.insert("role".into(), Value::String(role));
                o.insert("content".into(), pair[1].clone());
                o
            }
            Value::Object(o) => o,
            _ => return Err(MessageParseError::BadShape),
        };
        // LangChain serialized constructor: {"lc":1,"type":"constructor","id":[..,"HumanMessage"],"kwargs":{..}}
        if obj.get("lc").is_some() && obj.get("type").and_then(Value::as_str) == Some("constructor")
        {
            let class = obj
                .get("id")
                .and_then(Value::as_array)
                .and_then(|ids| ids.last())
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let mut kwargs = match obj.remove("kwargs") {
                Some(Value::Object(k)) => k,
                _ => Object::new(),
            };
            let role = class
                .trim_end_matches("Chunk")
                .trim_end_matches("Message")
                .to_ascii_lowercase();
            kwargs.insert("type".into(), Value::String(role));
            obj = kwargs;
        }
        let role_raw = obj
            .get("type")
            .or_else(|| obj.get("role"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let kind = match role_raw.as_str() {
            "human" | "user" | "HumanMessageChunk" => "human",
            "ai" | "assistant" | "AIMessageChunk" => "ai",
            "system" | "developer" | "SystemMessageChunk" => "system",
            "tool" | "ToolMessageChunk" => "tool",
            "remove" => "remove",
            other => return Err(MessageParseError::UnknownRole(other.to_owned())),
        };
        obj.remove("role");
        obj.insert("type".into(), Value::String(kind.into()));
        if kind == "tool" {
            match obj.get("tool_call_id") {
                None | Some(Value::Null) => return Err(MessageParseError::MissingToolCallId),
                _ => {}
            }
            // Non-string, non-list content is coerced to a string.
            if let Some(c) = obj.get_mut("content") {
                if !c.is_string() && !c.is_array() {
                    *c = Value::String(c.to_string());
                }
            }
        }
        // Drop LangChain-only fields that our structs do not model.
        obj.remove("example");
        obj.remove("tool_call_chunks");
        obj.remove("chunk_position");
        let mut msg: Message = serde_json::from_value(Value::Object(obj))
            .map_err(|e| MessageParseError::Invalid(e.to_string()))?;
        if let Message::Ai(ai) = &mut msg {
            ai.backfill_tool_calls_from_raw();
        }
        Ok(msg)
    }
}

#[cfg(test)]
#[path = "messages_tests.rs"]
mod tests;
