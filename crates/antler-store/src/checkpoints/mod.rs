//! Checkpoints on SQLite: writes proportional to what changed, any checkpoint loads in one scan.
//!
//! Each checkpoint of a thread gets a sequence number `seq` (1, 2, ... in write order). Message
//! bodies live in `checkpoint_messages`, one row per version of the message at position `ord`,
//! valid for `from_seq <= seq < to_seq` (`to_seq` NULL while live). The live rows are always the
//! head's list. A write:
//!
//! - folds its [`Change`]s into a net effect per `ord` (a message replaced twice in one step is
//!   stored once);
//! - `Upsert` closes the live row at `ord` (if any) and inserts the new body; `Remove` closes it;
//!   `Clear` closes every live row (summarization only);
//! - on a fork (parent is not the head) first makes the parent's list live again: head rows the
//!   parent did not have are closed, parent rows closed since are re-inserted from the new seq;
//!   rows both share stay as they are. A write without a parent on a non-empty thread starts from
//!   an empty list.
//!
//! Non-message channels (`fields`) are stored only when the write carries them; otherwise the
//! row points (`fields_seq`) at the checkpoint whose fields are current.
//!
//! Loading checkpoint `s` is the checkpoint row joined with its fields row, plus
//! `from_seq <= s AND (to_seq IS NULL OR to_seq > s) ORDER BY ord` (for the head, `to_seq IS
//! NULL`), one walk of the unique index on (thread, ord, from_seq), which is already in `ord`
//! order. There is no index on live rows: it cost every write a page (schema version 3).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use antler_protocol::checkpoint::{
    Checkpoint, CheckpointError, CheckpointMeta, CheckpointWrite, Checkpointer,
};
use antler_protocol::{Change, Entry, Message, Messages, ThreadState};
use rusqlite::params;
use serde_json::Value;

use crate::db::Cx;
use crate::error::StoreError;
use crate::SqliteStore;

pub mod recover;

/// A checkpoint write, encoded off the writer thread.
struct EncodedWrite {
    thread_id: String,
    checkpoint_id: String,
    parent_id: Option<String>,
    step: i64,
    created_at: String,
    metadata: String,
    fields: Option<String>,
    /// A `Clear` came first in the net effect.
    cleared: bool,
    /// Net effect per position: `Some(body)` = the message now there, `None` = removed.
    ops: Vec<Op>,
    /// Payload bytes (metadata, fields, bodies).
    bytes: u64,
}

/// The net effect of a write at one position.
struct Op {
    ord: i64,
    /// `Some(body)` = the message now there, `None` = removed.
    body: Option<String>,
    /// The position is new in this write: no live row can be there to close.
    fresh: bool,
}

fn ord_i64(ord: u64) -> Result<i64, StoreError> {
    i64::try_from(ord).map_err(|e| StoreError::encode(format!("message ord {ord}"), e))
}

fn encode(write: CheckpointWrite) -> Result<EncodedWrite, StoreError> {
    let CheckpointWrite {
        meta,
        changes,
        fields,
    } = write;
    let mut cleared = false;
    // Per position: the message now there (or `None`: removed) and whether the write created
    // the position.
    let mut net: BTreeMap<u64, (Option<Arc<Message>>, bool)> = BTreeMap::new();
    for change in changes {
        match change {
            Change::Upsert {
                ord,
                message,
                appended,
            } => {
                let fresh = appended || net.get(&ord).is_some_and(|e| e.1);
                net.insert(ord, (Some(message), fresh));
            }
            Change::Remove { ord } => {
                let fresh = net.get(&ord).is_some_and(|e| e.1);
                net.insert(ord, (None, fresh));
            }
            Change::Clear => {
                cleared = true;
                net.clear();
            }
        }
    }
    let metadata = serde_json::to_string(&meta.metadata)
        .map_err(|e| StoreError::encode("checkpoint metadata", e))?;
    let fields = fields
        .map(|f| serde_json::to_string(&f))
        .transpose()
        .map_err(|e| StoreError::encode("checkpoint fields", e))?;
    let mut bytes = (metadata.len() + fields.as_ref().map_or(0, String::len)) as u64;
    let mut ops = Vec::with_capacity(net.len());
    for (ord, (message, fresh)) in net {
        // After a clear, removing a position that is already gone is a no-op; so is removing
        // one this write created.
        if (cleared || fresh) && message.is_none() {
            continue;
        }
        let body = message
            .map(|m| serde_json::to_string(&*m))
            .transpose()
            .map_err(|e| StoreError::encode(format!("message at ord {ord}"), e))?;
        bytes += body.as_ref().map_or(0, String::len) as u64;
        ops.push(Op {
            ord: ord_i64(ord)?,
            body,
            fresh,
        });
    }
    Ok(EncodedWrite {
        thread_id: meta.thread_id,
        checkpoint_id: meta.checkpoint_id,
        parent_id: meta.parent_id,
        step: meta.step,
        created_at: meta.created_at,
        metadata,
        fields,
        cleared,
        ops,
        bytes,
    })
}

