//! Framing `values` events for one subscriber from the JSON of each message it has already
//! written.
//!
//! A `values` event carries the whole state, and a run emits one after every superstep that
//! changed it (about three per tool round): at 1,000 messages that is ~400 KB of JSON each time,
//! almost all of it messages the subscriber was sent a moment ago. Messages are immutable and
//! shared by address (`Arc<Message>`), so a subscriber keeps the JSON of each message of the
//! last state it framed, keyed by address (holding the message, so the address cannot be
//! reused), and frames the next state by copying those bytes and encoding only the messages it
//! has not seen. What it keeps is one state's messages: entries the newest frame did not use
//! are dropped after it. The bytes are those [`crate::wire::state_string`] writes.

use std::sync::Arc;

use antler_protocol::hash::AddrMap;
use antler_protocol::{Message, ThreadState};
use bytes::{BufMut, BytesMut};

/// How the serialized state begins: `messages` is the first field, and the state framed from
/// a snapshot's fields has none.
const EMPTY_MESSAGES_PREFIX: &str = "{\"messages\":[]";

struct Encoded {
    /// Keeps the address the entry is keyed by from being reused.
    _message: Arc<Message>,
    json: Box<[u8]>,
    /// The frame that last used it.
    frame: u64,
}

/// One subscriber's encodings (see the module docs).
#[derive(Default)]
pub(super) struct ValuesEncoder {
    messages: AddrMap<Encoded>,
    /// The fields of the last state framed, and their JSON after [`EMPTY_MESSAGES_PREFIX`].
    fields: Option<(Arc<ThreadState>, Box<str>)>,
    frames: u64,
    /// Length of the last frame written: the next one's capacity hint.
    last_len: usize,
}

/// A message's JSON as it appears in the state.
fn encode(message: &Message) -> Option<Box<[u8]>> {
    let json = if crate::wire::needs_strip(message) {
        serde_json::to_vec(&crate::wire::message_value(message))
    } else {
        serde_json::to_vec(message)
    };
    json.ok().map(Vec::into_boxed_slice)
}

impl ValuesEncoder {
    /// Room for the next `values` frame: the last one's length and slack for what the run
    /// appended since (growing a buffer of a long state would copy all of it).
    pub(super) fn size_hint(&self) -> usize {
        self.last_len + self.last_len / 8 + 1024
    }

