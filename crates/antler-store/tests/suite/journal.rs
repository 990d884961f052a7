//! The run journal (`run_events`): seq per thread, batches, put-if-absent, cursors, truncation
//! (spec 40 §6.6 `test_run_event_store.py`).

use antler_store::journal::{CATEGORY_MESSAGE, CATEGORY_TRACE};
use antler_store::{EventQuery, MessageCursor, NewRunEvent, RunEventRecord, SqliteStore};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::temp_store;

fn ev(thread: &str, run: &str, kind: &str, category: &str, content: Value) -> NewRunEvent {
    NewRunEvent::new(thread, run, kind, category, content)
}

/// A run's `run.delivery` receipt on thread `t`.
fn receipt(run: &str, content: Value) -> NewRunEvent {
    ev("t", run, "run.delivery", "outputs", content)
}

fn msg(thread: &str, run: &str, text: &str) -> NewRunEvent {
    ev(
        thread,
        run,
        "llm.ai.response",
        CATEGORY_MESSAGE,
        json!({"type": "ai", "content": text}),
    )
}

/// Thread `t`'s message events under a cursor.
async fn messages_of_t(
    store: &SqliteStore,
    before_seq: Option<i64>,
    after_seq: Option<i64>,
    limit: usize,
) -> Vec<RunEventRecord> {
    let cursor = MessageCursor {
        before_seq,
        after_seq,
        limit,
    };
    store.list_run_messages("t", cursor).await.unwrap()
}

/// Message events, one per `(thread, run, text)`.
fn msgs(items: &[(&str, &str, &str)]) -> Vec<NewRunEvent> {
    items
        .iter()
        .map(|&(thread, run, text)| msg(thread, run, text))
        .collect()
}

/// Append `events`; the append must succeed.
async fn append(store: &SqliteStore, events: Vec<NewRunEvent>) -> Vec<RunEventRecord> {
    store.append_run_events(events).await.unwrap()
}

fn seqs(records: &[antler_store::RunEventRecord]) -> Vec<i64> {
    records.iter().map(|r| r.seq).collect()
}

#[tokio::test]
async fn seq_is_strictly_increasing_per_thread_and_independent_across_threads() {
    let (_d, store) = temp_store();
    let a = append(
        &store,
        msgs(&[("t1", "r1", "a"), ("t2", "r2", "b"), ("t1", "r1", "c")]),
    )
    .await;
    assert_eq!(seqs(&a), [1, 1, 2]);
    let b = append(&store, vec![msg("t1", "r1", "d"), msg("t2", "r2", "e")]).await;
    assert_eq!(seqs(&b), [3, 2]);
    // Batch continuity: a batch gets consecutive seqs after the previous head.
    let batch: Vec<_> = (0..20).map(|i| msg("t1", "r3", &format!("m{i}"))).collect();
    let c = store.append_run_events(batch).await.unwrap();
    assert_eq!(seqs(&c), (4..24).collect::<Vec<_>>());
    assert_eq!(store.last_run_event("t1").await.unwrap().unwrap().seq, 23);
}

#[tokio::test]
async fn concurrent_appenders_never_collide() {
    let (_d, store) = temp_store();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                append(
                    &store,
                    vec![msg("t", &format!("r{w}"), &format!("{w}-{i}"))],
                )
                .await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = messages_of_t(&store, None, None, 1000).await;
    assert_eq!(seqs(&all), (1..=80).collect::<Vec<_>>());
}

#[tokio::test]
async fn two_store_handles_on_one_file_share_the_seq() {
    // Two processes = two connections to one file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    let a = SqliteStore::open(&path).unwrap();
    let b = SqliteStore::open(&path).unwrap();
    a.append_run_events(vec![msg("t", "r1", "x")])
        .await
        .unwrap();
    let got = b
        .append_run_events(vec![msg("t", "r2", "y")])
        .await
        .unwrap();
    assert_eq!(got[0].seq, 2);
}

