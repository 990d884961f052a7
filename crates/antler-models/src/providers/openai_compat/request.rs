//! The Chat Completions request body, serialized straight from the borrowed history.
//!
//! Nothing here clones the conversation: [`WireBody`] and its helpers are `Serialize` views over
//! `&[Arc<Message>]` that write OpenAI's shapes (`user`/`assistant`/`system`/`tool` roles,
//! `tool_calls` with JSON-string `arguments`, `tool_call_id`) directly into the output buffer.

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::{AiMessage, Content, Message, Object, ToolSpec};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::OpenAiCompatOptions;
use crate::providers::mapping::{
    answered_invalid_calls, call_fields, call_tool_choice, insert_some, openai_tool_choice,
    settle_tool_choice, ArcJsonCache, EncodedTexts, OpenAiBody, ToolJsonCache, ToolSchema,
};
use crate::ChatRequest;

/// Body keys owned by the adapter; configured extras and per-call settings cannot replace them.
const RESERVED_KEYS: [&str; 4] = ["model", "messages", "tools", "stream"];

/// Content-block types that carry reasoning or provider-native tool use; Chat Completions
/// rejects them inside `content`, so they are dropped from outgoing messages.
const DROPPED_BLOCK_TYPES: [&str; 6] = [
    "thinking",
    "redacted_thinking",
    "reasoning",
    "reasoning_content",
    "tool_use",
    "tool_call",
];

/// This wire format's encoded tools (see [`ToolJsonCache`]).
static TOOL_JSON: ToolJsonCache = ToolJsonCache::new();
/// Its encoded system messages (see [`EncodedTexts`]).
static SYSTEM_JSON: EncodedTexts = EncodedTexts::new();

/// The request body of one call.
pub(crate) fn body<'a>(
    options: &'a OpenAiCompatOptions,
    model: &'a str,
    req: ChatRequest<'a>,
    stream: bool,
) -> WireBody<'a> {
    OpenAiBody {
        model,
        history_key: "messages",
        history: WireMessages::new(&req, options.replay_reasoning_content),
        tools: req.tools,
        tool: WireTool,
        tool_cache: &TOOL_JSON,
        tool_choice: call_tool_choice(&req, map_tool_choice),
        stream,
        params: params(options, &req, stream),
    }
}

/// Configured sampling fields, `extra`, `extra_body`, then the call's `settings`, key by key (later
/// wins; `null` settings are ignored; a `settings.extra_body` object is merged like `extra_body`).
fn params(options: &OpenAiCompatOptions, req: &ChatRequest<'_>, stream: bool) -> Object {
    let mut p = Object::new();
    insert_some(&mut p, "temperature", options.temperature);
    insert_some(&mut p, "max_tokens", options.max_tokens);
    insert_some(
        &mut p,
        "reasoning_effort",
        options.reasoning_effort.as_deref(),
    );
    let mut p = call_fields(
        p,
        options.extra.iter().chain(options.extra_body.iter()),
        req.settings,
        RESERVED_KEYS,
        "ignoring a configured body field the adapter owns",
    );
    settle_tool_choice(&mut p, req, map_tool_choice);
    if stream && options.stream_usage {
        let mut opts = match p.remove("stream_options") {
            Some(Value::Object(o)) => o,
            _ => Object::new(),
        };
        opts.insert("include_usage".into(), Value::Bool(true));
        p.insert("stream_options".into(), Value::Object(opts));
    } else if !stream {
        p.remove("stream_options");
    }
    p
}

/// Provider-neutral tool choice → OpenAI's: `auto`/`none`/`required` stay, `any` means
/// `required`, `{"name": n}` or any other string names a function.
fn map_tool_choice(choice: &Value) -> Value {
    openai_tool_choice(
        choice,
        |name| serde_json::json!({"type": "function", "function": {"name": name}}),
        // An object with a `type` is already OpenAI's shape.
        |o| match o.get("type") {
            None => o.get("name").and_then(Value::as_str),
            Some(_) => None,
        },
    )
}

