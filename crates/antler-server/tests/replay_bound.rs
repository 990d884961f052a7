//! Regression guard: a run's replay buffer stays within its byte bound, whatever the run emits.
//! The bound is `max_bytes`, except that the newest `MIN_RETAINED_EVENTS` frames are always kept
//! (DeerFlow's replay window) — so the retained bytes never exceed the larger of the two.
//! Checked after every push on the buffer itself, and end to end through the in-process bus by
//! what a late subscriber replays.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::time::Duration;

use antler_server::runs::bus::{EventBus, InProcessBus, Subscribe};
use antler_server::sse::{frame_bytes, Cursor, Kind, RunBuffer, MIN_RETAINED_EVENTS};
use futures::StreamExt;

/// The most a buffer may hold, given the sizes of the frames pushed so far (newest last).
fn bound(max_bytes: usize, recent: &VecDeque<usize>) -> usize {
    max_bytes.max(recent.iter().sum())
}

/// Push `n` events of `data_len` bytes of JSON, checking the bound after each push.
fn fill(max_bytes: usize, n: usize, data_len: usize) -> usize {
    let buf = RunBuffer::new("run", max_bytes);
    let data = format!("\"{}\"", "x".repeat(data_len.saturating_sub(2)));
    let mut recent = VecDeque::new();
    for _ in 0..n {
        let id = buf.push(Kind::Values, "values", &data).unwrap();
        recent.push_back(frame_bytes("values", &data, &id).len());
        if recent.len() > MIN_RETAINED_EVENTS {
            recent.pop_front();
        }
        let retained = buf.retained_bytes();
        assert!(
            retained <= bound(max_bytes, &recent),
            "{retained} bytes retained, bound {} (max_bytes {max_bytes}, {} frames of ~{data_len} B pushed)",
            bound(max_bytes, &recent),
            buf.emitted()
        );
    }
    buf.retained_bytes()
}

#[test]
fn small_events_stay_within_max_bytes() {
    // 256 frames of ~100 B fit in 64 KiB: the byte bound is the one that binds.
    let max = 64 * 1024;
    let retained = fill(max, 20_000, 100);
    assert!(retained <= max);
    assert!(
        retained > max / 2,
        "the buffer should be used up to its bound"
    );
}

#[test]
fn large_events_keep_only_the_replay_window() {
    // 100 KB frames (a `values` event at ~300 messages): only the newest window survives.
    let retained = fill(1024 * 1024, 2_000, 100_000);
    assert!(retained <= MIN_RETAINED_EVENTS * 100_200);
}

#[tokio::test]
async fn a_late_subscriber_replays_no_more_than_the_bound() {
    let max = 32 * 1024;
    let bus = InProcessBus::new(max);
    let run = bus.open("run");
    let data = format!("\"{}\"", "y".repeat(60));
    for _ in 0..50_000 {
        run.publish(Kind::Updates, "updates", &data).unwrap();
    }
    run.close();
    let mut replay = run.subscribe(Subscribe {
        cursor: Cursor::Earliest,
        filter: None,
        heartbeat: Duration::from_secs(60),
        on_disconnect: None,
    });
    let mut bytes = 0;
    while let Some(chunk) = replay.next().await {
        bytes += chunk.unwrap().len();
    }
    let end = antler_server::sse::END_FRAME.len();
    assert!(
        bytes - end <= max,
        "a late subscriber replayed {bytes} bytes from a {max}-byte buffer"
    );
}