#[tokio::test]
async fn structured_and_string_content_round_trip() {
    let (_d, store) = temp_store();
    let mut meta = serde_json::Map::new();
    meta.insert("caller".into(), json!("lead_agent"));
    append(
        &store,
        vec![
            ev(
                "t",
                "r",
                "run.start",
                "trace",
                json!({"chain": "lead_agent"}),
            )
            .with_metadata(meta.clone())
            .with_user(Some("alice".into())),
            ev("t", "r", "run.error", "error", json!("boom")),
            ev("t", "r", "x", "trace", json!("{\"looks\": \"like json\"}")),
        ],
    )
    .await;
    let got = store
        .list_run_events("r", EventQuery::default())
        .await
        .unwrap();
    assert_eq!(got[0].content, json!({"chain": "lead_agent"}));
    assert_eq!(got[0].metadata, meta);
    assert_eq!(got[0].user_id.as_deref(), Some("alice"));
    assert_eq!(got[1].content, json!("boom"));
    // A string that happens to be JSON stays a string.
    assert_eq!(got[2].content, json!("{\"looks\": \"like json\"}"));
}

#[tokio::test]
async fn put_if_absent_is_idempotent_per_run_and_type() {
    let (_d, store) = temp_store();
    let delivery = || {
        receipt(
            "r",
            json!({"presented": true, "paths": ["/mnt/user-data/outputs/a.md"]}),
        )
    };
    let (first, created) = store.put_run_event_if_absent(delivery()).await.unwrap();
    assert!(created);
    append(&store, vec![msg("t", "r", "after")]).await;
    let (again, created) = store.put_run_event_if_absent(delivery()).await.unwrap();
    assert!(!created);
    assert_eq!(again, first);
    // Another run gets its own receipt.
    let (_, created) = store
        .put_run_event_if_absent(receipt("r2", json!({})))
        .await
        .unwrap();
    assert!(created);
    let deliveries = store
        .list_run_events(
            "r",
            EventQuery {
                event_types: vec!["run.delivery".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 1);
}

#[tokio::test]
async fn a_runs_last_batch_and_its_receipt_land_together_and_the_receipt_once() {
    let (_d, store) = temp_store();
    let ids = antler_store::RunEventIds {
        thread_id: "t".into(),
        run_id: "r".into(),
        user_id: None,
    };
    let encoded = |text: &str| {
        antler_store::EncodedRunEvent::new(
            &ids,
            "llm.ai.response",
            CATEGORY_MESSAGE,
            antler_store::EventContent::Json(json!({"type": "ai", "content": text}).to_string()),
            serde_json::Map::new(),
            store.max_trace_content(),
            String::new(),
        )
        .unwrap()
    };
    let delivery = || receipt("r", json!({"presented": false}));
    let created = store
        .append_encoded_run_events_then_if_absent(
            std::sync::Arc::new(vec![encoded("m1"), encoded("m2")]),
            delivery(),
        )
        .await
        .unwrap();
    assert!(created);
    // A second finish (a retried run end) appends its batch but not another receipt.
    let created = store
        .append_encoded_run_events_then_if_absent(
            std::sync::Arc::new(vec![encoded("m3")]),
            delivery(),
        )
        .await
        .unwrap();
    assert!(!created);
    let all = store
        .list_run_events("r", EventQuery::default())
        .await
        .unwrap();
    let kinds: Vec<(&str, Option<&str>)> = all
        .iter()
        .map(|r| (r.event_type.as_str(), r.content["content"].as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("llm.ai.response", Some("m1")),
            ("llm.ai.response", Some("m2")),
            ("run.delivery", None),
            ("llm.ai.response", Some("m3")),
        ]
    );
    let seqs: Vec<i64> = all.iter().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // An empty batch still settles the receipt.
    let created = store
        .append_encoded_run_events_then_if_absent(
            std::sync::Arc::new(vec![]),
            receipt("r3", json!({})),
        )
        .await
        .unwrap();
    assert!(created);
}

#[tokio::test]
async fn message_listing_pages_across_runs_with_cursors() {
    let (_d, store) = temp_store();
    let mut batch = Vec::new();
    for i in 1..=10 {
        let run = if i <= 5 { "r1" } else { "r2" };
        batch.push(msg("t", run, &format!("m{i}")));
        batch.push(ev("t", run, "llm.error", CATEGORY_TRACE, json!("noise")));
    }
    store.append_run_events(batch).await.unwrap();
    let text = |rs: &[antler_store::RunEventRecord]| -> Vec<String> {
        rs.iter()
            .map(|r| r.content["content"].as_str().unwrap().to_owned())
            .collect()
    };
    // Latest `limit`, ascending.
    let latest = messages_of_t(&store, None, None, 3).await;
    assert_eq!(text(&latest), ["m8", "m9", "m10"]);
    assert!(latest.iter().all(|r| r.category == CATEGORY_MESSAGE));
    // Page backwards.
    let before = messages_of_t(&store, Some(latest[0].seq), None, 3).await;
    assert_eq!(text(&before), ["m5", "m6", "m7"]);
    // Page forwards.
    let after = messages_of_t(&store, None, Some(before[2].seq), 2).await;
    assert_eq!(text(&after), ["m8", "m9"]);
    let r1 = store
        .list_run_messages_by_run("t", "r1", MessageCursor::default())
        .await
        .unwrap();
    assert_eq!(text(&r1), ["m1", "m2", "m3", "m4", "m5"]);
    assert_eq!(store.count_run_messages("t").await.unwrap(), 10);
}

#[tokio::test]
async fn run_events_filter_by_type_task_and_cursor() {
    let (_d, store) = temp_store();
    let mut task = serde_json::Map::new();
    task.insert("task_id".into(), json!("sub-1"));
    append(
        &store,
        vec![
            ev("t", "r", "run.start", "trace", json!({})),
            ev("t", "r", "subagent.step", "subagent", json!(1)).with_metadata(task.clone()),
            ev("t", "r", "subagent.step", "subagent", json!(2)),
            ev("t", "r", "run.end", "outputs", json!({"status": "success"})),
            ev("t", "other", "run.start", "trace", json!({})),
        ],
    )
    .await;
    let all = store
        .list_run_events("r", EventQuery::default())
        .await
        .unwrap();
    assert_eq!(seqs(&all), [1, 2, 3, 4]);
    let by_task = store
        .list_run_events(
            "r",
            EventQuery {
                task_id: Some("sub-1".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&by_task), [2]);
    let typed = store
        .list_run_events(
            "r",
            EventQuery {
                event_types: vec!["run.start".into(), "run.end".into()],
                after_seq: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&typed), [4]);
}

#[tokio::test]
async fn trace_content_is_truncated_on_a_char_boundary_and_flagged() {
    let (_d, store) = temp_store();
    store.set_max_trace_content(10);
    let long = "ééééééééé!"; // 19 bytes
    let got = append(
        &store,
        vec![
            ev("t", "r", "llm.error", CATEGORY_TRACE, json!(long)),
            ev("t", "r", "llm.ai.response", CATEGORY_MESSAGE, json!(long)),
        ],
    )
    .await;
    assert_eq!(got[0].content, json!("ééééé"));
    assert_eq!(got[0].metadata["content_truncated"], json!(true));
    assert_eq!(got[0].metadata["original_byte_length"], json!(19));
    // Messages are never cut.
    assert_eq!(got[1].content, json!(long));
    let stored = store
        .list_run_events("r", EventQuery::default())
        .await
        .unwrap();
    assert_eq!(stored[0].content, json!("ééééé"));
}

#[tokio::test]
async fn deletes_by_run_and_by_thread() {
    let (_d, store) = temp_store();
    append(
        &store,
        msgs(&[("t", "r1", "a"), ("t", "r2", "b"), ("u", "r3", "c")]),
    )
    .await;
    assert_eq!(store.delete_run_events_by_run("t", "r1").await.unwrap(), 1);
    assert_eq!(store.delete_run_events_by_thread("t").await.unwrap(), 1);
    assert_eq!(store.count_run_messages("t").await.unwrap(), 0);
    assert_eq!(store.count_run_messages("u").await.unwrap(), 1);
    // Deleting a thread also drops its journal.
    store.delete_thread("u").await.unwrap();
    assert_eq!(store.count_run_messages("u").await.unwrap(), 0);
}

#[tokio::test]
async fn a_damaged_row_does_not_hide_the_rest_of_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    let store = SqliteStore::open(&path).unwrap();
    append(&store, vec![msg("t", "r", "a"), msg("t", "r", "b")]).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE run_events SET content = '{\"type\": \"ai\", \"cont' WHERE seq = 1",
        [],
    )
    .unwrap();
    let got = store
        .list_run_messages("t", MessageCursor::default())
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].metadata["content_corrupt"], json!(true));
    assert!(got[0].content.is_string());
    assert_eq!(got[1].content["content"], json!("b"));
}

