//! Thread records outside a run: metadata and title edits, deletion. Runs write their own
//! (`run/`); these are the API's writes, kept behind [`App`] so no server route touches the
//! store.

use antler_store::{ThreadRecord, ThreadUpdate};

use crate::{AgentError, App};

impl App {
    /// Apply `update` to a thread record (metadata merge, title, status); the updated record.
    pub async fn update_thread(
        &self,
        thread_id: &str,
        update: ThreadUpdate,
    ) -> Result<ThreadRecord, AgentError> {
        Ok(self.store.update_thread(thread_id, update).await?)
    }

    /// Delete a thread's record, checkpoints and runs (not its files); whether it existed.
    pub async fn delete_thread(&self, thread_id: &str) -> Result<bool, AgentError> {
        Ok(self.store.delete_thread(thread_id).await?)
    }
}
