//! Checkpoint semantics: replay equivalence, forks, reopen, corruption, bytes per step.

use std::sync::Arc;

use antler_protocol::checkpoint::{CheckpointError, CheckpointWrite, Checkpointer};
use antler_protocol::{Message, StateUpdate, ThreadState};
use antler_store::{SqliteStore, StoreError, SCHEMA_VERSION};
use pretty_assertions::assert_eq;
use proptest::prelude::*;

use super::{db_file, latest_message_count, meta, msg, one_checkpoint, temp_store, ThreadWriter};

/// Whole-state equality plus the stored position keys.
fn assert_same(loaded: &ThreadState, expected: &ThreadState, what: &str) {
    assert_eq!(loaded, expected, "{what}: state");
    assert_eq!(
        loaded.messages.entries(),
        expected.messages.entries(),
        "{what}: entries (ords)"
    );
}

#[derive(Clone, Debug)]
enum MsgOp {
    Put(u8, u8),
    Remove(u8),
}

#[derive(Clone, Debug)]
enum Write {
    Msgs(Vec<MsgOp>),
    RemoveAll(Vec<(u8, u8)>),
    Title(Option<u8>),
    Nothing,
}

#[derive(Clone, Debug)]
enum Start {
    Head,
    /// Fork from an earlier checkpoint (index modulo the number written).
    Fork(usize),
    /// A write without a parent on a thread that already has checkpoints.
    Fresh,
}

fn id_of(k: u8) -> String {
    format!("m{k}")
}

fn text_of(k: u8, v: u8) -> String {
    format!("message {k} version {v}")
}

fn write_strategy() -> impl Strategy<Value = Write> {
    let op = prop_oneof![
        3 => (0u8..8, any::<u8>()).prop_map(|(k, v)| MsgOp::Put(k, v)),
        1 => (0u8..8).prop_map(MsgOp::Remove),
    ];
    prop_oneof![
        6 => prop::collection::vec(op, 1..4).prop_map(Write::Msgs),
        1 => prop::collection::vec((0u8..8, any::<u8>()), 0..3).prop_map(Write::RemoveAll),
        1 => prop::option::of(0u8..3).prop_map(Write::Title),
        1 => Just(Write::Nothing),
    ]
}

fn start_strategy() -> impl Strategy<Value = Start> {
    prop_oneof![
        12 => Just(Start::Head),
        2 => any::<usize>().prop_map(Start::Fork),
        1 => Just(Start::Fresh),
    ]
}

fn apply(state: &mut ThreadState, write: &Write) {
    let update = match write {
        Write::Msgs(ops) => StateUpdate::messages(
            ops.iter()
                .map(|op| match op {
                    MsgOp::Put(k, v) => msg(&id_of(*k), &text_of(*k, *v)),
                    MsgOp::Remove(k) => Message::remove(id_of(*k)),
                })
                .collect(),
        ),
        Write::RemoveAll(tail) => StateUpdate::messages(
            std::iter::once(Message::remove_all())
                .chain(tail.iter().map(|(k, v)| msg(&id_of(*k), &text_of(*k, *v))))
                .collect(),
        ),
        Write::Title(t) => StateUpdate {
            title: Some(t.map(|t| format!("title {t}"))),
            ..Default::default()
        },
        Write::Nothing => StateUpdate::default(),
    };
    // Removing an unknown id is rejected by the reducer and leaves the state untouched; the
    // checkpoint is still written (with no changes).
    let _ = state.apply(update);
}

