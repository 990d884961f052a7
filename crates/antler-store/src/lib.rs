//! antler's persistence: checkpoints, the thread index and run records in one SQLite file.
//!
//! [`SqliteStore`] is the embedded default (DESIGN §3): a file under `$ANTLER_HOME` in WAL mode,
//! migrated at open, implementing [`antler_runtime::Checkpointer`] with writes proportional to what
//! changed (see [`checkpoints`] for the temporal message table). The same handle serves the
//! thread index (`antler threads list|show`, the HTTP server's `/threads`) and run records
//! (`/runs`, startup recovery of runs a crashed process left unfinished).
//!
//! Async callers never block the runtime: one writer thread owns the read-write connection
//! (group commit, one savepoint per operation), reads run on pooled read-only connections in
//! `spawn_blocking` (see `db.rs`).

pub mod checkpoints;
mod db;
mod error;
pub mod runs;
mod schema;
pub mod threads;

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub use checkpoints::{LatestGood, StoreStats};
pub use error::{Failure, StoreError};
pub use runs::{RunRecord, RunStatus, RunUsage};
pub use schema::SCHEMA_VERSION;
pub use threads::{ThreadQuery, ThreadRecord, ThreadUpdate};

#[derive(Default)]
struct Counters {
    checkpoints: AtomicU64,
    checkpoint_bytes: AtomicU64,
}

struct Inner {
    db: db::Db,
    stats: Counters,
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
            }),
        }
    }

    /// The database file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        self.inner.db.path()
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
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
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
