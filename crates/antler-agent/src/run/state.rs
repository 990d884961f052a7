//! Thread-state writes that are not runs — a new thread's empty initial checkpoint and a
//! client's state update (`POST /threads/{id}/state`) — kept beside the lifecycle so every
//! checkpoint a front end causes is written here, through `CheckpointWrite::new`.

use antler_protocol::checkpoint::CheckpointWrite;
use antler_protocol::{Change, ThreadState};
use antler_store::ThreadRecord;
use serde_json::{json, Value};

use crate::{AgentError, App};

impl App {
    /// Create (or replace) a thread record; a thread without checkpoints gets an empty initial
    /// one (`step: -1`) so state and history work before the first run.
    pub async fn create_thread(&self, record: ThreadRecord) -> Result<ThreadRecord, AgentError> {
        let thread_id = record.thread_id.clone();
        let record = self.store.upsert_thread(record).await?;
        if self.store.latest_checkpoint(&thread_id).await?.is_none() {
            let write = CheckpointWrite::new(
                thread_id.clone(),
                None,
                -1,
                json!({"source": "input", "step": -1, "thread_id": thread_id}),
                Vec::new(),
                Some(ThreadState::default().fields_value()),
            );
            self.store.put_checkpoint(write).await?;
        }
        Ok(record)
    }

    /// Write a state update as a new checkpoint after `parent` (at `step`); returns its id.
    /// `writer` is LangGraph's `as_node`.
    pub async fn write_state(
        &self,
        thread_id: &str,
        parent: Option<String>,
        step: i64,
        writer: &str,
        changes: Vec<Change>,
        fields: Value,
    ) -> Result<String, AgentError> {
        let write = CheckpointWrite::new(
            thread_id,
            parent,
            step,
            json!({
                "source": "update",
                "step": step,
                "writer": writer,
                "thread_id": thread_id,
            }),
            changes,
            Some(fields),
        );
        let id = write.meta.checkpoint_id.clone();
        self.store.put_checkpoint(write).await?;
        Ok(id)
    }
}