/// `batch`: write the checkpoints `batch` at a time through one `put_all` (forks, fresh starts
/// and chains then meet inside a batch; a fork resumes from the in-memory state it names).
async fn run_sequence(steps: &[(Start, Write)], batch: usize) {
    let (_dir, store) = temp_store();
    let mut writer = ThreadWriter::new("t");
    let mut state = ThreadState::default();
    let mut written: Vec<(String, ThreadState)> = Vec::new();
    let mut pending = Vec::new();
    for (start, write) in steps {
        match start {
            Start::Head => {}
            Start::Fork(i) if !written.is_empty() => {
                let (id, kept) = &written[i % written.len()];
                if batch > 1 {
                    state = kept.clone();
                } else {
                    // Resume the way the runtime does: from the stored checkpoint.
                    state = store.get("t", id).await.unwrap().unwrap().state;
                }
                writer.reset_to(Some(id.clone()), &state);
            }
            Start::Fork(_) => {}
            Start::Fresh => {
                state = ThreadState::default();
                writer.reset_to(None, &state);
            }
        }
        apply(&mut state, write);
        if batch > 1 {
            let w = writer.write_for(&mut state);
            written.push((w.meta.checkpoint_id.clone(), state.clone()));
            pending.push(w);
            if pending.len() == batch {
                store.put_all(std::mem::take(&mut pending)).await.unwrap();
            }
        } else {
            let id = writer.commit(&store, &mut state).await;
            written.push((id, state.clone()));
        }
    }
    store.put_all(pending).await.unwrap();
    let latest = store.latest("t").await.unwrap().unwrap();
    let (last_id, _) = written.last().unwrap();
    assert_eq!(&latest.meta.checkpoint_id, last_id);
    assert_same(&latest.state, &state, "latest");
    for (i, (id, expected)) in written.iter().enumerate() {
        let cp = store.get("t", id).await.unwrap().unwrap();
        assert_same(&cp.state, expected, &format!("checkpoint {i} ({id})"));
    }
    let listed = store.list("t", usize::MAX, None).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|m| m.checkpoint_id.as_str()).collect();
    let expected: Vec<&str> = written.iter().rev().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, expected);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any sequence of reducer writes, forks and fresh starts, checkpointed after every step,
    /// loads back exactly: the head and every earlier checkpoint.
    #[test]
    fn checkpoints_replay_the_in_memory_state(
        steps in prop::collection::vec((start_strategy(), write_strategy()), 1..40)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_sequence(&steps, 1));
    }

    /// The same, written in batches (one transaction each).
    #[test]
    fn batched_checkpoints_replay_the_in_memory_state(
        steps in prop::collection::vec((start_strategy(), write_strategy()), 1..40),
        batch in 2..6usize,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_sequence(&steps, batch));
    }
}

fn push(state: &mut ThreadState, id: &str, text: &str) {
    state.apply(StateUpdate::message(msg(id, text))).unwrap();
}

/// A writer of thread `t` and its empty state.
fn fresh_thread() -> (ThreadWriter, ThreadState) {
    (ThreadWriter::new("t"), ThreadState::default())
}

/// Checkpoints of thread `t`, one a step, and the writer and state after the last.
struct Steps {
    w: ThreadWriter,
    state: ThreadState,
    /// Each step's checkpoint id and state.
    ids: Vec<String>,
    states: Vec<ThreadState>,
}

/// Commit `n` checkpoints of thread `t`; `step(i, state)` changes the state before the `i`th.
async fn commit_steps(
    store: &dyn Checkpointer,
    n: usize,
    mut step: impl FnMut(usize, &mut ThreadState),
) -> Steps {
    let (mut w, mut state) = fresh_thread();
    let mut ids = Vec::new();
    let mut states = Vec::new();
    for i in 0..n {
        step(i, &mut state);
        ids.push(w.commit(store, &mut state).await);
        states.push(state.clone());
    }
    Steps {
        w,
        state,
        ids,
        states,
    }
}

#[tokio::test]
async fn fork_from_an_older_checkpoint() {
    let (_dir, store) = temp_store();
    let Steps {
        mut w,
        mut state,
        ids,
        states,
    } = commit_steps(&store, 5, |i, state| {
        push(state, &format!("m{i}"), &format!("hello {i}"));
        if i == 3 {
            // Replace an older message too, so the fork must bring back a closed row.
            push(state, "m1", "hello 1, edited");
        }
    })
    .await;

    // Resume from checkpoint 2 (three messages, m1 unedited) and write something new.
    let base = store.get("t", &ids[2]).await.unwrap().unwrap();
    assert_eq!(base.state, states[2]);
    let mut forked = base.state;
    w.reset_to(Some(ids[2].clone()), &forked);
    push(&mut forked, "f0", "forked");
    let fork_id = w.commit(&store, &mut forked).await;

    let head = store.latest("t").await.unwrap().unwrap();
    assert_eq!(head.meta.checkpoint_id, fork_id);
    assert_eq!(head.meta.parent_id.as_deref(), Some(ids[2].as_str()));
    let texts: Vec<String> = head.state.messages.iter().map(Message::text).collect();
    assert_eq!(texts, ["hello 0", "hello 1", "hello 2", "forked"]);
    assert_eq!(head.state, forked);

    // The original branch is intact.
    for (id, expected) in ids.iter().zip(&states) {
        assert_eq!(&store.get("t", id).await.unwrap().unwrap().state, expected);
    }

    // Fork again, from the old branch's tip (now not the head), and continue on it.
    let mut tip = store.get("t", &ids[4]).await.unwrap().unwrap().state;
    w.reset_to(Some(ids[4].clone()), &tip);
    state
        .apply(StateUpdate::message(Message::remove("m0")))
        .unwrap();
    tip.apply(StateUpdate::message(Message::remove("m0")))
        .unwrap();
    let second = w.commit(&store, &mut tip).await;
    push(&mut tip, "m5", "after the second fork");
    let third = w.commit(&store, &mut tip).await;
    assert_eq!(store.get("t", &second).await.unwrap().unwrap().state, state);
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, tip);
    assert_eq!(
        store.latest("t").await.unwrap().unwrap().meta.checkpoint_id,
        third
    );
    // ... and the first fork still loads.
    assert_eq!(
        store.get("t", &fork_id).await.unwrap().unwrap().state,
        forked
    );
}