/// The body of one `POST /chat/completions`, borrowed from the request.
pub type WireBody<'a> = OpenAiBody<'a, WireMessages<'a>, WireTool<'a>>;

/// A tool as `{type: function, function: {name, description, parameters}}`.
pub struct WireTool<'a>(&'a ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry("function", &WireFunction(self.0))?;
        m.end()
    }
}

struct WireFunction<'a>(&'a ToolSpec);

impl Serialize for WireFunction<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tool = self.0;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("name", &tool.name)?;
        m.serialize_entry("description", &tool.description)?;
        m.serialize_entry("parameters", &ToolSchema(tool))?;
        m.end()
    }
}

/// The system prompt followed by the history.
pub struct WireMessages<'a> {
    system: Option<&'a str>,
    messages: &'a [Arc<Message>],
    replay_reasoning: bool,
    /// The run's encoded messages.
    cache: Option<&'a ArcJsonCache<Message>>,
    /// Tool-call ids that have a tool result; computed only when some AI message carries invalid
    /// tool calls (those are replayed only when answered, else a strict provider rejects the
    /// unanswered call).
    answered: Option<HashSet<&'a str>>,
}

impl<'a> WireMessages<'a> {
    fn new(req: &ChatRequest<'a>, replay_reasoning: bool) -> Self {
        WireMessages {
            system: req.system.filter(|s| !s.is_empty()),
            messages: req.messages,
            replay_reasoning,
            cache: req.encodings.map(|e| &e.chat),
            answered: answered_invalid_calls(req.messages),
        }
    }
}

impl Serialize for WireMessages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        if let Some(system) = self.system {
            let message = RoleText {
                role: "system",
                content: system,
            };
            SYSTEM_JSON.write_element(&mut seq, system, &message)?;
        }
        let encoded = self.cache.map(|cache| {
            cache.encoded(self.messages, self.replay_reasoning, |msg| {
                let wire = WireMessage {
                    msg,
                    replay_reasoning: self.replay_reasoning,
                    answered: None,
                };
                wire.is_context_free()
                    .then(|| serde_json::value::to_raw_value(&wire).ok().map(Arc::from))
                    .flatten()
            })
        });
        for (i, msg) in self.messages.iter().enumerate() {
            if matches!(**msg, Message::Remove(_)) {
                continue;
            }
            match encoded.as_ref().and_then(|e| e[i].as_ref()) {
                Some(raw) => seq.serialize_element(&**raw)?,
                None => seq.serialize_element(&WireMessage {
                    msg,
                    replay_reasoning: self.replay_reasoning,
                    answered: self.answered.as_ref(),
                })?,
            }
        }
        seq.end()
    }
}

/// `{role, content}` with string content.
#[derive(Serialize)]
struct RoleText<'a> {
    role: &'static str,
    content: &'a str,
}

struct WireMessage<'a> {
    msg: &'a Message,
    replay_reasoning: bool,
    answered: Option<&'a HashSet<&'a str>>,
}