/// Close every live message row of a thread at `seq` (rows born at `seq` are deleted instead).
fn close_all(cx: &Cx<'_>, thread: &str, seq: i64, born_here: bool) -> Result<(), StoreError> {
    if born_here {
        cx.exec(
            "DELETE FROM checkpoint_messages
             WHERE thread_id = ?1 AND to_seq IS NULL AND from_seq = ?2",
            params![thread, seq],
            "close messages",
        )?;
    }
    cx.exec(
        "UPDATE checkpoint_messages SET to_seq = ?2 WHERE thread_id = ?1 AND to_seq IS NULL",
        params![thread, seq],
        "close messages",
    )?;
    Ok(())
}

/// Closes the live row of a position, through the unique index on (thread, position, version),
/// which holds every version of the position (one per replacement, or per fork that brought it
/// back): usually one to three. The hint pins that plan: an `UPDATE` of `to_seq` that found its
/// rows through an index whose key or condition involves `to_seq` (as schema version 2's
/// live-rows index did) cannot run in one pass, and SQLite would build an ephemeral table — a
/// pager and a page cache of its own, ~87 KB allocated and freed — for the one row that token
/// usage's stamp closes on every step.
const CLOSE_ONE: &str =
    "UPDATE checkpoint_messages INDEXED BY sqlite_autoindex_checkpoint_messages_1
     SET to_seq = ?3 WHERE thread_id = ?1 AND ord = ?2 AND to_seq IS NULL";

/// Close the live row at `ord`, if any.
fn close_one(
    cx: &Cx<'_>,
    thread: &str,
    ord: i64,
    seq: i64,
    born_here: bool,
) -> Result<(), StoreError> {
    if born_here {
        cx.exec(
            "DELETE FROM checkpoint_messages
             WHERE thread_id = ?1 AND ord = ?2 AND to_seq IS NULL AND from_seq = ?3",
            params![thread, ord, seq],
            "close a message",
        )?;
    }
    cx.exec(CLOSE_ONE, params![thread, ord, seq], "close a message")?;
    Ok(())
}

/// Make the message list of checkpoint `parent` live again at `seq`; returns bytes copied.
fn rebase(cx: &Cx<'_>, thread: &str, parent: i64, seq: i64) -> Result<u64, StoreError> {
    // Live rows born after the parent are not in its list.
    cx.exec(
        "UPDATE checkpoint_messages SET to_seq = ?3
         WHERE thread_id = ?1 AND to_seq IS NULL AND from_seq > ?2",
        params![thread, parent, seq],
        "fork a checkpoint",
    )?;
    // Parent rows closed since then come back, valid from `seq`.
    let bytes: Option<i64> = cx.query_opt(
        "SELECT COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) FROM checkpoint_messages
         WHERE thread_id = ?1 AND from_seq <= ?2 AND to_seq > ?2",
        params![thread, parent],
        "fork a checkpoint",
        |r| r.get(0),
    )?;
    cx.exec(
        "INSERT INTO checkpoint_messages (thread_id, ord, from_seq, body)
         SELECT thread_id, ord, ?3, body FROM checkpoint_messages
         WHERE thread_id = ?1 AND from_seq <= ?2 AND to_seq > ?2",
        params![thread, parent, seq],
        "fork a checkpoint",
    )?;
    Ok(bytes.map_or(0, |b| u64::try_from(b).unwrap_or(0)))
}

/// The newest checkpoint seq of a thread, `None` when it has none.
fn head_seq(cx: &Cx<'_>, thread: &str) -> Result<Option<i64>, StoreError> {
    let head = cx.query_opt(
        "SELECT MAX(seq) FROM checkpoints WHERE thread_id = ?1",
        [thread],
        "read the thread head",
        |r| r.get::<_, Option<i64>>(0),
    )?;
    Ok(head.flatten())
}