#[tokio::test]
async fn unknown_parent_is_rejected_and_writes_nothing() {
    let (_dir, store) = temp_store();
    one_checkpoint(&store).await;
    let mut other = ThreadWriter::new("u");
    let other_id = other.commit(&store, &mut ThreadState::default()).await;

    for parent in ["nope", other_id.as_str()] {
        let err = store
            .put(CheckpointWrite {
                meta: meta("t", "bad", Some(parent), 5),
                changes: vec![],
                fields: None,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CheckpointError::UnknownParent(p) if p == parent),
            "{err}"
        );
    }
    assert_eq!(store.list("t", 10, None).await.unwrap().len(), 1);
    assert!(store.get("t", "bad").await.unwrap().is_none());
    assert_eq!(store.stats().checkpoints, 2);
}

#[tokio::test]
async fn no_parent_on_a_non_empty_thread_starts_empty() {
    let (_dir, store) = temp_store();
    let (mut w, mut state) = fresh_thread();
    push(&mut state, "a", "a");
    state.title = Some("old".into());
    let first = w.commit(&store, &mut state).await;

    let mut fresh = ThreadState::default();
    w.reset_to(None, &fresh);
    push(&mut fresh, "b", "b");
    w.commit(&store, &mut fresh).await;

    let head = store.latest("t").await.unwrap().unwrap();
    assert_eq!(head.state, fresh);
    assert_eq!(head.state.title, None);
    assert_eq!(store.get("t", &first).await.unwrap().unwrap().state, state);
}

