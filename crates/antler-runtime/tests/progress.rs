//! Tool progress reports: `custom` events only when the consumer takes them, bounded per call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use antler_protocol::{StreamEvent, StreamModes, ThreadState};
use antler_runtime::*;
use serde_json::json;

#[test]
fn progress_is_built_only_for_custom_consumers_and_is_bounded() {
    let state = ThreadState::default();
    let silent = RunContext::new("t", "r", Arc::new(NullSink));
    let ctx = ToolContext::new("c1", &state, &silent);
    assert!(ctx.progress("bash").is_none());

    let no_custom = Arc::new(CollectingSink::with_modes(StreamModes {
        custom: false,
        ..StreamModes::ALL
    }));
    let run = RunContext::new("t", "r", no_custom);
    let ctx = ToolContext::new("c1", &state, &run);
    assert!(ctx.progress("bash").is_none());

    let sink = Arc::new(CollectingSink::new());
    let run = RunContext::new("t", "r", sink.clone());
    let ctx = ToolContext::new("c1", &state, &run);
    let p = ctx.progress("bash").unwrap();
    p.report("line one");
    p.report(&"x".repeat(1000));
    for _ in 0..ProgressReporter::MAX_REPORTS + 10 {
        p.clone().report("more");
    }
    let events: Vec<_> = sink
        .events()
        .into_iter()
        .map(|e| match e {
            StreamEvent::Custom(v) => v,
            other => panic!("unexpected {}", other.name()),
        })
        .collect();
    assert_eq!(
        events[0],
        json!({"type": "tool_progress", "tool_call_id": "c1", "tool": "bash", "message": "line one"})
    );
    assert_eq!(
        events[1]["message"].as_str().unwrap().chars().count(),
        ProgressReporter::MAX_CHARS
    );
    // MAX_REPORTS messages, then one notice, then nothing.
    assert_eq!(events.len(), ProgressReporter::MAX_REPORTS + 1);
    assert_eq!(
        events.last().unwrap()["message"],
        "… (further progress not shown)"
    );
}
