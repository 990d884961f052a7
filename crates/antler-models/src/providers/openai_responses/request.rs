//! The Responses request body, written straight from the borrowed history.
//!
//! Each message becomes one or more `input` items, serialized from borrowed views:
//! - the static prompt and system messages: `{role: system, content}`;
//! - human content: `{role: user, content}` (a string, or `input_text` / `input_image` parts);
//! - an assistant message: its reasoning items (from `reasoning` content blocks) when they can be
//!   replayed and something follows them, its text as one assistant message, then one
//!   `function_call` per entry of `tool_calls` (and per answered invalid call, with its raw
//!   arguments);
//! - a tool result: `{type: function_call_output, call_id, output}`.

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::{AiMessage, Content, Message, Object, ToolSpec};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::ResponsesOptions;
use crate::providers::mapping::{
    answered_invalid_calls, call_fields, call_tool_choice, insert_some, openai_tool_choice,
    settle_tool_choice, ArcJsonCache, EncodedTexts, OpenAiBody, ToolJsonCache, ToolSchema,
};
use crate::ChatRequest;

/// Body keys owned by the adapter; configured extras and per-call settings cannot replace them.
const RESERVED_KEYS: [&str; 5] = ["model", "input", "tools", "stream", "messages"];

/// Chat Completions fields with no place (or another name) in a Responses body.
const FOREIGN_KEYS: [&str; 2] = ["stream_options", "max_completion_tokens"];

/// This wire format's encoded tools (see [`ToolJsonCache`]).
static TOOL_JSON: ToolJsonCache = ToolJsonCache::new();
/// Its encoded system prompts (see [`EncodedTexts`]).
static SYSTEM_JSON: EncodedTexts = EncodedTexts::new();

/// The request body of one call.
pub(crate) fn body<'a>(
    options: &'a ResponsesOptions,
    model: &'a str,
    req: ChatRequest<'a>,
    stream: bool,
) -> WireBody<'a> {
    let params = params(options, &req);
    // Without storage, an item id refers to nothing: only encrypted reasoning can be replayed.
    let stored = params.get("store").and_then(Value::as_bool) != Some(false);
    OpenAiBody {
        model,
        history_key: "input",
        history: Input {
            system: req.system.filter(|s| !s.is_empty()),
            messages: req.messages,
            stored,
            cache: req.encodings.map(|e| &e.responses),
            answered: answered_invalid_calls(req.messages),
        },
        tools: req.tools,
        tool: WireTool,
        tool_cache: &TOOL_JSON,
        tool_choice: call_tool_choice(&req, map_tool_choice),
        stream,
        params,
    }
}

/// Configured fields, `extra`, then the call's `settings` (later wins; a `settings.extra_body`
/// object is merged like its keys), in the Responses API's names.
fn params(options: &ResponsesOptions, req: &ChatRequest<'_>) -> Object {
    let mut p = Object::new();
    insert_some(&mut p, "temperature", options.temperature);
    insert_some(&mut p, "max_output_tokens", options.max_output_tokens);
    insert_some(
        &mut p,
        "reasoning_effort",
        options.reasoning_effort.as_deref(),
    );
    let mut p = call_fields(
        p,
        &options.extra,
        req.settings,
        RESERVED_KEYS.into_iter().chain(FOREIGN_KEYS),
        "dropping a body field the Responses adapter owns or the API rejects",
    );
    if let Some(m) = p.remove("max_tokens") {
        p.entry("max_output_tokens").or_insert(m);
    }
    if let Some(effort) = p.remove("reasoning_effort") {
        let reasoning = p
            .entry("reasoning")
            .or_insert_with(|| Value::Object(Object::new()));
        if let Value::Object(r) = reasoning {
            r.entry("effort").or_insert(effort);
        }
    }
    if p.get("store").and_then(Value::as_bool) == Some(false) && p.contains_key("reasoning") {
        // Stateless reasoning: ask for the encrypted state so it can be replayed.
        let include = p
            .entry("include")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = include {
            if !list.iter().any(|v| v == "reasoning.encrypted_content") {
                list.push(Value::from("reasoning.encrypted_content"));
            }
        }
    }
    settle_tool_choice(&mut p, req, map_tool_choice);
    p
}

/// Provider-neutral tool choice → the Responses API's: `auto`/`none`/`required` stay, `any`
/// means `required`, a name or `{"name": n}` (or Chat Completions' nested shape) names a function.
fn map_tool_choice(choice: &Value) -> Value {
    openai_tool_choice(
        choice,
        |name| serde_json::json!({"type": "function", "name": name}),
        |o| {
            o.get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
        },
    )
}

/// The body of one `POST /responses`, borrowed from the request.
pub type WireBody<'a> = OpenAiBody<'a, Input<'a>, WireTool<'a>>;

/// A tool as the flat `{type: function, name, description, parameters}`.
pub struct WireTool<'a>(&'a ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry("name", &self.0.name)?;
        m.serialize_entry("description", &self.0.description)?;
        m.serialize_entry("parameters", &ToolSchema(self.0))?;
        m.end()
    }
}

