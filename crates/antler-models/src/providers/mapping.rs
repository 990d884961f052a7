//! Steps of the wire mapping that several wire formats take alike: merging the call's settings
//! into the configured body fields, tool schemas, which invalid tool calls may be replayed, and
//! the small pieces of building messages and chunks from an answer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use antler_protocol::hash::AddrMap;
use antler_protocol::identity::{address, shared_prefix_addrs};
use antler_protocol::{
    AiMessage, AiMessageChunk, Content, InvalidToolCall, Message, Object, ToolCall, ToolCallChunk,
    ToolSpec, UsageMetadata,
};
use serde::de::DeserializeOwned;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::driver::SseEvent;
use super::http::truncate;
use crate::{ChatRequest, ModelError};

/// Longest piece of an unreadable answer quoted in a [`ModelError::Decode`].
const QUOTED_CHARS: usize = 500;

/// Merge the call's `settings` over `fields`, key by key (later wins): `null` settings are
/// ignored, and a `settings.extra_body` object is merged like its keys.
pub(crate) fn merge_settings(fields: &mut Object, settings: &Object) {
    for (k, v) in settings {
        match (k.as_str(), v) {
            (_, Value::Null) => {}
            ("extra_body", Value::Object(extra)) => {
                for (k, v) in extra {
                    fields.insert(k.clone(), v.clone());
                }
            }
            _ => {
                fields.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The body fields of one call: the `configured` ones, then `extras` (verbatim config fields),
/// then the call's `settings` ([`merge_settings`]), less the `reserved` keys the adapter owns
/// (each one that was set is logged with `why`).
pub(crate) fn call_fields<'e, 'k>(
    mut configured: Object,
    extras: impl IntoIterator<Item = (&'e String, &'e Value)>,
    settings: &Object,
    reserved: impl IntoIterator<Item = &'k str>,
    why: &str,
) -> Object {
    for (k, v) in extras {
        configured.insert(k.clone(), v.clone());
    }
    merge_settings(&mut configured, settings);
    drop_keys(&mut configured, reserved, why);
    configured
}

/// Remove `keys` from `fields`, saying why for each one that was set.
pub(crate) fn drop_keys<'k>(
    fields: &mut Object,
    keys: impl IntoIterator<Item = &'k str>,
    why: &str,
) {
    for key in keys {
        if fields.remove(key).is_some() {
            tracing::debug!(key, "{why}");
        }
    }
}

/// One turn of a history for the APIs that want roles to alternate: its role and its items
/// (blocks, parts), results (tool results, function responses) first.
#[derive(Debug)]
pub(crate) struct Turn<R, I> {
    pub role: R,
    pub items: Vec<I>,
    /// How many leading items are results.
    results: usize,
}

/// The role of a [`Turn`], serialized as its `role`; the items go under `ITEMS`.
pub(crate) trait TurnRole: PartialEq + Serialize {
    const ITEMS: &'static str;
}

impl<R: TurnRole, I: Serialize> Serialize for Turn<R, I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("role", &self.role)?;
        m.serialize_entry(R::ITEMS, &self.items)?;
        m.end()
    }
}

/// Add one message's `items` to the history as a turn of `role`, merged into the last turn
/// when it has the same role; results (`is_result`) go after that turn's results and before
/// its other items. A message without items adds nothing.
pub(crate) fn push_turn<R: PartialEq, I>(
    turns: &mut Vec<Turn<R, I>>,
    role: R,
    items: Vec<I>,
    is_result: impl Fn(&I) -> bool,
) {
    if items.is_empty() {
        return;
    }
    if turns.last().is_none_or(|t| t.role != role) {
        turns.push(Turn {
            role,
            items: Vec::new(),
            results: 0,
        });
    }
    let Some(turn) = turns.last_mut() else {
        return;
    };
    for item in items {
        if is_result(&item) {
            turn.items.insert(turn.results, item);
            turn.results += 1;
        } else {
            turn.items.push(item);
        }
    }
}

/// A content block's `type` (`""` when it has none).
pub(crate) fn block_type(block: &Object) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A text that is not blank.
pub(crate) fn non_blank(text: Option<&Value>) -> Option<&str> {
    text.and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
}

/// The URL of an `image_url` block (`"image_url": "<url>"` or `{"url": "<url>"}`).
pub(crate) fn image_url(block: &Object) -> Option<&str> {
    match block.get("image_url") {
        Some(Value::String(u)) => Some(u.as_str()),
        Some(v) => v.get("url").and_then(Value::as_str),
        None => None,
    }
}

/// The inline data of LangChain's standard `image` block (`data`, or `base64`).
pub(crate) fn image_data(block: &Object) -> Option<&str> {
    block
        .get("data")
        .or_else(|| block.get("base64"))
        .and_then(Value::as_str)
}

/// Tool-call id → tool name, over every call (valid or not) of the history's assistant
/// messages, for APIs that name a tool result by its function.
pub(crate) fn call_names(messages: &[Arc<Message>]) -> HashMap<&str, &str> {
    let mut names = HashMap::new();
    for ai in messages.iter().filter_map(|m| m.as_ai()) {
        for c in &ai.tool_calls {
            names.insert(c.id_str(), c.name.as_str());
        }
        for c in &ai.invalid_tool_calls {
            if let (Some(id), Some(name)) = (c.id.as_deref(), c.name.as_deref()) {
                names.insert(id, name);
            }
        }
    }
    names
}

/// The media type and data of a `data:<mime>;base64,<data>` URL.
pub(crate) fn base64_data_url(url: &str) -> Option<(&str, &str)> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    Some((meta.strip_suffix(";base64")?, data))
}

