//! antler's persistence: checkpoints, the thread index, run records, the run journal and
//! long-term memory in one SQLite file.
//!
//! [`SqliteStore`] is the embedded default (DESIGN §3): a file under `$ANTLER_HOME` in WAL mode,
//! migrated at open, implementing [`antler_protocol::checkpoint::Checkpointer`] with writes proportional to what
//! changed (see [`checkpoints`] for the temporal message table). The same handle serves the
//! thread index (`antler threads list|show`, the HTTP server's `/threads`), run records with
//! leases and atomic per-thread admission ([`runs`]), the append-only run journal
//! ([`journal`]) and per-user memory ([`memory`]). The three stores of seed 002 — checkpoint,
//! journal, memory — are separate tables with separate lifecycles; none is derived from another.
//!
//! Async callers never block the runtime: one writer thread owns the read-write connection
//! (group commit, one savepoint per operation), reads run on pooled read-only connections in
//! `spawn_blocking` (see `db.rs`).

pub mod checkpoints;
mod db;
mod error;
pub mod journal;
pub mod lease;
pub mod memory;
pub mod runs;
mod schema;
pub mod threads;

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub use checkpoints::{LatestGood, StoreStats};
pub use error::{Failure, StoreError};
pub use journal::{
    EncodedRunEvent, EventContent, EventQuery, MessageCursor, NewRunEvent, RunEventIds,
    RunEventRecord,
};
pub use lease::LeaseOwner;
pub use memory::{MemoryChange, MemorySave, MemorySnapshot};
pub use runs::{
    Admission, AdmitOptions, AdmitOutcome, BusyMark, Heartbeat, MultitaskStrategy, RunFinish,
    RunRecord, RunStatus, RunUsage,
};
pub use schema::SCHEMA_VERSION;
pub use threads::{ThreadQuery, ThreadRecord, ThreadUpdate};

/// DeerFlow's default `run_events.max_trace_content`.
pub const DEFAULT_MAX_TRACE_CONTENT: u64 = 10_240;

#[derive(Default)]
struct Counters {
    checkpoints: AtomicU64,
    checkpoint_bytes: AtomicU64,
}

struct Inner {
    db: db::Db,
    stats: Counters,
    /// Bytes of `trace` journal content kept per event.
    max_trace_content: AtomicU64,
}

/// Checkpoints, threads and runs in one SQLite database. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.db.path())
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Open (or create) the database at `path`: parent directories are created, the file is put
    /// in WAL mode and migrated to [`SCHEMA_VERSION`]. Blocking; call it at startup (or inside
    /// `spawn_blocking`). Fails with a [`StoreError`] naming the path and the cause.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Ok(Self::from_db(db::Db::open(path)?))
    }

    /// A private in-memory database, gone when the last handle drops (tests).
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Ok(Self::from_db(db::Db::open_in_memory()?))
    }

    fn from_db(db: db::Db) -> SqliteStore {
        SqliteStore {
            inner: Arc::new(Inner {
                db,
                stats: Counters::default(),
                max_trace_content: AtomicU64::new(DEFAULT_MAX_TRACE_CONTENT),
            }),
        }
    }

    /// The database file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        self.inner.db.path()
    }

    /// Cap the database file at about `max_bytes` (SQLite's `max_page_count`; `None` lifts the
    /// cap). A write that would grow the file beyond it fails with [`Failure::DiskFull`] and
    /// leaves nothing of itself behind — the behaviour of a full disk, for quotas and tests. The
    /// cap never goes below the file's current size.
    pub async fn set_size_limit(&self, max_bytes: Option<u64>) -> Result<(), StoreError> {
        self.db()
            .configure_writer(move |cx| {
                let page: i64 = cx
                    .conn
                    .pragma_query_value(None, "page_size", |r| r.get(0))
                    .map_err(cx.err("set the size limit"))?;
                let pages = match max_bytes {
                    Some(b) => i64::try_from(b)
                        .unwrap_or(i64::MAX)
                        .div_euclid(page.max(1))
                        .max(1),
                    None => 0xFFFF_FFFE,
                };
                cx.conn
                    .pragma_update(None, "max_page_count", pages)
                    .map_err(cx.err("set the size limit"))
            })
            .await
    }

    /// Move everything in the write-ahead log into the main file and truncate the log, so the
    /// `.db` file alone holds the data (before copying or inspecting it).
    pub async fn checkpoint_wal(&self) -> Result<(), StoreError> {
        self.db()
            .configure_writer(|cx| {
                cx.conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .map_err(cx.err("checkpoint the write-ahead log"))
            })
            .await
    }

    /// As [`SqliteStore::checkpoint_wal`], but without waiting: when another connection (a
    /// second `antler` process on the same file) is reading or writing, SQLite leaves the log
    /// for a later checkpoint and this returns `false` at once. For process exit, which must
    /// not stall behind someone else's transaction.
    pub async fn try_truncate_wal(&self) -> Result<bool, StoreError> {
        self.db()
            .configure_writer(|cx| {
                let err = cx.err("checkpoint the write-ahead log");
                cx.conn
                    .busy_timeout(std::time::Duration::ZERO)
                    .map_err(&err)?;
                // Columns: busy (1 when blocked), log frames, frames checkpointed.
                let busy = cx
                    .conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                        r.get::<_, i64>(0)
                    });
                cx.conn.busy_timeout(db::BUSY_TIMEOUT).map_err(&err)?;
                match busy {
                    Ok(b) => Ok(b == 0),
                    Err(e) if db::is_busy(&e) => Ok(false),
                    Err(e) => Err(err(e)),
                }
            })
            .await
    }

    /// Refuse every write (`PRAGMA query_only`) until turned off again: writes fail with
    /// [`Failure::ReadOnly`], as on a read-only file system. For maintenance and tests.
    pub async fn set_read_only(&self, read_only: bool) -> Result<(), StoreError> {
        self.db()
            .configure_writer(move |cx| {
                cx.conn
                    .pragma_update(None, "query_only", read_only)
                    .map_err(cx.err("switch read-only mode"))
            })
            .await
    }

    fn db(&self) -> &db::Db {
        &self.inner.db
    }

    fn stats_counters(&self) -> &Counters {
        &self.inner.stats
    }
}

/// Now as RFC 3339 UTC with microseconds (sorts lexicographically).
pub(crate) fn now() -> String {
    antler_protocol::checkpoint::rfc3339_micros(chrono::Utc::now(), true)
}

/// Encode a JSON value for a TEXT column.
pub(crate) fn json_text(what: &str, v: &serde_json::Value) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::encode(what, e))
}

/// Decode a JSON TEXT column of a thread or run row.
pub(crate) fn json_value(what: String, text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what,
        cause: e.to_string(),
    })
}
