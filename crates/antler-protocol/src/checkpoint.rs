//! Checkpoints: the restore point of a thread's state, written after every step — the trait the
//! loop writes through and the store implements, kept below both so the store needs no runtime.
//!
//! A write carries only what changed since the previous checkpoint of the thread: the message
//! [`Change`]s drained from the state's message list, and the non-message channels only when they
//! differ. Implementations must keep bytes written per step independent of history length.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::{Change, Entry, Messages, ThreadState};
use async_trait::async_trait;
use serde_json::Value;

/// Identity and metadata of one checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointMeta {
    pub thread_id: String,
    pub checkpoint_id: String,
    pub parent_id: Option<String>,
    /// LangGraph-style step number (-1 for the input checkpoint).
    pub step: i64,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// `{"source": "input"|"loop"|"update", "step": n, "writes": {...}, "run_id": ..}`.
    pub metadata: Value,
}

/// A checkpoint with the state it restores.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub meta: CheckpointMeta,
    pub state: ThreadState,
}

/// One checkpoint to persist.
#[derive(Clone, Debug)]
pub struct CheckpointWrite {
    pub meta: CheckpointMeta,
    /// Message changes since the parent checkpoint, in order.
    pub changes: Vec<Change>,
    /// The non-message channels (`ThreadState::fields_value`), `None` when unchanged since the
    /// parent.
    pub fields: Option<Value>,
}

impl CheckpointWrite {
    /// The one way every writer (the loop, recovery, rollback, state updates, new threads) makes
    /// a checkpoint: a fresh time-ordered id (so ids sort by write order) stamped now.
    /// `metadata` is LangGraph's (`source`, `step`, the writer's keys, `thread_id`).
    pub fn new(
        thread_id: impl Into<String>,
        parent_id: Option<String>,
        step: i64,
        metadata: Value,
        changes: Vec<Change>,
        fields: Option<Value>,
    ) -> CheckpointWrite {
        CheckpointWrite {
            meta: CheckpointMeta {
                thread_id: thread_id.into(),
                checkpoint_id: uuid::Uuid::now_v7().to_string(),
                parent_id,
                step,
                created_at: now_rfc3339(),
                metadata,
            },
            changes,
            fields,
        }
    }

    pub fn checkpoint_id(&self) -> &str {
        &self.meta.checkpoint_id
    }
}

/// RFC 3339 UTC timestamp with microseconds, `Z` suffix.
pub fn now_rfc3339() -> String {
    rfc3339_micros(chrono::Utc::now(), true)
}

/// `t` as chrono's `to_rfc3339_opts(SecondsFormat::Micros, use_z)` writes it
/// (`2026-12-06T23:10:06.123456Z`, or `+00:00` for the offset), without its formatting
/// machinery: a handful of these are written per agent step.
pub fn rfc3339_micros(t: chrono::DateTime<chrono::Utc>, use_z: bool) -> String {
    use chrono::{Datelike, Timelike};
    let year = t.year();
    let nanos = t.nanosecond();
    // Years chrono writes with a sign or more digits, and leap seconds, go the long way.
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        return t.to_rfc3339_opts(chrono::SecondsFormat::Micros, use_z);
    }
    let mut b = [0_u8; 32];
    let mut put = |at: usize, v: u32, width: usize| {
        let mut v = v;
        for i in (0..width).rev() {
            b[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, year.unsigned_abs(), 4);
    put(5, t.month(), 2);
    put(8, t.day(), 2);
    put(11, t.hour(), 2);
    put(14, t.minute(), 2);
    put(17, t.second(), 2);
    put(20, nanos / 1000, 6);
    b[4] = b'-';
    b[7] = b'-';
    b[10] = b'T';
    b[13] = b':';
    b[16] = b':';
    b[19] = b'.';
    let end = if use_z {
        b[26] = b'Z';
        27
    } else {
        b[26..32].copy_from_slice(b"+00:00");
        32
    };
    // Every byte written is ASCII.
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// How a run ended, as the loop reports it (the store's run records add `pending`, `running`
/// and `timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Success,
    Error,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// DeerFlow's `multitask_strategy`: what a new run does when its thread already has one.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum MultitaskStrategy {
    /// Refuse the new run (HTTP 409; DeerFlow's default).
    #[default]
    Reject,
    /// Stop the active run (`interrupted`, its checkpoint kept) and start the new one.
    Interrupt,
    /// Stop the active run as `error` ("Rolled back by user"); the caller restores the thread to
    /// the old run's rollback point before starting.
    Rollback,
    /// Queue the new run (`pending`) until the active ones finish.
    Enqueue,
}

impl MultitaskStrategy {
    pub const ALL: [MultitaskStrategy; 4] = [
        MultitaskStrategy::Reject,
        MultitaskStrategy::Interrupt,
        MultitaskStrategy::Rollback,
        MultitaskStrategy::Enqueue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MultitaskStrategy::Reject => "reject",
            MultitaskStrategy::Interrupt => "interrupt",
            MultitaskStrategy::Rollback => "rollback",
            MultitaskStrategy::Enqueue => "enqueue",
        }
    }
}

