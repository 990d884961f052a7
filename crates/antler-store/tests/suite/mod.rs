//! Shared helpers: checkpoint writes driven the way the agent loop drives them.

mod admission;
mod checkpoints;
mod concurrency;
mod journal;
mod limits;
mod memory;
mod open;
mod records;

use antler_protocol::checkpoint::{CheckpointMeta, CheckpointWrite, Checkpointer};
use antler_protocol::{Message, StateUpdate, ThreadState};
use antler_store::SqliteStore;
use serde_json::{json, Value};

/// A store on a fresh file in its own temporary directory (kept alive by the returned guard).
pub fn temp_store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&db_file(&dir)).unwrap();
    (dir, store)
}

/// The database file of a [`temp_store`].
pub fn db_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("db").join("antler.db")
}

pub fn meta(thread: &str, id: &str, parent: Option<&str>, step: i64) -> CheckpointMeta {
    CheckpointMeta {
        thread_id: thread.to_owned(),
        checkpoint_id: id.to_owned(),
        parent_id: parent.map(str::to_owned),
        step,
        created_at: "2025-01-01T00:00:00.000000Z".to_owned(),
        metadata: json!({"source": "loop", "step": step}),
    }
}

/// How many messages the thread's latest checkpoint holds (it must have one).
pub async fn latest_message_count(store: &SqliteStore, thread: &str) -> usize {
    let latest = store.latest(thread).await.unwrap().unwrap();
    latest.state.messages.len()
}

/// The revision of `user`'s memory for the default agent.
pub async fn default_memory_revision(store: &SqliteStore, user: &str) -> i64 {
    store
        .load_memory(user, "__default__")
        .await
        .unwrap()
        .revision
}

/// Thread `t` with one committed checkpoint holding message `a`.
pub async fn one_checkpoint(store: &SqliteStore) -> (ThreadWriter, ThreadState) {
    let mut w = ThreadWriter::new("t");
    let mut state = ThreadState::default();
    state.apply(StateUpdate::message(msg("a", "a"))).unwrap();
    w.commit(store, &mut state).await;
    (w, state)
}

/// A message with a fixed id.
pub fn msg(id: &str, text: &str) -> Message {
    let mut m = Message::human(text);
    m.set_id(id);
    m
}

/// Writes checkpoints of one thread: drains the state's message changes and sends the fields
/// only when they differ from the parent's.
pub struct ThreadWriter {
    pub thread: String,
    pub head: Option<String>,
    head_fields: Value,
    pub step: i64,
    n: usize,
}

impl ThreadWriter {
    pub fn new(thread: &str) -> Self {
        ThreadWriter {
            thread: thread.to_owned(),
            head: None,
            head_fields: ThreadState::default().fields_value(),
            step: -1,
            n: 0,
        }
    }

    pub fn write_for(&mut self, state: &mut ThreadState) -> CheckpointWrite {
        let changes = state.messages.take_changes();
        let fields = state.fields_value();
        let changed = (fields != self.head_fields).then(|| fields.clone());
        let id = format!("{}-cp{}", self.thread, self.n);
        self.n += 1;
        let write = CheckpointWrite {
            meta: meta(&self.thread, &id, self.head.as_deref(), self.step),
            changes,
            fields: changed,
        };
        self.head = Some(id);
        self.head_fields = fields;
        self.step += 1;
        write
    }

    /// Put a checkpoint of `state` after the current head; returns its id.
    pub async fn commit(&mut self, store: &dyn Checkpointer, state: &mut ThreadState) -> String {
        let write = self.write_for(state);
        let id = write.meta.checkpoint_id.clone();
        store.put(write).await.unwrap();
        id
    }

    /// Continue from checkpoint `id` (or from nothing) holding `state`.
    pub fn reset_to(&mut self, id: Option<String>, state: &ThreadState) {
        self.head = id;
        self.head_fields = state.fields_value();
    }
}
