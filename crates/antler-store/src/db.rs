//! Connection plumbing: one writer thread, a pool of read connections.
//!
//! rusqlite's `Connection` is `Send` but not `Sync`, and every call blocks. Writes go to a
//! dedicated OS thread that owns the only read-write connection; callers send it a job and await a
//! oneshot reply, so the tokio runtime never blocks on SQLite. The writer drains whatever jobs are
//! queued into one transaction (group commit), each job inside its own savepoint: a failing job
//! rolls back alone, and replies are sent only after the batch committed, so an `Ok` always means
//! durable-as-configured. Reads run on `spawn_blocking` with a pooled read-only connection inside
//! a read transaction (a consistent WAL snapshot), so a slow reader never delays a writer.
//!
//! An in-memory database has no second connection to read from, so there reads go through the
//! writer too.
//!
//! Small writes on a run's hot path (checkpoints, journal batches) may instead run on the
//! caller's thread when the writer is idle ([`Db::write_inline`]): the connection is behind a
//! mutex the writer holds only while it runs a batch, so an idle writer costs the caller no
//! thread hand-off (two wake-ups per write). Under contention the job queues as usual and joins
//! a group commit.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_protocol::hash::FastMap;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::error::{classify_io, StoreError};
use crate::schema;

/// How long a statement waits for a lock held by another connection or process.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most jobs committed in one writer transaction.
const MAX_BATCH: usize = 128;
/// Idle read connections kept open.
const MAX_IDLE_READERS: usize = 8;
const STATEMENT_CACHE: usize = 64;
/// Write-ahead-log frames after which a commit copies the log back into the database file
/// (SQLite's default is 1,000, ~4 MiB). Each copy writes every page the log touched once, its
/// newest version, and syncs both files: a step's ~19 frames are mostly the same few b-tree
/// pages rewritten, so a longer log copies each of them once for more steps and syncs less
/// often. The log's file keeps its high-water mark (~16 MiB) while the database is open; it
/// is folded in and truncated at exit.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 4000;

/// What a job sees: the connection and the path to name in errors, and on the writer
/// connection what it knows of the threads' heads.
pub(crate) struct Cx<'a> {
    pub conn: &'a Connection,
    pub path: &'a Path,
    heads: Option<&'a Heads>,
}

/// Threads' newest checkpoints as this connection wrote them (most kept at once).
const MAX_HEADS: usize = 1024;

/// A thread's newest checkpoint, as the writer connection last wrote it.
#[derive(Debug)]
pub(crate) struct Head {
    pub checkpoint_id: String,
    pub seq: i64,
    pub fields_seq: Option<i64>,
}

/// The heads of the threads the writer connection wrote checkpoints for, so the next write of
/// a thread need not read its head and parent back (two b-tree lookups per transaction).
///
/// An entry is trusted only while nothing else can have changed the checkpoint tables since it
/// was recorded: no other connection committed (SQLite's data version, read when a transaction
/// begins, is the one this connection's last commit left), this connection changed no rows
/// outside [`Cx::keeping_heads`] sections (its running count of changes, less the changes
/// made inside those sections, is the entry's), and no transaction or savepoint rolled back
/// since (that clears every entry).
#[derive(Default)]
pub(crate) struct Heads {
    map: RefCell<FastMap<String, (Head, u64)>>,
    /// Rows changed inside `keeping_heads` sections.
    kept: Cell<u64>,
    /// The connection's change count when the open section began.
    open: Cell<Option<u64>>,
    /// SQLite's data version after this connection's last commit.
    version: Cell<Option<u32>>,
}

impl Heads {
    /// Rows this connection changed outside `keeping_heads` sections.
    fn foreign(&self, conn: &Connection) -> u64 {
        let at = self.open.get().unwrap_or_else(|| conn.total_changes());
        at.saturating_sub(self.kept.get())
    }

    fn clear(&self) {
        self.map.borrow_mut().clear();
    }

    /// A transaction began: forget every head if another connection committed since ours.
    fn began(&self, conn: &Connection) {
        if self.version.get().is_none() || data_version(conn) != self.version.get() {
            self.clear();
        }
    }