impl WireMessage<'_> {
    /// The encoding depends on the message and `replay_reasoning` only: not on which calls
    /// the rest of the history answers (an AI message's invalid calls are replayed only when
    /// answered). Reducer instructions are never written.
    fn is_context_free(&self) -> bool {
        match self.msg {
            Message::Ai(ai) => ai.invalid_tool_calls.is_empty(),
            Message::Remove(_) => false,
            _ => true,
        }
    }
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self.msg {
            Message::Human(h) => {
                m.serialize_entry("role", "user")?;
                m.serialize_entry("content", &WireContent(&h.content))?;
            }
            Message::System(sys) => {
                m.serialize_entry("role", "system")?;
                m.serialize_entry("content", &WireContent(&sys.content))?;
            }
            Message::Ai(ai) => {
                m.serialize_entry("role", "assistant")?;
                let calls = WireToolCalls {
                    ai,
                    answered: self.answered,
                };
                let has_calls = calls.is_present();
                if content_is_empty(&ai.content) {
                    // OpenAI's documented "no content" for a tool-calling turn is `null`.
                    if has_calls {
                        m.serialize_entry("content", &Value::Null)?;
                    } else {
                        m.serialize_entry("content", "")?;
                    }
                } else {
                    m.serialize_entry("content", &WireContent(&ai.content))?;
                }
                if has_calls {
                    m.serialize_entry("tool_calls", &calls)?;
                }
                if self.replay_reasoning {
                    if let Some(Value::String(r)) = ai.additional_kwargs.get("reasoning_content") {
                        m.serialize_entry("reasoning_content", r)?;
                    }
                }
            }
            Message::Tool(t) => {
                m.serialize_entry("role", "tool")?;
                m.serialize_entry("tool_call_id", &t.tool_call_id)?;
                match &t.content {
                    Content::Text(text) => m.serialize_entry("content", text)?,
                    blocks @ Content::Blocks(_) => m.serialize_entry("content", &blocks.text())?,
                }
            }
            // Filtered out by `WireMessages`; reducer instructions never reach a provider.
            Message::Remove(_) => {}
        }
        if let Some(name) = self.msg.name().as_deref().filter(|n| !n.is_empty()) {
            m.serialize_entry("name", name)?;
        }
        m.end()
    }
}

fn is_dropped_block(block: &Value) -> bool {
    block
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| DROPPED_BLOCK_TYPES.contains(&t))
}

fn content_is_empty(content: &Content) -> bool {
    match content {
        Content::Text(t) => t.is_empty(),
        Content::Blocks(blocks) => blocks.iter().all(is_dropped_block),
    }
}

/// Message content: a string as is; blocks with bare strings wrapped as text parts and
/// reasoning/tool-use blocks dropped.
struct WireContent<'a>(&'a Content);

impl Serialize for WireContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Content::Text(t) => s.serialize_str(t),
            Content::Blocks(blocks) => {
                let mut seq = s.serialize_seq(None)?;
                for block in blocks {
                    match block {
                        Value::String(text) => {
                            seq.serialize_element(&TextPart { kind: "text", text })?
                        }
                        b if is_dropped_block(b) => {}
                        b => seq.serialize_element(b)?,
                    }
                }
                seq.end()
            }
        }
    }
}

/// `{type: text, text}`.
#[derive(Serialize)]
struct TextPart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

/// An assistant message's calls in OpenAI's shape: the parsed calls, answered invalid calls (with
/// their raw arguments), or, when the message has neither, the raw provider copy verbatim.
struct WireToolCalls<'a> {
    ai: &'a AiMessage,
    answered: Option<&'a HashSet<&'a str>>,
}

impl WireToolCalls<'_> {
    fn replayed_invalid(&self) -> impl Iterator<Item = &antler_protocol::InvalidToolCall> {
        let answered = self.answered;
        self.ai
            .invalid_tool_calls
            .iter()
            .filter(move |c| match (c.id.as_deref(), answered) {
                (Some(id), Some(set)) => set.contains(id),
                _ => false,
            })
    }

    fn raw(&self) -> Option<&Vec<Value>> {
        match self.ai.additional_kwargs.get("tool_calls") {
            Some(Value::Array(raw)) if !raw.is_empty() => Some(raw),
            _ => None,
        }
    }

    fn structured(&self) -> bool {
        !self.ai.tool_calls.is_empty() || self.replayed_invalid().next().is_some()
    }

    fn is_present(&self) -> bool {
        self.structured()
            || (self.ai.tool_calls.is_empty()
                && self.ai.invalid_tool_calls.is_empty()
                && self.raw().is_some())
    }
}

impl Serialize for WireToolCalls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.structured() {
            if let Some(raw) = self.raw() {
                return raw.serialize(s);
            }
        }
        let mut seq = s.serialize_seq(None)?;
        for call in &self.ai.tool_calls {
            let args = serde_json::to_string(&call.args).map_err(serde::ser::Error::custom)?;
            seq.serialize_element(&WireToolCall {
                id: call.id_str(),
                name: &call.name,
                arguments: &args,
            })?;
        }
        for call in self.replayed_invalid() {
            seq.serialize_element(&WireToolCall {
                id: call.id.as_deref().unwrap_or_default(),
                name: call.name.as_deref().unwrap_or_default(),
                arguments: call.args.as_deref().unwrap_or_default(),
            })?;
        }
        seq.end()
    }
}