/// Serializes each element of a slice through a borrowed view, e.g. `Each(tools, WireTool)`.
pub(crate) struct Each<'a, T, F>(pub &'a [T], pub F);

impl<'a, T, V, F> Serialize for Each<'a, T, F>
where
    F: Fn(&'a T) -> V,
    V: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&(self.1)(item))?;
        }
        seq.end()
    }
}

/// Wire encodings of values shared by `Arc` (tool specs, history messages): a run offers the
/// same shared specs and the same history messages on every model call, and encoding them
/// again each time was a measurable part of a model step (with a long history, most of it). An entry is keyed by the `Arc`'s address and a variant bit (a
/// wire option the encoding depends on) and holds a `Weak` of the value, which keeps the
/// address from being reused — and the value from being changed in place (`Arc::get_mut`
/// refuses while a `Weak` exists, `Arc::make_mut` moves the value) — while the entry exists.
/// Entries of dropped values are swept when the cache has doubled since the last sweep.
pub(crate) struct ArcJsonCache<T, V = Arc<RawValue>>(Mutex<Option<ArcEntries<T, V>>>);

/// Encoded tool specs.
pub(crate) type ToolJsonCache = ArcJsonCache<ToolSpec>;

struct ArcEntries<T, V> {
    map: AddrMap<ArcJson<T, V>>,
    /// Entries at which dead ones are swept next.
    sweep_at: usize,
}

struct ArcJson<T, V> {
    of: Weak<T>,
    json: V,
}

/// Fewest entries before a sweep.
const ARC_JSON_SWEEP: usize = 1024;

/// Wire encodings kept across the model calls of one conversation — a run: each history
/// message is encoded once for the run's calls instead of on every call, which with a long
/// history was most of a step. It holds only what the run's own calls encoded and goes with
/// the run (a process-wide cache would also keep the encodings of finished runs whose
/// messages are still retained elsewhere, e.g. in a replay buffer). Pass it in
/// [`ChatRequest::encodings`](crate::ChatRequest::encodings).
#[derive(Default)]
pub struct EncodingCache {
    /// Chat Completions messages (the variant bit: `replay_reasoning_content`) that
    /// `chat_history` does not cover.
    pub(crate) chat: ArcJsonCache<Message>,
    /// The leading Chat Completions messages the run sent, as sent.
    pub(crate) chat_history: Mutex<HistoryMemo>,
    /// Responses input items (the variant bit: whether the API stores items).
    pub(crate) responses: ArcJsonCache<Message, Arc<[Box<RawValue>]>>,
    /// Bytes of the run's last request body (0: none yet): the next body's buffer is sized
    /// from it.
    pub(crate) last_body: std::sync::atomic::AtomicUsize,
}

/// The JSON of a run's leading history messages as its last call sent them, comma-separated:
/// a call copies it whole and encodes only the messages after it, instead of looking up and
/// copying each message's encoding (with a long history, ~200 instructions a message on every
/// call). It holds a `Weak` of every message it covers, so an address it knows can neither be
/// reused nor its value changed in place (see [`ArcJsonCache`]): a list whose leading messages
/// are the same allocations, in the same order, starts with exactly these bytes.
#[derive(Default)]
pub(crate) struct HistoryMemo {
    /// The wire option the encodings depend on (`replay_reasoning_content`).
    variant: bool,
    /// The messages covered, in list order, each with the length of `json` up to and
    /// including it (a reducer instruction adds nothing).
    covered: Vec<(Weak<Message>, usize)>,
    /// Their addresses, apart so a sync compares them in rounds ([`antler_protocol::identity`]).
    addrs: Vec<usize>,
    json: Vec<u8>,
}