#[tokio::test]
async fn list_is_newest_first_with_before_and_limit() {
    let (_dir, store) = temp_store();
    let ids = commit_steps(&store, 6, |i, state| push(state, &format!("m{i}"), "x"))
        .await
        .ids;
    let got = |v: Vec<antler_protocol::checkpoint::CheckpointMeta>| {
        v.into_iter().map(|m| m.checkpoint_id).collect::<Vec<_>>()
    };
    assert_eq!(
        got(store.list("t", 2, None).await.unwrap()),
        [ids[5].clone(), ids[4].clone()]
    );
    assert_eq!(
        got(store.list("t", 10, Some(&ids[2])).await.unwrap()),
        [ids[1].clone(), ids[0].clone()]
    );
    let first = store.list("t", 1, Some(&ids[1])).await.unwrap();
    assert_eq!(first[0], meta("t", &ids[0], None, -1));
    assert!(store.list("nobody", 10, None).await.unwrap().is_empty());
    assert!(store.latest("nobody").await.unwrap().is_none());

    Checkpointer::delete_thread(&store, "t").await.unwrap();
    assert!(store.latest("t").await.unwrap().is_none());
    assert!(store.list("t", 10, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn reopen_resumes_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    let (mut w, mut state) = fresh_thread();
    {
        let store = SqliteStore::open(&path).unwrap();
        for i in 0..20 {
            push(&mut state, &format!("m{i}"), &format!("turn {i}"));
            if i == 10 {
                state.title = Some("A title".into());
            }
            w.commit(&store, &mut state).await;
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    let head = store.latest("t").await.unwrap().unwrap();
    assert_same(&head.state, &state, "after reopen");
    assert_eq!(head.meta.checkpoint_id, w.head.clone().unwrap());

    // Resume: the loaded state continues with fresh ords and writes on top of the file.
    let mut resumed = head.state;
    w.reset_to(Some(head.meta.checkpoint_id), &resumed);
    push(&mut resumed, "m20", "turn 20");
    w.commit(&store, &mut resumed).await;
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    let head = store.latest("t").await.unwrap().unwrap();
    assert_same(&head.state, &resumed, "after the second reopen");
    assert_eq!(head.state.messages.len(), 21);
    assert_eq!(head.state.title.as_deref(), Some("A title"));
}

#[tokio::test]
async fn corrupt_rows_fall_back_to_an_earlier_checkpoint() {
    let (dir, store) = temp_store();
    let Steps { ids, states, .. } = commit_steps(&store, 4, |i, state| {
        push(state, &format!("m{i}"), &format!("turn {i}"));
    })
    .await;
    // Garble the message written by the last checkpoint (seq 4) behind the store's back.
    let raw = rusqlite::Connection::open(db_file(&dir)).unwrap();
    let n = raw
        .execute(
            "UPDATE checkpoint_messages SET body = '{\"type\": \"human\", \"conte' \
             WHERE thread_id = 't' AND from_seq = 4",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);

    let err = store.latest("t").await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, CheckpointError::Corrupt(_)), "{text}");
    assert!(
        text.contains(&ids[3]) && text.contains("thread t"),
        "{text}"
    );
    assert!(text.contains("ord 3"), "{text}");

    let good = store.latest_good("t").await.unwrap();
    assert_eq!(good.skipped, [ids[3].clone()]);
    let cp = good.checkpoint.unwrap();
    assert_eq!(cp.meta.checkpoint_id, ids[2]);
    assert_eq!(cp.state, states[2]);

    // Garbled metadata of checkpoint 3 as well: the walk skips both.
    raw.execute(
        "UPDATE checkpoints SET metadata = 'not json' WHERE checkpoint_id = ?1",
        [&ids[2]],
    )
    .unwrap();
    let good = store.latest_good("t").await.unwrap();
    assert_eq!(good.skipped, [ids[3].clone(), ids[2].clone()]);
    assert_eq!(good.checkpoint.unwrap().state, states[1]);
    let err = store.get_checkpoint("t", &ids[2]).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptCheckpoint { what, .. } if what == "metadata"),
        "{err}"
    );
}

#[tokio::test]
async fn corrupt_fields_are_reported() {
    let (dir, store) = temp_store();
    let mut w = ThreadWriter::new("t");
    let mut state = ThreadState {
        title: Some("t1".into()),
        ..Default::default()
    };
    let first = w.commit(&store, &mut state).await;
    push(&mut state, "a", "a");
    let second = w.commit(&store, &mut state).await;
    let raw = rusqlite::Connection::open(db_file(&dir)).unwrap();
    // The second checkpoint did not change the fields: it reads them from the first.
    raw.execute(
        "UPDATE checkpoints SET fields = '[1,' WHERE checkpoint_id = ?1",
        [&first],
    )
    .unwrap();
    for id in [&first, &second] {
        let err = store.get("t", id).await.unwrap_err();
        assert!(err.to_string().contains(id.as_str()), "{err}");
        assert!(err.to_string().contains("fields"), "{err}");
    }
    let good = store.latest_good("t").await.unwrap();
    assert!(good.checkpoint.is_none());
    assert_eq!(good.skipped, [second, first]);
}

/// Bytes of checkpoint payload written by one step that appends one message.
async fn step_bytes(store: &SqliteStore, history: usize) -> u64 {
    let thread = format!("h{history}");
    let mut w = ThreadWriter::new(&thread);
    let mut state = ThreadState::default();
    let body = "x".repeat(400);
    for i in 0..history {
        push(&mut state, &format!("m{i:06}"), &body);
        w.commit(store, &mut state).await;
    }
    // Measure a few steps at this history length and keep the largest.
    let mut worst = 0;
    for i in history..history + 3 {
        push(&mut state, &format!("m{i:06}"), &body);
        let before = store.stats().checkpoint_bytes;
        w.commit(store, &mut state).await;
        worst = worst.max(store.stats().checkpoint_bytes - before);
    }
    assert_eq!(latest_message_count(store, &thread).await, history + 3);
    worst
}