struct WireToolCall<'a> {
    id: &'a str,
    name: &'a str,
    arguments: &'a str,
}

impl Serialize for WireToolCall<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("id", self.id)?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry(
            "function",
            &FunctionCall {
                name: self.name,
                arguments: self.arguments,
            },
        )?;
        m.end()
    }
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn history() -> Vec<Arc<Message>> {
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"type": "human", "content": [{"type": "text", "text": "hi \"there\""}, "bare"], "name": "u"},
            {"type": "ai", "content": "", "id": "a1",
             "tool_calls": [{"id": "c1", "name": "bash", "args": {"command": "ls\n"}}],
             "additional_kwargs": {"reasoning_content": "thought"}},
            {"type": "tool", "tool_call_id": "c1", "name": "bash", "content": "a\tb"},
            {"type": "ai", "content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "ok"}],
             "invalid_tool_calls": [{"id": "bad", "name": "bash", "args": "{oops", "error": "e"}]},
            {"type": "remove", "id": "gone"},
            {"type": "tool", "tool_call_id": "bad", "content": "Error: bad args", "status": "error"},
            {"type": "system", "content": "note"},
        ]))
        .unwrap();
        messages.into_iter().map(Arc::new).collect()
    }

    fn encode_with(
        messages: &[Arc<Message>],
        replay: bool,
        encodings: Option<&crate::EncodingCache>,
    ) -> String {
        let options = OpenAiCompatOptions {
            replay_reasoning_content: replay,
            ..Default::default()
        };
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
    fn cached_history_encodings_are_the_bytes_of_a_fresh_encoding() {
        let messages = history();
        let cache = crate::EncodingCache::default();
        for replay in [false, true] {
            let uncached = encode_with(&messages, replay, None);
            let first = encode_with(&messages, replay, Some(&cache));
            assert_eq!(first, uncached);
            assert_eq!(encode_with(&messages, replay, Some(&cache)), first);
            let body: Value = serde_json::from_str(&first).unwrap();
            let sent = body["messages"].as_array().unwrap();
            // The system prompt, then every message but the reducer instruction.
            assert_eq!(sent.len(), 7);
            assert_eq!(sent[2]["reasoning_content"].is_string(), replay);
            // The invalid call is answered by a later tool result: replayed.
            assert_eq!(sent[4]["tool_calls"][0]["id"], "bad");
        }
        // Once encoded, every context-free message is served from the cache (the encoder
        // declines all here); the AI message with invalid calls and the reducer are not cached.
        let hits: Vec<bool> = cache
            .chat
            .encoded(&messages, false, |_| None)
            .iter()
            .map(Option::is_some)
            .collect();
        assert_eq!(hits, [true, true, true, false, false, true, true]);
        // Without its answer the invalid call is not replayed, though the message is the same
        // allocation as before.
        let mut unanswered = messages.clone();
        unanswered.remove(5);
        let body: Value =
            serde_json::from_str(&encode_with(&unanswered, false, Some(&cache))).unwrap();
        assert!(body["messages"][4].get("tool_calls").is_none());
    }

    #[test]
    fn a_message_changed_in_place_is_encoded_again() {
        let cache = crate::EncodingCache::default();
        let mut messages = history();
        let before = encode_with(&messages, false, Some(&cache));
        // `make_mut` on an `Arc` the cache holds a `Weak` of: the value moves, the encoding
        // follows it.
        if let Message::Tool(t) = Arc::make_mut(&mut messages[2]) {
            t.content = "edited".into();
        }
        let after = encode_with(&messages, false, Some(&cache));
        assert_ne!(before, after);
        assert!(after.contains(r#""content":"edited""#));
        assert_eq!(after, encode_with(&messages, false, None));
    }
}