/// Persist one checkpoint; returns payload bytes written.
fn put_tx(cx: &Cx<'_>, w: &EncodedWrite) -> Result<u64, StoreError> {
    let thread = w.thread_id.as_str();
    // The head this connection recorded for the thread (by an earlier write of this batch or
    // of an earlier one), if nothing else can have changed it since; and its seq and fields
    // seq when it is this write's parent.
    let known = cx.head(thread, |k| {
        let parent = (w.parent_id.as_deref() == Some(k.checkpoint_id.as_str()))
            .then_some((k.seq, k.fields_seq));
        (k.seq, parent)
    });
    let (head, known_parent) = match known {
        Some((seq, parent)) => (Some(seq), parent),
        None => (head_seq(cx, thread)?, None),
    };
    let seq = head.map_or(1, |h| h + 1);
    let parent: Option<(i64, Option<i64>)> = match (&w.parent_id, known_parent) {
        (Some(_), Some(p)) => Some(p),
        (Some(pid), None) => Some(
            cx.query_opt(
                "SELECT seq, fields_seq FROM checkpoints
                 WHERE thread_id = ?1 AND checkpoint_id = ?2",
                params![thread, pid],
                "read the parent checkpoint",
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .ok_or_else(|| StoreError::UnknownParent(pid.clone()))?,
        ),
        (None, _) => None,
    };
    let fields_seq = match (&w.fields, parent) {
        (Some(_), _) => Some(seq),
        (None, Some((_, fs))) => fs,
        (None, None) => None,
    };
    cx.exec(
        "INSERT INTO checkpoints (thread_id, seq, checkpoint_id, parent_id, step, created_at,
                                  metadata, fields, fields_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            thread,
            seq,
            w.checkpoint_id,
            w.parent_id,
            w.step,
            w.created_at,
            w.metadata,
            w.fields,
            fields_seq,
        ],
        "insert a checkpoint",
    )?;

    let mut bytes = w.bytes;
    let mut born_here = false;
    match (head, parent) {
        (Some(h), Some((p, _))) if p != h => {
            bytes += rebase(cx, thread, p, seq)?;
            born_here = true;
        }
        (Some(_), None) => close_all(cx, thread, seq, false)?,
        _ => {}
    }
    if w.cleared {
        close_all(cx, thread, seq, born_here)?;
    }
    for op in &w.ops {
        // A position the write created has no live row: nothing to close.
        if !w.cleared && !op.fresh {
            close_one(cx, thread, op.ord, seq, born_here)?;
        }
        if let Some(body) = &op.body {
            cx.exec(
                "INSERT INTO checkpoint_messages (thread_id, ord, from_seq, body)
                 VALUES (?1, ?2, ?3, ?4)",
                params![thread, op.ord, seq, body],
                "insert a message",
            )?;
        }
    }
    cx.set_head(thread, &w.checkpoint_id, seq, fields_seq);
    Ok(bytes)
}

/// Which checkpoint to load.
pub(crate) enum Which<'a> {
    Head,
    Id(&'a str),
    Seq(i64),
}

const CHECKPOINT_COLUMNS: &str = "SELECT c.seq, c.checkpoint_id, c.parent_id, c.step,
        c.created_at, c.metadata, c.fields_seq, f.fields
    FROM checkpoints c
    LEFT JOIN checkpoints f ON f.thread_id = c.thread_id AND f.seq = c.fields_seq";

struct Row {
    seq: i64,
    meta: CheckpointMeta,
    metadata: String,
    fields_seq: Option<i64>,
    fields: Option<String>,
}

fn corrupt(row: &Row, what: impl Into<String>, cause: impl ToString) -> StoreError {
    StoreError::CorruptCheckpoint {
        thread_id: row.meta.thread_id.clone(),
        checkpoint_id: row.meta.checkpoint_id.clone(),
        what: what.into(),
        cause: cause.to_string(),
    }
}

fn read_row(thread: &str, r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        seq: r.get(0)?,
        meta: CheckpointMeta {
            thread_id: thread.to_owned(),
            checkpoint_id: r.get(1)?,
            parent_id: r.get(2)?,
            step: r.get(3)?,
            created_at: r.get(4)?,
            metadata: Value::Null,
        },
        metadata: r.get(5)?,
        fields_seq: r.get(6)?,
        fields: r.get(7)?,
    })
}

fn decode_meta(row: &Row) -> Result<CheckpointMeta, StoreError> {
    let mut meta = row.meta.clone();
    meta.metadata = serde_json::from_str(&row.metadata).map_err(|e| corrupt(row, "metadata", e))?;
    Ok(meta)
}

