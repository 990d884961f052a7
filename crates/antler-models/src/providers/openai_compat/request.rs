//! The Chat Completions request body, serialized straight from the borrowed history.
//!
//! Nothing here clones the conversation: [`WireBody`] and its helpers are `Serialize` views over
//! `&[Arc<Message>]` that write OpenAI's shapes (`user`/`assistant`/`system`/`tool` roles,
//! `tool_calls` with JSON-string `arguments`, `tool_call_id`) directly into the output buffer.

use std::cell::OnceCell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use antler_protocol::{AiMessage, Content, Message, Object, ToolSpec};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::OpenAiCompatOptions;
use crate::providers::mapping::{
    answered_invalid_calls, call_fields, call_tool_choice, insert_some, openai_tool_choice,
    settle_tool_choice, ArcJsonCache, EncodedTexts, HistoryMemo, OpenAiBody, ToolJsonCache,
    ToolSchema,
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

/// Writes `body` into `out`: its bytes as serialized, the run's history memo copied and
/// extended (see [`HistoryMemo`]).
pub(crate) fn write_body(body: &WireBody<'_>, out: &mut Vec<u8>) -> serde_json::Result<()> {
    body.write_json(out, WireMessages::write_json)
}

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
    /// The run's leading messages as last sent.
    memo: Option<&'a Mutex<HistoryMemo>>,
    /// Tool-call ids that have a tool result; computed only when some AI message carries invalid
    /// tool calls (those are replayed only when answered, else a strict provider rejects the
    /// unanswered call).
    /// Made when a message is first written in its context (once the memo covers the leading
    /// messages, none of which has invalid calls, usually never): not a scan of the whole
    /// history on every call.
    answered: OnceCell<Option<HashSet<&'a str>>>,
}

impl<'a> WireMessages<'a> {
    fn new(req: &ChatRequest<'a>, replay_reasoning: bool) -> Self {
        WireMessages {
            system: req.system.filter(|s| !s.is_empty()),
            messages: req.messages,
            replay_reasoning,
            cache: req.encodings.map(|e| &e.chat),
            memo: req.encodings.map(|e| &e.chat_history),
            answered: OnceCell::new(),
        }
    }

    fn answered(&self) -> Option<&HashSet<&'a str>> {
        self.answered
            .get_or_init(|| answered_invalid_calls(self.messages))
            .as_ref()
    }

    /// The system prompt and its message.
    fn system(&self) -> Option<(&'a str, RoleText<'a>)> {
        self.system.map(|content| {
            let message = RoleText {
                role: "system",
                content,
            };
            (content, message)
        })
    }

    /// Writes the messages into `out` as their `Serialize` would: the run's memo of the
    /// leading ones first, extended by the context-free messages after it; what follows the
    /// first message that is not context-free is written one by one.
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let Some(memo) = self.memo else {
            return serde_json::to_writer(out, self);
        };
        out.push(b'[');
        let mut empty = true;
        if let Some((system, message)) = self.system() {
            serde_json::to_writer(&mut *out, &SYSTEM_JSON.element(system, &message))?;
            empty = false;
        }
        let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
        let mut covered = memo.sync(self.messages, self.replay_reasoning);
        for msg in &self.messages[covered..] {
            let wire = WireMessage {
                msg,
                replay_reasoning: self.replay_reasoning,
                answered: None,
            };
            if matches!(**msg, Message::Remove(_)) {
                memo.skip(msg);
            } else if wire.is_context_free() {
                memo.push(msg, |buf| serde_json::to_writer(buf, &wire))?;
            } else {
                break;
            }
            covered += 1;
        }
        if !memo.json().is_empty() {
            if !empty {
                out.push(b',');
            }
            out.extend_from_slice(memo.json());
            empty = false;
        }
        drop(memo);
        let rest = &self.messages[covered..];
        let encoded = self.encoded(rest);
        for (i, msg) in rest.iter().enumerate() {
            if matches!(**msg, Message::Remove(_)) {
                continue;
            }
            if !empty {
                out.push(b',');
            }
            empty = false;
            match encoded.as_ref().and_then(|e| e[i].as_ref()) {
                Some(raw) => serde_json::to_writer(&mut *out, &**raw)?,
                None => serde_json::to_writer(&mut *out, &self.wire(msg))?,
            }
        }
        out.push(b']');
        Ok(())
    }

    /// `messages`' encodings from the run's cache (`None` where not cacheable).
    fn encoded(&self, messages: &'a [Arc<Message>]) -> Option<Vec<Option<Arc<RawValue>>>> {
        self.cache.map(|cache| {
            cache.encoded(messages, self.replay_reasoning, |msg| {
                let wire = WireMessage {
                    msg,
                    replay_reasoning: self.replay_reasoning,
                    answered: None,
                };
                wire.is_context_free()
                    .then(|| serde_json::value::to_raw_value(&wire).ok().map(Arc::from))
                    .flatten()
            })
        })
    }

    /// `msg` encoded in its context.
    fn wire<'m>(&'m self, msg: &'m Message) -> WireMessage<'m> {
        WireMessage {
            msg,
            replay_reasoning: self.replay_reasoning,
            answered: self.answered(),
        }
    }
}

