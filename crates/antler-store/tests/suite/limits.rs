//! A full disk or a read-only store: a clear error naming the cause, and no partial state.

use antler_protocol::{StateUpdate, ThreadState};
use antler_store::{
    AdmitOptions, Failure, MemoryChange, MultitaskStrategy, NewRunEvent, RunRecord, SqliteStore,
    StoreError,
};
use serde_json::json;

use super::{default_memory_revision, msg, temp_store, ThreadWriter};

fn big_event(run: &str, i: usize) -> NewRunEvent {
    NewRunEvent::new(
        "t",
        run,
        "llm.ai.response",
        "message",
        json!({"type": "ai", "content": format!("{i}:{}", "x".repeat(8 * 1024))}),
    )
}

/// Append `events`; the append must succeed.
async fn append(store: &SqliteStore, events: Vec<NewRunEvent>) {
    store.append_run_events(events).await.unwrap();
}

/// Admit `rec` with `reject`; the admission must fail.
async fn admit_err(store: &SqliteStore, rec: RunRecord) -> StoreError {
    store
        .admit_run(rec, AdmitOptions::new(MultitaskStrategy::Reject))
        .await
        .unwrap_err()
}

async fn counts(store: &SqliteStore) -> (u64, usize, i64) {
    (
        store.count_run_messages("t").await.unwrap(),
        store.list_runs("t", 100).await.unwrap().len(),
        default_memory_revision(store, "u").await,
    )
}

#[tokio::test]
async fn a_full_disk_fails_whole_writes_with_a_clear_error() {
    let (_d, store) = temp_store();
    append(&store, vec![big_event("r0", 0)]).await;
    let before = counts(&store).await;
    store.set_size_limit(Some(0)).await.unwrap();

    // A journal batch: all or nothing.
    let batch: Vec<_> = (1..40).map(|i| big_event("r1", i)).collect();
    let err = store.append_run_events(batch).await.unwrap_err();
    assert_eq!(err.failure(), Some(Failure::DiskFull), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("disk is full") && text.contains(&store.path().display().to_string()),
        "{text}"
    );
    // Admission: no run row.
    let mut rec = RunRecord::new("r1", "t", "lead_agent");
    rec.metadata = json!({"pad": "y".repeat(64 * 1024)});
    let err = admit_err(&store, rec).await;
    assert_eq!(err.failure(), Some(Failure::DiskFull), "{err}");
    // Memory: unchanged.
    let err = store
        .save_memory(
            "u",
            "__default__",
            0,
            MemoryChange {
                profile: Some(json!({"user": {"workContext": {"summary": "z".repeat(64 * 1024)}}})),
                facts: Some(vec![
                    json!({"id": "fact_1", "content": "w".repeat(64 * 1024)}),
                ]),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::DiskFull), "{err}");
    // Checkpoint: nothing of it.
    let mut w = ThreadWriter::new("t");
    let mut state = ThreadState::default();
    state
        .apply(StateUpdate::message(msg("m1", &"q".repeat(64 * 1024))))
        .unwrap();
    let write = w.write_for(&mut state);
    assert!(store.put_checkpoint(write).await.is_err());
    assert!(store.latest_checkpoint("t").await.unwrap().is_none());
    assert_eq!(counts(&store).await, before);

    // Space comes back: writes work again.
    store.set_size_limit(None).await.unwrap();
    append(&store, vec![big_event("r2", 99)]).await;
}

#[tokio::test]
async fn a_read_only_store_refuses_writes_and_keeps_its_data() {
    let (_d, store) = temp_store();
    append(&store, vec![big_event("r0", 0)]).await;
    let before = counts(&store).await;
    store.set_read_only(true).await.unwrap();
    let err = store
        .append_run_events(vec![big_event("r1", 1), big_event("r1", 2)])
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::ReadOnly), "{err}");
    assert!(err.to_string().contains("read-only"), "{err}");
    let err = admit_err(&store, RunRecord::new("r1", "t", "lead_agent")).await;
    assert_eq!(err.failure(), Some(Failure::ReadOnly), "{err}");
    // Reads still work.
    assert_eq!(counts(&store).await, before);
    store.set_read_only(false).await.unwrap();
    append(&store, vec![big_event("r1", 3)]).await;
}