impl HistoryMemo {
    /// How many leading `messages` the memo covers, once it has let go of what `messages` no
    /// longer starts with (all of it, for another `variant`).
    pub(crate) fn sync(&mut self, messages: &[Arc<Message>], variant: bool) -> usize {
        if self.variant != variant {
            self.variant = variant;
            self.covered.clear();
            self.addrs.clear();
            self.json.clear();
        }
        let same = shared_prefix_addrs(&self.addrs, messages);
        if same < self.covered.len() {
            self.covered.truncate(same);
            self.addrs.truncate(same);
            self.json.truncate(self.covered.last().map_or(0, |c| c.1));
        }
        same
    }

    /// Cover `msg`, the message after the ones covered, whose JSON `write` appends. On error
    /// the memo is as it was.
    pub(crate) fn push(
        &mut self,
        msg: &Arc<Message>,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
    ) -> serde_json::Result<()> {
        let before = self.json.len();
        if before > 0 {
            self.json.push(b',');
        }
        if let Err(e) = write(&mut self.json) {
            self.json.truncate(before);
            return Err(e);
        }
        self.skip(msg);
        Ok(())
    }

    /// Cover `msg`, the message after the ones covered, which sends nothing (a reducer
    /// instruction).
    pub(crate) fn skip(&mut self, msg: &Arc<Message>) {
        self.covered.push((Arc::downgrade(msg), self.json.len()));
        self.addrs.push(address(msg));
    }

    /// The covered messages' JSON, comma-separated.
    pub(crate) fn json(&self) -> &[u8] {
        &self.json
    }

    #[cfg(test)]
    pub(crate) fn covered(&self) -> usize {
        self.covered.len()
    }
}

impl std::fmt::Debug for EncodingCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodingCache").finish_non_exhaustive()
    }
}

impl<T, V> Default for ArcJsonCache<T, V> {
    fn default() -> Self {
        ArcJsonCache(Mutex::new(None))
    }
}

impl<T, V: Clone> ArcJsonCache<T, V> {
    pub(crate) const fn new() -> Self {
        ArcJsonCache(Mutex::new(None))
    }

    fn key(item: &Arc<T>, variant: bool) -> usize {
        // Allocations of an `ArcInner` are at least word-aligned: the low bit is free.
        (Arc::as_ptr(item) as usize) | usize::from(variant)
    }

    /// Each item's encoding, from the cache or made now by `encode`; `None` for the items
    /// `encode` declines (not cacheable, or not encodable on their own: the caller writes those
    /// inline). The lock is not held while encoding.
    pub(crate) fn encoded<'a>(
        &self,
        items: &'a [Arc<T>],
        variant: bool,
        mut encode: impl FnMut(&'a Arc<T>) -> Option<V>,
    ) -> Vec<Option<V>> {
        let mut out = Vec::with_capacity(items.len());
        {
            let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
            for item in items {
                let hit = guard.as_ref().and_then(|c| {
                    c.map.get(&Self::key(item, variant)).filter(|e| {
                        e.of.strong_count() > 0 && std::ptr::eq(e.of.as_ptr(), Arc::as_ptr(item))
                    })
                });
                out.push(hit.map(|e| e.json.clone()));
            }
        }
        let mut made = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if out[i].is_none() {
                if let Some(json) = encode(item) {
                    made.push((Self::key(item, variant), Arc::downgrade(item), json.clone()));
                    out[i] = Some(json);
                }
            }
        }
        if !made.is_empty() {
            let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let cache = guard.get_or_insert_with(|| ArcEntries {
                map: AddrMap::default(),
                sweep_at: ARC_JSON_SWEEP,
            });
            for (key, of, json) in made {
                if cache.map.len() >= cache.sweep_at {
                    cache.map.retain(|_, e| e.of.strong_count() > 0);
                    cache.sweep_at = ARC_JSON_SWEEP.max(2 * cache.map.len());
                }
                cache.map.insert(key, ArcJson { of, json });
            }
        }
        out
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or(0, |c| c.map.len())
    }
}

impl ToolJsonCache {
    /// Each tool's encoding (`wire(tool)` as JSON); `None` if one does not serialize on its own
    /// (the caller then writes the tools inline).
    fn tools<'a, W: Serialize>(
        &self,
        tools: &'a [Arc<ToolSpec>],
        wire: impl Fn(&'a Arc<ToolSpec>) -> W,
    ) -> Option<Vec<Arc<RawValue>>> {
        self.encoded(tools, false, |t| {
            serde_json::value::to_raw_value(&wire(t))
                .ok()
                .map(Arc::from)
        })
        .into_iter()
        .collect()
    }
}

