//! Run records: one row per run with its lifecycle status, timestamps, lease and token totals
//! (spec 40 §6.4).
//!
//! Statuses are DeerFlow's: `pending, running, success, error, timeout, interrupted`; there is no
//! `cancelled` (user cancellation is `interrupted`).
//!
//! Admission is atomic per thread: [`SqliteStore::admit_run`] reclaims orphans (runs whose lease
//! expired or whose owner process is gone: marked `error` and journaled), then applies DeerFlow's
//! multitask strategy against the live runs — `reject` refuses, `interrupt` and `rollback` stop
//! the old run (`interrupted`, resp. `error` "Rolled back by user") and start the new one in the
//! same transaction, `enqueue` records the new run `pending` behind them. So at most one run per
//! thread is `running` at any time, across every process sharing the database.
//!
//! While it runs, the owner renews its lease ([`SqliteStore::heartbeat_run`]); a heartbeat that
//! finds the row no longer held (another process interrupted it) tells the owner to stop. The
//! terminal status goes through [`SqliteStore::finish_run`], which only the lease holder can do:
//! a process that lost its run never overwrites what the new owner recorded.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::db::Cx;
use crate::error::StoreError;
use crate::journal::{append_tx, has_event_tx, NewRunEvent};
use crate::lease::LeaseOwner;
use crate::{json_text, json_value, now, SqliteStore};

/// Lifecycle status of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Admitted, not started.
    Pending,
    Running,
    Success,
    Error,
    /// Reserved: DeerFlow defines it but nothing sets it.
    Timeout,
    /// Cancelled (interrupt) or stopped by shutdown.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Success,
        RunStatus::Error,
        RunStatus::Timeout,
        RunStatus::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Timeout => "timeout",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// `success`, `error`, `timeout` and `interrupted` end a run.
    pub fn is_terminal(self) -> bool {
        match self {
            RunStatus::Pending | RunStatus::Running => false,
            RunStatus::Success | RunStatus::Error | RunStatus::Timeout | RunStatus::Interrupted => {
                true
            }
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<antler_runtime::RunStatus> for RunStatus {
    fn from(s: antler_runtime::RunStatus) -> Self {
        match s {
            antler_runtime::RunStatus::Success => RunStatus::Success,
            antler_runtime::RunStatus::Error => RunStatus::Error,
            antler_runtime::RunStatus::Interrupted => RunStatus::Interrupted,
        }
    }
}

/// A status string that is not one of [`RunStatus`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown run status {0:?}")]
pub struct UnknownRunStatus(pub String);

impl FromStr for RunStatus {
    type Err = UnknownRunStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownRunStatus(s.to_owned()))
    }
}

/// One run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub thread_id: String,
    pub assistant_id: String,
    pub status: RunStatus,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC; bumped by every change.
    pub updated_at: String,
    pub error: Option<String>,
    /// Why a successful run stopped early (`loop_capped`, `token_capped`, ...).
    pub stop_reason: Option<String>,
    pub metadata: Value,
    pub kwargs: Value,
    /// `reject` | `interrupt` | `rollback` | `enqueue`.
    pub multitask_strategy: String,
    pub total_input_tokens: i64,
    pub total_output_tokens: i64,
    pub total_tokens: i64,
    pub llm_call_count: i64,
    /// RFC 3339 UTC: when the run moved to `running`.
    pub started_at: Option<String>,
    /// RFC 3339 UTC: when the run reached a terminal status.
    pub ended_at: Option<String>,
    /// The process driving the run ([`LeaseOwner::id`]); `None` for runs created without a lease.
    pub lease_owner: Option<String>,
    /// Unix milliseconds until which the lease holds.
    pub lease_expires_at: Option<i64>,
}