    /// This connection committed.
    fn committed(&self, conn: &Connection) {
        self.version.set(data_version(conn));
    }

    /// Work was rolled back: what it recorded may not be in the database.
    fn rolled_back(&self) {
        self.clear();
        self.version.set(None);
    }
}

/// An open `keeping_heads` section; closing it counts its changes as kept, also when the job
/// unwinds (then nothing recorded is trusted any more).
struct Section<'a> {
    heads: &'a Heads,
    conn: &'a Connection,
    start: u64,
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        let h = self.heads;
        h.open.set(None);
        let made = self.conn.total_changes().saturating_sub(self.start);
        h.kept.set(h.kept.get().saturating_add(made));
        if std::thread::panicking() {
            h.rolled_back();
        }
    }
}

/// SQLite's data version of the main database (changes with every commit, this connection's
/// or another's); `None` when it cannot be read.
fn data_version(conn: &Connection) -> Option<u32> {
    let mut v: std::ffi::c_uint = 0;
    conn.file_control(
        Some(rusqlite::MAIN_DB),
        rusqlite::FileControl::DataVersion(&mut v),
    )
    .ok()
    .map(|()| v)
}

impl Cx<'_> {
    /// Run `f`, whose writes keep the recorded heads true (checkpoint puts record the heads
    /// they write; the journal does not touch checkpoints).
    pub fn keeping_heads<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(heads) = self.heads.filter(|h| h.open.get().is_none()) else {
            return f();
        };
        let start = self.conn.total_changes();
        heads.open.set(Some(start));
        let _section = Section {
            heads,
            conn: self.conn,
            start,
        };
        f()
    }

    /// `read` of the head this connection recorded for `thread`, if it is still the thread's
    /// head.
    pub fn head<R>(&self, thread: &str, read: impl FnOnce(&Head) -> R) -> Option<R> {
        let h = self.heads?;
        let foreign = h.foreign(self.conn);
        match h.map.borrow().get(thread) {
            Some((head, at)) if *at == foreign => Some(read(head)),
            _ => None,
        }
    }

    /// Record `thread`'s head just written (inside a `keeping_heads` section; elsewhere the
    /// write would make every recorded head untrusted anyway).
    pub fn set_head(&self, thread: &str, checkpoint_id: &str, seq: i64, fields_seq: Option<i64>) {
        let Some(h) = self.heads.filter(|h| h.open.get().is_some()) else {
            return;
        };
        let foreign = h.foreign(self.conn);
        let mut map = h.map.borrow_mut();
        if let Some((head, at)) = map.get_mut(thread) {
            // In place: the strings keep their buffers.
            head.checkpoint_id.clear();
            head.checkpoint_id.push_str(checkpoint_id);
            head.seq = seq;
            head.fields_seq = fields_seq;
            *at = foreign;
            return;
        }
        if map.len() >= MAX_HEADS {
            map.clear();
        }
        let head = Head {
            checkpoint_id: checkpoint_id.to_owned(),
            seq,
            fields_seq,
        };
        map.insert(thread.to_owned(), (head, foreign));
    }

    /// Map a rusqlite error to a [`StoreError`] naming this database and `op`.
    pub fn err(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |e| StoreError::sqlite(self.path, op, &e)
    }

    /// Run one cached statement; returns the rows changed.
    pub fn exec(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        op: &'static str,
    ) -> Result<usize, StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map_err(self.err(op))
    }

    /// The first row of a cached query, if any, read by `read` (an aggregate always has one).
    pub fn query_opt<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        op: &'static str,
        read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, StoreError> {
        use rusqlite::OptionalExtension;
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row(params, read).optional())
            .map_err(self.err(op))
    }

    /// Every row of a cached query, each read by `read`.
    pub fn query_all<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        op: &'static str,
        read: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_map(params, read)?.collect())
            .map_err(self.err(op))
    }
}