/// Encodings of a few long texts (system messages), remembered by content: a run sends the
/// same prompt on every model call, and escaping it into JSON each time was a measurable part
/// of a model step. Most recently used first; a lookup compares the text (a `memcmp`, far
/// cheaper than escaping it).
pub(crate) struct EncodedTexts(Mutex<Vec<(Box<str>, Arc<RawValue>)>>);

/// Texts remembered per cache.
const ENCODED_TEXTS: usize = 8;
/// Shorter texts are cheaper to escape than to look up.
const ENCODED_TEXT_MIN: usize = 512;

impl EncodedTexts {
    pub(crate) const fn new() -> Self {
        EncodedTexts(Mutex::new(Vec::new()))
    }

    /// The JSON of `value()`, which depends on `text` only: from the cache, or made now.
    /// `None` when it does not serialize on its own.
    pub(crate) fn get<V: Serialize>(
        &self,
        text: &str,
        value: impl FnOnce() -> V,
    ) -> Option<Arc<RawValue>> {
        let mut entries = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = entries.iter().position(|(t, _)| &**t == text) {
            let hit = entries.remove(i);
            let raw = hit.1.clone();
            entries.insert(0, hit);
            return Some(raw);
        }
        let raw: Arc<RawValue> = serde_json::value::to_raw_value(&value()).ok()?.into();
        entries.insert(0, (text.into(), raw.clone()));
        entries.truncate(ENCODED_TEXTS);
        Some(raw)
    }

    /// Writes `value` (which depends on `text` only) as the next element of `seq`: a long
    /// text's from the cache, a short one's (cheaper to escape than to look up) directly.
    pub(crate) fn write_element<S: SerializeSeq, V: Serialize>(
        &self,
        seq: &mut S,
        text: &str,
        value: &V,
    ) -> Result<(), S::Error> {
        seq.serialize_element(&self.element(text, value))
    }

    /// `value` (which depends on `text` only) as it serializes: see [`EncodedTexts::write_element`].
    pub(crate) fn element<'v, V: Serialize>(&self, text: &str, value: &'v V) -> TextJson<'v, V> {
        match (text.len() >= ENCODED_TEXT_MIN)
            .then(|| self.get(text, || value))
            .flatten()
        {
            Some(raw) => TextJson::Encoded(raw),
            None => TextJson::Value(value),
        }
    }
}

/// A value that depends on one text, encoded before or not (see [`EncodedTexts::element`]).
pub(crate) enum TextJson<'v, V> {
    Encoded(Arc<RawValue>),
    Value(&'v V),
}

impl<V: Serialize> Serialize for TextJson<'_, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TextJson::Encoded(raw) => raw.serialize(s),
            TextJson::Value(v) => v.serialize(s),
        }
    }
}

/// Writes `tools` under `tools` when there are any, each as `wire` shapes it, through `cache`.
pub(crate) fn serialize_cached_tools<'a, M, W>(
    m: &mut M,
    cache: &ToolJsonCache,
    tools: &'a [Arc<ToolSpec>],
    wire: impl Fn(&'a Arc<ToolSpec>) -> W,
) -> Result<(), M::Error>
where
    M: SerializeMap,
    W: Serialize,
{
    // No tools, or one that does not serialize on its own: written inline (or not at all).
    match (!tools.is_empty())
        .then(|| cache.tools(tools, &wire))
        .flatten()
    {
        Some(encoded) => m.serialize_entry("tools", &encoded),
        None => serialize_tools(m, tools, wire),
    }
}

/// Writes `tools` under `tools` when there are any, each as `wire` shapes it.
pub(crate) fn serialize_tools<'a, M, W>(
    m: &mut M,
    tools: &'a [Arc<ToolSpec>],
    wire: impl Fn(&'a Arc<ToolSpec>) -> W,
) -> Result<(), M::Error>
where
    M: SerializeMap,
    W: Serialize,
{
    if !tools.is_empty() {
        m.serialize_entry("tools", &Each(tools, wire))?;
    }
    Ok(())
}

