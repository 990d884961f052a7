//! The thread index: one row per thread with its status, title, owner and metadata.
//!
//! Independent of checkpoints: a thread can be listed before its first run, and checkpoints can
//! be written for a thread that has no record. [`SqliteStore::delete_thread`] removes the record,
//! its checkpoints, runs and journal.

use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::checkpoints::delete_checkpoints_tx;
use crate::db::Cx;
use crate::error::StoreError;
use crate::journal::delete_events_tx;
use crate::{json_text, json_value, now, SqliteStore};

/// One thread of the index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadRecord {
    pub thread_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC; bumped by every upsert and update.
    pub updated_at: String,
    /// A JSON object.
    pub metadata: Value,
    /// `idle` | `busy` | `interrupted` | `error`.
    pub status: String,
    pub title: Option<String>,
    pub owner: Option<String>,
}

impl ThreadRecord {
    pub const IDLE: &'static str = "idle";
    pub const BUSY: &'static str = "busy";
    pub const INTERRUPTED: &'static str = "interrupted";
    pub const ERROR: &'static str = "error";

    /// A fresh idle thread with empty metadata, stamped now.
    pub fn new(thread_id: impl Into<String>) -> Self {
        let ts = now();
        ThreadRecord {
            thread_id: thread_id.into(),
            created_at: ts.clone(),
            updated_at: ts,
            metadata: Value::Object(Map::new()),
            status: Self::IDLE.to_owned(),
            title: None,
            owner: None,
        }
    }
}

/// Filters and paging of [`SqliteStore::list_threads`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadQuery {
    pub limit: usize,
    pub offset: usize,
    pub owner: Option<String>,
    pub status: Option<String>,
}

impl Default for ThreadQuery {
    fn default() -> Self {
        ThreadQuery {
            limit: 50,
            offset: 0,
            owner: None,
            status: None,
        }
    }
}

/// A partial update of a thread; `None` leaves a column as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadUpdate {
    /// `Some(None)` clears the title.
    pub title: Option<Option<String>>,
    pub status: Option<String>,
    /// Keys merged into the stored metadata object (shallow; a key set to null stays null).
    pub metadata: Option<Map<String, Value>>,
}

const COLUMNS: &str =
    "SELECT thread_id, created_at, updated_at, metadata, status, title, owner FROM threads";

struct RawThread {
    record: ThreadRecord,
    metadata: String,
}

fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawThread> {
    Ok(RawThread {
        record: ThreadRecord {
            thread_id: r.get(0)?,
            created_at: r.get(1)?,
            updated_at: r.get(2)?,
            metadata: Value::Null,
            status: r.get(4)?,
            title: r.get(5)?,
            owner: r.get(6)?,
        },
        metadata: r.get(3)?,
    })
}

fn decode(raw: RawThread) -> Result<ThreadRecord, StoreError> {
    let mut record = raw.record;
    record.metadata = json_value(
        format!("metadata of thread {}", record.thread_id),
        &raw.metadata,
    )?;
    Ok(record)
}

fn get_tx(cx: &Cx<'_>, thread_id: &str) -> Result<Option<ThreadRecord>, StoreError> {
    cx.query_opt(
        &format!("{COLUMNS} WHERE thread_id = ?1"),
        [thread_id],
        "read a thread",
        read_raw,
    )?
    .map(decode)
    .transpose()
}

fn not_found(thread_id: &str) -> StoreError {
    StoreError::NotFound {
        kind: "thread",
        id: thread_id.to_owned(),
    }
}

impl SqliteStore {
    /// Insert a thread, or overwrite every column but `created_at` of an existing one.
    /// `updated_at` is set to now; an empty `created_at` is stamped now. Returns the stored row.
    pub async fn upsert_thread(&self, record: ThreadRecord) -> Result<ThreadRecord, StoreError> {
        let metadata = json_text("thread metadata", &record.metadata)?;
        self.db()
            .write(move |cx| {
                let ts = now();
                let created = if record.created_at.is_empty() {
                    ts.clone()
                } else {
                    record.created_at.clone()
                };
                cx.exec(
                    "INSERT INTO threads
                       (thread_id, created_at, updated_at, metadata, status, title, owner)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (thread_id) DO UPDATE SET
                       updated_at = excluded.updated_at, metadata = excluded.metadata,
                       status = excluded.status, title = excluded.title,
                       owner = excluded.owner",
                    params![
                        record.thread_id,
                        created,
                        ts,
                        metadata,
                        record.status,
                        record.title,
                        record.owner
                    ],
                    "upsert a thread",
                )?;
                get_tx(cx, &record.thread_id)?.ok_or_else(|| not_found(&record.thread_id))
            })
            .await
    }