impl RunRecord {
    /// A pending run stamped now, empty metadata and kwargs, strategy `reject`, zero usage.
    pub fn new(
        run_id: impl Into<String>,
        thread_id: impl Into<String>,
        assistant_id: impl Into<String>,
    ) -> Self {
        let ts = now();
        RunRecord {
            run_id: run_id.into(),
            thread_id: thread_id.into(),
            assistant_id: assistant_id.into(),
            status: RunStatus::Pending,
            created_at: ts.clone(),
            updated_at: ts,
            error: None,
            stop_reason: None,
            metadata: Value::Object(Map::new()),
            kwargs: Value::Object(Map::new()),
            multitask_strategy: "reject".to_owned(),
            total_input_tokens: 0,
            total_output_tokens: 0,
            total_tokens: 0,
            llm_call_count: 0,
            started_at: None,
            ended_at: None,
            lease_owner: None,
            lease_expires_at: None,
        }
    }
}

/// Token totals of a run (replace the stored ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunUsage {
    pub total_input_tokens: i64,
    pub total_output_tokens: i64,
    pub total_tokens: i64,
    pub llm_call_count: i64,
}

const COLUMNS: &str = "SELECT run_id, thread_id, assistant_id, status, created_at, updated_at,
    error, stop_reason, metadata, kwargs, multitask_strategy, total_input_tokens,
    total_output_tokens, total_tokens, llm_call_count, started_at, ended_at, lease_owner,
    lease_expires_at FROM runs";

struct RawRun {
    record: RunRecord,
    status: String,
    metadata: String,
    kwargs: String,
}

fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        record: RunRecord {
            run_id: r.get(0)?,
            thread_id: r.get(1)?,
            assistant_id: r.get(2)?,
            status: RunStatus::Pending,
            created_at: r.get(4)?,
            updated_at: r.get(5)?,
            error: r.get(6)?,
            stop_reason: r.get(7)?,
            metadata: Value::Null,
            kwargs: Value::Null,
            multitask_strategy: r.get(10)?,
            total_input_tokens: r.get(11)?,
            total_output_tokens: r.get(12)?,
            total_tokens: r.get(13)?,
            llm_call_count: r.get(14)?,
            started_at: r.get(15)?,
            ended_at: r.get(16)?,
            lease_owner: r.get(17)?,
            lease_expires_at: r.get(18)?,
        },
        status: r.get(3)?,
        metadata: r.get(8)?,
        kwargs: r.get(9)?,
    })
}

fn decode(raw: RawRun) -> Result<RunRecord, StoreError> {
    let mut record = raw.record;
    let id = record.run_id.clone();
    record.status = raw
        .status
        .parse()
        .map_err(|e: UnknownRunStatus| StoreError::Corrupt {
            what: format!("status of run {id}"),
            cause: e.to_string(),
        })?;
    record.metadata = json_value(format!("metadata of run {id}"), &raw.metadata)?;
    record.kwargs = json_value(format!("kwargs of run {id}"), &raw.kwargs)?;
    Ok(record)
}

fn get_tx(cx: &Cx<'_>, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    cx.conn
        .prepare_cached(&format!("{COLUMNS} WHERE run_id = ?1"))
        .and_then(|mut s| s.query_row([run_id], read_raw).optional())
        .map_err(cx.err("read a run"))?
        .map(decode)
        .transpose()
}