/// Ends a request body's map with what every wire format puts last: `tool_choice` when set,
/// `stream: true` when streaming, then the remaining settings in order.
pub(crate) fn end_body<M: SerializeMap>(
    mut m: M,
    tool_choice: Option<&Value>,
    stream: bool,
    rest: &Object,
) -> Result<M::Ok, M::Error> {
    if let Some(choice) = tool_choice {
        m.serialize_entry("tool_choice", choice)?;
    }
    if stream {
        m.serialize_entry("stream", &true)?;
    }
    for (k, v) in rest {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

/// A tool's JSON schema; a tool without one gets the empty object schema the APIs require.
pub(crate) struct ToolSchema<'a>(pub &'a ToolSpec);

impl Serialize for ToolSchema<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.0.parameters.is_null() {
            return self.0.parameters.serialize(s);
        }
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("type", "object")?;
        m.serialize_entry("properties", &Object::new())?;
        m.end()
    }
}

/// Ids of the tool calls some tool message answers, computed only when an assistant message
/// carries invalid tool calls: those are replayed only when answered, else a strict provider
/// rejects the unanswered call.
pub(crate) fn answered_invalid_calls(messages: &[Arc<Message>]) -> Option<HashSet<&str>> {
    let has_invalid = messages.iter().any(|m| {
        m.as_ai()
            .is_some_and(|ai| !ai.invalid_tool_calls.is_empty())
    });
    has_invalid.then(|| {
        messages
            .iter()
            .filter_map(|m| m.as_tool())
            .map(|t| t.tool_call_id.as_str())
            .collect()
    })
}

/// `bytes` as the JSON shape `T`, or a [`ModelError::Decode`] saying it is not `what` and quoting
/// its start.
pub(crate) fn decode_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ModelError::Decode(format!(
            "{what} ({e}): {}",
            truncate(&String::from_utf8_lossy(bytes), QUOTED_CHARS)
        ))
    })
}

/// The JSON shape `T` an event carries, `None` for an event without data; else as
/// [`decode_json`].
pub(crate) fn decode_event<T: DeserializeOwned>(
    event: &SseEvent,
    what: &str,
) -> Result<Option<T>, ModelError> {
    let data = event.data.trim();
    if data.is_empty() {
        return Ok(None);
    }
    decode_json(data.as_bytes(), what).map(Some)
}

/// A stream event's kind: its JSON `type`, else the SSE event name.
pub(crate) fn event_type(v: &Value, event: &SseEvent) -> String {
    v.get("type")
        .and_then(Value::as_str)
        .or(event.event.as_deref())
        .unwrap_or("")
        .to_owned()
}

/// A provider's `error` as text: `"<kind>: <message>"` when the object names its kind under
/// `kind_key`, else its `message`, else the error as sent.
pub(crate) fn error_description(error: &Value, kind_key: Option<&str>) -> String {
    let field = |k: &str| error.get(k).and_then(Value::as_str);
    match (kind_key.and_then(field), field("message")) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (None, Some(message)) => message.to_owned(),
        _ => match error {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    }
}

/// A vendor's description of its `error` object (each vendor's `error_text`).
pub(crate) type ErrorText = fn(&Value) -> String;

/// A 2xx body's `error` (described by `text`) where the answer should be, as a
/// [`ModelError::Decode`].
pub(crate) fn error_in_answer(error: Option<&Value>, text: ErrorText) -> Result<(), ModelError> {
    error_present(error, text, |t| {
        ModelError::Decode(format!("provider answered 2xx with an error: {t}"))
    })
}

/// A stream chunk's `error` (described by `text`), as a [`ModelError::Stream`].
pub(crate) fn error_mid_stream(error: Option<&Value>, text: ErrorText) -> Result<(), ModelError> {
    error_present(error, text, |t| {
        ModelError::Stream(format!("provider sent an error mid-stream: {t}"))
    })
}

/// `Err(wrap(text(error)))` when `error` is there and not `null`.
fn error_present(
    error: Option<&Value>,
    text: ErrorText,
    wrap: impl FnOnce(String) -> ModelError,
) -> Result<(), ModelError> {
    match error.filter(|e| !e.is_null()) {
        Some(e) => Err(wrap(text(e))),
        None => Ok(()),
    }
}

/// A 2xx body whose `field` (`type`, `object`) names another kind of object than `expected`.
pub(crate) fn check_kind(field: &str, got: Option<&str>, expected: &str) -> Result<(), ModelError> {
    match got {
        Some(kind) if kind != expected => Err(ModelError::Decode(format!(
            "response has {field} '{kind}', expected '{expected}'"
        ))),
        _ => Ok(()),
    }
}

/// Give a raw tool call without a usable `id` a generated `{prefix}<uuid>`, so its result can be
/// paired with it.
pub(crate) fn ensure_call_id(call: &mut Object, prefix: &str) {
    let has_id = call
        .get("id")
        .and_then(Value::as_str)
        .is_some_and(|id| !id.is_empty());
    if !has_id {
        let id = generated_id(prefix);
        tracing::debug!(%id, "provider sent a tool call without an id; generated one");
        call.insert("id".into(), Value::String(id));
    }
}

