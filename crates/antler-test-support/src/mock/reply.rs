//! [`Reply<W>`]: one scripted answer of a [`super::MockServer<W>`] — what to answer (a message
//! in the vendor's terms, an error, a raw body, nothing) and how (headers, delays, a stream cut
//! short, stalled, kept warm or split into tiny writes). The vendor modules add constructors in
//! their own terms (`MockReply::tool_call`, `AnthropicReply::blocks`, …).

use std::time::Duration;

use serde_json::Value;

use super::{MockAnswer, MockWire};

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ReplyBody<A> {
    Message(A),
    Error { status: u16, body: Value },
    Raw { status: u16, body: String },
    Hang,
}

/// One scripted answer; answered as JSON or as a stream depending on the request's `stream`
/// flag. Events are counted from the first one the vendor sends.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply<W: MockWire> {
    pub(crate) body: ReplyBody<W::Answer>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) delay: Duration,
    pub(crate) chunk_delay: Duration,
    pub(crate) stall_after: Option<usize>,
    pub(crate) keepalive: Option<Duration>,
    pub(crate) drop_after: Option<usize>,
    pub(crate) error_after: Option<(usize, Value)>,
    pub(crate) fragment_size: Option<usize>,
}

impl<W: MockWire> Reply<W> {
    fn new(body: ReplyBody<W::Answer>) -> Self {
        Reply {
            body,
            headers: Vec::new(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            stall_after: None,
            keepalive: None,
            drop_after: None,
            error_after: None,
            fragment_size: None,
        }
    }

    /// A successful answer in the vendor's terms (see the vendor's constructors for the usual
    /// shapes, and [`Reply::text`] in code generic over the vendor).
    pub fn answer(answer: W::Answer) -> Self {
        Self::new(ReplyBody::Message(answer))
    }

    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::answer(W::text(&text.into()))
    }

    /// An HTTP error with a JSON body (e.g. `openai_error`, `anthropic_error`).
    pub fn error(status: u16, body: Value) -> Self {
        Self::new(ReplyBody::Error { status, body })
    }

    /// `body` sent verbatim with `status` (as `application/json`, or `text/event-stream` when the
    /// request streams): invalid JSON, odd shapes, hand-written SSE.
    pub fn raw_body(status: u16, body: &str) -> Self {
        Self::new(ReplyBody::Raw {
            status,
            body: body.to_owned(),
        })
    }

    /// Never answers (until the server is dropped).
    pub fn hang() -> Self {
        Self::new(ReplyBody::Hang)
    }

    /// The scripted answer, when this reply is one.
    pub(crate) fn answer_mut(&mut self) -> Option<&mut W::Answer> {
        match &mut self.body {
            ReplyBody::Message(a) => Some(a),
            ReplyBody::Error { .. } | ReplyBody::Raw { .. } | ReplyBody::Hang => None,
        }
    }

    pub(crate) fn answer_ref(&self) -> Option<&W::Answer> {
        match &self.body {
            ReplyBody::Message(a) => Some(a),
            ReplyBody::Error { .. } | ReplyBody::Raw { .. } | ReplyBody::Hang => None,
        }
    }

    /// The reply with `edit` applied to its answer (errors, raw bodies and hangs stay as they are).
    pub(crate) fn with_answer(mut self, edit: impl FnOnce(&mut W::Answer)) -> Self {
        if let Some(a) = self.answer_mut() {
            edit(a);
        }
        self
    }

    /// The reply with `edit` applied to its answer's scripted token counts (zeros until set).
    pub(crate) fn with_usage(self, edit: impl FnOnce(&mut MockUsage)) -> Self {
        self.with_answer(|a| edit(a.usage_mut()))
    }

    /// Token usage to report (otherwise estimated as bytes / 4 of request and answer).
    pub fn usage(self, input: u64, output: u64) -> Self {
        self.with_answer(|a| a.set_usage(input, output))
    }

    /// An extra response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// `Retry-After: <secs>`.
    pub fn retry_after(self, secs: u64) -> Self {
        self.header("retry-after", secs.to_string())
    }

    /// Wait this long before answering at all.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Streams: wait this long before every event after the first.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Streams: send `n` events, then go silent (connection kept open).
    pub fn stall_after_events(mut self, n: usize) -> Self {
        self.stall_after = Some(n);
        self
    }