/// Run an UPDATE on one run (`?1` = run id) and return the updated row.
fn update_one(
    cx: &Cx<'_>,
    run_id: &str,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<RunRecord, StoreError> {
    let n = cx
        .conn
        .prepare_cached(sql)
        .and_then(|mut s| s.execute(params))
        .map_err(cx.err("update a run"))?;
    if n == 0 {
        return Err(StoreError::NotFound {
            kind: "run",
            id: run_id.to_owned(),
        });
    }
    get_tx(cx, run_id)?.ok_or_else(|| StoreError::NotFound {
        kind: "run",
        id: run_id.to_owned(),
    })
}

impl SqliteStore {
    /// Insert a run (its id must be new). Empty timestamps are stamped now.
    pub async fn create_run(&self, record: RunRecord) -> Result<RunRecord, StoreError> {
        let encoded = EncodedRun::new(record)?;
        self.db().write(move |cx| insert_tx(cx, encoded)).await
    }

    pub async fn get_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = run_id.to_owned();
        self.db().read(move |cx| get_tx(cx, &id)).await
    }

    /// Set a run's status and error text (`None` clears it); bumps `updated_at`.
    pub async fn set_run_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<String>,
    ) -> Result<RunRecord, StoreError> {
        let id = run_id.to_owned();
        self.db()
            .write(move |cx| {
                let ts = now();
                update_one(
                    cx,
                    &id,
                    "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4,
                       started_at = CASE WHEN ?2 = 'running' THEN COALESCE(started_at, ?4)
                                         ELSE started_at END,
                       ended_at = CASE WHEN ?2 IN ('pending', 'running') THEN NULL
                                       ELSE COALESCE(ended_at, ?4) END
                     WHERE run_id = ?1",
                    params![id, status.as_str(), error, ts],
                )
            })
            .await
    }

    /// Set (or clear) why a run stopped; bumps `updated_at`.
    pub async fn set_run_stop_reason(
        &self,
        run_id: &str,
        stop_reason: Option<String>,
    ) -> Result<RunRecord, StoreError> {
        let id = run_id.to_owned();
        self.db()
            .write(move |cx| {
                update_one(
                    cx,
                    &id,
                    "UPDATE runs SET stop_reason = ?2, updated_at = ?3 WHERE run_id = ?1",
                    params![id, stop_reason, now()],
                )
            })
            .await
    }

    /// Replace a run's token totals; bumps `updated_at`.
    pub async fn update_run_usage(
        &self,
        run_id: &str,
        usage: RunUsage,
    ) -> Result<RunRecord, StoreError> {
        let id = run_id.to_owned();
        self.db()
            .write(move |cx| {
                update_one(
                    cx,
                    &id,
                    "UPDATE runs SET total_input_tokens = ?2, total_output_tokens = ?3,
                       total_tokens = ?4, llm_call_count = ?5, updated_at = ?6
                     WHERE run_id = ?1",
                    params![
                        id,
                        usage.total_input_tokens,
                        usage.total_output_tokens,
                        usage.total_tokens,
                        usage.llm_call_count,
                        now()
                    ],
                )
            })
            .await
    }

    /// A thread's runs, newest first.
    pub async fn list_runs(
        &self,
        thread_id: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let id = thread_id.to_owned();
        self.db()
            .read(move |cx| {
                let mut stmt = cx
                    .conn
                    .prepare_cached(&format!(
                        "{COLUMNS} WHERE thread_id = ?1 ORDER BY created_at DESC, rowid DESC
                         LIMIT ?2"
                    ))
                    .map_err(cx.err("list runs"))?;
                let rows = stmt
                    .query_map(
                        params![id, i64::try_from(limit).unwrap_or(i64::MAX)],
                        read_raw,
                    )
                    .map_err(cx.err("list runs"))?;
                let mut out = Vec::new();
                for raw in rows {
                    out.push(decode(raw.map_err(cx.err("list runs"))?)?);
                }
                Ok(out)
            })
            .await
    }

    /// Startup recovery: give every `pending`/`running` run `status` (and `stop_reason`).
    /// Returns how many runs were marked.
    pub async fn mark_unfinished_runs(
        &self,
        status: RunStatus,
        stop_reason: Option<&str>,
    ) -> Result<usize, StoreError> {
        let stop_reason = stop_reason.map(str::to_owned);
        self.db()
            .write(move |cx| {
                cx.conn
                    .prepare_cached(
                        "UPDATE runs SET status = ?1, stop_reason = ?2, updated_at = ?3
                         WHERE status IN ('pending', 'running')",
                    )
                    .and_then(|mut s| s.execute(params![status.as_str(), stop_reason, now()]))
                    .map_err(cx.err("mark unfinished runs"))
            })
            .await
    }
}

/// A run row encoded for insertion.
struct EncodedRun {
    record: RunRecord,
    metadata: String,
    kwargs: String,
}

impl EncodedRun {
    fn new(record: RunRecord) -> Result<EncodedRun, StoreError> {
        Ok(EncodedRun {
            metadata: json_text("run metadata", &record.metadata)?,
            kwargs: json_text("run kwargs", &record.kwargs)?,
            record,
        })
    }
}