/// A fresh tool-call id, `{prefix}<uuid>`.
fn generated_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// The provider's tool-call id when it sent a usable one, else a generated `call_<uuid>`.
pub(crate) fn call_id_or_new(id: Option<String>) -> String {
    id.filter(|id| !id.is_empty())
        .unwrap_or_else(|| generated_id("call_"))
}

/// An answer's tool calls as LangChain splits them: the calls to run, and the invalid ones (no
/// name, or arguments that are not a JSON object) kept with their raw arguments and the reason.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    pub valid: Vec<ToolCall>,
    pub invalid: Vec<InvalidToolCall>,
}

impl Calls {
    pub(crate) fn valid(&mut self, id: Option<String>, name: String, args: Object) {
        self.valid.push(ToolCall {
            name,
            args,
            id,
            kind: "tool_call".into(),
        });
    }

    pub(crate) fn invalid(
        &mut self,
        id: Option<String>,
        name: Option<String>,
        args: Option<String>,
        error: impl Into<String>,
    ) {
        self.invalid.push(InvalidToolCall {
            kind: "invalid_tool_call".into(),
            id,
            name,
            args,
            error: Some(error.into()),
        });
    }

    /// No call at all, valid or not.
    pub(crate) fn is_empty(&self) -> bool {
        self.valid.is_empty() && self.invalid.is_empty()
    }
}

/// `additional_kwargs` holding the answer's reasoning text as `reasoning_content`, when it has
/// any.
pub(crate) fn reasoning_kwargs(reasoning: String) -> Object {
    let mut kwargs = Object::new();
    if !reasoning.is_empty() {
        kwargs.insert("reasoning_content".into(), Value::String(reasoning));
    }
    kwargs
}

/// The message an answer folds into, with id `message_id`.
pub(crate) fn answer_message(
    message_id: &str,
    content: Content,
    additional_kwargs: Object,
    response_metadata: Object,
    calls: Calls,
    usage_metadata: Option<UsageMetadata>,
) -> AiMessage {
    AiMessage {
        content,
        additional_kwargs: additional_kwargs.into(),
        response_metadata: response_metadata.into(),
        name: None,
        id: Some(message_id.to_owned()),
        tool_calls: calls.valid.into(),
        invalid_tool_calls: calls.invalid.into(),
        usage_metadata,
    }
}

/// Token counts that are set, by LangChain's names (`cache_read`, `reasoning`, …), as a usage
/// details object; `None` when none is.
pub(crate) fn token_details<'k>(
    counts: impl IntoIterator<Item = (&'k str, Option<u64>)>,
) -> Option<Object> {
    let details: Object = counts
        .into_iter()
        .filter_map(|(name, n)| Some((name.to_owned(), Value::from(n?))))
        .collect();
    (!details.is_empty()).then_some(details)
}

/// The metadata every answer carries, in LangChain's keys: `finish_reason` (OpenAI's
/// vocabulary), `model_name` (the call's model when the answer names none) and the provider's
/// answer `id`.
pub(crate) fn response_metadata(
    finish_reason: Option<&str>,
    model: Option<String>,
    default_model: &str,
    provider_id: Option<String>,
) -> Object {
    // Room for these, a `system_fingerprint` and the `model_provider` the runtime stamps: the
    // map is kept with the message for the thread's life, so it is sized once.
    let mut meta = Object::with_capacity(5);
    meta.insert(
        "finish_reason".into(),
        finish_reason.map_or(Value::Null, Value::from),
    );
    meta.insert(
        "model_name".into(),
        Value::String(model.unwrap_or_else(|| default_model.to_owned())),
    );
    if let Some(id) = provider_id {
        meta.insert("id".into(), Value::String(id));
    }
    meta
}

/// An empty delta of message `id`.
pub(crate) fn delta_chunk(id: &str) -> AiMessageChunk {
    AiMessageChunk {
        id: Some(id.to_owned()),
        ..Default::default()
    }
}

/// Whether a delta carries anything worth forwarding.
pub(crate) fn has_payload(c: &AiMessageChunk) -> bool {
    !(c.content.is_empty() && c.additional_kwargs.is_empty() && c.tool_call_chunks.is_empty())
}

/// Append `delta` to the string at `key`, creating it when absent.
pub(crate) fn append_str(obj: &mut Object, key: &str, delta: &str) {
    match obj.get_mut(key) {
        Some(Value::String(s)) => s.push_str(delta),
        _ => {
            obj.insert(key.to_owned(), Value::from(delta));
        }
    }
}