/// A queued write. `run` executes it inside a savepoint and keeps the result; `finish` replies
/// once the batch's fate is known.
trait WriteJob: Send {
    fn run(&mut self, cx: &Cx<'_>) -> bool;
    fn fail(&mut self, err: StoreError);
    /// The error this job ran into, if any.
    fn error(&self) -> Option<StoreError>;
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
    /// Runs alone, outside any transaction (connection settings such as `query_only`).
    fn outside_transaction(&self) -> bool;
}

struct Pending<R, F> {
    f: Option<F>,
    result: Option<Result<R, StoreError>>,
    reply: oneshot::Sender<Result<R, StoreError>>,
    raw: bool,
}

impl<R, F> WriteJob for Pending<R, F>
where
    R: Send + 'static,
    F: FnOnce(&Cx<'_>) -> Result<R, StoreError> + Send + 'static,
{
    fn run(&mut self, cx: &Cx<'_>) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let r = f(cx);
        let ok = r.is_ok();
        self.result = Some(r);
        ok
    }

    fn fail(&mut self, err: StoreError) {
        self.f = None;
        self.result = Some(Err(err));
    }

    fn error(&self) -> Option<StoreError> {
        match &self.result {
            Some(Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let out = match (self.result, commit) {
            (Some(Err(e)), _) | (_, Err(e)) => Err(e),
            (Some(Ok(r)), Ok(())) => Ok(r),
            // Never ran and the batch committed: cannot happen, but stay total.
            (None, Ok(())) => Err(StoreError::Encode {
                what: "write job".into(),
                cause: "job was not executed".into(),
            }),
        };
        // The caller may have gone away (cancelled); nothing to do then.
        let _ = self.reply.send(out);
    }

    fn outside_transaction(&self) -> bool {
        self.raw
    }
}

type Job = Box<dyn WriteJob>;

/// Read-only connections for one database file.
struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    fn take(&self) -> Result<Connection, StoreError> {
        if let Some(c) = self.idle.lock().ok().and_then(|mut v| v.pop()) {
            return Ok(c);
        }
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::open(&self.path, &e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| StoreError::open(&self.path, &e))?;
        stable_plans(&conn).map_err(|e| StoreError::open(&self.path, &e))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(conn)
    }

    fn give_back(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE_READERS {
                idle.push(conn);
            }
        }
    }
}

/// The read-write connection and what it knows between transactions.
struct Writer {
    conn: Connection,
    heads: Heads,
}

/// The shared database handle.
pub(crate) struct Db {
    path: PathBuf,
    writer: mpsc::Sender<Job>,
    /// The read-write connection; the writer thread holds it while it runs a batch.
    conn: Arc<Mutex<Writer>>,
    readers: Option<Arc<ReadPool>>,
}

impl Db {
    /// Open (creating) a database file. Blocking; call at startup.
    pub fn open(path: &Path) -> Result<Db, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                kind: classify_io(&e),
                cause: format!("cannot create directory {}: {e}", parent.display()),
            })?;
        }
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::open(path, &e))?;
        configure(&conn, path, true)?;
        schema::migrate(&mut conn, path)?;
        let readers = Arc::new(ReadPool {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
        });
        Self::start(conn, path.to_path_buf(), Some(readers))
    }

    /// A private in-memory database (tests).
    pub fn open_in_memory() -> Result<Db, StoreError> {
        let path = PathBuf::from(":memory:");
        let mut conn = Connection::open_in_memory().map_err(|e| StoreError::open(&path, &e))?;
        configure(&conn, &path, false)?;
        schema::migrate(&mut conn, &path)?;
        Self::start(conn, path, None)
    }

    fn start(
        conn: Connection,
        path: PathBuf,
        readers: Option<Arc<ReadPool>>,
    ) -> Result<Db, StoreError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread_path = path.clone();
        let conn = Arc::new(Mutex::new(Writer {
            conn,
            heads: Heads::default(),
        }));
        let writer_conn = conn.clone();
        std::thread::Builder::new()
            .name("antler-store-writer".into())
            .spawn(move || writer_loop(&writer_conn, &thread_path, &rx))
            .map_err(|e| StoreError::Open {
                path: path.clone(),
                kind: crate::error::Failure::Other,
                cause: format!("cannot start the writer thread: {e}"),
            })?;
        Ok(Db {
            path,
            writer: tx,
            conn,
            readers,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn closed(&self) -> StoreError {
        StoreError::Closed {
            path: self.path.clone(),
        }
    }

    /// Run `f` on the writer connection, atomically (its own savepoint in a group commit).
    pub async fn write<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Cx<'_>) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, false).await
    }

    /// As [`Db::write`], but run on the calling thread when the writer is idle (no batch in
    /// progress), skipping the hand-off to the writer thread. For small, frequent writes only:
    /// the caller blocks for the write's duration.
    pub async fn write_inline<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Cx<'_>) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, mut rx) = oneshot::channel();
        let job: Job = Box::new(Pending {
            f: Some(f),
            result: None,
            reply,
            raw: false,
        });
        if let Some(job) = self.try_run_here(job) {
            self.writer.send(job).map_err(|_| self.closed())?;
            return rx.await.map_err(|_| self.closed())?;
        }
        // The job replied before `run_begun` returned.
        rx.try_recv().map_err(|_| self.closed())?
    }

    /// Run `job` on this thread if the connection and the database's write lock are free at
    /// once; otherwise hand it back for the writer thread.
    fn try_run_here(&self, job: Job) -> Option<Job> {
        let writer = match self.conn.try_lock() {
            Ok(w) => w,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Some(job),
        };
        // Another process holding the write lock must not block this thread for the busy
        // timeout: then the writer thread waits for it instead.
        match begin_now(&writer.conn) {
            Ok(()) => {
                run_begun(&writer, &self.path, vec![job]);
                None
            }
            Err(e) if is_busy(&e) => Some(job),
            Err(e) => {
                job.finish(Err(StoreError::sqlite(&self.path, "begin a write", &e)));
                None
            }
        }
    }

    /// Run `f` on the writer connection outside any transaction (connection pragmas).
    pub async fn configure_writer<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Cx<'_>) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, true).await
    }

    async fn send<R, F>(&self, f: F, raw: bool) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Cx<'_>) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job: Job = Box::new(Pending {
            f: Some(f),
            result: None,
            reply,
            raw,
        });
        self.writer.send(job).map_err(|_| self.closed())?;
        rx.await.map_err(|_| self.closed())?
    }

    /// Run `f` against a consistent snapshot, off the async runtime.
    pub async fn read<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Cx<'_>) -> Result<R, StoreError> + Send + 'static,
    {
        let Some(pool) = &self.readers else {
            return self.write(f).await;
        };
        let pool = pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.take()?;
            let result = {
                let tx = conn
                    .transaction()
                    .map_err(|e| StoreError::sqlite(&pool.path, "begin a read", &e))?;
                f(&Cx {
                    conn: &tx,
                    path: &pool.path,
                    heads: None,
                })
                // Dropping the transaction rolls back, which ends the read snapshot.
            };
            pool.give_back(conn);
            result
        })
        .await
        .map_err(|_| self.closed())?
    }
}