#[tokio::test]
async fn bytes_per_step_do_not_grow_with_history() {
    let (_dir, store) = temp_store();
    let at_10 = step_bytes(&store, 10).await;
    let at_100 = step_bytes(&store, 100).await;
    let at_1000 = step_bytes(&store, 1000).await;
    eprintln!("checkpoint bytes per step at 10/100/1000 messages: {at_10}/{at_100}/{at_1000}");
    assert!(at_10 > 400 && at_10 < 1000, "{at_10}");
    assert!(at_100 * 2 <= at_10 * 3, "{at_100} vs {at_10}");
    assert!(at_1000 * 2 <= at_10 * 3, "{at_1000} vs {at_10}");
    let stats = store.stats();
    assert_eq!(stats.checkpoints, 10 + 100 + 1000 + 9);
}

#[tokio::test]
async fn a_step_replacing_a_message_twice_stores_one_version() {
    let (dir, store) = temp_store();
    let (mut w, mut state) = fresh_thread();
    push(&mut state, "a", "one");
    push(&mut state, "a", "two");
    push(&mut state, "b", "b");
    state
        .apply(StateUpdate::message(Message::remove("b")))
        .unwrap();
    w.commit(&store, &mut state).await;
    let raw = rusqlite::Connection::open(db_file(&dir)).unwrap();
    let rows: i64 = raw
        .query_row("SELECT COUNT(*) FROM checkpoint_messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
}

#[tokio::test]
async fn works_behind_a_trait_object_and_in_memory() {
    let store: Arc<dyn Checkpointer> = Arc::new(SqliteStore::open_in_memory().unwrap());
    let state = commit_steps(store.as_ref(), 5, |i, state| {
        push(state, &format!("m{i}"), "x");
    })
    .await
    .state;
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
}

/// A write of thread `t` that changes nothing.
fn empty_write(id: &str, parent: Option<&str>, step: i64) -> CheckpointWrite {
    CheckpointWrite {
        meta: meta("t", id, parent, step),
        changes: vec![],
        fields: None,
    }
}

/// A batch that must fail whole: a good child of `w`'s head (its id returned), then a write
/// naming an unknown parent.
fn doomed_batch(w: &mut ThreadWriter, state: &ThreadState) -> (Vec<CheckpointWrite>, String) {
    let mut good = state.clone();
    push(&mut good, "c", "never stored");
    let first = w.write_for(&mut good);
    let first_id = first.meta.checkpoint_id.clone();
    (vec![first, empty_write("bad", Some("nope"), 9)], first_id)
}

#[tokio::test]
async fn a_batch_of_checkpoints_is_written_whole_or_not_at_all() {
    let (_dir, store) = temp_store();
    let (mut w, mut state) = one_checkpoint(&store).await;
    // Three supersteps written together: each is a checkpoint of its own, chained.
    let mut writes = Vec::new();
    let mut states = Vec::new();
    for i in 0..3 {
        push(&mut state, &format!("b{i}"), &format!("batched {i}"));
        if i == 1 {
            push(&mut state, "a", "a, replaced in the batch");
        }
        writes.push(w.write_for(&mut state));
        states.push(state.clone());
    }
    let ids: Vec<String> = writes
        .iter()
        .map(|w| w.meta.checkpoint_id.clone())
        .collect();
    store.put_all(writes).await.unwrap();
    for (id, expected) in ids.iter().zip(&states) {
        assert_eq!(&store.get("t", id).await.unwrap().unwrap().state, expected);
    }
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
    assert_eq!(store.stats().checkpoints, 4);

    // A batch whose last write names an unknown parent leaves nothing of the batch behind.
    let (doomed, first_id) = doomed_batch(&mut w, &state);
    let err = store.put_all(doomed).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::UnknownParent(p) if p == "nope"),
        "{err}"
    );
    assert!(store.get("t", &first_id).await.unwrap().is_none());
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
    assert_eq!(store.list("t", 10, None).await.unwrap().len(), 4);
    assert_eq!(store.stats().checkpoints, 4);
}

// The writer connection remembers each thread's head between transactions (so a step's first
// checkpoint need not read it back); these are the ways that memory could go stale.

