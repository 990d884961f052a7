//! The run journal: an append-only stream of run events per thread (spec 40 §6.3, table
//! `run_events`).
//!
//! The journal is the audit and UI history of what runs did — inputs, every model response,
//! tool results, lifecycle, errors, deliveries. It is never part of a model's context (seed 002)
//! and never stands in for a checkpoint. Contract, as DeerFlow's `RunEventStore`:
//!
//! - `seq` is strictly increasing per thread and independent across threads; it is assigned in
//!   the writer's transaction, so two processes appending to one thread never collide;
//! - a batch is appended atomically (all or nothing) with consecutive seqs;
//! - [`SqliteStore::list_run_messages`] returns only `category == "message"` with before/after
//!   cursors; [`SqliteStore::list_run_events`] returns one run's stream;
//! - [`SqliteStore::put_run_event_if_absent`] writes an event unless the run already has one of
//!   that type (the idempotent primitive for terminal receipts such as `run.delivery`);
//! - `trace` content longer than the store's `max_trace_content` is cut on a character boundary
//!   and flagged with `content_truncated` / `original_byte_length`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use antler_protocol::hash::FastMap;
use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::db::Cx;
use crate::error::StoreError;
use crate::{now, SqliteStore};

/// Category of message events (the UI's history).
pub const CATEGORY_MESSAGE: &str = "message";
/// Category whose content is cut at `max_trace_content`.
pub const CATEGORY_TRACE: &str = "trace";

/// An event to append. `created_at` empty = stamped at write time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewRunEvent {
    pub thread_id: String,
    pub run_id: String,
    pub user_id: Option<String>,
    /// `run.start`, `llm.ai.response`, `llm.tool.result`, `run.end`, …
    pub event_type: String,
    /// `message`, `trace`, `lifecycle`, `outputs`, `error`, `middleware`, `memory`, …
    pub category: String,
    /// A string, or any JSON value (kept as JSON).
    pub content: Value,
    pub metadata: Map<String, Value>,
    pub created_at: String,
}

impl NewRunEvent {
    /// An event with empty metadata, stamped at write time.
    pub fn new(
        thread_id: impl Into<String>,
        run_id: impl Into<String>,
        event_type: impl Into<String>,
        category: impl Into<String>,
        content: Value,
    ) -> Self {
        NewRunEvent {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            user_id: None,
            event_type: event_type.into(),
            category: category.into(),
            content,
            metadata: Map::new(),
            created_at: String::new(),
        }
    }

    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    pub fn with_user(mut self, user_id: Option<String>) -> Self {
        self.user_id = user_id;
        self
    }
}

/// A stored event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEventRecord {
    pub seq: i64,
    pub thread_id: String,
    pub run_id: String,
    pub user_id: Option<String>,
    pub event_type: String,
    pub category: String,
    pub content: Value,
    pub metadata: Map<String, Value>,
    /// RFC 3339 UTC.
    pub created_at: String,
}

/// Which events of a run to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only these event types (empty = all).
    pub event_types: Vec<String>,
    /// Only events whose `metadata.task_id` equals this.
    pub task_id: Option<String>,
    /// Forward cursor: events with `seq > after_seq`.
    pub after_seq: Option<i64>,
    /// At most this many (0 = 500, DeerFlow's default).
    pub limit: usize,
}

/// A page of message events (`category == "message"`), always in ascending seq order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCursor {
    /// The last `limit` messages with `seq < before_seq`.
    pub before_seq: Option<i64>,
    /// The first `limit` messages with `seq > after_seq`.
    pub after_seq: Option<i64>,
    /// 0 = 50.
    pub limit: usize,
}

/// A journal row's ids, shared by every event of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEventIds {
    pub thread_id: Arc<str>,
    pub run_id: Arc<str>,
    pub user_id: Option<Arc<str>>,
}

/// An event's content as stored: text, or JSON already encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventContent {
    Text(String),
    Json(String),
}

impl EventContent {
    /// A JSON string is stored as its text; anything else as JSON.
    pub fn from_value(value: &Value) -> Result<Self, StoreError> {
        match value {
            Value::String(s) => Ok(EventContent::Text(s.clone())),
            other => serde_json::to_string(other)
                .map(EventContent::Json)
                .map_err(|e| StoreError::encode("event content", e)),
        }
    }

    fn text(&self) -> &str {
        match self {
            EventContent::Text(s) | EventContent::Json(s) => s,
        }
    }
}