impl std::str::FromStr for MultitaskStrategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MultitaskStrategy::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}

/// A `multitask_strategy` name that is none of reject, interrupt, rollback, enqueue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown multitask strategy {0:?}")]
pub struct UnknownStrategy(pub String);

#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckpointError {
    /// The store could not be read or written (disk full, read-only, locked, unreachable).
    #[error("checkpoint store error: {0}")]
    Store(String),
    /// Stored data could not be decoded.
    #[error("checkpoint data is corrupt: {0}")]
    Corrupt(String),
    /// A write's parent is not a checkpoint of the thread.
    #[error("unknown parent checkpoint {0}")]
    UnknownParent(String),
}

/// Where checkpoints live. The embedded default is SQLite (`antler-store`).
#[async_trait]
pub trait Checkpointer: Send + Sync {
    /// Persist one checkpoint. When `meta.parent_id` is not the thread's latest checkpoint (a
    /// fork), `changes` are relative to that parent.
    async fn put(&self, write: CheckpointWrite) -> Result<(), CheckpointError>;

    /// Persist several checkpoints of one thread, in order, each the parent of the next (a
    /// run's supersteps between two side effects). A store that can should write them all or
    /// none, in one transaction; the default writes them one by one.
    async fn put_all(&self, writes: Vec<CheckpointWrite>) -> Result<(), CheckpointError> {
        for w in writes {
            self.put(w).await?;
        }
        Ok(())
    }

    /// The latest checkpoint of a thread.
    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, CheckpointError>;

    /// A specific checkpoint.
    async fn get(
        &self,
        thread_id: &str,
        checkpoint_id: &str,
    ) -> Result<Option<Checkpoint>, CheckpointError>;