/// Connection settings for the writer (`wal` = switch the file to WAL).
fn configure(conn: &Connection, path: &Path, wal: bool) -> Result<(), StoreError> {
    let open_err = |e: rusqlite::Error| StoreError::open(path, &e);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    stable_plans(conn).map_err(open_err)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    if wal {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Open {
                path: path.to_path_buf(),
                kind: crate::error::Failure::Other,
                cause: format!("cannot switch to WAL journal mode (got {mode})"),
            });
        }
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
            .map_err(open_err)?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(open_err)?;
    Ok(())
}

/// Keep a cached statement's plan when its parameters are rebound. Without this, the bundled
/// SQLite (built with STAT4) marks a statement such as `WHERE thread_id = ?1` + `MAX(seq)` for
/// re-preparation whenever `?1` changes, so every checkpoint write parsed and planned its
/// queries again (~10% of a step's CPU). The schema's indexes decide every plan here; no
/// parameter value can pick a better one.
fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(|_| ())
}

fn writer_loop(writer: &Mutex<Writer>, path: &Path, rx: &mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        // Held for the whole batch: inline writers queue behind it meanwhile.
        let writer = writer.lock().unwrap_or_else(|e| e.into_inner());
        let writer = &*writer;
        let conn = &writer.conn;
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            if job.outside_transaction() {
                // Settle what is queued before it, then run it alone.
                if !batch.is_empty() {
                    run_batch(writer, path, std::mem::take(&mut batch));
                }
                let mut job = job;
                job.run(&Cx {
                    conn,
                    path,
                    heads: Some(&writer.heads),
                });
                // It may have committed on its own (autocommit): the next transaction finds
                // the data version moved and forgets the heads.
                job.finish(Ok(()));
            } else {
                batch.push(job);
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            run_batch(writer, path, batch);
        }
    }
}