/// An event ready for the `run_events` table: content and metadata encoded, trace content cut,
/// ids shared. Writers that append many events build these where the event happens (from
/// borrowed data, no intermediate `Value`) and hand them to
/// [`SqliteStore::append_encoded_run_events`].
#[derive(Clone, Debug)]
pub struct EncodedRunEvent {
    ids: RunEventIds,
    event_type: Cow<'static, str>,
    category: Cow<'static, str>,
    content: EventContent,
    metadata: String,
    created_at: String,
}

impl EncodedRunEvent {
    /// Encode one event; `max_trace` is the store's `max_trace_content`
    /// ([`SqliteStore::max_trace_content`]); `created_at` empty = now.
    pub fn new(
        ids: &RunEventIds,
        event_type: impl Into<Cow<'static, str>>,
        category: impl Into<Cow<'static, str>>,
        mut content: EventContent,
        mut metadata: Map<String, Value>,
        max_trace: usize,
        created_at: String,
    ) -> Result<Self, StoreError> {
        let category = category.into();
        cut_trace(&category, &mut content, &mut metadata, max_trace);
        Self::encoded(
            ids,
            event_type.into(),
            category,
            content,
            &metadata,
            created_at,
        )
    }

    /// [`EncodedRunEvent::new`] with the metadata serialized straight from `metadata` (a
    /// struct of borrowed fields, not a map built for the purpose). Its JSON must be an object.
    /// A `trace` event whose content is cut takes the flags in its metadata as `new` would.
    pub fn with_metadata<M: Serialize>(
        ids: &RunEventIds,
        event_type: impl Into<Cow<'static, str>>,
        category: impl Into<Cow<'static, str>>,
        content: EventContent,
        metadata: &M,
        max_trace: usize,
        created_at: String,
    ) -> Result<Self, StoreError> {
        let event_type = event_type.into();
        let category = category.into();
        if category == CATEGORY_TRACE && content.text().len() > max_trace {
            let map = match serde_json::to_value(metadata) {
                Ok(Value::Object(map)) => map,
                Ok(_) => {
                    return Err(StoreError::encode(
                        format!("metadata of {event_type}"),
                        "not an object",
                    ))
                }
                Err(e) => return Err(StoreError::encode(format!("metadata of {event_type}"), e)),
            };
            return Self::new(
                ids, event_type, category, content, map, max_trace, created_at,
            );
        }
        Self::encoded(ids, event_type, category, content, metadata, created_at)
    }

    fn encoded<M: Serialize + ?Sized>(
        ids: &RunEventIds,
        event_type: Cow<'static, str>,
        category: Cow<'static, str>,
        content: EventContent,
        metadata: &M,
        created_at: String,
    ) -> Result<Self, StoreError> {
        let metadata = serde_json::to_string(metadata)
            .map_err(|e| StoreError::encode(format!("metadata of {event_type}"), e))?;
        Ok(EncodedRunEvent {
            ids: ids.clone(),
            event_type,
            category,
            content,
            metadata,
            created_at: if created_at.is_empty() {
                now()
            } else {
                created_at
            },
        })
    }
}

/// `trace` content longer than `max` bytes is cut on a character boundary and flagged; true
/// when it was.
fn cut_trace(
    category: &str,
    content: &mut EventContent,
    metadata: &mut Map<String, Value>,
    max: usize,
) -> bool {
    let text = content.text();
    if category != CATEGORY_TRACE || text.len() <= max {
        return false;
    }
    metadata.insert("content_truncated".into(), Value::Bool(true));
    metadata.insert("original_byte_length".into(), Value::from(text.len()));
    *content = EventContent::Text(cut(text, max).to_owned());
    true
}

/// An event encoded off the writer thread, with the decoded forms returned as its record.
struct Encoded {
    row: EncodedRunEvent,
    content_value: Value,
    metadata_value: Map<String, Value>,
}

/// Cut `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn encode(event: NewRunEvent, max_trace: usize) -> Result<Encoded, StoreError> {
    let NewRunEvent {
        thread_id,
        run_id,
        user_id,
        event_type,
        category,
        mut content,
        mut metadata,
        created_at,
    } = event;
    let ids = RunEventIds {
        thread_id: thread_id.into(),
        run_id: run_id.into(),
        user_id: user_id.map(Into::into),
    };
    let mut text = EventContent::from_value(&content)
        .map_err(|e| StoreError::encode(format!("content of {event_type}"), e))?;
    if cut_trace(&category, &mut text, &mut metadata, max_trace) {
        // The record returns what was stored.
        content = Value::String(text.text().to_owned());
    }
    let row = EncodedRunEvent::encoded(
        &ids,
        event_type.into(),
        category.into(),
        text,
        &metadata,
        created_at,
    )?;
    Ok(Encoded {
        row,
        content_value: content,
        metadata_value: metadata,
    })
}