fn insert_tx(cx: &Cx<'_>, encoded: EncodedRun) -> Result<RunRecord, StoreError> {
    let EncodedRun {
        mut record,
        metadata,
        kwargs,
    } = encoded;
    let ts = now();
    if record.created_at.is_empty() {
        record.created_at = ts.clone();
    }
    if record.updated_at.is_empty() {
        record.updated_at = ts;
    }
    cx.conn
        .prepare_cached(
            "INSERT INTO runs (run_id, thread_id, assistant_id, status, created_at,
               updated_at, error, stop_reason, metadata, kwargs, multitask_strategy,
               total_input_tokens, total_output_tokens, total_tokens, llm_call_count,
               started_at, ended_at, lease_owner, lease_expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18, ?19)",
        )
        .and_then(|mut s| {
            s.execute(params![
                record.run_id,
                record.thread_id,
                record.assistant_id,
                record.status.as_str(),
                record.created_at,
                record.updated_at,
                record.error,
                record.stop_reason,
                metadata,
                kwargs,
                record.multitask_strategy,
                record.total_input_tokens,
                record.total_output_tokens,
                record.total_tokens,
                record.llm_call_count,
                record.started_at,
                record.ended_at,
                record.lease_owner,
                record.lease_expires_at,
            ])
        })
        .map_err(cx.err("create a run"))?;
    Ok(record)
}

/// DeerFlow's `multitask_strategy`: what a new run does when its thread already has one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

impl FromStr for MultitaskStrategy {
    type Err = UnknownRunStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MultitaskStrategy::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownRunStatus(s.to_owned()))
    }
}

/// The error text of a run rolled back by a newer one (DeerFlow's wording).
pub const ROLLED_BACK: &str = "Rolled back by user";

/// The error text of a reclaimed orphan.
pub const ORPHANED: &str =
    "run did not finish: the process driving it exited (crash or kill) or stopped renewing its lease";

/// How a run is admitted: the strategy and the lease it runs under.
#[derive(Clone, Debug)]
pub struct AdmitOptions {
    pub strategy: MultitaskStrategy,
    pub owner: LeaseOwner,
    /// How long the lease holds without a heartbeat.
    pub lease: Duration,
}

impl AdmitOptions {
    /// This process, a 30 s lease.
    pub fn new(strategy: MultitaskStrategy) -> Self {
        AdmitOptions {
            strategy,
            owner: LeaseOwner::current().clone(),
            lease: DEFAULT_LEASE,
        }
    }
}

/// Default lease length; owners renew it at a third of that.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The result of [`SqliteStore::admit_run`].
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// The run is `running` under the caller's lease.
    Started(RunRecord),
    /// The run is `pending` behind live runs; start it with [`SqliteStore::try_start_run`].
    Queued(RunRecord),
    /// `reject`: a live run holds the thread; nothing was written for the new run.
    Rejected { active: RunRecord },
}

/// What admission did.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmitOutcome {
    pub admission: Admission,
    /// Live runs this admission stopped (`interrupt`: `interrupted`; `rollback`: `error`), as
    /// they were before (their metadata may carry a rollback point).
    pub displaced: Vec<RunRecord>,
    /// Orphans found on the thread and marked `error` (journaled).
    pub reclaimed: Vec<RunRecord>,
}

/// A lease renewal's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Heartbeat {
    /// Still ours; renewed.
    Held,
    /// No longer ours (another process interrupted or reclaimed it, or it ended): stop the run.
    /// Carries the row as it is now (`None` if it vanished).
    Lost(Option<Box<RunRecord>>),
}

/// The terminal write of [`SqliteStore::finish_run`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFinish {
    pub error: Option<String>,
    pub stop_reason: Option<String>,
    /// Replaces the stored totals when set.
    pub usage: Option<RunUsage>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
}