/// The system prompt followed by the history, as `input` items.
pub struct Input<'a> {
    system: Option<&'a str>,
    messages: &'a [Arc<Message>],
    stored: bool,
    /// The run's encoded input items of each message (an AI message may be several; the
    /// variant bit is `stored`, which decides whether reasoning is replayed).
    cache: Option<&'a ArcJsonCache<Message, Arc<[Box<RawValue>]>>>,
    answered: Option<HashSet<&'a str>>,
}

/// `{role, content}` with string content.
#[derive(Serialize)]
struct RoleText<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    call_id: &'a str,
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct FunctionCallOutput<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    call_id: &'a str,
    output: &'a str,
}

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        if let Some(system) = self.system {
            let item = RoleText {
                role: "system",
                content: system,
            };
            SYSTEM_JSON.write_element(&mut seq, system, &item)?;
        }
        let cached = self.cache.map(|cache| {
            cache.encoded(self.messages, self.stored, |msg| {
                // Which invalid calls are replayed depends on the rest of the history.
                if matches!(&**msg, Message::Ai(ai) if !ai.invalid_tool_calls.is_empty()) {
                    return None;
                }
                let mut items = Items(Vec::new());
                self.items(msg, &mut items).ok()?;
                Some(Arc::from(items.0))
            })
        });
        for (i, msg) in self.messages.iter().enumerate() {
            match cached.as_ref().and_then(|c| c[i].as_ref()) {
                Some(items) => {
                    for item in items.iter() {
                        seq.serialize_element(&**item)?;
                    }
                }
                None => self.items(msg, &mut seq)?,
            }
        }
        seq.end()
    }
}

/// Collects a message's input items, each encoded on its own.
struct Items(Vec<Box<RawValue>>);

impl SerializeSeq for Items {
    type Ok = ();
    type Error = serde_json::Error;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Self::Error> {
        self.0.push(serde_json::value::to_raw_value(value)?);
        Ok(())
    }

    fn end(self) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

impl Input<'_> {
    /// The input items of one message (none for a reducer instruction).
    fn items<S: SerializeSeq>(&self, msg: &Message, seq: &mut S) -> Result<(), S::Error> {
        match msg {
            Message::Human(h) => seq.serialize_element(&UserMessage("user", &h.content)),
            Message::System(sys) => seq.serialize_element(&UserMessage("system", &sys.content)),
            Message::Ai(ai) => self.assistant_items(ai, seq),
            Message::Tool(t) => {
                let text = t.content.text();
                seq.serialize_element(&FunctionCallOutput {
                    kind: "function_call_output",
                    call_id: &t.tool_call_id,
                    output: &text,
                })
            }
            Message::Remove(_) => Ok(()),
        }
    }

    /// Whether a stored reasoning block can go back to the API.
    fn replayable(&self, block: &Value) -> bool {
        block.get("encrypted_content").is_some_and(Value::is_string)
            || (self.stored && block.get("id").is_some_and(Value::is_string))
    }

    fn assistant_items<S: SerializeSeq>(
        &self,
        ai: &AiMessage,
        seq: &mut S,
    ) -> Result<(), S::Error> {
        let mut text = String::new();
        let mut reasoning: Vec<&Value> = Vec::new();
        match &ai.content {
            Content::Text(t) => text.push_str(t),
            Content::Blocks(blocks) => {
                for block in blocks {
                    match block {
                        Value::String(t) => text.push_str(t),
                        b if block_type(b) == Some("reasoning") && self.replayable(b) => {
                            reasoning.push(b);
                        }
                        b if block_type(b) == Some("reasoning") => {}
                        b if matches!(block_type(b), Some("text" | "output_text")) => {
                            if let Some(t) = b.get("text").and_then(Value::as_str) {
                                text.push_str(t);
                            }
                        }
                        // Other providers' reasoning and tool-use blocks, images: not replayed.
                        _ => {}
                    }
                }
            }
        }
        let invalid: Vec<_> = match &self.answered {
            Some(answered) => ai
                .invalid_tool_calls
                .iter()
                .filter(|c| c.id.as_deref().is_some_and(|id| answered.contains(id)))
                .collect(),
            None => Vec::new(),
        };
        let has_text = !text.trim().is_empty();
        // A reasoning item must be followed by the item it produced.
        if has_text || !ai.tool_calls.is_empty() || !invalid.is_empty() {
            for block in reasoning {
                seq.serialize_element(&ReasoningItem(block))?;
            }
        }
        if has_text {
            seq.serialize_element(&RoleText {
                role: "assistant",
                content: &text,
            })?;
        }
        for call in &ai.tool_calls {
            let arguments = serde_json::to_string(&call.args).map_err(serde::ser::Error::custom)?;
            seq.serialize_element(&FunctionCall {
                kind: "function_call",
                call_id: call.id_str(),
                name: &call.name,
                arguments: &arguments,
            })?;
        }
        for call in invalid {
            seq.serialize_element(&FunctionCall {
                kind: "function_call",
                call_id: call.id.as_deref().unwrap_or_default(),
                name: call.name.as_deref().unwrap_or_default(),
                arguments: call.args.as_deref().unwrap_or_default(),
            })?;
        }
        Ok(())
    }
}