    /// The thread shows `busy` while a run lasts: created (idle fields, `owner`) when new, else
    /// only its status and `updated_at` change and an owner is set only if it had none. One
    /// statement — every run does it, and reading the record back to write it whole cost a
    /// read, a write and two metadata round trips through JSON.
    pub async fn mark_thread_busy(
        &self,
        thread_id: &str,
        owner: Option<&str>,
    ) -> Result<(), StoreError> {
        let id = thread_id.to_owned();
        let owner = owner.map(str::to_owned);
        self.db()
            .write(move |cx| mark_busy_tx(cx, &id, owner.as_deref()))
            .await
    }

    pub async fn get_thread(&self, thread_id: &str) -> Result<Option<ThreadRecord>, StoreError> {
        let id = thread_id.to_owned();
        self.db().read(move |cx| get_tx(cx, &id)).await
    }

    /// Threads, most recently updated first.
    pub async fn list_threads(&self, query: ThreadQuery) -> Result<Vec<ThreadRecord>, StoreError> {
        self.db()
            .read(move |cx| {
                cx.query_all(
                    &format!(
                        "{COLUMNS} WHERE (?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR status = ?2)
                         ORDER BY updated_at DESC, thread_id DESC LIMIT ?3 OFFSET ?4"
                    ),
                    params![
                        query.owner,
                        query.status,
                        i64::try_from(query.limit).unwrap_or(i64::MAX),
                        i64::try_from(query.offset).unwrap_or(i64::MAX),
                    ],
                    "list threads",
                    read_raw,
                )?
                .into_iter()
                .map(decode)
                .collect()
            })
            .await
    }

    /// Change title, status and/or metadata; bumps `updated_at`. Returns the updated row.
    pub async fn update_thread(
        &self,
        thread_id: &str,
        update: ThreadUpdate,
    ) -> Result<ThreadRecord, StoreError> {
        let id = thread_id.to_owned();
        self.db()
            .write(move |cx| {
                let mut record = get_tx(cx, &id)?.ok_or_else(|| not_found(&id))?;
                if let Some(title) = update.title {
                    record.title = title;
                }
                if let Some(status) = update.status {
                    record.status = status;
                }
                if let Some(patch) = update.metadata {
                    match &mut record.metadata {
                        Value::Object(m) => m.extend(patch),
                        other => *other = Value::Object(patch),
                    }
                }
                record.updated_at = now();
                let metadata = json_text("thread metadata", &record.metadata)?;
                cx.exec(
                    "UPDATE threads SET title = ?2, status = ?3, metadata = ?4, updated_at = ?5
                     WHERE thread_id = ?1",
                    params![id, record.title, record.status, metadata, record.updated_at],
                    "update a thread",
                )?;
                Ok(record)
            })
            .await
    }

    /// Remove a thread record with its checkpoints, runs and journal. Returns whether anything
    /// existed.
    pub async fn delete_thread(&self, thread_id: &str) -> Result<bool, StoreError> {
        let id = thread_id.to_owned();
        self.db()
            .write(move |cx| {
                let had_checkpoints = delete_checkpoints_tx(cx, &id)?;
                let events = delete_events_tx(cx, &id)?;
                let runs = cx.exec(
                    "DELETE FROM runs WHERE thread_id = ?1",
                    [&id],
                    "delete runs",
                )?;
                let threads = cx.exec(
                    "DELETE FROM threads WHERE thread_id = ?1",
                    [&id],
                    "delete a thread",
                )?;
                Ok(had_checkpoints || runs > 0 || threads > 0 || events > 0)
            })
            .await
    }
}

/// [`SqliteStore::mark_thread_busy`] inside the caller's transaction (admission marks the thread
/// of a run it starts in the same commit).
pub(crate) fn mark_busy_tx(
    cx: &Cx<'_>,
    thread_id: &str,
    owner: Option<&str>,
) -> Result<(), StoreError> {
    cx.exec(
        "INSERT INTO threads
           (thread_id, created_at, updated_at, metadata, status, title, owner)
         VALUES (?1, ?2, ?2, '{}', ?3, NULL, ?4)
         ON CONFLICT (thread_id) DO UPDATE SET
           updated_at = excluded.updated_at, status = excluded.status,
           owner = COALESCE(threads.owner, excluded.owner)",
        params![thread_id, now(), ThreadRecord::BUSY, owner],
        "mark a thread busy",
    )?;
    Ok(())
}