/// Load one checkpoint of `thread` within the caller's read snapshot.
pub(crate) fn load(
    cx: &Cx<'_>,
    thread: &str,
    which: Which<'_>,
) -> Result<Option<Checkpoint>, StoreError> {
    let head = head_seq(cx, thread)?;
    let Some(head) = head else {
        return Ok(None);
    };
    let by_seq = format!("{CHECKPOINT_COLUMNS} WHERE c.thread_id = ?1 AND c.seq = ?2");
    let read = |r: &rusqlite::Row<'_>| read_row(thread, r);
    let row = match which {
        Which::Head => cx.query_opt(&by_seq, params![thread, head], "read a checkpoint", read),
        Which::Seq(seq) => cx.query_opt(&by_seq, params![thread, seq], "read a checkpoint", read),
        Which::Id(id) => cx.query_opt(
            &format!("{CHECKPOINT_COLUMNS} WHERE c.thread_id = ?1 AND c.checkpoint_id = ?2"),
            params![thread, id],
            "read a checkpoint",
            read,
        ),
    }?;
    let Some(row) = row else {
        return Ok(None);
    };
    let meta = decode_meta(&row)?;
    let mut state: ThreadState = match (row.fields_seq, &row.fields) {
        (None, _) => ThreadState::default(),
        (Some(_), Some(f)) => serde_json::from_str(f).map_err(|e| corrupt(&row, "fields", e))?,
        (Some(fs), None) => {
            return Err(corrupt(
                &row,
                "fields",
                format!("checkpoint seq {fs} holding them has no fields"),
            ))
        }
    };
    state.messages = Messages::from_entries(load_entries(cx, &row, row.seq == head)?);
    Ok(Some(Checkpoint { meta, state }))
}

/// The head's message list.
const HEAD_MESSAGES: &str = "SELECT ord, body FROM checkpoint_messages
    WHERE thread_id = ?1 AND to_seq IS NULL ORDER BY ord";

/// The message list of checkpoint `?2`.
const MESSAGES_AT: &str = "SELECT ord, body FROM checkpoint_messages
    WHERE thread_id = ?1 AND from_seq <= ?2 AND (to_seq IS NULL OR to_seq > ?2)
    ORDER BY ord";

fn load_entries(cx: &Cx<'_>, row: &Row, is_head: bool) -> Result<Vec<Entry>, StoreError> {
    let thread = row.meta.thread_id.as_str();
    // The head's list is exactly the live rows; older ones need the range test.
    let (sql, seq) = if is_head {
        (HEAD_MESSAGES, None)
    } else {
        (MESSAGES_AT, Some(row.seq))
    };
    let mut stmt = cx
        .conn
        .prepare_cached(sql)
        .map_err(cx.err("read messages"))?;
    let mut rows = match seq {
        None => stmt.query(params![thread]),
        Some(seq) => stmt.query(params![thread, seq]),
    }
    .map_err(cx.err("read messages"))?;
    let mut entries = Vec::new();
    while let Some(r) = rows.next().map_err(cx.err("read messages"))? {
        let ord: i64 = r.get(0).map_err(cx.err("read messages"))?;
        let body: String = r
            .get(1)
            .map_err(|e| corrupt(row, format!("message at ord {ord}"), e))?;
        let message: Message = serde_json::from_str(&body)
            .map_err(|e| corrupt(row, format!("message at ord {ord}"), e))?;
        let ord =
            u64::try_from(ord).map_err(|e| corrupt(row, format!("message at ord {ord}"), e))?;
        entries.push(Entry {
            ord,
            message: Arc::new(message),
        });
    }
    Ok(entries)
}