/// Whether an active run has nobody driving it any more. Runs created without a lease (an
/// older antler, or a writer that does not use admission) count only when `unleased` is set,
/// and then once idle longer than a lease.
fn is_orphan(run: &RunRecord, now_ms: i64, grace: Duration, unleased: bool) -> bool {
    match (&run.lease_owner, run.lease_expires_at) {
        (Some(owner), Some(until)) => until < now_ms || !LeaseOwner::from_id(owner).is_alive(),
        (Some(owner), None) => !LeaseOwner::from_id(owner).is_alive(),
        (None, _) => {
            unleased
                && chrono::DateTime::parse_from_rfc3339(&run.updated_at)
                    .map(|t| now_ms - t.timestamp_millis() > lease_ms(grace))
                    .unwrap_or(true)
        }
    }
}

fn active_runs_tx(cx: &Cx<'_>, thread: &str) -> Result<Vec<RunRecord>, StoreError> {
    let mut stmt = cx
        .conn
        .prepare_cached(&format!(
            "{COLUMNS} WHERE thread_id = ?1 AND status IN ('pending', 'running')
             ORDER BY created_at, rowid"
        ))
        .map_err(cx.err("read active runs"))?;
    let rows = stmt
        .query_map([thread], read_raw)
        .map_err(cx.err("read active runs"))?;
    let mut out = Vec::new();
    for raw in rows {
        out.push(decode(raw.map_err(cx.err("read active runs"))?)?);
    }
    Ok(out)
}

/// Move an active run to a terminal status (no lease check).
fn end_tx(
    cx: &Cx<'_>,
    run_id: &str,
    status: RunStatus,
    error: Option<&str>,
) -> Result<RunRecord, StoreError> {
    let ts = now();
    update_one(
        cx,
        run_id,
        "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4, ended_at = ?4,
           lease_expires_at = NULL
         WHERE run_id = ?1",
        params![run_id, status.as_str(), error, ts],
    )
}

/// Mark an orphan `error` and journal it: `run.error`, `run.end`, and a zero-delivery receipt
/// unless the run already has one.
fn reclaim_tx(cx: &Cx<'_>, run: &RunRecord, max_trace: usize) -> Result<RunRecord, StoreError> {
    let ended = end_tx(cx, &run.run_id, RunStatus::Error, Some(ORPHANED))?;
    let mut meta = Map::new();
    meta.insert("error_type".into(), Value::from("orphaned"));
    meta.insert("previous_status".into(), Value::from(run.status.as_str()));
    meta.insert(
        "lease_owner".into(),
        run.lease_owner.clone().map_or(Value::Null, Value::from),
    );
    let mut events = vec![
        NewRunEvent::new(
            &run.thread_id,
            &run.run_id,
            "run.error",
            "error",
            Value::from(ORPHANED),
        )
        .with_metadata(meta),
        NewRunEvent::new(
            &run.thread_id,
            &run.run_id,
            "run.end",
            "outputs",
            serde_json::json!({"status": "error", "error": ORPHANED}),
        ),
    ];
    if !has_event_tx(cx, &run.run_id, "run.delivery")? {
        events.push(NewRunEvent::new(
            &run.thread_id,
            &run.run_id,
            "run.delivery",
            "outputs",
            serde_json::json!({"presented": false, "paths": [], "by_tool": {}}),
        ));
    }
    append_tx(cx, events, max_trace)?;
    tracing::warn!(run = %run.run_id, thread = %run.thread_id, "reclaimed an orphaned run");
    Ok(ended)
}

/// Reclaim the orphans among a thread's active runs; returns (live, reclaimed).
fn sweep_tx(
    cx: &Cx<'_>,
    thread: &str,
    grace: Duration,
    max_trace: usize,
    unleased: bool,
) -> Result<(Vec<RunRecord>, Vec<RunRecord>), StoreError> {
    let now = now_ms();
    let mut live = Vec::new();
    let mut reclaimed = Vec::new();
    for run in active_runs_tx(cx, thread)? {
        if is_orphan(&run, now, grace, unleased) {
            reclaimed.push(reclaim_tx(cx, &run, max_trace)?);
        } else {
            live.push(run);
        }
    }
    Ok((live, reclaimed))
}

