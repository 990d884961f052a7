//! Run records: one row per run with its lifecycle status, timestamps, lease and token totals
//! (spec 40 §6.4). Admission (multitask strategies over leases) is [`admission`].
//!
//! Statuses are DeerFlow's: `pending, running, success, error, timeout, interrupted`; there is no
//! `cancelled` (user cancellation is `interrupted`).

use std::fmt;
use std::str::FromStr;

use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::db::Cx;
use crate::error::StoreError;
use crate::{json_text, json_value, now, SqliteStore};

pub mod admission;
pub use admission::{
    Admission, AdmitOptions, AdmitOutcome, BusyMark, Heartbeat, MultitaskStrategy, RunFinish,
    DEFAULT_LEASE, ORPHANED, ROLLED_BACK,
};

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

impl From<antler_protocol::checkpoint::RunStatus> for RunStatus {
    fn from(s: antler_protocol::checkpoint::RunStatus) -> Self {
        match s {
            antler_protocol::checkpoint::RunStatus::Success => RunStatus::Success,
            antler_protocol::checkpoint::RunStatus::Error => RunStatus::Error,
            antler_protocol::checkpoint::RunStatus::Interrupted => RunStatus::Interrupted,
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

pub(super) const COLUMNS: &str =
    "SELECT run_id, thread_id, assistant_id, status, created_at, updated_at,
    error, stop_reason, metadata, kwargs, multitask_strategy, total_input_tokens,
    total_output_tokens, total_tokens, llm_call_count, started_at, ended_at, lease_owner,
    lease_expires_at FROM runs";

pub(super) struct RawRun {
    record: RunRecord,
    status: String,
    metadata: String,
    kwargs: String,
}

pub(super) fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
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

pub(super) fn decode(raw: RawRun) -> Result<RunRecord, StoreError> {
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

pub(super) fn get_tx(cx: &Cx<'_>, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    cx.query_opt(
        &format!("{COLUMNS} WHERE run_id = ?1"),
        [run_id],
        "read a run",
        read_raw,
    )?
    .map(decode)
    .transpose()
}

/// Every run a `{COLUMNS} WHERE ...` query selects, decoded.
pub(super) fn query_runs(
    cx: &Cx<'_>,
    sql: &str,
    params: impl rusqlite::Params,
    op: &'static str,
) -> Result<Vec<RunRecord>, StoreError> {
    cx.query_all(sql, params, op, read_raw)?
        .into_iter()
        .map(decode)
        .collect()
}

/// Replace a run's token totals; `updated_at` is set when `ts` is given. Returns rows changed.
pub(super) fn set_usage_tx(
    cx: &Cx<'_>,
    run_id: &str,
    usage: RunUsage,
    ts: Option<String>,
    op: &'static str,
) -> Result<usize, StoreError> {
    cx.exec(
        "UPDATE runs SET total_input_tokens = ?2, total_output_tokens = ?3,
           total_tokens = ?4, llm_call_count = ?5, updated_at = COALESCE(?6, updated_at)
         WHERE run_id = ?1",
        params![
            run_id,
            usage.total_input_tokens,
            usage.total_output_tokens,
            usage.total_tokens,
            usage.llm_call_count,
            ts
        ],
        op,
    )
}

fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound {
        kind: "run",
        id: run_id.to_owned(),
    }
}

/// Run an UPDATE on one run (`?1` = run id) and return the updated row.
pub(super) fn update_one(
    cx: &Cx<'_>,
    run_id: &str,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<RunRecord, StoreError> {
    if cx.exec(sql, params, "update a run")? == 0 {
        return Err(not_found(run_id));
    }
    get_tx(cx, run_id)?.ok_or_else(|| not_found(run_id))
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
                if set_usage_tx(cx, &id, usage, Some(now()), "update a run")? == 0 {
                    return Err(not_found(&id));
                }
                get_tx(cx, &id)?.ok_or_else(|| not_found(&id))
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
                query_runs(
                    cx,
                    &format!(
                        "{COLUMNS} WHERE thread_id = ?1 ORDER BY created_at DESC, rowid DESC
                         LIMIT ?2"
                    ),
                    params![id, i64::try_from(limit).unwrap_or(i64::MAX)],
                    "list runs",
                )
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
        self.mark_runs(
            "UPDATE runs SET status = ?1, stop_reason = ?2, updated_at = ?3
             WHERE status IN ('pending', 'running')",
            status,
            stop_reason,
        )
        .await
    }

    /// As [`SqliteStore::mark_unfinished_runs`], for the runs created without a lease only
    /// (nothing tells whether their writer is alive; leased runs are reclaimed by their lease —
    /// [`SqliteStore::reclaim_orphaned_runs`] — so live runs of other processes stay running).
    pub async fn mark_unleased_unfinished_runs(
        &self,
        status: RunStatus,
        stop_reason: Option<&str>,
    ) -> Result<usize, StoreError> {
        self.mark_runs(
            "UPDATE runs SET status = ?1, stop_reason = ?2, updated_at = ?3
             WHERE status IN ('pending', 'running') AND lease_owner IS NULL",
            status,
            stop_reason,
        )
        .await
    }

    /// Run a `mark unfinished runs` UPDATE (`?1` status, `?2` stop reason, `?3` now).
    async fn mark_runs(
        &self,
        sql: &'static str,
        status: RunStatus,
        stop_reason: Option<&str>,
    ) -> Result<usize, StoreError> {
        let stop_reason = stop_reason.map(str::to_owned);
        self.db()
            .write(move |cx| {
                cx.exec(
                    sql,
                    params![status.as_str(), stop_reason, now()],
                    "mark unfinished runs",
                )
            })
            .await
    }
}

/// A run row encoded for insertion.
pub(super) struct EncodedRun {
    record: RunRecord,
    metadata: String,
    kwargs: String,
}

impl EncodedRun {
    pub(super) fn new(record: RunRecord) -> Result<EncodedRun, StoreError> {
        Ok(EncodedRun {
            metadata: json_text("run metadata", &record.metadata)?,
            kwargs: json_text("run kwargs", &record.kwargs)?,
            record,
        })
    }
}

pub(super) fn insert_tx(cx: &Cx<'_>, encoded: EncodedRun) -> Result<RunRecord, StoreError> {
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