fn list_tx(
    cx: &Cx<'_>,
    thread: &str,
    limit: usize,
    before: Option<&str>,
) -> Result<Vec<CheckpointMeta>, StoreError> {
    let before_seq: Option<i64> = match before {
        Some(b) => cx.query_opt(
            "SELECT seq FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id = ?2",
            params![thread, b],
            "list checkpoints",
            |r| r.get(0),
        )?,
        None => None,
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    cx.query_all(
        &format!(
            "{CHECKPOINT_COLUMNS} WHERE c.thread_id = ?1 AND c.seq < ?2 ORDER BY c.seq DESC LIMIT ?3"
        ),
        params![thread, before_seq.unwrap_or(i64::MAX), limit],
        "list checkpoints",
        |r| read_row(thread, r),
    )?
    .iter()
    .map(decode_meta)
    .collect()
}

pub(crate) fn delete_checkpoints_tx(cx: &Cx<'_>, thread: &str) -> Result<bool, StoreError> {
    cx.exec(
        "DELETE FROM checkpoint_messages WHERE thread_id = ?1",
        [thread],
        "delete checkpoints",
    )?;
    let n = cx.exec(
        "DELETE FROM checkpoints WHERE thread_id = ?1",
        [thread],
        "delete checkpoints",
    )?;
    Ok(n > 0)
}

/// The newest checkpoint of a thread that decodes, and the ids of newer ones that did not.
#[derive(Clone, Debug)]
pub struct LatestGood {
    /// `None` when the thread has no checkpoint that loads.
    pub checkpoint: Option<Checkpoint>,
    /// Corrupt checkpoint ids skipped, newest first.
    pub skipped: Vec<String>,
}

/// Counters of checkpoint writes committed through one store handle (and its clones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Logical payload bytes written by checkpoint puts: metadata, fields when present, message
    /// bodies (including those a fork re-materialized).
    pub checkpoint_bytes: u64,
}

impl SqliteStore {
    /// Persist one checkpoint (see [`Checkpointer::put`]).
    pub async fn put_checkpoint(&self, write: CheckpointWrite) -> Result<(), StoreError> {
        self.put_checkpoints(vec![write]).await
    }

    /// Several checkpoints in one transaction, in order (each the parent of the next): all are
    /// written or none.
    pub async fn put_checkpoints(&self, writes: Vec<CheckpointWrite>) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let n = writes.len() as u64;
        let encoded = writes
            .into_iter()
            .map(encode)
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = self
            .db()
            .write_inline(move |cx| {
                cx.keeping_heads(|| {
                    let mut bytes = 0;
                    for w in &encoded {
                        bytes += put_tx(cx, w)?;
                    }
                    Ok(bytes)
                })
            })
            .await?;
        let stats = self.stats_counters();
        stats.checkpoints.fetch_add(n, Ordering::Relaxed);
        stats.checkpoint_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The head checkpoint of a thread.
    pub async fn latest_checkpoint(
        &self,
        thread_id: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .read(move |cx| load(cx, &thread, Which::Head))
            .await
    }

    /// One checkpoint of a thread by id.
    pub async fn get_checkpoint(
        &self,
        thread_id: &str,
        checkpoint_id: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let thread = thread_id.to_owned();
        let id = checkpoint_id.to_owned();
        self.db()
            .read(move |cx| load(cx, &thread, Which::Id(&id)))
            .await
    }

