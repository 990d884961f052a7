//! Repairing a thread whose newest checkpoints do not decode: [`RecoveringCheckpointer`] wraps
//! the store, and when the head is corrupt it forks a new head from the last good checkpoint plus
//! the complete message rounds the run journal recorded after it — real recorded messages only,
//! never invented ones, tool-call pairing intact. Every run (CLI or server) loads through it.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use antler_protocol::checkpoint::{
    Checkpoint, CheckpointError, CheckpointMeta, CheckpointWrite, Checkpointer,
};
use antler_protocol::{Message, ThreadState};
use serde_json::{json, Value};

use crate::journal::{MessageCursor, NewRunEvent};
use crate::{SqliteStore, StoreError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a checkpoint recovery did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovery {
    /// The checkpoint the thread was rebuilt from (`None`: none decoded; rebuilt from the
    /// journal alone).
    pub from_checkpoint: Option<String>,
    /// Corrupt checkpoints skipped, newest first.
    pub skipped: Vec<String>,
    /// Message ids restored from the journal, in order.
    pub replayed: Vec<String>,
    /// Journaled messages left out because their tool round was incomplete.
    pub dropped: Vec<String>,
    /// The new head.
    pub checkpoint_id: String,
}

/// Journal messages recorded since `since` (RFC 3339) that are missing from `known`, in seq
/// order. Only the thread's own messages: the user's input, the lead agent's replies, tool
/// results (subagent and middleware model calls are not thread messages).
async fn journal_messages_since(
    store: &SqliteStore,
    thread_id: &str,
    since: &str,
    known: &HashSet<String>,
) -> Result<Vec<Message>, StoreError> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .list_run_messages(
                thread_id,
                MessageCursor {
                    after_seq: Some(after),
                    before_seq: None,
                    limit: 500,
                },
            )
            .await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for ev in page {
            if ev.created_at.as_str() < since {
                continue;
            }
            let thread_message = match ev.event_type.as_str() {
                "llm.human.input" | "llm.tool.result" => true,
                "llm.ai.response" => ev
                    .metadata
                    .get("caller")
                    .and_then(Value::as_str)
                    .is_none_or(|c| c == "lead_agent"),
                _ => false,
            };
            if !thread_message {
                continue;
            }
            let Ok(m) = serde_json::from_value::<Message>(ev.content) else {
                continue;
            };
            if m.id().is_some_and(|id| !known.contains(id)) {
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// Keep only complete tool rounds: an AI message with tool calls stays if every call has a
/// result (already in the thread or replayed); results stay only after their call.
fn complete_rounds(base: &ThreadState, candidates: Vec<Message>) -> (Vec<Message>, Vec<String>) {
    let mut answered: HashSet<String> = HashSet::new();
    for m in base.messages.iter().chain(candidates.iter()) {
        if let Message::Tool(t) = m {
            answered.insert(t.tool_call_id.clone());
        }
    }
    let mut calls_known: HashSet<String> = base
        .messages
        .iter()
        .filter_map(Message::as_ai)
        .flat_map(|a| a.tool_calls.iter().map(|c| c.id_str().to_owned()))
        .collect();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for m in candidates {
        let ok = match &m {
            Message::Ai(a) => {
                let complete = a.tool_calls.iter().all(|c| answered.contains(c.id_str()));
                if complete {
                    calls_known.extend(a.tool_calls.iter().map(|c| c.id_str().to_owned()));
                }
                complete
            }
            Message::Tool(t) => calls_known.contains(&t.tool_call_id),
            _ => true,
        };
        if ok {
            kept.push(m);
        } else if let Some(id) = m.id() {
            dropped.push(id.to_owned());
        }
    }
    (kept, dropped)
}

/// Rebuild a thread whose head checkpoint does not decode: fork from the newest checkpoint that
/// does, add the complete rounds the journal recorded after it, and journal what was done.
/// `Ok(None)` when the head is fine.
pub async fn recover_thread(
    store: &SqliteStore,
    thread_id: &str,
    run_id: &str,
) -> Result<Option<Recovery>, StoreError> {
    match store.latest_checkpoint(thread_id).await {
        Ok(_) => return Ok(None),
        Err(StoreError::CorruptCheckpoint { .. }) => {}
        Err(e) => return Err(e),
    }
    let good = store.latest_good(thread_id).await?;
    let (mut state, parent, step, since) = match &good.checkpoint {
        Some(c) => (
            c.state.clone(),
            Some(c.meta.checkpoint_id.clone()),
            c.meta.step + 1,
            c.meta.created_at.clone(),
        ),
        None => (ThreadState::default(), None, 0, String::new()),
    };
    // Whatever the loaded state carries is already stored; only new pushes are written.
    let _ = state.messages.take_changes();
    let known: HashSet<String> = state
        .messages
        .iter()
        .filter_map(|m| m.id().map(str::to_owned))
        .collect();
    let candidates = journal_messages_since(store, thread_id, &since, &known).await?;
    let (kept, dropped) = complete_rounds(&state, candidates);
    let replayed: Vec<String> = kept
        .iter()
        .filter_map(|m| m.id().map(str::to_owned))
        .collect();
    for m in kept {
        state.messages.push(m);
    }
    let write = CheckpointWrite::new(
        thread_id,
        parent.clone(),
        step,
        json!({
            "source": "recovery",
            "step": step,
            "run_id": run_id,
            "thread_id": thread_id,
            "recovered_from": parent,
            "skipped": good.skipped,
            "replayed": replayed,
        }),
        state.messages.take_changes(),
        Some(state.fields_value()),
    );
    let checkpoint_id = write.meta.checkpoint_id.clone();
    store.put_checkpoint(write).await?;
    let recovery = Recovery {
        from_checkpoint: parent,
        skipped: good.skipped,
        replayed,
        dropped,
        checkpoint_id,
    };
    tracing::warn!(
        thread = thread_id,
        from = ?recovery.from_checkpoint,
        skipped = recovery.skipped.len(),
        replayed = recovery.replayed.len(),
        "recovered a thread from a corrupt checkpoint"
    );
    let event = NewRunEvent::new(
        thread_id,
        run_id,
        "checkpoint.recovered",
        "lifecycle",
        json!({
            "from_checkpoint": recovery.from_checkpoint,
            "skipped": recovery.skipped,
            "replayed": recovery.replayed,
            "dropped": recovery.dropped,
            "checkpoint_id": recovery.checkpoint_id,
        }),
    );
    if let Err(e) = store.append_run_events(vec![event]).await {
        tracing::warn!(error = %e, "could not journal the recovery");
    }
    Ok(Some(recovery))
}

/// The store as the loop's checkpointer, repairing a corrupt head on load (see
/// [`recover_thread`]). One per run; free when nothing is corrupt.
pub struct RecoveringCheckpointer {
    store: SqliteStore,
    run_id: String,
    recovered: Mutex<Option<Recovery>>,
}

impl RecoveringCheckpointer {
    pub fn new(store: SqliteStore, run_id: impl Into<String>) -> Self {
        RecoveringCheckpointer {
            store,
            run_id: run_id.into(),
            recovered: Mutex::new(None),
        }
    }

    /// What was repaired during this run, if anything.
    pub fn recovery(&self) -> Option<Recovery> {
        lock(&self.recovered).clone()
    }
}

super::impl_checkpointer! {
    RecoveringCheckpointer, store;
    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, CheckpointError> {
        match self.store.latest_checkpoint(thread_id).await {
            Err(StoreError::CorruptCheckpoint { .. }) => {
                let r = recover_thread(&self.store, thread_id, &self.run_id).await?;
                *lock(&self.recovered) = r;
                Ok(self.store.latest_checkpoint(thread_id).await?)
            }
            other => Ok(other?),
        }
    }
}