/// Run one of the writer's fixed transaction-control statements, prepared once per connection
/// (`execute_batch` would parse it again for every job).
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// `BEGIN IMMEDIATE` without waiting for another connection's write lock.
fn begin_now(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::ZERO)?;
    let begun = control(conn, "BEGIN IMMEDIATE");
    conn.busy_timeout(BUSY_TIMEOUT)?;
    begun
}

pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn fail_all(batch: Vec<Job>, err: StoreError) {
    for job in batch {
        job.finish(Err(err.clone()));
    }
}

fn run_batch(writer: &Writer, path: &Path, batch: Vec<Job>) {
    if let Err(e) = control(&writer.conn, "BEGIN IMMEDIATE") {
        return fail_all(batch, StoreError::sqlite(path, "begin a write", &e));
    }
    run_begun(writer, path, batch);
}

/// Run `batch` in the transaction just begun, then commit (or roll back) and reply.
fn run_begun(writer: &Writer, path: &Path, mut batch: Vec<Job>) {
    let conn = &writer.conn;
    let heads = &writer.heads;
    heads.began(conn);
    let cx = Cx {
        conn,
        path,
        heads: Some(heads),
    };
    // A job alone in its batch needs no savepoint: if it fails, the whole transaction (its
    // work only) rolls back, which is what the savepoint would have done.
    if batch.len() == 1 {
        let ok = batch.iter_mut().all(|job| job.run(&cx));
        if !ok || conn.is_autocommit() {
            let err = batch
                .iter()
                .find_map(|j| j.error())
                .unwrap_or_else(|| rolled_back(path));
            return abort(writer, batch, err);
        }
        return commit(writer, path, batch);
    }
    let mut broken = None;
    for job in &mut batch {
        if let Err(e) = control(conn, "SAVEPOINT job") {
            job.fail(StoreError::sqlite(path, "begin a write", &e));
            continue;
        }
        let ok = job.run(&cx);
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (disk full, I/O error): every job of
            // the batch is lost, including those that succeeded.
            broken = Some(job.error().unwrap_or_else(|| rolled_back(path)));
            break;
        }
        let end = if ok {
            control(conn, "RELEASE job")
        } else {
            heads.rolled_back();
            control(conn, "ROLLBACK TO job").and_then(|()| control(conn, "RELEASE job"))
        };
        if let Err(e) = end {
            broken = Some(StoreError::sqlite(path, "end a write", &e));
            break;
        }
    }
    if let Some(err) = broken {
        return abort(writer, batch, err);
    }
    commit(writer, path, batch);
}

/// The error of a transaction SQLite rolled back on its own (disk full, I/O error).
fn rolled_back(path: &Path) -> StoreError {
    StoreError::Sqlite {
        path: path.to_path_buf(),
        op: "write",
        kind: crate::error::Failure::Io,
        cause: "SQLite rolled the transaction back".into(),
    }
}

/// Roll back what is still open and fail every job with `err`.
fn abort(writer: &Writer, batch: Vec<Job>, err: StoreError) {
    writer.heads.rolled_back();
    if !writer.conn.is_autocommit() {
        let _ = control(&writer.conn, "ROLLBACK");
    }
    fail_all(batch, err);
}

