//! Long-term memory persistence: buckets, optimistic revisions, clearing.

use antler_store::{MemoryChange, MemorySave, SqliteStore, StoreError};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::{default_memory_revision, temp_store};

/// Save a change of `user`'s memory in bucket `agent` expecting revision `rev`.
async fn save(
    store: &SqliteStore,
    user: &str,
    agent: &str,
    rev: i64,
    profile: Option<Value>,
    facts: Option<Vec<Value>>,
) -> Result<MemorySave, StoreError> {
    store
        .save_memory(user, agent, rev, MemoryChange { profile, facts })
        .await
}

/// Replace the facts of `user`'s bucket `agent` expecting revision `rev`; the save must not fail.
async fn save_facts(store: &SqliteStore, user: &str, agent: &str, rev: i64, facts: Vec<Value>) {
    save(store, user, agent, rev, None, Some(facts))
        .await
        .unwrap();
}

fn fact(id: &str, content: &str) -> Value {
    json!({"id": id, "content": content, "category": "preference", "confidence": 0.9})
}

#[tokio::test]
async fn empty_memory_loads_at_revision_zero() {
    let (_d, store) = temp_store();
    let m = store.load_memory("alice", "__default__").await.unwrap();
    assert_eq!(
        (m.revision, &m.profile, m.facts.len(), m.updated_at),
        (0, &Value::Null, 0, None)
    );
}

#[tokio::test]
async fn saves_are_optimistic_and_atomic() {
    let (_d, store) = temp_store();
    let profile = json!({"user": {"workContext": {"summary": "Rust dev", "updatedAt": "x"}}});
    let saved = save(
        &store,
        "alice",
        "__default__",
        0,
        Some(profile.clone()),
        Some(vec![fact("fact_1", "likes tea")]),
    )
    .await
    .unwrap();
    assert_eq!(saved, MemorySave::Saved { revision: 1 });
    // A writer that loaded revision 0 loses and writes nothing.
    let stale = save(
        &store,
        "alice",
        "__default__",
        0,
        Some(json!({})),
        Some(vec![]),
    )
    .await
    .unwrap();
    assert_eq!(stale, MemorySave::Conflict { current: 1 });
    let m = store.load_memory("alice", "__default__").await.unwrap();
    assert_eq!(m.revision, 1);
    assert_eq!(m.profile, profile);
    assert_eq!(m.facts, [fact("fact_1", "likes tea")]);
    assert!(m.updated_at.is_some());
}

#[tokio::test]
async fn buckets_share_summaries_but_not_facts() {
    let (_d, store) = temp_store();
    save(
        &store,
        "bob",
        "__default__",
        0,
        Some(json!({"user": {}})),
        Some(vec![fact("fact_a", "a"), fact("fact_b", "b")]),
    )
    .await
    .unwrap();
    save_facts(&store, "bob", "researcher", 1, vec![fact("fact_r", "r")]).await;
    let lead = store.load_memory("bob", "__default__").await.unwrap();
    let res = store.load_memory("bob", "researcher").await.unwrap();
    assert_eq!(lead.facts.len(), 2);
    assert_eq!(res.facts, [fact("fact_r", "r")]);
    // Profile untouched by a facts-only write, revision shared.
    assert_eq!(res.profile, json!({"user": {}}));
    assert_eq!((lead.revision, res.revision), (2, 2));
    assert_eq!(
        store.memory_buckets("bob").await.unwrap(),
        ["__default__", "researcher"]
    );
    // Facts replace the bucket.
    save_facts(&store, "bob", "__default__", 2, vec![fact("fact_b", "b")]).await;
    let lead = store.load_memory("bob", "__default__").await.unwrap();
    assert_eq!(lead.facts, [fact("fact_b", "b")]);
}

#[tokio::test]
async fn bad_fact_ids_are_refused_before_writing() {
    let (_d, store) = temp_store();
    let err = save(
        &store,
        "u",
        "__default__",
        0,
        None,
        Some(vec![fact("../etc", "x")]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StoreError::Encode { .. }), "{err}");
    assert_eq!(default_memory_revision(&store, "u").await, 0);
}

#[tokio::test]
async fn clear_one_bucket_or_everything() {
    let (_d, store) = temp_store();
    for (user, agent, rev) in [
        ("u", "__default__", 0),
        ("u", "coder", 1),
        ("v", "__default__", 0),
    ] {
        save(
            &store,
            user,
            agent,
            rev,
            Some(json!({"user": {}})),
            Some(vec![fact("fact_1", "x")]),
        )
        .await
        .unwrap();
    }
    assert_eq!(store.memory_users().await.unwrap(), ["u", "v"]);
    assert_eq!(store.clear_memory("u", Some("coder")).await.unwrap(), 1);
    let m = store.load_memory("u", "__default__").await.unwrap();
    assert_eq!((m.facts.len(), m.revision), (1, 3));
    assert_eq!(store.clear_memory("u", None).await.unwrap(), 1);
    let m = store.load_memory("u", "__default__").await.unwrap();
    assert_eq!(
        (m.revision, m.facts.len(), &m.profile),
        (0, 0, &Value::Null)
    );
    assert_eq!(store.memory_users().await.unwrap(), ["v"]);
}
