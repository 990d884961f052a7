//! InputSanitization (chain S1, wrap_model): the user's latest message reaches the model with
//! framework tags escaped and framed between `--- BEGIN USER INPUT ---` / `--- END USER INPUT ---`
//! (the system prompt tells the model what the frame means). Request-only: state keeps the
//! user's own words.
//!
//! First in the chain, so it is the outermost model wrapper: every inner wrapper — LLM retries
//! included — sees the sanitized text, and inner wrappers may still add trusted hidden context
//! that must not be escaped. Only the last *genuine* user message is processed (not the summary,
//! not hidden injected reminders — but a hidden clarification answer is the user's own words).
//! When Uploads prepended its `<current_uploads>` block, only the user's part
//! (`additional_kwargs.original_user_content`) is framed, so the trusted block stays intact.

use std::sync::{Arc, Weak};

use antler_protocol::identity::shared_prefix;
use antler_protocol::untrusted::{frame, neutralize};
use antler_protocol::{Content, HumanMessage, Message};
use antler_runtime::{HookSet, Middleware, ModelNext, ModelRequest, RunKey};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::hook::ModelResult;
use crate::memory::preprocess::is_human_input_response;

/// The middleware's name in `updates` events and `antler chain`.
pub const NAME: &str = "InputSanitizationMiddleware";

/// The kwarg Uploads (and IM channels) set to the user's text before any framing.
pub const ORIGINAL_USER_CONTENT: &str = "original_user_content";

/// Options of the input sanitizer (DeerFlow has none; on unless switched off here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSanitizationSettings {
    /// Frame and neutralize the user's message.
    pub enabled: bool,
}

impl Default for InputSanitizationSettings {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct InputSanitizationMiddleware {
    settings: InputSanitizationSettings,
}

impl InputSanitizationMiddleware {
    pub fn new(settings: InputSanitizationSettings) -> Self {
        Self { settings }
    }
}

fn is_genuine_user_message(m: &HumanMessage) -> bool {
    if m.name.as_deref() == Some("summary") {
        return false;
    }
    let hidden = m
        .additional_kwargs
        .get("hide_from_ui")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    !hidden || is_human_input_response(&m.additional_kwargs)
}

/// The message's text (bare strings and `text` blocks joined by newlines) and, for block
/// content, the indices of the blocks it came from.
fn extract_text(content: &Content) -> (String, Option<Vec<usize>>) {
    match content {
        Content::Text(s) => (s.clone(), None),
        Content::Blocks(blocks) => {
            let mut parts = Vec::new();
            let mut idx = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                let text = match b {
                    Value::String(s) => Some(s.as_str()),
                    Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                        o.get("text").and_then(Value::as_str)
                    }
                    _ => None,
                };
                if let Some(t) = text.filter(|t| !t.is_empty()) {
                    parts.push(t);
                    idx.push(i);
                }
            }
            (parts.join("\n"), Some(idx))
        }
    }
}

/// Collapse the text blocks into one at the first one's position; non-text blocks that sat
/// between text blocks follow it in order, everything else stays where it was.
fn rebuild_blocks(blocks: &[Value], processed: &str, text_idx: &[usize]) -> Vec<Value> {
    let (Some(&first), Some(&last)) = (text_idx.first(), text_idx.last()) else {
        return blocks.to_vec();
    };
    let mut out: Vec<Value> = blocks[..first].to_vec();
    out.push(json!({"type": "text", "text": processed}));
    out.extend(
        (first + 1..=last)
            .filter(|i| !text_idx.contains(i))
            .map(|i| blocks[i].clone()),
    );
    out.extend_from_slice(&blocks[last + 1..]);
    out
}

/// Neutralize every user block after the server-injected first one.
fn neutralize_later_blocks(blocks: &[Value]) -> Vec<Value> {
    let mut out = vec![blocks[0].clone()];
    for b in &blocks[1..] {
        out.push(match b {
            Value::String(s) => Value::String(neutralize(s)),
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                match o.get("text") {
                    Some(Value::String(s)) => {
                        let mut o = o.clone();
                        o.insert("text".into(), Value::String(neutralize(s)));
                        Value::Object(o)
                    }
                    _ => b.clone(),
                }
            }
            other => other.clone(),
        });
    }
    out
}