/// A stored reasoning block as an input item: `type`, `id`, `summary` (required; `[]` when
/// absent) and `encrypted_content`, nothing else.
struct ReasoningItem<'a>(&'a Value);

impl Serialize for ReasoningItem<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", "reasoning")?;
        if let Some(id) = self.0.get("id").filter(|v| v.is_string()) {
            m.serialize_entry("id", id)?;
        }
        match self.0.get("summary").filter(|v| v.is_array()) {
            Some(summary) => m.serialize_entry("summary", summary)?,
            None => m.serialize_entry("summary", &[] as &[Value])?,
        }
        if let Some(enc) = self.0.get("encrypted_content").filter(|v| v.is_string()) {
            m.serialize_entry("encrypted_content", enc)?;
        }
        m.end()
    }
}

/// A user or system message: string content as is, blocks as `input_text` / `input_image` parts.
struct UserMessage<'a>(&'static str, &'a Content);

impl Serialize for UserMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("role", self.0)?;
        match self.1 {
            Content::Text(t) => m.serialize_entry("content", t)?,
            Content::Blocks(blocks) => m.serialize_entry("content", &InputParts(blocks))?,
        }
        m.end()
    }
}

struct InputParts<'a>(&'a [Value]);

#[derive(Serialize)]
struct InputText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct InputImage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    image_url: &'a str,
}

impl Serialize for InputParts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        let text = |t| InputText {
            kind: "input_text",
            text: t,
        };
        for block in self.0 {
            match block {
                Value::String(t) => seq.serialize_element(&text(t))?,
                Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                    Some("text" | "input_text") => {
                        if let Some(t) = o.get("text").and_then(Value::as_str) {
                            seq.serialize_element(&text(t))?;
                        }
                    }
                    Some("image_url") => {
                        let url = match o.get("image_url") {
                            Some(Value::String(u)) => Some(u.as_str()),
                            Some(v) => v.get("url").and_then(Value::as_str),
                            None => None,
                        };
                        if let Some(url) = url {
                            seq.serialize_element(&InputImage {
                                kind: "input_image",
                                image_url: url,
                            })?;
                        }
                    }
                    // Already in the Responses vocabulary.
                    Some("input_image" | "input_file") => seq.serialize_element(block)?,
                    _ => tracing::debug!("dropping a content block the Responses API cannot take"),
                },
                _ => {}
            }
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn history() -> Vec<Arc<Message>> {
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"type": "human", "content": "hi \"there\""},
            {"type": "ai", "id": "a1",
             "content": [{"type": "reasoning", "id": "rs_1", "summary": []}, {"type": "text", "text": "let me look"}],
             "tool_calls": [{"id": "c1", "name": "bash", "args": {"command": "ls\n"}}]},
            {"type": "tool", "tool_call_id": "c1", "name": "bash", "content": "a\tb"},
            {"type": "ai", "content": "", "invalid_tool_calls": [{"id": "bad", "name": "bash", "args": "{oops"}]},
            {"type": "remove", "id": "gone"},
            {"type": "tool", "tool_call_id": "bad", "content": "Error: bad args", "status": "error"},
            {"type": "system", "content": "note"},
        ]))
        .unwrap();
        messages.into_iter().map(Arc::new).collect()
    }

    fn encode(
        messages: &[Arc<Message>],
        store: bool,
        encodings: Option<&crate::EncodingCache>,
    ) -> String {
        let mut options = ResponsesOptions::default();
        options.extra.insert("store".into(), json!(store));
        let req = ChatRequest {
            system: Some("sys"),
            messages,
            tools: &[],
            tool_choice: None,
            settings: &Object::new(),
            message_id: "m",
            encodings,
        };
        serde_json::to_string(&body(&options, "model", req, false)).unwrap()
    }

    #[test]
    fn cached_input_items_are_the_bytes_of_a_fresh_encoding() {
        let messages = history();
        let cache = crate::EncodingCache::default();
        for store in [true, false] {
            let first = encode(&messages, store, Some(&cache));
            assert_eq!(first, encode(&messages, store, None));
            assert_eq!(encode(&messages, store, Some(&cache)), first);
            let body: Value = serde_json::from_str(&first).unwrap();
            let kinds: Vec<&str> = body["input"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["type"].as_str().or(i["role"].as_str()).unwrap())
                .collect();
            // The stored reasoning item is replayed only when the API keeps items.
            let mut expected = vec!["system", "user", "reasoning", "assistant", "function_call"];
            if !store {
                expected.retain(|k| *k != "reasoning");
            }
            expected.extend([
                "function_call_output",
                "function_call",
                "function_call_output",
                "system",
            ]);
            assert_eq!(kinds, expected, "store: {store}");
        }
        // Every message but the one with invalid calls (and the reducer, which has no items)
        // is served from the cache once encoded.
        let hits: Vec<usize> = cache
            .responses
            .encoded(&messages, true, |_| None)
            .iter()
            .map(|items| items.as_ref().map_or(usize::MAX, |i| i.len()))
            .collect();
        assert_eq!(hits, [1, 3, 1, usize::MAX, 0, 1, 1]);
    }
}