/// A tool call that arrived whole in a stream, as one complete chunk at position `index`.
pub(crate) fn whole_call_chunk(
    id: &str,
    name: Option<String>,
    args: String,
    index: usize,
) -> ToolCallChunk {
    ToolCallChunk {
        name,
        args: Some(args),
        id: Some(id.to_owned()),
        index: Some(index as i64),
        kind: "tool_call_chunk".into(),
    }
}

/// A provider-neutral tool choice in the OpenAI family's vocabulary: `auto`/`none`/`required`
/// stay, `any` and `true` mean `required`, `false` means `none`, another string names a
/// function (shaped by `function`), and so does an object whose name `object_name` finds;
/// anything else is sent as given.
pub(crate) fn openai_tool_choice(
    choice: &Value,
    function: impl Fn(&str) -> Value,
    object_name: impl Fn(&Object) -> Option<&str>,
) -> Value {
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" | "none" | "required" => choice.clone(),
            "any" => Value::from("required"),
            name => function(name),
        },
        Value::Bool(true) => Value::from("required"),
        Value::Bool(false) => Value::from("none"),
        Value::Object(o) => object_name(o).map_or_else(|| choice.clone(), function),
        other => other.clone(),
    }
}

/// The call's tool choice as `map` words it; none without tools.
pub(crate) fn call_tool_choice(req: &ChatRequest<'_>, map: fn(&Value) -> Value) -> Option<Value> {
    if req.tools.is_empty() {
        None
    } else {
        req.tool_choice.map(map)
    }
}

/// A configured `tool_choice` among the body fields: dropped with `parallel_tool_calls` when the
/// call has no tools (OpenAI rejects them then), dropped for the call's own choice, else worded
/// by `map`.
pub(crate) fn settle_tool_choice(
    fields: &mut Object,
    req: &ChatRequest<'_>,
    map: fn(&Value) -> Value,
) {
    if req.tools.is_empty() {
        fields.remove("tool_choice");
        fields.remove("parallel_tool_calls");
    } else if req.tool_choice.is_some() {
        fields.remove("tool_choice");
    } else if let Some(choice) = fields.get_mut("tool_choice") {
        *choice = map(choice);
    }
}

/// Inserts `value` at `key` when it is set.
pub(crate) fn insert_some(fields: &mut Object, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        fields.insert(key.into(), v.into());
    }
}

/// The body of an OpenAI-family call (Chat Completions, Responses), borrowed from the request:
/// `model`, the history `H` under `history_key`, the tools as `tool` shapes each, then
/// [`end_body`]'s tail.
pub struct OpenAiBody<'a, H, T> {
    pub(crate) model: &'a str,
    pub(crate) history_key: &'static str,
    pub(crate) history: H,
    pub(crate) tools: &'a [Arc<ToolSpec>],
    pub(crate) tool: fn(&'a ToolSpec) -> T,
    /// The wire format's cache of encoded tools.
    pub(crate) tool_cache: &'static ToolJsonCache,
    pub(crate) tool_choice: Option<Value>,
    pub(crate) stream: bool,
    pub(crate) params: Object,
}

impl<H: Serialize, T: Serialize> Serialize for OpenAiBody<'_, H, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry(self.history_key, &self.history)?;
        self.serialize_rest(&mut m)?;
        end_body(m, self.tool_choice.as_ref(), self.stream, &self.params)
    }
}