/// Commit the batch's transaction and reply to every job.
fn commit(writer: &Writer, path: &Path, batch: Vec<Job>) {
    match control(&writer.conn, "COMMIT") {
        Ok(()) => {
            writer.heads.committed(&writer.conn);
            for job in batch {
                job.finish(Ok(()));
            }
        }
        Err(e) => abort(writer, batch, StoreError::sqlite(path, "commit", &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_heads_are_trusted_only_while_nothing_else_wrote() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch("CREATE TABLE t (x)").expect("create");
        let heads = Heads::default();
        let cx = Cx {
            conn: &conn,
            path: Path::new(":memory:"),
            heads: Some(&heads),
        };
        let seq = |cx: &Cx<'_>| cx.head("a", |h| h.seq);
        cx.keeping_heads(|| {
            cx.exec("INSERT INTO t VALUES (1)", [], "insert")?;
            cx.set_head("a", "c1", 1, None);
            Ok::<_, StoreError>(())
        })
        .expect("kept");
        assert_eq!(seq(&cx), Some(1));
        // A change outside a section (say, the thread deleted) may have touched any thread.
        cx.exec("INSERT INTO t VALUES (2)", [], "insert")
            .expect("insert");
        assert_eq!(seq(&cx), None);
        cx.keeping_heads(|| cx.set_head("a", "c2", 2, None));
        assert_eq!(seq(&cx), Some(2));
        // A job that unwinds leaves nothing trusted, and the next section works again.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cx.keeping_heads(|| {
                cx.set_head("a", "c3", 3, None);
                panic!("the job failed");
            })
        }));
        assert!(unwound.is_err());
        assert_eq!(seq(&cx), None);
        cx.keeping_heads(|| cx.set_head("a", "c4", 4, None));
        assert_eq!(seq(&cx), Some(4));
    }

    /// How often the cached head query was re-prepared after being rebound to other threads.
    fn head_query_reprepares(cx: &Cx<'_>) -> Result<i32, StoreError> {
        let sql = "SELECT MAX(seq) FROM checkpoints WHERE thread_id = ?1";
        for thread in ["a", "b", "c"] {
            cx.query_opt(sql, [thread], "read the thread head", |r| {
                r.get::<_, Option<i64>>(0)
            })?;
        }
        let stmt = cx.conn.prepare_cached(sql).map_err(cx.err("prepare"))?;
        Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
    }

    #[tokio::test]
    async fn rebinding_a_cached_statement_keeps_its_plan() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open(&dir.path().join("antler.db")).expect("open");
        let on_writer = db.write(head_query_reprepares).await.expect("write");
        let on_reader = db.read(head_query_reprepares).await.expect("read");
        assert_eq!((on_writer, on_reader), (0, 0));
    }

    /// Frames in the write-ahead log now (a passive checkpoint reports them).
    fn wal_frames(cx: &Cx<'_>) -> Result<i64, StoreError> {
        cx.conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .map_err(cx.err("checkpoint"))
    }

    #[tokio::test]
    async fn the_log_is_copied_back_only_past_its_longer_threshold() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open(&dir.path().join("antler.db")).expect("open");
        db.write(|cx| {
            cx.conn
                .execute_batch("CREATE TABLE scratch (b BLOB)")
                .map_err(cx.err("create"))
        })
        .await
        .expect("create");
        // 15 commits of ~100 pages each: past SQLite's default of 1,000 frames, which would
        // have copied the log back and restarted it.
        for _ in 0..15 {
            db.write(|cx| {
                cx.conn
                    .execute("INSERT INTO scratch VALUES (randomblob(400000))", [])
                    .map(|_| ())
                    .map_err(cx.err("insert"))
            })
            .await
            .expect("insert");
        }
        let frames = db.configure_writer(wal_frames).await.expect("frames");
        assert!(
            (1_400..WAL_AUTOCHECKPOINT_PAGES).contains(&frames),
            "{frames} frames in the log"
        );
    }
}
