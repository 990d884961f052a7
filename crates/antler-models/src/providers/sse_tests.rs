#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;

use super::{SseDecoder, SseEvent};

fn data(s: &str) -> SseEvent {
    SseEvent {
        event: None,
        data: s.to_owned(),
    }
}

/// Feed `chunks` one by one and collect every event, flushing at the end.
fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut dec = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        dec.push(c, &mut out).unwrap();
    }
    dec.finish(&mut out);
    out
}

#[test]
fn several_events_in_one_chunk() {
    let body = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
    assert_eq!(
        decode(&[body]),
        vec![data("{\"a\":1}"), data("{\"b\":2}"), data("[DONE]")]
    );
}

#[test]
fn a_line_split_across_chunks_at_every_position() {
    let body = b"data: {\"content\":\"h\xc3\xa9llo\"}\n\ndata: [DONE]\n\n";
    for split in 0..=body.len() {
        let (a, b) = body.split_at(split);
        assert_eq!(
            decode(&[a, b]),
            vec![data("{\"content\":\"h\u{e9}llo\"}"), data("[DONE]")],
            "split at {split}"
        );
    }
}

#[test]
fn one_byte_at_a_time() {
    let body: &[u8] = b"data: one\r\n\r\ndata: two\n\n";
    let chunks: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(decode(&chunks), vec![data("one"), data("two")]);
}

#[test]
fn crlf_and_lone_cr_line_endings() {
    assert_eq!(
        decode(&[b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"]),
        vec![data("a"), data("b"), data("c")]
    );
    // The \r and \n of one line ending in different chunks do not make an extra blank line.
    assert_eq!(
        decode(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]),
        vec![data("a\nb")]
    );
}

#[test]
fn comments_and_unknown_fields_are_ignored() {
    let body = b": OPENROUTER PROCESSING\n\nid: 7\nretry: 100\ndata: x\nfoo\n\n:keep-alive\n\n";
    assert_eq!(decode(&[body]), vec![data("x")]);
}

#[test]
fn multi_line_data_is_joined_and_event_name_kept() {
    assert_eq!(
        decode(&[b"event: error\ndata: {\"error\":\ndata:  1}\n\n"]),
        vec![SseEvent {
            event: Some("error".into()),
            data: "{\"error\":\n 1}".into(),
        }]
    );
}

#[test]
fn an_event_without_data_is_not_dispatched() {
    assert_eq!(
        decode(&[b"event: ping\n\n\n\ndata: y\n\n"]),
        vec![data("y")]
    );
}

/// `input` pushed in one piece: the events `push` gives, then all of them after `finish`.
fn push_then_finish(input: &[u8]) -> (Vec<SseEvent>, Vec<SseEvent>) {
    let mut dec = SseDecoder::new();
    let mut out = Vec::new();
    dec.push(input, &mut out).unwrap();
    let pushed = out.clone();
    dec.finish(&mut out);
    (pushed, out)
}

#[test]
fn unterminated_last_event_is_flushed_on_finish() {
    let (pushed, all) = push_then_finish(b"data: [DONE]");
    assert!(pushed.is_empty());
    assert_eq!(all, vec![data("[DONE]")]);
}

#[test]
fn data_without_space_after_colon() {
    assert_eq!(decode(&[b"data:{}\n\n"]), vec![data("{}")]);
}

// Anthropic-style streams (named events).
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
    let (pushed, all) = push_then_finish(b"event: error\ndata: {\"a\":1}");
    assert!(pushed.is_empty());
    assert_eq!(all, vec![ev("error", "{\"a\":1}")]);
}

#[test]
fn json_lines_are_one_event_each_however_they_are_cut() {
    let body = "{\"a\":1}\n\r\n{\"b\":\"x: y\"}\r\n  \n{\"c\":[]}";
    let expected = vec![
        data("{\"a\":1}"),
        data("{\"b\":\"x: y\"}"),
        data("{\"c\":[]}"),
    ];
    for size in 1..body.len() {
        let mut d = SseDecoder::for_framing(crate::providers::driver::Framing::JsonLines);
        let mut out = Vec::new();
        for piece in body.as_bytes().chunks(size) {
            d.push(piece, &mut out).unwrap();
        }
        d.finish(&mut out);
        assert_eq!(out, expected, "chunk size {size}");
    }
}
