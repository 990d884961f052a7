//! Incremental decoder for the `text/event-stream` body of a streamed Messages call.
//!
//! (The OpenAI adapter has its own decoder in a private module; this one is the same small state
//! machine.) Bytes arrive in arbitrary network chunks: a line may be split anywhere, one chunk may
//! hold many events. Lines end in `\n`, `\r\n` or a lone `\r`, even when the `\r` and `\n` of one
//! ending land in different chunks. `event:` names the event, `data:` lines accumulate until a
//! blank line dispatches it; comments, `id:` and `retry:` are ignored.

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
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

#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, unterminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a leading `\n` completes that line ending.
    skip_lf: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Feed the next network chunk; complete events are appended to `out`.
    pub(crate) fn push(
        &mut self,
        mut bytes: &[u8],
        out: &mut Vec<SseEvent>,
    ) -> Result<(), LineTooLong> {
        if std::mem::take(&mut self.skip_lf) {
            bytes = bytes.strip_prefix(b"\n").unwrap_or(bytes);
        }
        while let Some(pos) = bytes.iter().position(|b| matches!(b, b'\n' | b'\r')) {
            let (head, tail) = bytes.split_at(pos);
            if tail[0] == b'\r' {
                match tail.get(1) {
                    Some(b'\n') => bytes = &tail[2..],
                    Some(_) => bytes = &tail[1..],
                    None => {
                        bytes = &tail[1..];
                        self.skip_lf = true;
                    }
                }
            } else {
                bytes = &tail[1..];
            }
            if self.line.is_empty() {
                self.line_done(head, out);
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, out);
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
            self.line_done(&line, out);
        }
        self.dispatch(out);
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(0) => return,
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
        if std::mem::take(&mut self.has_data) {
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: Some(event.into()),
            data: data.into(),
        }
    }

    #[test]
    fn events_split_anywhere_decode_the_same() {
        let body = "event: ping\ndata: {\"type\":\"ping\"}\r\n\r\n: comment\nevent: message_stop\r\ndata: {}\rdata: x\r\r";
        let expected = vec![
            ev("ping", "{\"type\":\"ping\"}"),
            ev("message_stop", "{}\nx"),
        ];
        for size in 1..body.len() {
            let mut d = SseDecoder::new();
            let mut out = Vec::new();
            for piece in body.as_bytes().chunks(size) {
                d.push(piece, &mut out).unwrap();
            }
            d.finish(&mut out);
            assert_eq!(out, expected, "chunk size {size}");
        }
    }

    #[test]
    fn an_unterminated_event_is_flushed_at_the_end() {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        d.push(b"event: error\ndata: {\"a\":1}", &mut out).unwrap();
        assert!(out.is_empty());
        d.finish(&mut out);
        assert_eq!(out, vec![ev("error", "{\"a\":1}")]);
    }
}
