//! SSE streaming (spec 70 §4): framing, event order, ids, replay, gaps, fan-out, heartbeats,
//! disconnect semantics.

use std::collections::HashSet;

use antler_server::ServerConfig;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::*;

const ALL_MODES: [&str; 4] = ["values", "messages-tuple", "updates", "custom"];

fn seq_of(id: &str) -> u64 {
    let (ms, seq) = id.split_once('-').unwrap();
    assert!(ms.parse::<u64>().unwrap() > 1_600_000_000_000, "{id}");
    seq.parse().unwrap()
}

#[tokio::test]
async fn a_tool_run_streams_as_langgraph_frames_it() {
    let s = TestServer::start(ls_then(
        "call_k2",
        "List uploads",
        "The folder has three entries.",
    ))
    .await;
    s.thread("t1").await;
    let (h, events) = s
        .stream_run(
            "t1",
            json!({
                "assistant_id": "lead_agent",
                "input": say("List the uploads folder"),
                "config": {"recursion_limit": 1000},
                "context": {"model_name": "main", "thinking_enabled": false},
                "stream_mode": ALL_MODES,
                "on_disconnect": "continue",
            }),
        )
        .await;
    assert_eq!(h["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(h["cache-control"], "no-cache");
    assert_eq!(h["x-accel-buffering"], "no");
    assert!(h.get("content-encoding").is_none());
    let (thread_id, run_id) = ids_from_location(&h);
    assert_eq!(thread_id, "t1");

    // metadata first, end last (no id), every other event id'ed 0, 1, 2, … on one data line.
    assert_eq!(events[0].event, "metadata");
    assert_eq!(
        events[0].data,
        json!({"run_id": run_id, "thread_id": "t1", "attempt": 1})
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last.event.as_str(), &last.data, &last.id),
        ("end", &Value::Null, &None)
    );
    for (i, e) in events[..events.len() - 1].iter().enumerate() {
        assert_eq!(seq_of(e.id.as_deref().unwrap()), i as u64, "{e:?}");
        assert_eq!(e.data_lines, 1);
    }
    assert!(names(&events)
        .iter()
        .all(|n| ["metadata", "values", "updates", "messages", "end"].contains(n)));

    // messages: [message, metadata] pairs; the AI's tool call streams as tool_call_chunks.
    let msgs: Vec<&Sse> = events.iter().filter(|e| e.event == "messages").collect();
    let first_ai = msgs
        .iter()
        .find(|e| e.data[0]["type"] == "AIMessageChunk")
        .unwrap();
    let meta = &first_ai.data[1];
    assert_eq!(meta["langgraph_node"], "model");
    assert!(meta["langgraph_checkpoint_ns"]
        .as_str()
        .unwrap()
        .starts_with("model:"));
    assert_eq!(meta["run_id"], run_id.as_str());
    assert_eq!(meta["thread_id"], "t1");
    let chunk = &first_ai.data[0];
    assert_eq!(chunk["tool_call_chunks"][0]["name"], "ls");
    assert_eq!(chunk["tool_call_chunks"][0]["id"], "call_k2");
    assert_eq!(chunk["tool_call_chunks"][0]["type"], "tool_call_chunk");
    assert_eq!(chunk["chunk_position"], "last");
    let tool = msgs.iter().find(|e| e.data[0]["type"] == "tool").unwrap();
    assert_eq!(tool.data[0]["tool_call_id"], "call_k2");
    assert_eq!(tool.data[0]["name"], "ls");
    assert_eq!(tool.data[0]["status"], "success", "{}", tool.data[0]);
    assert!(tool.data[0]["id"].is_string());
    assert_eq!(tool.data[1]["langgraph_node"], "tools");
    assert!(tool.data[1]["langgraph_checkpoint_ns"]
        .as_str()
        .unwrap()
        .starts_with("tools:"));
    // The text answer streams as deltas of one id.
    let text_chunks: Vec<&Sse> = msgs
        .iter()
        .copied()
        .filter(|e| e.data[0]["type"] == "AIMessageChunk" && e.data[0]["id"] != chunk["id"])
        .collect();
    assert!(text_chunks.len() >= 3, "word by word: {text_chunks:?}");
    let joined: String = text_chunks
        .iter()
        .map(|e| e.data[0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(joined, "The folder has three entries.");

    // updates name their node; the final values hold every streamed id.
    let updates: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "updates")
        .map(|e| &e.data)
        .collect();
    assert!(updates.iter().any(|u| u.get("model").is_some()));
    assert!(updates
        .iter()
        .any(|u| u["tools"]["messages"][0]["tool_call_id"] == "call_k2"));
    assert!(updates
        .iter()
        .any(|u| u.get("ThreadDataMiddleware.before_agent").is_some()));
    let final_values = last_values(&events);
    let ids: HashSet<&str> = strs(&final_values["messages"], "id").into_iter().collect();
    for m in &msgs {
        assert!(
            ids.contains(m.data[0]["id"].as_str().unwrap()),
            "{:?}",
            m.data[0]
        );
    }
    assert_eq!(
        kinds(&final_values["messages"]),
        ["human", "ai", "tool", "ai"]
    );

    // The run finalized before `end`: status and the message feed are already there.
    let run = run_status(&s, "t1", &run_id).await;
    assert_eq!(run["status"], "success", "{run} {events:?}");
    let (_, page) = s.get("/api/threads/t1/messages/page?limit=50").await;
    let feed_ids: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["content"]["id"].as_str().unwrap())
        .collect();
    let shown = visible(&final_values["messages"]);
    let state_ids: Vec<&str> = shown.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(feed_ids, state_ids, "one message id everywhere");
}

#[tokio::test]
async fn only_requested_modes_are_sent() {
    let s = TestServer::start(vec![ScriptedReply::text("hi there")]).await;
    s.thread("t1").await;
    let (_, events) = s.stream_run("t1", json!({"input": say("hello")})).await;
    let kinds: HashSet<&str> = names(&events).into_iter().collect();
    assert_eq!(kinds, HashSet::from(["metadata", "values", "end"]));
    s.model.push(ScriptedReply::text("again"));
    let (_, events) = s
        .stream_run(
            "t1",
            json!({"input": say("x"), "stream_mode": "messages-tuple"}),
        )
        .await;
    let kinds: HashSet<&str> = names(&events).into_iter().collect();
    assert_eq!(kinds, HashSet::from(["metadata", "messages", "end"]));
}

/// Starts a run on `t1` that outlives its client (`on_disconnect: continue`), reads up to its
/// first `values` event and disconnects: the run's id.
async fn start_and_leave(s: &TestServer, text: &str) -> String {
    start_detached(s, text).await.0
}

async fn join(
    s: &TestServer,
    thread: &str,
    run: &str,
    last_event_id: Option<&str>,
    query: &str,
) -> SseReader {
    let mut req = s
        .client
        .get(s.url(&format!("/api/threads/{thread}/runs/{run}/stream{query}")));
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    assert_eq!(
        r.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    SseReader::new(r)
}

#[tokio::test]
async fn rejoin_replays_then_follows_and_several_clients_watch_one_run() {
    let s = TestServer::gated(vec![ScriptedReply::text("one two three four")]).await;
    s.thread("t1").await;
    let (run, mut first) = start_stream(
        &s,
        "t1",
        json!({"input": say("go"), "stream_mode": ALL_MODES, "on_disconnect": "continue"}),
    )
    .await;
    first.until("metadata").await;
    let v = first.until("values").await;
    drop(first); // the browser aborts the fetch; the run keeps going

    // Reload: replay from the start (Last-Event-ID -1), then live.
    let mut a = join(&s, "t1", &run, Some("-1"), "").await;
    let mut b = join(&s, "t1", &run, None, "").await;
    assert_eq!(a.until("metadata").await.data["run_id"], run.as_str());
    // Resume strictly after a known event.
    let mut c = join(&s, "t1", &run, v.id.as_deref(), "").await;
    s.model.open(1);
    let rest_a = a.rest().await;
    let rest_b = b.rest().await;
    let rest_c = c.rest().await;
    assert_eq!(names(&rest_a).last(), Some(&"end"));
    // Both replayed the same frames.
    assert_eq!(b.events, a.events);
    assert_eq!(rest_b.len(), rest_a.len() + 1);
    // c starts right after `v`.
    let after_v = seq_of(v.id.as_deref().unwrap()) + 1;
    assert_eq!(seq_of(rest_c[0].id.as_deref().unwrap()), after_v);
    assert_eq!(rest_c.last().unwrap().event, "end");
    // A stream_mode filter on join.
    let mut only = join(
        &s,
        "t1",
        &run,
        Some("-1"),
        "?stream_mode=values&cancel_on_disconnect=false",
    )
    .await;
    let kinds: HashSet<String> = only.rest().await.into_iter().map(|e| e.event).collect();
    assert_eq!(
        kinds,
        HashSet::from(["metadata".to_owned(), "values".to_owned(), "end".to_owned()])
    );
    assert_eq!(run_status(&s, "t1", &run).await["status"], "success");
}

#[tokio::test]
async fn a_cursor_older_than_the_window_gets_a_gap() {
    let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    let s = TestServer::start_with(
        vec![ScriptedReply::text(words.join(" "))],
        Options {
            config: ServerConfig {
                max_buffered_bytes: 1,
                ..Options::default().config
            },
            ..Options::default()
        },
    )
    .await;
    s.thread("t1").await;
    // A background run: nobody reads while it runs, so the window slides past the start.
    let r = s
        .post_req(
            "/api/threads/t1/runs",
            json!({"input": say("long"), "stream_mode": ["messages-tuple"]}),
        )
        .await;
    let (_, run) = ids_from_location(r.headers());
    s.state.runs.get(&run).unwrap().wait_done().await;
    let mut gap = join(&s, "t1", &run, Some("1755854660123-3"), "").await;
    let events = gap.rest().await;
    assert_eq!(names(&events), ["gap"], "one gap, no end");
    let g = &events[0];
    assert_eq!(g.id, None);
    assert_eq!(g.data["code"], "stream_replay_gap");
    assert_eq!(g.data["run_id"], run.as_str());
    assert_eq!(g.data["requested_event_id"], "1755854660123-3");
    assert_eq!(g.data["recovery"], "reload_durable_state");
    let latest = g.data["latest_available_event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Rejoining from the latest id gets just `end`.
    let mut again = join(&s, "t1", &run, Some(&latest), "").await;
    assert_eq!(names(&again.rest().await), ["end"]);
    // From the start: the retained window (≥ 256 events), then end.
    let mut all = join(&s, "t1", &run, Some("-1"), "").await;
    let rest = all.rest().await;
    assert!(rest.len() >= 257, "{}", rest.len());
    assert_eq!(rest.last().unwrap().event, "end");
}

#[tokio::test]
async fn disconnect_cancels_unless_the_client_said_continue() {
    let s = TestServer::gated(texts(&["never", "kept"])).await;
    s.thread("t1").await;
    // Default on_disconnect (cancel): dropping the stream interrupts the run.
    let (run, mut r) = start_stream(&s, "t1", json!({"input": say("a")})).await;
    r.until("values").await;
    let handle = s.state.runs.get(&run).unwrap();
    drop(r);
    assert_eq!(
        handle.wait_done().await,
        antler_store::RunStatus::Interrupted
    );
    assert_eq!(run_status(&s, "t1", &run).await["status"], "interrupted");
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "interrupted");
    // on_disconnect continue: the run survives the client.
    let run2 = start_and_leave(&s, "b").await;
    let handle = s.state.runs.get(&run2).unwrap();
    s.model.open(1);
    assert_eq!(handle.wait_done().await, antler_store::RunStatus::Success);
    // A join with cancel_on_disconnect=1 cancels when it goes away.
    let run3 = start_and_leave(&s, "c").await;
    let mut j = join(&s, "t1", &run3, None, "?cancel_on_disconnect=1").await;
    j.until("metadata").await;
    let handle = s.state.runs.get(&run3).unwrap();
    drop(j);
    assert_eq!(
        handle.wait_done().await,
        antler_store::RunStatus::Interrupted
    );
}

#[tokio::test]
async fn idle_streams_carry_heartbeat_comments() {
    let s = TestServer::start_with(
        vec![ScriptedReply::text("late")],
        Options {
            open: false,
            config: ServerConfig {
                heartbeat: std::time::Duration::from_millis(20),
                ..Options::default().config
            },
            ..Options::default()
        },
    )
    .await;
    s.thread("t1").await;
    let (_run, mut r) = start_stream(
        &s,
        "t1",
        json!({"input": say("a"), "on_disconnect": "continue"}),
    )
    .await;
    let hb = r.until(":comment").await;
    assert_eq!(hb.data, json!(": heartbeat"));
    s.model.open(1);
    let rest = r.rest().await;
    assert_eq!(names(&rest).last(), Some(&"end"));
}

#[tokio::test]
async fn a_finished_and_released_run_joins_as_just_end() {
    let s = TestServer::start_with(
        vec![ScriptedReply::text("done")],
        Options {
            config: ServerConfig {
                retention: std::time::Duration::ZERO,
                ..Options::default().config
            },
            ..Options::default()
        },
    )
    .await;
    s.thread("t1").await;
    let (h, _) = s.stream_run("t1", json!({"input": say("a")})).await;
    let (_, run) = ids_from_location(&h);
    // Retention zero: the buffer is released right after the run finalized.
    while s.state.runs.get(&run).is_some() {
        tokio::task::yield_now().await;
    }
    let mut j = join(&s, "t1", &run, Some("-1"), "").await;
    let ev = j.rest().await;
    assert_eq!(names(&ev), ["end"]);
    assert_eq!(ev[0].data, Value::Null);
}

/// A finished run keeps its `values` events as checkpoint ids, not as its messages: a late
/// joiner gets the very frames the creator streamed, read back from the store.
#[tokio::test]
async fn a_finished_run_replays_its_values_from_the_checkpoints() {
    let s = TestServer::start(ls_then("call_k9", "List uploads", "Three entries.")).await;
    s.thread("t1").await;
    let (h, live) = s
        .stream_run(
            "t1",
            json!({"input": say("List the uploads folder"), "stream_mode": ALL_MODES}),
        )
        .await;
    let (_, run) = ids_from_location(&h);
    // The run's buffer is retained, and settled, once the run left its thread.
    while s.state.runs.is_busy("t1") || s.state.runs.held_bytes() == 0 {
        tokio::task::yield_now().await;
    }
    let held = s.state.runs.held_bytes();
    let live_values: Vec<&Sse> = live.iter().filter(|e| e.event == "values").collect();
    assert!(live_values.len() >= 4, "{}", live_values.len());
    // Held: the framed non-values events and ~100 B per values event, no message bodies.
    let framed: usize = live
        .iter()
        .filter(|e| !matches!(e.event.as_str(), "values" | "end"))
        .map(|e| e.data.to_string().len() + 64)
        .sum();
    assert!(
        held < framed + 200 * live_values.len(),
        "{held} bytes held; {framed} bytes of frames"
    );
    let replayed = join(&s, "t1", &run, Some("-1"), "").await.rest().await;
    assert_eq!(replayed, live);
    // The last values event is the thread's final state.
    let (status, state) = s.get("/api/threads/t1/state").await;
    assert_eq!(status, 200);
    assert_eq!(live_values.last().unwrap().data, state["values"]);
}

/// The bounded load check of the suite: 200 concurrent streamed runs, every stream complete
/// (`metadata` first, ids 0…n-1 without holes, `end` last, streamed text = final message).
/// `antler-bench`'s `examples/load.rs` measures the same against the release binary with model latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_lose_no_event() {
    const N: usize = 200;
    let replies = (0..N)
        .map(|i| ScriptedReply::text(format!("answer number {i} in a few words")))
        .collect();
    let s = TestServer::start(replies).await;
    for i in 0..N {
        s.thread(&format!("c{i}")).await;
    }
    let s = std::sync::Arc::new(s);
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                s.stream_run(
                    &format!("c{i}"),
                    json!({"input": say("go"), "stream_mode": ["values", "messages-tuple", "updates"]}),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        let (h, events) = t.await.unwrap();
        let (_, run) = ids_from_location(&h);
        assert_eq!(events[0].event, "metadata");
        assert_eq!(events[0].data["run_id"], run.as_str());
        assert_eq!(events.last().unwrap().event, "end");
        for (i, e) in events[..events.len() - 1].iter().enumerate() {
            assert_eq!(seq_of(e.id.as_deref().unwrap()), i as u64);
        }
        let streamed: String = events
            .iter()
            .filter(|e| e.event == "messages" && e.data[0]["type"] == "AIMessageChunk")
            .map(|e| e.data[0]["content"].as_str().unwrap().to_owned())
            .collect();
        let last = last_values(&events);
        let answer = visible(&last["messages"]).last().unwrap()["content"].clone();
        assert_eq!(json!(streamed), answer);
    }
    assert_eq!(s.state.runs.live_count(), 0);
}

/// The SSE frames of one short run, pinned: event names, order, the shape of each payload.
#[tokio::test]
async fn the_frames_of_one_run_snapshot() {
    let s = TestServer::start(vec![ScriptedReply::text("Hello there.")]).await;
    s.thread("t1").await;
    let (_, events) = s
        .stream_run(
            "t1",
            json!({
                "assistant_id": "lead_agent",
                "input": say("Say hello"),
                "stream_mode": ["values", "updates", "messages-tuple"],
            }),
        )
        .await;
    let frames: Vec<Value> = events
        .iter()
        .filter(|e| e.event != ":comment")
        .map(|e| {
            // An event id is `<ms>-<seq>`: keep the sequence number only.
            let seq = e.id.as_deref().map(seq_of);
            json!({"event": e.event, "seq": seq, "data": antler_test_support::redact::redact(&e.data)})
        })
        .collect();
    insta::assert_json_snapshot!("sse_frames_of_one_run", frames);
}
