//! Run records: one row per run with its lifecycle status and token totals (spec 40 §6.4).
//!
//! Statuses are DeerFlow's: `pending, running, success, error, timeout, interrupted`; there is no
//! `cancelled` (cancellation is `interrupted`). At startup the server calls
//! [`SqliteStore::mark_unfinished_runs`] so runs a crashed process left `pending`/`running` get a
//! terminal status.

use std::fmt;
use std::str::FromStr;

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::db::Cx;
use crate::error::StoreError;
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
    total_output_tokens, total_tokens, llm_call_count FROM runs";

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
        let metadata = json_text("run metadata", &record.metadata)?;
        let kwargs = json_text("run kwargs", &record.kwargs)?;
        self.db()
            .write(move |cx| {
                let mut record = record;
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
                           total_input_tokens, total_output_tokens, total_tokens, llm_call_count)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
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
                        ])
                    })
                    .map_err(cx.err("create a run"))?;
                Ok(record)
            })
            .await
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
                update_one(
                    cx,
                    &id,
                    "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4 WHERE run_id = ?1",
                    params![id, status.as_str(), error, now()],
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