impl<H, T: Serialize> OpenAiBody<'_, H, T> {
    fn serialize_rest<M: SerializeMap>(&self, m: &mut M) -> Result<(), M::Error> {
        serialize_cached_tools(m, self.tool_cache, self.tools, |t| (self.tool)(t))
    }

    /// Writes the body into `out`, the history by `history` (which must write one JSON
    /// value): the same bytes as its `Serialize`, but the history written straight into the
    /// buffer, so it can copy what it kept encoded.
    pub(crate) fn write_json(
        &self,
        out: &mut Vec<u8>,
        history: impl FnOnce(&H, &mut Vec<u8>) -> serde_json::Result<()>,
    ) -> serde_json::Result<()> {
        /// The fields after the history, as a map of their own.
        struct Rest<'b, 'a, H, T>(&'b OpenAiBody<'a, H, T>);
        impl<H, T: Serialize> Serialize for Rest<'_, '_, H, T> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let body = self.0;
                let mut m = s.serialize_map(None)?;
                body.serialize_rest(&mut m)?;
                end_body(m, body.tool_choice.as_ref(), body.stream, &body.params)
            }
        }
        out.extend_from_slice(b"{\"model\":");
        serde_json::to_writer(&mut *out, self.model)?;
        out.push(b',');
        serde_json::to_writer(&mut *out, self.history_key)?;
        out.push(b':');
        history(&self.history, out)?;
        // `{…}` continues the body from its first field on; `{}` closes it.
        let at = out.len();
        serde_json::to_writer(&mut *out, &Rest(self))?;
        if out.len() == at + 2 {
            out.truncate(at);
            out.push(b'}');
        } else {
            out[at] = b',';
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn spec(name: &str) -> Arc<ToolSpec> {
        Arc::new(ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters: json!({"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}),
        })
    }

    /// `{"tools": …}` written through `cache`, and written inline.
    fn both(cache: &ToolJsonCache, tools: &[Arc<ToolSpec>]) -> (String, String) {
        struct Body<'a>(&'a ToolJsonCache, &'a [Arc<ToolSpec>], bool);
        impl Serialize for Body<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                let wire = |t: &Arc<ToolSpec>| {
                    json!({
                        "type": "function", "name": t.name,
                        "description": t.description, "parameters": t.parameters,
                    })
                };
                if self.2 {
                    serialize_cached_tools(&mut m, self.0, self.1, wire)?;
                } else {
                    serialize_tools(&mut m, self.1, wire)?;
                }
                m.end()
            }
        }
        (
            serde_json::to_string(&Body(cache, tools, true)).unwrap(),
            serde_json::to_string(&Body(cache, tools, false)).unwrap(),
        )
    }

    #[test]
    fn cached_tool_encodings_are_the_inline_bytes_and_follow_the_spec() {
        let cache = ToolJsonCache::new();
        let (a, b) = (spec("a"), spec("b"));
        let tools = vec![a.clone(), b.clone()];
        let (cached, inline) = both(&cache, &tools);
        assert_eq!(cached, inline);
        assert!(cached.contains(r#""properties":{"z":{"type":"string"},"a":{"type":"integer"}}"#));
        // The same specs again: the same encodings, not new ones.
        let first = cache.tools(&tools, |t| t.name.clone()).unwrap();
        let again = cache.tools(&tools, |t| t.name.clone()).unwrap();
        assert!(Arc::ptr_eq(&first[0], &again[0]) && Arc::ptr_eq(&first[1], &again[1]));
        // Another spec of the same name is another entry, with its own content.
        let mut other = (*a).clone();
        other.description = "changed".into();
        let tools2 = vec![Arc::new(other), b];
        let (cached2, inline2) = both(&cache, &tools2);
        assert_eq!(cached2, inline2);
        assert_ne!(cached2, cached);
        assert_eq!(both(&cache, &[]).0, "{}");
    }

    #[test]
    fn encoded_texts_follow_the_text_and_keep_the_latest_few() {
        let cache = EncodedTexts::new();
        let prompt = "say \"hi\"\n".repeat(100);
        let first = cache.get(&prompt, || json!({"content": prompt})).unwrap();
        assert_eq!(
            first.get(),
            serde_json::to_string(&json!({"content": prompt})).unwrap()
        );
        // The same text again (another allocation): the same encoding, not made again.
        let copy = prompt.clone();
        let again = cache.get(&copy, || -> Value { unreachable!() }).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // Another text is encoded on its own; past the limit the oldest is forgotten.
        for i in 0..ENCODED_TEXTS {
            let t = format!("{prompt}{i}");
            let raw = cache.get(&t, || json!({"content": t})).unwrap();
            assert!(raw.get().ends_with(&format!("{i}\"}}")), "{}", raw.get());
        }
        let made = std::cell::Cell::new(false);
        cache.get(&prompt, || {
            made.set(true);
            json!({"content": prompt})
        });
        assert!(made.get());
    }

    #[test]
    fn entries_of_dropped_specs_are_swept() {
        let cache = ToolJsonCache::new();
        let kept = spec("kept");
        cache
            .tools(std::slice::from_ref(&kept), |t| t.name.clone())
            .unwrap();
        for i in 0..ARC_JSON_SWEEP + 10 {
            cache
                .tools(&[spec(&format!("t{i}"))], |t| t.name.clone())
                .unwrap();
        }
        let len = cache.len();
        assert!(len < ARC_JSON_SWEEP, "{len} entries");
        let again = cache
            .tools(std::slice::from_ref(&kept), |t| t.name.clone())
            .unwrap();
        assert_eq!(again[0].get(), r#""kept""#);
    }
}