#[tokio::test]
async fn a_write_by_another_connection_between_two_puts_is_seen() {
    let (dir, store) = temp_store();
    let Steps {
        mut w, mut state, ..
    } = commit_steps(&store, 3, |i, state| push(state, &format!("m{i}"), "x")).await;
    // Another process (its own connection) continues the thread.
    let other = SqliteStore::open(&db_file(&dir)).unwrap();
    let mut theirs = state.clone();
    push(&mut theirs, "o", "from elsewhere");
    let their_write = w.write_for(&mut theirs);
    let their_id = their_write.meta.checkpoint_id.clone();
    other.put(their_write).await.unwrap();
    // This store continues from their checkpoint: a stale head would reuse its seq.
    w.reset_to(Some(their_id.clone()), &theirs);
    state = theirs;
    push(&mut state, "m3", "after theirs");
    let mine = w.commit(&store, &mut state).await;
    let head = store.latest("t").await.unwrap().unwrap();
    assert_eq!(head.meta.checkpoint_id, mine);
    assert_eq!(head.meta.parent_id.as_deref(), Some(their_id.as_str()));
    assert_eq!(head.state, state);
    assert_eq!(store.list("t", 10, None).await.unwrap().len(), 5);
}

#[tokio::test]
async fn a_deleted_thread_is_not_continued_from_its_old_head() {
    let (_dir, store) = temp_store();
    let Steps { ids, .. } =
        commit_steps(&store, 2, |i, state| push(state, &format!("m{i}"), "x")).await;
    assert!(store.delete_checkpoints("t").await.unwrap());
    let err = store
        .put(empty_write("after", Some(&ids[1]), 3))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::UnknownParent(p) if p == &ids[1]),
        "{err}"
    );
    // Started over, the thread's first checkpoint holds only what it writes.
    let (mut w, mut state) = fresh_thread();
    push(&mut state, "n", "new");
    w.commit(&store, &mut state).await;
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
    assert_eq!(store.list("t", 10, None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_rolled_back_batch_leaves_no_head_behind() {
    let (_dir, store) = temp_store();
    let (mut w, mut state) = one_checkpoint(&store).await;
    let (doomed, first_id) = doomed_batch(&mut w, &state);
    store.put_all(doomed).await.unwrap_err();
    // The batch's first write was rolled back with it: nothing may build on it.
    let err = store
        .put(empty_write("child", Some(&first_id), 10))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::UnknownParent(p) if p == &first_id),
        "{err}"
    );
    // And the thread goes on from its real head.
    let head = store.latest("t").await.unwrap().unwrap();
    w.reset_to(Some(head.meta.checkpoint_id.clone()), &head.state);
    push(&mut state, "d", "next");
    let next = w.commit(&store, &mut state).await;
    let head = store.latest("t").await.unwrap().unwrap();
    assert_eq!(head.meta.checkpoint_id, next);
    assert_eq!(head.state, state);
    assert_eq!(store.list("t", 10, None).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_version_2_database_migrates_and_keeps_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    let Steps {
        mut w,
        mut state,
        ids,
        states,
    } = {
        let store = SqliteStore::open(&path).unwrap();
        // Every step appends one message and rewrites the one before it, as token usage's
        // stamp does: closed versions sit beside the live ones.
        commit_steps(&store, 12, |i, state| {
            if i > 0 {
                push(
                    state,
                    &format!("m{}", i - 1),
                    &format!("turn {} stamped", i - 1),
                );
            }
            push(state, &format!("m{i}"), &format!("turn {i}"));
        })
        .await
    };
    // Make the file what schema version 2 left: its two partial indexes, its version number.
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(
            "CREATE INDEX checkpoint_messages_live ON checkpoint_messages (thread_id, ord)
                 WHERE to_seq IS NULL;
             CREATE INDEX run_events_messages ON run_events (thread_id, seq)
                 WHERE category = 'message';
             PRAGMA user_version = 2;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = raw
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let partial: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN
                 ('checkpoint_messages_live', 'run_events_messages')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(partial, 0);
    let closed: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM checkpoint_messages WHERE to_seq IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(closed, 11);

    assert_same(
        &store.latest("t").await.unwrap().unwrap().state,
        &state,
        "head",
    );
    for (id, expected) in ids.iter().zip(&states) {
        let cp = store.get("t", id).await.unwrap().unwrap();
        assert_same(&cp.state, expected, id);
    }
    // Writing goes on where version 2 stopped.
    push(&mut state, "m11", "turn 11 stamped");
    push(&mut state, "m12", "turn 12");
    w.commit(&store, &mut state).await;
    let head = store.latest("t").await.unwrap().unwrap();
    assert_same(&head.state, &state, "after a write on the migrated file");
    assert_eq!(head.state.messages.len(), 13);
}