impl SqliteStore {
    /// Admit a run on its thread atomically (see the module doc). `record.status` and the lease
    /// fields are set here; `record.multitask_strategy` is set to the strategy used.
    pub async fn admit_run(
        &self,
        record: RunRecord,
        opts: AdmitOptions,
    ) -> Result<AdmitOutcome, StoreError> {
        let max_trace = self.max_trace_bytes();
        let mut record = record;
        record.multitask_strategy = opts.strategy.as_str().to_owned();
        record.lease_owner = Some(opts.owner.id().to_owned());
        let mut encoded = EncodedRun::new(record)?;
        self.db()
            .write(move |cx| {
                let thread = encoded.record.thread_id.clone();
                let (live, reclaimed) = sweep_tx(cx, &thread, opts.lease, max_trace, true)?;
                let ts = now();
                let until = now_ms().saturating_add(lease_ms(opts.lease));
                encoded.record.lease_expires_at = Some(until);
                encoded.record.updated_at = ts.clone();
                let mut displaced = Vec::new();
                let admission = if live.is_empty() {
                    encoded.record.status = RunStatus::Running;
                    encoded.record.started_at = Some(ts);
                    Admission::Started(insert_tx(cx, encoded)?)
                } else {
                    match opts.strategy {
                        MultitaskStrategy::Reject => Admission::Rejected {
                            active: live
                                .into_iter()
                                .next()
                                .ok_or_else(|| StoreError::encode("admission", "no active run"))?,
                        },
                        MultitaskStrategy::Enqueue => {
                            encoded.record.status = RunStatus::Pending;
                            Admission::Queued(insert_tx(cx, encoded)?)
                        }
                        MultitaskStrategy::Interrupt | MultitaskStrategy::Rollback => {
                            // The new run is persisted first, in the same transaction: the old
                            // one is never stopped for a run that was not recorded.
                            encoded.record.status = RunStatus::Running;
                            encoded.record.started_at = Some(ts);
                            let started = insert_tx(cx, encoded)?;
                            let (status, error) = match opts.strategy {
                                MultitaskStrategy::Rollback => {
                                    (RunStatus::Error, Some(ROLLED_BACK))
                                }
                                _ => (RunStatus::Interrupted, None),
                            };
                            for run in live {
                                end_tx(cx, &run.run_id, status, error)?;
                                displaced.push(run);
                            }
                            Admission::Started(started)
                        }
                    }
                };
                Ok(AdmitOutcome {
                    admission,
                    displaced,
                    reclaimed,
                })
            })
            .await
    }

    /// Start a queued (`pending`) run of `owner` once no earlier live run holds its thread.
    /// Returns the running record, or `None` while it must keep waiting. Fails with `NotFound`
    /// when the run is no longer pending under this owner (it was interrupted or reclaimed).
    pub async fn try_start_run(
        &self,
        run_id: &str,
        owner: &LeaseOwner,
        lease: Duration,
    ) -> Result<Option<RunRecord>, StoreError> {
        let id = run_id.to_owned();
        let owner = owner.id().to_owned();
        let max_trace = self.max_trace_bytes();
        self.db()
            .write(move |cx| {
                let run = get_tx(cx, &id)?
                    .filter(|r| {
                        r.status == RunStatus::Pending && r.lease_owner.as_deref() == Some(&owner)
                    })
                    .ok_or_else(|| StoreError::NotFound {
                        kind: "pending run",
                        id: id.clone(),
                    })?;
                let (live, _) = sweep_tx(cx, &run.thread_id, lease, max_trace, true)?;
                // FIFO: any other running run, or a pending one queued before this one.
                let mine = live.iter().position(|r| r.run_id == id);
                let ahead = live.iter().enumerate().any(|(i, r)| {
                    r.run_id != id
                        && (r.status == RunStatus::Running || mine.is_some_and(|m| i < m))
                });
                if ahead {
                    return Ok(None);
                }
                let until = now_ms().saturating_add(lease_ms(lease));
                let ts = now();
                update_one(
                    cx,
                    &id,
                    "UPDATE runs SET status = 'running', started_at = ?2, updated_at = ?2,
                       lease_expires_at = ?3
                     WHERE run_id = ?1",
                    params![id, ts, until],
                )
                .map(Some)
            })
            .await
    }

