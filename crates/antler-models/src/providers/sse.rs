//! Incremental decoder for streamed bodies, shared by every wire format: `text/event-stream`
//! (OpenAI-compatible chat completions and Anthropic messages) and, for APIs that stream one JSON
//! document per line, NDJSON.
//!
//! Bytes arrive in arbitrary network chunks: a line may be split anywhere, one chunk may hold many
//! events. Lines end in `\n`, `\r\n` or a lone `\r` (even when the `\r` and `\n` of one line ending
//! land in different chunks). `data:` lines accumulate until a blank line dispatches the event;
//! `:` comments, `id:` and `retry:` are ignored. [`SseDecoder::finish`] flushes an event the
//! server did not terminate with a blank line. In [`Framing::JsonLines`] every non-blank line is
//! an event of its own.

use super::driver::Framing;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the server sent one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// A single line longer than this is treated as a broken stream rather than buffered forever.
const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// The line is longer than [`MAX_LINE_BYTES`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LineTooLong;

#[derive(Debug)]
pub(crate) struct SseDecoder {
    framing: Framing,
    /// Bytes of the current, unterminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a leading `\n` belongs to that line ending.
    skip_lf: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
}

impl SseDecoder {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::for_framing(Framing::Sse)
    }

    pub(crate) fn for_framing(framing: Framing) -> Self {
        SseDecoder {
            framing,
            line: Vec::new(),
            skip_lf: false,
            data: String::new(),
            has_data: false,
            event: None,
        }
    }

    /// Feed the next network chunk; complete events are appended to `out`.
    pub(crate) fn push(
        &mut self,
        mut bytes: &[u8],
        out: &mut Vec<SseEvent>,
    ) -> Result<(), LineTooLong> {
        if self.skip_lf {
            self.skip_lf = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(pos) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let (head, tail) = bytes.split_at(pos);
            let is_cr = tail[0] == b'\r';
            bytes = &tail[1..];
            if is_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            if self.line.is_empty() {
                self.take_line(head, out);
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                self.take_line(&line, out);
            }
        }
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            return Err(LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// End of body: an unterminated last line and a pending event are flushed.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.take_line(&line, out);
        }
        self.dispatch(out);
    }

    fn take_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if self.framing == Framing::JsonLines {
            let text = String::from_utf8_lossy(line);
            if !text.trim().is_empty() {
                out.push(SseEvent {
                    event: None,
                    data: text.into_owned(),
                });
            }
            return;
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