    /// Appends the `values` frame of the state `fields` (its `messages` empty) with the
    /// messages `parts` (in order) to `out`. `false` (nothing written) when a part cannot be
    /// encoded; the caller then frames the state the plain way.
    pub(super) fn write<'a>(
        &mut self,
        fields: &Arc<ThreadState>,
        parts: impl IntoIterator<Item = &'a [Arc<Message>]>,
        id: &str,
        out: &mut BytesMut,
    ) -> bool {
        if !self.cache_fields(fields) {
            return false;
        }
        let start = out.len();
        out.reserve(self.size_hint());
        out.put_slice(b"event: values\ndata: {\"messages\":[");
        self.frames += 1;
        let frame = self.frames;
        let mut count = 0usize;
        for part in parts {
            for message in part {
                if count > 0 {
                    out.put_u8(b',');
                }
                count += 1;
                let entry = self
                    .messages
                    .entry(Arc::as_ptr(message) as usize)
                    .or_insert_with(|| Encoded {
                        _message: message.clone(),
                        json: Box::default(),
                        frame: 0,
                    });
                if entry.frame == 0 {
                    let Some(json) = encode(message) else {
                        out.truncate(start);
                        return false;
                    };
                    entry.json = json;
                }
                entry.frame = frame;
                out.put_slice(&entry.json);
            }
        }
        out.put_u8(b']');
        if let Some((_, rest)) = &self.fields {
            out.put_slice(rest.as_bytes());
        }
        out.put_slice(b"\nid: ");
        out.put_slice(id.as_bytes());
        out.put_slice(b"\n\n");
        // Keep one state's messages: drop what this frame did not show (replaced, removed).
        if self.messages.len() > count {
            self.messages.retain(|_, e| e.frame == frame);
        }
        self.last_len = out.len() - start;
        true
    }

    /// Keeps the JSON of `fields` after `{"messages":[]` (the run hands over the same fields
    /// while they do not change); `false` when it cannot be written that way.
    fn cache_fields(&mut self, fields: &Arc<ThreadState>) -> bool {
        if matches!(&self.fields, Some((f, _)) if Arc::ptr_eq(f, fields)) {
            return true;
        }
        self.fields = None;
        if !fields.messages.is_empty() {
            return false;
        }
        let Ok(json) = serde_json::to_string(&**fields) else {
            return false;
        };
        let Some(rest) = json.strip_prefix(EMPTY_MESSAGES_PREFIX) else {
            return false;
        };
        self.fields = Some((fields.clone(), rest.into()));
        true
    }

    /// Lets go of everything kept (the run's states are read back from the store from now on).
    pub(super) fn clear(&mut self) {
        self.messages = AddrMap::default();
        self.fields = None;
    }

    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.messages.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_protocol::{Content, Messages};
    use serde_json::json;

    fn frame(enc: &mut ValuesEncoder, state: &ThreadState) -> String {
        let mut fields = state.clone();
        let messages: Vec<Arc<Message>> = state.messages.arcs().cloned().collect();
        fields.messages = Messages::default();
        let mut out = BytesMut::new();
        assert!(enc.write(&Arc::new(fields), [messages.as_slice()], "9-1", &mut out));
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn expected(state: &ThreadState) -> String {
        let b = crate::sse::frame_bytes("values", &crate::wire::state_string(state), "9-1");
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// A hidden human message with an inline image: the state shows it without the image.
    fn hidden_with_image() -> Message {
        let mut m = Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "look"}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
        ]));
        m.set_id("hidden-1");
        antler_protocol::markers::mark_hidden(m.additional_kwargs_mut());
        m
    }

    #[test]
    fn frames_are_the_bytes_of_the_plain_serialization() {
        let mut enc = ValuesEncoder::default();
        let mut state = ThreadState::default();
        assert_eq!(frame(&mut enc, &state), expected(&state));
        state.title = Some("a \"title\"\n".into());
        state
            .extensions
            .insert("custom_key".into(), json!({"x": [1.5, -2, null]}));
        for i in 0..5 {
            let mut m = Message::human(format!("m{i} é \u{1F600} \\"));
            m.set_id(format!("id{i}"));
            state.messages.push(m);
        }
        let mut ai = Message::ai("answer");
        ai.set_id("ai-1");
        state.messages.push(ai);
        assert_eq!(frame(&mut enc, &state), expected(&state));
        // A message the state shows stripped: the whole state goes through the value path.
        state.messages.push(hidden_with_image());
        assert!(state.messages.iter().any(crate::wire::needs_strip));
        let out = frame(&mut enc, &state);
        assert!(!out.contains("base64"), "{out}");
        assert_eq!(out, expected(&state));
    }

    #[test]
    fn keeps_the_messages_of_the_last_frame_only() {
        let mut enc = ValuesEncoder::default();
        let mut state = ThreadState::default();
        for i in 0..10 {
            let mut m = Message::human(format!("m{i}"));
            m.set_id(format!("id{i}"));
            state.messages.push(m);
        }
        assert_eq!(frame(&mut enc, &state), expected(&state));
        assert_eq!(enc.kept(), 10);
        // Replace one by id, remove another: the old versions are let go of.
        let mut replaced = Message::human("replaced");
        replaced.set_id("id3");
        state.messages.push(replaced);
        state.messages.add(vec![Message::remove("id5")]).unwrap();
        let out = frame(&mut enc, &state);
        assert!(out.contains("replaced") && !out.contains("\"m5\""), "{out}");
        assert_eq!(out, expected(&state));
        assert_eq!(enc.kept(), 9);
        enc.clear();
        assert_eq!(enc.kept(), 0);
        assert_eq!(frame(&mut enc, &state), expected(&state));
    }

    #[test]
    fn a_message_seen_before_is_not_encoded_again() {
        let mut enc = ValuesEncoder::default();
        let mut state = ThreadState::default();
        state.messages.push(Message::human("first"));
        frame(&mut enc, &state);
        // Same address: the kept bytes are used (tamper with them to see it).
        let key = Arc::as_ptr(state.messages.arcs().next().unwrap()) as usize;
        enc.messages.get_mut(&key).unwrap().json = b"{\"kept\":true}".to_vec().into();
        state.messages.push(Message::human("second"));
        let out = frame(&mut enc, &state);
        assert!(out.contains("{\"kept\":true},{"), "{out}");
    }
}