    /// Renew the lease of an active run held by `owner`.
    pub async fn heartbeat_run(
        &self,
        run_id: &str,
        owner: &LeaseOwner,
        lease: Duration,
    ) -> Result<Heartbeat, StoreError> {
        let id = run_id.to_owned();
        let owner = owner.id().to_owned();
        self.db()
            .write(move |cx| {
                let until = now_ms().saturating_add(lease_ms(lease));
                let n = cx
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET lease_expires_at = ?3
                         WHERE run_id = ?1 AND lease_owner = ?2
                           AND status IN ('pending', 'running')",
                    )
                    .and_then(|mut s| s.execute(params![id, owner, until]))
                    .map_err(cx.err("renew a run lease"))?;
                if n == 1 {
                    Ok(Heartbeat::Held)
                } else {
                    Ok(Heartbeat::Lost(get_tx(cx, &id)?.map(Box::new)))
                }
            })
            .await
    }

    /// Record a run's terminal status, only while `owner` still holds it. Returns the updated
    /// row, or `None` when the run was no longer held (interrupted or reclaimed by another
    /// process) — then nothing was written.
    pub async fn finish_run(
        &self,
        run_id: &str,
        owner: &LeaseOwner,
        status: RunStatus,
        finish: RunFinish,
    ) -> Result<Option<RunRecord>, StoreError> {
        let id = run_id.to_owned();
        let owner = owner.id().to_owned();
        self.db()
            .write(move |cx| {
                let ts = now();
                let n = cx
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET status = ?3, error = ?4,
                           stop_reason = COALESCE(?5, stop_reason), updated_at = ?6,
                           ended_at = ?6, lease_expires_at = NULL
                         WHERE run_id = ?1 AND lease_owner = ?2
                           AND status IN ('pending', 'running')",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            id,
                            owner,
                            status.as_str(),
                            finish.error,
                            finish.stop_reason,
                            ts
                        ])
                    })
                    .map_err(cx.err("finish a run"))?;
                if n == 0 {
                    return Ok(None);
                }
                if let Some(u) = finish.usage {
                    cx.conn
                        .prepare_cached(
                            "UPDATE runs SET total_input_tokens = ?2, total_output_tokens = ?3,
                               total_tokens = ?4, llm_call_count = ?5
                             WHERE run_id = ?1",
                        )
                        .and_then(|mut s| {
                            s.execute(params![
                                id,
                                u.total_input_tokens,
                                u.total_output_tokens,
                                u.total_tokens,
                                u.llm_call_count
                            ])
                        })
                        .map_err(cx.err("finish a run"))?;
                }
                get_tx(cx, &id)
            })
            .await
    }

    /// Startup recovery without trampling live runs: every `pending`/`running` run whose lease
    /// expired or whose owner process is gone is marked `error` and journaled (`run.error`,
    /// `run.end`, a zero-delivery `run.delivery`). Runs driven by live processes — other
    /// `antler run`s on other threads — are left alone, and so are runs created without a lease
    /// (nothing tells whether their writer is alive; admission on their thread reclaims them
    /// once idle longer than `grace`).
    pub async fn reclaim_orphaned_runs(
        &self,
        grace: Duration,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let max_trace = self.max_trace_bytes();
        self.db()
            .write(move |cx| {
                let threads: Vec<String> = cx
                    .conn
                    .prepare_cached(
                        "SELECT DISTINCT thread_id FROM runs WHERE status IN ('pending', 'running')",
                    )
                    .and_then(|mut s| {
                        s.query_map([], |r| r.get(0))?
                            .collect::<rusqlite::Result<Vec<String>>>()
                    })
                    .map_err(cx.err("read active runs"))?;
                let mut out = Vec::new();
                for t in threads {
                    out.extend(sweep_tx(cx, &t, grace, max_trace, false)?.1);
                }
                Ok(out)
            })
            .await
    }

    /// The `pending`/`running` runs of a thread, oldest first.
    pub async fn active_runs(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let thread = thread_id.to_owned();
        self.db().read(move |cx| active_runs_tx(cx, &thread)).await
    }
}