    /// Checkpoints of a thread, newest first, optionally only those older than `before`.
    async fn list(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Vec<CheckpointMeta>, CheckpointError>;

    /// Forget a thread's checkpoints.
    async fn delete_thread(&self, thread_id: &str) -> Result<(), CheckpointError>;
}

/// Rebuild message entries by replaying changes over `base`.
pub fn replay_changes(base: &mut Vec<Entry>, changes: &[Change]) {
    for c in changes {
        match c {
            Change::Upsert { ord, message, .. } => {
                match base.binary_search_by_key(ord, |e| e.ord) {
                    Ok(i) => base[i].message = message.clone(),
                    Err(i) => base.insert(
                        i,
                        Entry {
                            ord: *ord,
                            message: message.clone(),
                        },
                    ),
                }
            }
            Change::Remove { ord } => {
                if let Ok(i) = base.binary_search_by_key(ord, |e| e.ord) {
                    base.remove(i);
                }
            }
            Change::Clear => base.clear(),
        }
    }
}

#[derive(Clone)]
struct Stored {
    meta: CheckpointMeta,
    entries: Vec<Entry>,
    fields: Value,
}

/// In-process checkpointer (DeerFlow's `memory` backend): lost on exit. Keeps every checkpoint's
/// materialized entries, sharing message bodies by `Arc`.
#[derive(Default)]
pub struct MemoryCheckpointer {
    threads: Mutex<HashMap<String, Vec<Stored>>>,
}

impl MemoryCheckpointer {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<String, Vec<Stored>>>, CheckpointError> {
        self.threads
            .lock()
            .map_err(|_| CheckpointError::Store("memory checkpointer lock poisoned".into()))
    }
}

fn materialize(s: &Stored) -> Result<Checkpoint, CheckpointError> {
    let mut state: ThreadState = if s.fields.is_null() {
        ThreadState::default()
    } else {
        serde_json::from_value(s.fields.clone())
            .map_err(|e| CheckpointError::Corrupt(e.to_string()))?
    };
    state.messages = Messages::from_entries(s.entries.clone());
    Ok(Checkpoint {
        meta: s.meta.clone(),
        state,
    })
}

#[async_trait]
impl Checkpointer for MemoryCheckpointer {
    async fn put(&self, write: CheckpointWrite) -> Result<(), CheckpointError> {
        let mut threads = self.lock()?;
        let list = threads.entry(write.meta.thread_id.clone()).or_default();
        let parent = match &write.meta.parent_id {
            Some(pid) => Some(
                list.iter()
                    .find(|s| &s.meta.checkpoint_id == pid)
                    .ok_or_else(|| CheckpointError::UnknownParent(pid.clone()))?,
            ),
            None => None,
        };
        let (mut entries, parent_fields) = match parent {
            Some(p) => (p.entries.clone(), p.fields.clone()),
            None => (Vec::new(), Value::Null),
        };
        replay_changes(&mut entries, &write.changes);
        let fields = write.fields.unwrap_or(parent_fields);
        list.push(Stored {
            meta: write.meta,
            entries,
            fields,
        });
        Ok(())
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, CheckpointError> {
        let threads = self.lock()?;
        threads
            .get(thread_id)
            .and_then(|l| l.last())
            .map(materialize)
            .transpose()
    }

    async fn get(
        &self,
        thread_id: &str,
        checkpoint_id: &str,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        let threads = self.lock()?;
        threads
            .get(thread_id)
            .and_then(|l| l.iter().find(|s| s.meta.checkpoint_id == checkpoint_id))
            .map(materialize)
            .transpose()
    }

    async fn list(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Vec<CheckpointMeta>, CheckpointError> {
        let threads = self.lock()?;
        let Some(list) = threads.get(thread_id) else {
            return Ok(Vec::new());
        };
        let end = match before {
            Some(b) => list
                .iter()
                .position(|s| s.meta.checkpoint_id == b)
                .unwrap_or(list.len()),
            None => list.len(),
        };
        Ok(list[..end]
            .iter()
            .rev()
            .take(limit)
            .map(|s| s.meta.clone())
            .collect())
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<(), CheckpointError> {
        self.lock()?.remove(thread_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339_micros;
    use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

    fn chrono_form(t: DateTime<Utc>, z: bool) -> String {
        t.to_rfc3339_opts(SecondsFormat::Micros, z)
    }

    /// The short formatter writes exactly what chrono writes, for both offset forms, across
    /// field boundaries, sub-microsecond truncation, and the years it hands back to chrono.
    #[test]
    fn writes_what_chrono_writes() {
        let mut times = vec![
            Utc.timestamp_opt(0, 0).unwrap(),
            Utc.timestamp_opt(1_796_000_000, 999_999_999).unwrap(),
            Utc.timestamp_opt(951_782_400, 1_000).unwrap(), // 2000-02-29
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 6, 1, 12, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(33, 1, 2, 3, 4, 5).unwrap(),
            Utc::now(),
        ];
        // A spread of instants, nanoseconds included.
        let mut x: i64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let secs = x.rem_euclid(4_102_444_800); // 1970..2100
            let nanos = (x >> 20).rem_euclid(1_000_000_000) as u32;
            times.push(Utc.timestamp_opt(secs, nanos).unwrap());
        }
        for t in times {
            for z in [true, false] {
                assert_eq!(rfc3339_micros(t, z), chrono_form(t, z), "{t:?} z={z}");
            }
        }
    }
}