impl Serialize for WireMessages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        if let Some((system, message)) = self.system() {
            SYSTEM_JSON.write_element(&mut seq, system, &message)?;
        }
        let encoded = self.encoded(self.messages);
        for (i, msg) in self.messages.iter().enumerate() {
            if matches!(**msg, Message::Remove(_)) {
                continue;
            }
            match encoded.as_ref().and_then(|e| e[i].as_ref()) {
                Some(raw) => seq.serialize_element(&**raw)?,
                None => seq.serialize_element(&self.wire(msg))?,
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

    /// One call's body as the driver writes it (the run's memo copied), and the same body
    /// serialized without any cache.
    fn written_and_fresh(
        messages: &[Arc<Message>],
        replay: bool,
        system: Option<&str>,
        tools: &[Arc<ToolSpec>],
        cache: &crate::EncodingCache,
    ) -> (String, String) {
        let options = OpenAiCompatOptions {
            replay_reasoning_content: replay,
            ..Default::default()
        };
        let settings = Object::new();
        let req = |encodings| ChatRequest {
            system,
            messages,
            tools,
            tool_choice: None,
            settings: &settings,
            message_id: "m",
            encodings,
        };
        // Streamed with tools: fields after the history; unstreamed without: none.
        let stream = !tools.is_empty();
        let mut out = Vec::new();
        write_body(&body(&options, "model", req(Some(cache)), stream), &mut out).unwrap();
        let fresh = serde_json::to_string(&body(&options, "model", req(None), stream)).unwrap();
        (String::from_utf8(out).unwrap(), fresh)
    }

    fn covered(cache: &crate::EncodingCache) -> usize {
        cache.chat_history.lock().unwrap().covered()
    }

    /// Whatever the run does to its list between calls — appends, an edit in place, a cut, a
    /// message whose encoding depends on the rest, another wire option — a call's body is the
    /// bytes of a fresh encoding, and the memo covers the leading messages it can.
    #[test]
    fn the_history_memo_writes_the_bytes_of_a_fresh_encoding() {
        let cache = crate::EncodingCache::default();
        let tools = [Arc::new(ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        })];
        let all = history();
        let invalid = all[3].clone();
        // The history without its AI message whose invalid call is answered.
        let mut list: Vec<Arc<Message>> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 3)
            .map(|(_, m)| m.clone())
            .collect();
        let long = "p".repeat(600);
        let check =
            |list: &[Arc<Message>], replay: bool, system: Option<&str>, with_tools: bool| {
                let tools: &[Arc<ToolSpec>] = if with_tools { &tools } else { &[] };
                let (written, fresh) = written_and_fresh(list, replay, system, tools, &cache);
                assert_eq!(written, fresh);
                serde_json::from_str::<Value>(&written).unwrap();
            };
        check(&list, false, Some("sys"), true);
        assert_eq!(covered(&cache), 6);
        check(&list, false, Some(&long), false);
        // Appended: only the new messages are encoded, the memo grows.
        list.push(Arc::new(Message::ai("next")));
        list.push(Arc::new(Message::human("more")));
        check(&list, false, None, true);
        assert_eq!(covered(&cache), 8);
        // Edited in place: the memo keeps what precedes the edit.
        if let Message::Tool(t) = Arc::make_mut(&mut list[2]) {
            t.content = "edited".into();
        }
        check(&list, false, Some("sys"), false);
        assert_eq!(covered(&cache), 8);
        // Cut short, then another wire option.
        list.truncate(3);
        check(&list, false, Some("sys"), true);
        assert_eq!(covered(&cache), 3);
        check(&list, true, Some("sys"), true);
        assert_eq!(covered(&cache), 3);
        // An AI message with an invalid call: its encoding depends on whether a later message
        // answers it, so the memo stops before it — answered and not.
        list.push(invalid);
        list.push(Arc::new(Message::ai("after")));
        check(&list, true, Some("sys"), false);
        assert_eq!(covered(&cache), 3);
        list.push(all[5].clone());
        check(&list, true, Some("sys"), true);
        let body: Value =
            serde_json::from_str(&written_and_fresh(&list, true, None, &[], &cache).0).unwrap();
        assert_eq!(body["messages"][3]["tool_calls"][0]["id"], "bad");
        // Nothing at all.
        check(&[], false, None, false);
        assert_eq!(covered(&cache), 0);
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