    /// Streams: while stalled (see [`Reply::stall_after_events`]), send the vendor's keep-alive
    /// every `every` instead of silence (OpenAI: the SSE comment `: ping`; Anthropic: a `ping`
    /// event) — a server that keeps the connection warm without answering.
    pub fn keepalive_while_stalled(mut self, every: Duration) -> Self {
        self.keepalive = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// Streams: send `n` events, then end the body without the vendor's end of stream.
    pub fn drop_after_events(mut self, n: usize) -> Self {
        self.drop_after = Some(n);
        self
    }

    /// Streams: send `n` events, then the vendor's error event carrying `error` and end the body.
    pub fn error_after_events(mut self, n: usize, error: Value) -> Self {
        self.error_after = Some((n, error));
        self
    }

    /// Streams: re-cut the SSE bytes into pieces of `n` bytes, so lines split across writes.
    pub fn sse_fragment_size(mut self, n: usize) -> Self {
        self.fragment_size = Some(n.max(1));
        self
    }

    /// The SSE frames of `events` as this reply sends them: cut short by `error_after`,
    /// `drop_after` or `stall_after`, ended by the vendor's end-of-stream frame when complete.
    /// `true` with them when the stream then stalls (connection kept open).
    pub(crate) fn frames(&self, events: &[Value]) -> (Vec<String>, bool) {
        let mut frames = Vec::new();
        for (i, event) in events.iter().enumerate() {
            if let Some((at, err)) = &self.error_after {
                if *at == i {
                    frames.push(W::frame(&W::error_event(err)));
                    return (frames, false);
                }
            }
            if self.drop_after == Some(i) {
                return (frames, false);
            }
            if self.stall_after == Some(i) {
                return (frames, true);
            }
            frames.push(W::frame(event));
        }
        if let Some((at, err)) = &self.error_after {
            if *at >= events.len() {
                frames.push(W::frame(&W::error_event(err)));
                return (frames, false);
            }
        }
        if self.stall_after.is_some_and(|n| n >= events.len()) {
            return (frames, true);
        }
        if let (None, Some(done)) = (self.drop_after, W::DONE) {
            frames.push(done.to_owned());
        }
        (frames, false)
    }
}

/// Text as streamed deltas: word by word, or in three pieces for a single word.
pub(crate) fn split_text(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    if words.len() > 1 {
        words.into_iter().map(str::to_owned).collect()
    } else {
        split_even(text, 3)
    }
}

/// `text` in up to `n` non-empty pieces of about equal length (on char boundaries).
pub(crate) fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The usage a reply reports when none is scripted: about 4 bytes a token of request and answer.
pub(crate) fn estimated_tokens(bytes: usize) -> u64 {
    (bytes as u64 / 4).max(1)
}

/// Scripted token counts; each vendor reports the ones its API has.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MockUsage {
    pub input: u64,
    pub output: u64,
    /// Prompt tokens read from a cache.
    pub cached: u64,
    /// Prompt tokens written to a cache (Anthropic).
    pub cache_creation: u64,
    /// Reasoning (thought) tokens.
    pub reasoning: u64,
}

impl MockUsage {
    /// Report `input` prompt and `output` completion tokens.
    pub(crate) fn set(&mut self, input: u64, output: u64) {
        self.input = input;
        self.output = output;
    }

    /// The `scripted` counts, else an estimate from the prompt's size and the answer's
    /// (`answer_bytes`).
    pub(crate) fn or_estimate(
        scripted: Option<MockUsage>,
        prompt_bytes: usize,
        answer_bytes: impl FnOnce() -> usize,
    ) -> MockUsage {
        scripted.unwrap_or_else(|| MockUsage {
            input: estimated_tokens(prompt_bytes),
            output: estimated_tokens(answer_bytes()),
            ..MockUsage::default()
        })
    }
}

/// Per-answer values of the wires whose objects carry an id and the model (Anthropic, Responses).
pub struct IdRender {
    pub(crate) id: String,
    pub(crate) model: String,
    /// Size of the request's prompt fields, for the usage estimate.
    pub(crate) prompt_bytes: usize,
}

impl IdRender {
    /// The values of an answer rendered outside a server (no request to size).
    pub(crate) fn standalone(id: &str, model: &str) -> Self {
        IdRender {
            id: id.into(),
            model: model.into(),
            prompt_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_helpers_keep_all_text() {
        assert_eq!(split_text("a bc d"), vec!["a ", "bc ", "d"]);
        assert_eq!(split_text("héllo!"), vec!["hé", "ll", "o!"]);
        assert_eq!(split_even("ab", 3), vec!["a", "b"]);
        assert!(split_even("", 3).is_empty());
    }
}