    /// Checkpoint metadata newest first; `before` (a checkpoint id) keeps only older ones.
    pub async fn list_checkpoints(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Vec<CheckpointMeta>, StoreError> {
        let thread = thread_id.to_owned();
        let before = before.map(str::to_owned);
        self.db()
            .read(move |cx| list_tx(cx, &thread, limit, before.as_deref()))
            .await
    }

    /// Walk back from the head to the newest checkpoint that decodes.
    pub async fn latest_good(&self, thread_id: &str) -> Result<LatestGood, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .read(move |cx| {
                let seqs: Vec<(i64, String)> = cx.query_all(
                    "SELECT seq, checkpoint_id FROM checkpoints
                     WHERE thread_id = ?1 ORDER BY seq DESC",
                    [&thread],
                    "list checkpoints",
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let mut skipped = Vec::new();
                for (seq, id) in seqs {
                    match load(cx, &thread, Which::Seq(seq)) {
                        Ok(checkpoint) => {
                            return Ok(LatestGood {
                                checkpoint,
                                skipped,
                            })
                        }
                        Err(StoreError::CorruptCheckpoint { .. }) => skipped.push(id),
                        Err(e) => return Err(e),
                    }
                }
                Ok(LatestGood {
                    checkpoint: None,
                    skipped,
                })
            })
            .await
    }

    /// Forget a thread's checkpoints (its thread record and runs stay).
    pub async fn delete_checkpoints(&self, thread_id: &str) -> Result<bool, StoreError> {
        let thread = thread_id.to_owned();
        self.db()
            .write(move |cx| delete_checkpoints_tx(cx, &thread))
            .await
    }

    /// Checkpoint write counters since this store was opened.
    pub fn stats(&self) -> StoreStats {
        let s = self.stats_counters();
        StoreStats {
            checkpoints: s.checkpoints.load(Ordering::Relaxed),
            checkpoint_bytes: s.checkpoint_bytes.load(Ordering::Relaxed),
        }
    }
}

/// `impl Checkpointer for $ty` over a [`SqliteStore`] — `self`, or its field `$field` — with
/// `latest` given by the caller (the one method the store and
/// [`recover::RecoveringCheckpointer`] do differently) and the rest going straight to the store.
macro_rules! impl_checkpointer {
    ($ty:ty $(, $field:ident)?; $($latest:tt)*) => {
        #[async_trait::async_trait]
        impl Checkpointer for $ty {
            $($latest)*

            async fn put(&self, write: CheckpointWrite) -> Result<(), CheckpointError> {
                Ok(self$(.$field)?.put_checkpoint(write).await?)
            }

            async fn put_all(&self, writes: Vec<CheckpointWrite>) -> Result<(), CheckpointError> {
                Ok(self$(.$field)?.put_checkpoints(writes).await?)
            }

            async fn get(
                &self,
                thread_id: &str,
                checkpoint_id: &str,
            ) -> Result<Option<Checkpoint>, CheckpointError> {
                Ok(self$(.$field)?.get_checkpoint(thread_id, checkpoint_id).await?)
            }

            async fn list(
                &self,
                thread_id: &str,
                limit: usize,
                before: Option<&str>,
            ) -> Result<Vec<CheckpointMeta>, CheckpointError> {
                Ok(self$(.$field)?.list_checkpoints(thread_id, limit, before).await?)
            }

            /// Checkpoints only; [`SqliteStore::delete_thread`] also drops the thread record and
            /// runs.
            async fn delete_thread(&self, thread_id: &str) -> Result<(), CheckpointError> {
                self$(.$field)?.delete_checkpoints(thread_id).await?;
                Ok(())
            }
        }
    };
}
use impl_checkpointer;

impl_checkpointer! {
    SqliteStore;
    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, CheckpointError> {
        Ok(self.latest_checkpoint(thread_id).await?)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rusqlite::Connection;

    use super::CLOSE_ONE;

    /// Column `col` of `{how} {sql}` (`EXPLAIN`, `EXPLAIN QUERY PLAN`) on the current schema,
    /// the statement's parameters unbound.
    fn explain(conn: &Connection, how: &str, col: usize, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("{how} {sql}")).expect("explain");
        let unbound = vec![rusqlite::types::Null; stmt.parameter_count()];
        let rows = stmt
            .query_map(rusqlite::params_from_iter(unbound), |r| {
                r.get::<_, String>(col)
            })
            .expect("query");
        rows.map(|r| r.expect("row")).collect()
    }

    /// Opcodes of `sql` as SQLite would run it.
    fn opcodes(conn: &Connection, sql: &str) -> Vec<String> {
        explain(conn, "EXPLAIN", 1, sql)
    }

    #[test]
    fn closing_a_position_builds_no_ephemeral_table() {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::schema::migrate(&mut conn, Path::new(":memory:")).expect("migrate");
        let ops = opcodes(&conn, CLOSE_ONE);
        assert!(
            ops.iter()
                .any(|o| o == "IdxGT" || o == "IdxGE" || o == "SeekGE"),
            "{ops:?}"
        );
        assert!(!ops.iter().any(|o| o == "OpenEphemeral"), "{ops:?}");
        // What the hint guards against: schema version 2's index on live rows brought back.
        conn.execute_batch(
            "CREATE INDEX live ON checkpoint_messages (thread_id, ord) WHERE to_seq IS NULL",
        )
        .expect("index");
        let plain = CLOSE_ONE.replace("INDEXED BY sqlite_autoindex_checkpoint_messages_1", "");
        assert!(opcodes(&conn, &plain).iter().any(|o| o == "OpenEphemeral"));
        assert!(!opcodes(&conn, CLOSE_ONE)
            .iter()
            .any(|o| o == "OpenEphemeral"));
    }

    /// Query plan details of `sql`.
    fn plan(conn: &Connection, sql: &str) -> String {
        explain(conn, "EXPLAIN QUERY PLAN", 3, sql).join("; ")
    }

    #[test]
    fn message_lists_load_in_order_from_the_unique_index_without_a_sort() {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::schema::migrate(&mut conn, Path::new(":memory:")).expect("migrate");
        for sql in [super::HEAD_MESSAGES, super::MESSAGES_AT] {
            let plan = plan(&conn, sql);
            assert!(
                plan.contains("sqlite_autoindex_checkpoint_messages_1"),
                "{sql}: {plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
    }
}