fn max_seq(cx: &Cx<'_>, thread: &str) -> Result<i64, StoreError> {
    let head = cx.query_opt(
        "SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE thread_id = ?1",
        [thread],
        "read the journal head",
        |r| r.get(0),
    )?;
    Ok(head.unwrap_or(0))
}

/// Insert rows, assigning seqs per thread; returns their seqs in input order.
fn insert_rows<'a>(
    cx: &Cx<'_>,
    rows: impl ExactSizeIterator<Item = &'a EncodedRunEvent>,
) -> Result<Vec<i64>, StoreError> {
    let mut next: FastMap<&'a str, i64> = FastMap::default();
    let mut stmt = cx
        .conn
        .prepare_cached(
            "INSERT INTO run_events (thread_id, run_id, user_id, seq, event_type, category,
                                     content, content_json, metadata, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .map_err(cx.err("append run events"))?;
    let mut seqs = Vec::with_capacity(rows.len());
    for e in rows {
        let thread: &'a str = &e.ids.thread_id;
        let seq = match next.get_mut(thread) {
            Some(s) => {
                *s += 1;
                *s
            }
            None => {
                let s = max_seq(cx, thread)? + 1;
                next.insert(thread, s);
                s
            }
        };
        let (content, content_json) = match &e.content {
            EventContent::Text(t) => (t, false),
            EventContent::Json(j) => (j, true),
        };
        stmt.execute(params![
            thread,
            &*e.ids.run_id,
            e.ids.user_id.as_deref(),
            seq,
            &*e.event_type,
            &*e.category,
            content,
            content_json,
            e.metadata,
            e.created_at,
        ])
        .map_err(cx.err("append run events"))?;
        seqs.push(seq);
    }
    Ok(seqs)
}

/// Insert `encoded` unless its run already has an event of that type; the stored (or existing)
/// record and whether it was created.
fn put_if_absent_tx(cx: &Cx<'_>, encoded: Encoded) -> Result<(RunEventRecord, bool), StoreError> {
    let existing = query(
        cx,
        &format!(
            "{COLUMNS} WHERE run_id = ?1 AND thread_id = ?2 AND event_type = ?3
             ORDER BY seq LIMIT 1"
        ),
        params![
            &*encoded.row.ids.run_id,
            &*encoded.row.ids.thread_id,
            &*encoded.row.event_type
        ],
        "read a run event",
    )?;
    if let Some(rec) = existing.into_iter().next() {
        return Ok((rec, false));
    }
    let rec = insert_tx(cx, vec![encoded])?
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::encode("run event", "nothing was inserted"))?;
    Ok((rec, true))
}

/// Insert events; returns the stored records in input order.
fn insert_tx(cx: &Cx<'_>, events: Vec<Encoded>) -> Result<Vec<RunEventRecord>, StoreError> {
    let seqs = insert_rows(cx, events.iter().map(|e| &e.row))?;
    Ok(events
        .into_iter()
        .zip(seqs)
        .map(|(e, seq)| RunEventRecord {
            seq,
            thread_id: e.row.ids.thread_id.to_string(),
            run_id: e.row.ids.run_id.to_string(),
            user_id: e.row.ids.user_id.as_deref().map(str::to_owned),
            event_type: e.row.event_type.into_owned(),
            category: e.row.category.into_owned(),
            content: e.content_value,
            metadata: e.metadata_value,
            created_at: e.row.created_at,
        })
        .collect())
}

const COLUMNS: &str = "SELECT seq, thread_id, run_id, user_id, event_type, category, content,
    content_json, metadata, created_at FROM run_events";

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(RunEventRecord, String, bool, String)> {
    Ok((
        RunEventRecord {
            seq: r.get(0)?,
            thread_id: r.get(1)?,
            run_id: r.get(2)?,
            user_id: r.get(3)?,
            event_type: r.get(4)?,
            category: r.get(5)?,
            content: Value::Null,
            metadata: Map::new(),
            created_at: r.get(9)?,
        },
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

/// Decode a row. A damaged JSON column does not hide the rest of the journal: the raw text is
/// returned as a string and flagged (`content_corrupt` / `metadata_corrupt`).
fn decode(raw: (RunEventRecord, String, bool, String)) -> Result<RunEventRecord, StoreError> {
    let (mut rec, content, is_json, metadata) = raw;
    rec.metadata = match serde_json::from_str(&metadata) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(thread = %rec.thread_id, seq = rec.seq, error = %e, "corrupt journal metadata");
            let mut m = Map::new();
            m.insert("metadata_corrupt".into(), Value::Bool(true));
            m
        }
    };
    rec.content = if is_json {
        match serde_json::from_str(&content) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(thread = %rec.thread_id, seq = rec.seq, error = %e, "corrupt journal content");
                rec.metadata
                    .insert("content_corrupt".into(), Value::Bool(true));
                Value::String(content)
            }
        }
    } else {
        Value::String(content)
    };
    Ok(rec)
}

