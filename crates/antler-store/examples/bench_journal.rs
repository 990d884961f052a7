//! Journal append throughput: what one run event costs when the journal flushes in batches of 20
//! (DeerFlow's flush threshold), against one transaction per event.
//!
//! `cargo run --release -p antler-store --example bench_journal [-- EVENTS]`
//!
//! Prints medians over repeated batches on a real WAL file (synchronous=NORMAL, as antler runs).
//! Target (issue 6): < 20 µs per event, batched.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use antler_store::{NewRunEvent, SqliteStore};
use serde_json::json;

/// A model response as the journal stores it (~600 bytes of JSON, as a short agent turn).
fn ai_event(thread: &str, run: &str, i: usize) -> NewRunEvent {
    let mut meta = serde_json::Map::new();
    meta.insert("caller".into(), json!("lead_agent"));
    meta.insert("llm_call_index".into(), json!(i));
    meta.insert("latency_ms".into(), json!(812));
    meta.insert(
        "usage".into(),
        json!({"input_tokens": 1200, "output_tokens": 90, "total_tokens": 1290}),
    );
    NewRunEvent::new(
        thread,
        run,
        "llm.ai.response",
        "message",
        json!({
            "type": "ai", "id": format!("lc_run--{i:08}"),
            "content": "Let me look at the workspace first and then write the summary file.",
            "tool_calls": [{"id": format!("call_{i}"), "name": "bash",
                            "args": {"description": "list files", "command": "ls -la /mnt/user-data/workspace"}}],
            "usage_metadata": {"input_tokens": 1200, "output_tokens": 90, "total_tokens": 1290},
        }),
    )
    .with_metadata(meta)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn per_event(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4000);
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("bench.db")).expect("open");

    // Warm up (statement cache, file growth).
    for i in 0..200 {
        store
            .append_run_events(vec![ai_event("warm", "w", i)])
            .await
            .unwrap();
    }

    const BATCH: usize = 20;
    let mut batched = Vec::new();
    let started = Instant::now();
    for b in 0..events / BATCH {
        let batch: Vec<_> = (0..BATCH)
            .map(|i| ai_event("t-batched", "r1", b * BATCH + i))
            .collect();
        let t = Instant::now();
        store.append_run_events(batch).await.unwrap();
        batched.push(t.elapsed());
    }
    let batched_total = started.elapsed();

    let singles_n = (events / 4).max(50);
    let mut single = Vec::new();
    for i in 0..singles_n {
        let ev = ai_event("t-single", "r2", i);
        let t = Instant::now();
        store.append_run_events(vec![ev]).await.unwrap();
        single.push(t.elapsed());
    }

    let med_batch = median(batched.clone());
    println!("journal append, {events} events of ~600 B JSON, WAL, synchronous=NORMAL");
    let mut sorted = batched.clone();
    sorted.sort();
    let p90 = sorted[sorted.len() * 9 / 10];
    let appended = events / BATCH * BATCH;
    println!(
        "  batched x{BATCH}: median {:.1} µs/batch = {:.2} µs/event; p90 {:.2} µs/event; \
         mean {:.2} µs/event ({:.0} events/s, WAL checkpoints included)",
        med_batch.as_secs_f64() * 1e6,
        per_event(med_batch, BATCH),
        per_event(p90, BATCH),
        per_event(batched_total, appended),
        appended as f64 / batched_total.as_secs_f64()
    );
    let med_single = median(single);
    println!(
        "  unbatched:   median {:.2} µs/event",
        per_event(med_single, 1)
    );
    // One agent step journals ~3 events (model response, tool result, an update/middleware
    // event); the observer only buffers, the flush runs off the loop.
    println!(
        "  cost per step (3 events, batched): {:.2} µs of writer time",
        per_event(med_batch, BATCH) * 3.0
    );
    let ok = per_event(med_batch, BATCH) < 20.0;
    println!(
        "  target < 20 µs/event batched: {}",
        if ok { "met" } else { "NOT met" }
    );
}