/// The sanitized form of one genuine user message, or `None` when it needs no change.
pub fn sanitize_user_message(msg: &HumanMessage) -> Option<HumanMessage> {
    let (text, text_idx) = extract_text(&msg.content);
    if text.is_empty() && !matches!(msg.content, Content::Text(_)) {
        // Image-only content: nothing to frame.
        return None;
    }
    let original = msg.additional_kwargs.get(ORIGINAL_USER_CONTENT);
    let processed = match original {
        Some(Value::String(orig)) if !orig.is_empty() => {
            let framed = frame(orig);
            if framed == *orig {
                text.clone()
            } else if let Some(i) = text.rfind(orig.as_str()) {
                // Only the user's suffix is framed; the server's uploads block stays as it is.
                format!("{}{framed}", &text[..i])
            } else if let Content::Blocks(blocks) = &msg.content {
                if blocks.len() >= 2 {
                    // Cannot locate the user's text: keep the first (server) block, neutralize
                    // the rest without framing.
                    let mut out = msg.clone();
                    out.content = Content::Blocks(neutralize_later_blocks(blocks));
                    return (out.content != msg.content).then_some(out);
                }
                frame(&text)
            } else {
                frame(&text)
            }
        }
        // Present but empty (an upload without text): nothing of the user's to sanitize.
        Some(Value::String(_)) => text.clone(),
        _ => frame(&text),
    };
    if processed == text {
        return None;
    }
    let mut out = msg.clone();
    out.content = match (&msg.content, &text_idx) {
        (Content::Blocks(blocks), Some(idx)) => {
            Content::Blocks(rebuild_blocks(blocks, &processed, idx))
        }
        _ => Content::Text(processed),
    };
    if !matches!(original, Some(Value::String(_))) {
        if original.is_some() {
            tracing::warn!("replacing a non-string {ORIGINAL_USER_CONTENT} before framing");
        }
        // Downstream consumers that need the genuine input (slash skills, regenerate) read it
        // from here rather than from the framed text.
        out.additional_kwargs.insert(
            ORIGINAL_USER_CONTENT.into(),
            Value::String(msg.content.text()),
        );
    }
    Some(out)
}

/// The last genuine user message of a request and its index.
fn last_genuine(messages: &[Arc<Message>]) -> Option<(usize, &Arc<Message>, &HumanMessage)> {
    messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match &**m {
            Message::Human(h) if is_genuine_user_message(h) => Some((i, m, h)),
            _ => None,
        })
}

/// Index and sanitized replacement of the last genuine user message of a request, if it needs
/// one (what the middleware sends, without its per-run memo).
#[cfg(test)]
fn sanitize_messages(messages: &[Arc<Message>]) -> Option<(usize, Message)> {
    let (i, _, human) = last_genuine(messages)?;
    sanitize_user_message(human).map(|h| (i, Message::Human(h)))
}

/// The run's last sanitized message: the original (a `Weak`, so its address cannot be taken by
/// another message while this is held) and its replacement (`None`: nothing to frame). The
/// same user message is framed once per run, and its replacement, one allocation for every
/// call, is encoded once in the run's request encodings instead of on every call.
#[derive(Clone)]
struct Framed {
    of: Weak<Message>,
    with: Option<Arc<Message>>,
}

const FRAMED: RunKey<Framed> = RunKey::new("InputSanitizationMiddleware.framed");

/// The run's last request list: the state's list with the framed message in its place. The
/// next call patches it — appends what is new, replaces what changed — instead of copying the
/// whole history into a new list (the request shares the state's list, so writing into it
/// copies it): O(history) pointer comparisons per call instead of O(history) reference counts
/// and an allocation.
#[derive(Default)]
struct RequestView {
    list: Arc<Vec<Arc<Message>>>,
}

const VIEW: RunKey<RequestView> = RunKey::new("InputSanitizationMiddleware.view");

impl RequestView {
    /// `src` with `framed` at `at`, in the kept list (copied only if a request still holds it).
    fn patch(
        &mut self,
        src: &[Arc<Message>],
        at: usize,
        framed: &Arc<Message>,
    ) -> Arc<Vec<Arc<Message>>> {
        let list = Arc::make_mut(&mut self.list);
        list.truncate(src.len());
        // What the kept list shares with `src` before and after `at` is skipped in rounds.
        let mut k = shared_prefix(list, src).min(at);
        while k < src.len() {
            let want = if k == at { framed } else { &src[k] };
            match list.get_mut(k) {
                Some(slot) if Arc::ptr_eq(slot, want) => {}
                Some(slot) => *slot = want.clone(),
                None => list.push(want.clone()),
            }
            k += 1;
            if k == at + 1 {
                k += shared_prefix(&list[k.min(list.len())..], &src[k..]);
            }
        }
        self.list.clone()
    }
}

#[async_trait]
impl Middleware for InputSanitizationMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL);

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        if self.settings.enabled {
            let found = last_genuine(&req.messages).map(|(i, m, h)| {
                let memo = req.run.get(&FRAMED).filter(|f| {
                    f.of.strong_count() > 0 && std::ptr::eq(f.of.as_ptr(), Arc::as_ptr(m))
                });
                let with = match memo {
                    Some(f) => f.with,
                    None => {
                        let with = sanitize_user_message(h).map(|h| Arc::new(Message::Human(h)));
                        let of = Arc::downgrade(m);
                        req.run.set(
                            &FRAMED,
                            Framed {
                                of,
                                with: with.clone(),
                            },
                        );
                        with
                    }
                };
                (i, with)
            });
            if let Some((i, Some(framed))) = found {
                let src = req.messages.clone();
                if let Some(list) = req.run.update(&VIEW, |view| view.patch(&src, i, &framed)) {
                    req.messages = list;
                } else {
                    req.messages_mut()[i] = framed;
                }
            }
        }
        next.run(req).await
    }
}

#[cfg(test)]
#[path = "input_sanitization_tests.rs"]
mod tests;