fn query(
    cx: &Cx<'_>,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
    op: &'static str,
) -> Result<Vec<RunEventRecord>, StoreError> {
    cx.query_all(sql, params, op, read_row)?
        .into_iter()
        .map(decode)
        .collect()
}

fn limit_i64(limit: usize, default: usize) -> i64 {
    let limit = if limit == 0 { default } else { limit };
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Message events of a thread (optionally one run) under a cursor, ascending.
fn messages_tx(
    cx: &Cx<'_>,
    thread: &str,
    run: Option<&str>,
    cursor: MessageCursor,
) -> Result<Vec<RunEventRecord>, StoreError> {
    let limit = limit_i64(cursor.limit, 50);
    let run_filter = "(?2 IS NULL OR run_id = ?2)";
    match (cursor.after_seq, cursor.before_seq) {
        (Some(after), _) => query(
            cx,
            &format!(
                "{COLUMNS} WHERE thread_id = ?1 AND category = 'message' AND {run_filter}
                   AND seq > ?3 ORDER BY seq ASC LIMIT ?4"
            ),
            params![thread, run, after, limit],
            "list journal messages",
        ),
        (None, before) => {
            let mut rows = query(
                cx,
                &format!(
                    "{COLUMNS} WHERE thread_id = ?1 AND category = 'message' AND {run_filter}
                       AND seq < ?3 ORDER BY seq DESC LIMIT ?4"
                ),
                params![thread, run, before.unwrap_or(i64::MAX), limit],
                "list journal messages",
            )?;
            rows.reverse();
            Ok(rows)
        }
    }
}

impl SqliteStore {
    /// Cap on `trace` content bytes (`run_events.max_trace_content`, default 10240).
    pub fn set_max_trace_content(&self, bytes: usize) {
        self.inner
            .max_trace_content
            .store(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn max_trace_bytes(&self) -> usize {
        usize::try_from(self.inner.max_trace_content.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Append events atomically (one transaction; seqs consecutive per thread). Returns the
    /// stored records in input order.
    pub async fn append_run_events(
        &self,
        events: Vec<NewRunEvent>,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let max = self.max_trace_bytes();
        let encoded = events
            .into_iter()
            .map(|e| encode(e, max))
            .collect::<Result<Vec<_>, _>>()?;
        self.db().write(move |cx| insert_tx(cx, encoded)).await
    }

    /// The `max_trace_content` an [`EncodedRunEvent`] for this store is cut at.
    pub fn max_trace_content(&self) -> usize {
        self.max_trace_bytes()
    }

    /// Append encoded events atomically (one transaction; seqs consecutive per thread). The
    /// batch is shared so a caller can keep it for a retry without copying it.
    pub async fn append_encoded_run_events(
        &self,
        events: Arc<Vec<EncodedRunEvent>>,
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        // A batch is small and frequent: written on the caller's thread when the writer is
        // idle, like a checkpoint (no hand-off to the writer thread and back).
        self.db()
            .write_inline(move |cx| cx.keeping_heads(|| insert_rows(cx, events.iter()).map(drop)))
            .await
    }

    /// Append one event unless its run already has an event of the same type. Returns the
    /// stored (or the existing) record and whether it was created.
    pub async fn put_run_event_if_absent(
        &self,
        event: NewRunEvent,
    ) -> Result<(RunEventRecord, bool), StoreError> {
        let encoded = encode(event, self.max_trace_bytes())?;
        self.db()
            .write(move |cx| put_if_absent_tx(cx, encoded))
            .await
    }

    /// [`SqliteStore::append_encoded_run_events`] then [`SqliteStore::put_run_event_if_absent`]
    /// in one transaction (a run's last batch and its terminal receipt: one commit instead of
    /// two). All or nothing; returns whether the receipt was created.
    pub async fn append_encoded_run_events_then_if_absent(
        &self,
        events: Arc<Vec<EncodedRunEvent>>,
        event: NewRunEvent,
    ) -> Result<bool, StoreError> {
        let encoded = encode(event, self.max_trace_bytes())?;
        self.db()
            .write_inline(move |cx| {
                if !events.is_empty() {
                    insert_rows(cx, events.iter())?;
                }
                put_if_absent_tx(cx, encoded).map(|(_, created)| created)
            })
            .await
    }

    /// One run's events in seq order.
    pub async fn list_run_events(
        &self,
        run_id: &str,
        q: EventQuery,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        let run = run_id.to_owned();
        self.db()
            .read(move |cx| {
                let limit = limit_i64(q.limit, 500);
                let types = (!q.event_types.is_empty())
                    .then(|| serde_json::to_string(&q.event_types))
                    .transpose()
                    .map_err(|e| StoreError::encode("event types", e))?;
                query(
                    cx,
                    &format!(
                        "{COLUMNS} WHERE run_id = ?1 AND seq > ?2
                           AND (?3 IS NULL OR event_type IN (SELECT value FROM json_each(?3)))
                           AND (?4 IS NULL OR json_extract(metadata, '$.task_id') = ?4)
                         ORDER BY seq LIMIT ?5"
                    ),
                    params![run, q.after_seq.unwrap_or(0), types, q.task_id, limit],
                    "list run events",
                )
            })
            .await
    }

    /// A thread's message events (`category == "message"`) under a cursor, ascending.
    pub async fn list_run_messages(
        &self,
        thread_id: &str,
        cursor: MessageCursor,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .read(move |cx| messages_tx(cx, &thread, None, cursor))
            .await
    }

    /// One run's message events under a cursor, ascending.
    pub async fn list_run_messages_by_run(
        &self,
        thread_id: &str,
        run_id: &str,
        cursor: MessageCursor,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        let thread = thread_id.to_owned();
        let run = run_id.to_owned();
        self.db()
            .read(move |cx| messages_tx(cx, &thread, Some(&run), cursor))
            .await
    }

    /// Number of message events of a thread.
    pub async fn count_run_messages(&self, thread_id: &str) -> Result<u64, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .read(move |cx| {
                let n: Option<i64> = cx.query_opt(
                    "SELECT COUNT(*) FROM run_events WHERE thread_id = ?1 AND category = 'message'",
                    [thread],
                    "count journal messages",
                    |r| r.get(0),
                )?;
                Ok(n.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
            })
            .await
    }

    /// The newest event of a thread (its highest seq), if any.
    pub async fn last_run_event(
        &self,
        thread_id: &str,
    ) -> Result<Option<RunEventRecord>, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .read(move |cx| {
                Ok(query(
                    cx,
                    &format!("{COLUMNS} WHERE thread_id = ?1 ORDER BY seq DESC LIMIT 1"),
                    params![thread],
                    "read the journal head",
                )?
                .into_iter()
                .next())
            })
            .await
    }

    /// Delete every event of a thread; returns how many.
    pub async fn delete_run_events_by_thread(&self, thread_id: &str) -> Result<usize, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .write(move |cx| delete_events_tx(cx, &thread))
            .await
    }

    /// Delete every event of one run; returns how many.
    pub async fn delete_run_events_by_run(
        &self,
        thread_id: &str,
        run_id: &str,
    ) -> Result<usize, StoreError> {
        let thread = thread_id.to_owned();
        let run = run_id.to_owned();
        self.db()
            .write(move |cx| {
                cx.exec(
                    "DELETE FROM run_events WHERE thread_id = ?1 AND run_id = ?2",
                    params![thread, run],
                    "delete run events",
                )
            })
            .await
    }
}

pub(crate) fn delete_events_tx(cx: &Cx<'_>, thread: &str) -> Result<usize, StoreError> {
    cx.exec(
        "DELETE FROM run_events WHERE thread_id = ?1",
        [thread],
        "delete run events",
    )
}

/// Append events inside an existing write (used by run reconciliation).
pub(crate) fn append_tx(
    cx: &Cx<'_>,
    events: Vec<NewRunEvent>,
    max_trace: usize,
) -> Result<Vec<RunEventRecord>, StoreError> {
    let encoded = events
        .into_iter()
        .map(|e| encode(e, max_trace))
        .collect::<Result<Vec<_>, _>>()?;
    insert_tx(cx, encoded)
}

/// Whether a run already has an event of this type (inside a write).
pub(crate) fn has_event_tx(
    cx: &Cx<'_>,
    run_id: &str,
    event_type: &str,
) -> Result<bool, StoreError> {
    Ok(cx
        .query_opt(
            "SELECT 1 FROM run_events WHERE run_id = ?1 AND event_type = ?2 LIMIT 1",
            params![run_id, event_type],
            "read a run event",
            |_| Ok(()),
        )?
        .is_some())
}