#[tokio::test]
async fn encoded_events_are_stored_as_the_same_events_would_be() {
    use antler_store::{EncodedRunEvent, EventContent, RunEventIds};
    use std::sync::Arc;

    let (_d, store) = temp_store();
    store.set_max_trace_content(10);
    let long = "ééééééééé!";
    let events = [
        (
            "llm.ai.response",
            CATEGORY_MESSAGE,
            json!({"type": "ai", "content": long}),
        ),
        ("llm.error", CATEGORY_TRACE, json!(long)),
        ("run.start", CATEGORY_TRACE, json!({"chain": "lead_agent"})),
        ("run.error", "error", json!("boom")),
    ];
    let meta = json!({"caller": "lead_agent"})
        .as_object()
        .cloned()
        .unwrap();
    let created = "2026-12-06T00:00:00Z".to_owned();
    let plain = events
        .iter()
        .map(|(kind, category, content)| {
            let mut e = ev("a", "ra", kind, category, content.clone()).with_metadata(meta.clone());
            e.user_id = Some("u".into());
            e.created_at = created.clone();
            e
        })
        .collect();
    append(&store, plain).await;
    let ids = RunEventIds {
        thread_id: "b".into(),
        run_id: "rb".into(),
        user_id: Some("u".into()),
    };
    let max = store.max_trace_content();
    let encoded: Vec<EncodedRunEvent> = events
        .iter()
        .map(|(kind, category, content)| {
            let content = EventContent::from_value(content).unwrap();
            EncodedRunEvent::new(
                &ids,
                *kind,
                *category,
                content,
                meta.clone(),
                max,
                created.clone(),
            )
            .unwrap()
        })
        .collect();
    // The same with the metadata serialized from a typed value (here a struct-like map):
    // trace content over the limit is still cut and flagged.
    #[derive(serde::Serialize)]
    struct Meta<'a> {
        caller: &'a str,
    }
    let ids_c = RunEventIds {
        thread_id: "c".into(),
        run_id: "rc".into(),
        user_id: Some("u".into()),
    };
    let typed: Vec<EncodedRunEvent> = events
        .iter()
        .map(|(kind, category, content)| {
            let content = EventContent::from_value(content).unwrap();
            let meta = Meta {
                caller: "lead_agent",
            };
            EncodedRunEvent::with_metadata(
                &ids_c,
                *kind,
                *category,
                content,
                &meta,
                max,
                created.clone(),
            )
            .unwrap()
        })
        .collect();
    store
        .append_encoded_run_events(Arc::new(typed))
        .await
        .unwrap();
    let batch = Arc::new(encoded);
    store
        .append_encoded_run_events(batch.clone())
        .await
        .unwrap();
    // The batch is still the caller's (kept for a retry): appending it again continues the seq.
    store.append_encoded_run_events(batch).await.unwrap();

    let list = |run: &'static str| {
        let store = store.clone();
        async move {
            store
                .list_run_events(run, EventQuery::default())
                .await
                .unwrap()
        }
    };
    let (a, b, c) = (list("ra").await, list("rb").await, list("rc").await);
    assert_eq!(b.len(), 2 * a.len());
    assert_eq!(c.len(), a.len());
    for (x, y) in a.iter().zip(&c) {
        assert_eq!(
            (&x.event_type, &x.category, &x.content, &x.metadata),
            (&y.event_type, &y.category, &y.content, &y.metadata)
        );
    }
    assert_eq!(c[1].metadata["content_truncated"], json!(true));
    assert_eq!(c[1].metadata["caller"], json!("lead_agent"));
    assert_eq!(seqs(&b), (1..=8).collect::<Vec<_>>());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            (
                &x.event_type,
                &x.category,
                &x.content,
                &x.metadata,
                &x.user_id,
                &x.created_at
            ),
            (
                &y.event_type,
                &y.category,
                &y.content,
                &y.metadata,
                &y.user_id,
                &y.created_at
            )
        );
    }
    assert_eq!(b[1].content, json!("ééééé"));
    assert_eq!(b[1].metadata["content_truncated"], json!(true));
    // Trace JSON is cut as text; a string is stored as text, anything else as JSON.
    assert_eq!(b[2].content, json!("{\"chain\":\""));
    assert_eq!(b[3].content, json!("boom"));
    assert_eq!(b[0].content, json!({"type": "ai", "content": long}));
}
